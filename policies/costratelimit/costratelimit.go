// Package costratelimit is the `llm-cost-based-ratelimit` policy: USD budgets
// per route (backend) or per application (consumer). It reserves an estimated
// cost (counted in micro-USD) before the request and settles, in its final
// phase, with the real cost that llm-cost published (x-llm-cost). It
// estimates with the pricer of the first llm-cost after it in the chain, the
// one whose cost it settles with, and refuses a model that pricer cannot
// price: a budget cannot be kept on spend it cannot count.
package costratelimit

import (
	"math"
	"time"

	"sluice/gwerror"
	"sluice/internal/satmath"
	"sluice/policies"
	"sluice/policies/ratelimit"
	"sluice/pricing"
	"sluice/sharedctx"
)

// Name is the policy name.
const Name = "llm-cost-based-ratelimit"

// MinReservation is the smallest cost reserved (micro-USD): a spent budget
// (remaining 0) then denies even a request whose estimate is 0 (an empty
// prompt with no output bound).
const MinReservation = 1

// Params configures llm-cost-based-ratelimit.
type Params struct {
	// BudgetLimits caps spend in USD per duration.
	BudgetLimits []BudgetLimit `json:"budgetLimits" jsonschema:"required,minItems=1"`
	// ConsumerBased keeps one budget per application (route:appid; route:default
	// without an application id) instead of one shared by the route.
	ConsumerBased bool `json:"consumerBased,omitempty"`
	// ResourceBased keeps one counter per resource (the endpoint, e.g.
	// /chat/completions: scope route/chat/completions, or
	// route/chat/completions:appid with consumerBased) instead of one across
	// the route's resources.
	ResourceBased bool `json:"resourceBased,omitempty"`
	// Algorithm: calendar (default: "30d"/720h is the UTC calendar month, other
	// durations are UTC-aligned fixed windows), fixed-window or token-bucket.
	Algorithm string `json:"algorithm,omitempty" jsonschema:"enum=token-bucket,enum=fixed-window,enum=calendar"`
	// ReserveOutput: maxTokens (default) prices the request's max tokens times
	// its number of choices (n per prompt of a batch) as output in the
	// estimate; none prices the prompt only.
	ReserveOutput string `json:"reserveOutput,omitempty" jsonschema:"enum=none,enum=maxTokens"`
	// Overrides give the listed applications other budgets (consumerBased only).
	Overrides []Override `json:"overrides,omitempty"`
}

// BudgetLimit is an `{amount, duration}` entry.
type BudgetLimit struct {
	// Amount is the budget in USD (at least 0.000001).
	Amount float64 `json:"amount" jsonschema:"required,minimum=0.000001"`
	// Duration is the period: "1h", "1d", "30d" (the UTC calendar month with the
	// default calendar algorithm).
	Duration policies.Duration `json:"duration" jsonschema:"required"`
}

// Override is a per-application budget set; it replaces the default budgets.
type Override struct {
	// Applications lists the application ids that get these budgets: each an
	// applications[].id of the deployment, or "default" for requests without
	// an application.
	Applications []string      `json:"applications" jsonschema:"required,minItems=1"`
	BudgetLimits []BudgetLimit `json:"budgetLimits" jsonschema:"required,minItems=1"`
}

// ApplicationRefs names the applications of overrides, for the deployment
// check ("default", the scope of requests without an application, may be
// overridden too).
func (p *Params) ApplicationRefs() []policies.ParamRef {
	return ratelimit.OverrideRefs(len(p.Overrides), func(i int) []string { return p.Overrides[i].Applications })
}

var _ policies.ApplicationReferrer = (*Params)(nil)

func (p *Params) algorithm() string {
	if p.Algorithm == "" {
		return ratelimit.AlgCalendar
	}
	return p.Algorithm
}

// micros converts a configured USD amount to micro-USD, clamped to int64.
func micros(usd float64) int64 { return satmath.Ceil(math.Round(usd * 1e6)) }

// Capacity is the budget in micro-USD per duration (ratelimit.LimitEntry):
// the amount must be a finite number of at least one micro-USD.
func (l BudgetLimit) Capacity() (int64, time.Duration, *policies.ParamError) {
	if math.IsInf(l.Amount, 0) || math.IsNaN(l.Amount) {
		return 0, l.Duration.D(), &policies.ParamError{Path: []string{"amount"}, Message: "amount must be a finite number of USD"}
	}
	m := micros(l.Amount)
	if m < 1 {
		return 0, l.Duration.D(), &policies.ParamError{Path: []string{"amount"}, Message: "amount must be at least 0.000001 USD"}
	}
	return m, l.Duration.D(), nil
}

// compile computes the engine's limits, the limit group of each override
// (groups[0] the default budgets, groups[i+1] those of overrides[i], which
// replace them) and the params errors in one pass, for Validate and build
// alike.
func (p *Params) compile() (set *ratelimit.LimitSet, groups [][]int) {
	set = &ratelimit.LimitSet{Algorithm: p.algorithm()}
	groups = [][]int{ratelimit.AddLimits(set, []string{"budgetLimits"}, 0, "", p.BudgetLimits)}
	set.CheckOverrides(p.ConsumerBased, len(p.Overrides))
	for i, o := range p.Overrides {
		groups = append(groups, ratelimit.AddLimits(set, ratelimit.ParamPath("overrides", i, "budgetLimits"), 0, "", o.BudgetLimits))
		set.AddOverride(i, o.Applications)
	}
	return set, groups
}

// Validate checks what the schema cannot.
func (p *Params) Validate() error {
	set, _ := p.compile()
	return set.Err()
}

// Definition is the policy's catalog entry. It reads x-llm-cost in the final
// phase, so llm-cost must be listed after it (final phases run in reverse).
func Definition() policies.Definition {
	d := policies.Define(Name, "v1",
		"USD budgets per route or per application: reserves an estimated cost, settles with the real cost from llm-cost.",
		build)
	d.Reads = []policies.MetaKey{
		{Key: sharedctx.KeyApplicationID, Phase: policies.PhaseRequest, Optional: true},
		{Key: sharedctx.KeyLLMCost, Phase: policies.PhaseFinal},
		{Key: sharedctx.KeyLLMCostStatus, Phase: policies.PhaseFinal},
	}
	return d
}

// Policy is one llm-cost-based-ratelimit instance.
type Policy struct {
	eng *ratelimit.Engine
	svc *policies.Services
	// pricer is the linked llm-cost's (set by LinkChain before the chain
	// serves; svc.Pricing when the policy runs outside a chain).
	pricer     pricing.Pricer
	route      string
	scoper     *ratelimit.Scoper
	overrideOf map[string]int
	groups     [][]int
	reserveOut bool
}

var (
	_ policies.Finalizer     = (*Policy)(nil)
	_ policies.ChainLinker   = (*Policy)(nil)
	_ policies.QuotaReporter = (*Policy)(nil)
)

// LinkChain links the instance to the first llm-cost after it, the one whose
// x-llm-cost it settles with (ratelimit.LinkedPricer): its pricer (pricing
// file and defaultPrice included) is the one the estimate uses.
func (p *Policy) LinkChain(entries []policies.Entry, self int) error {
	pr, ok := ratelimit.LinkedPricer(entries, self)
	if !ok {
		return ratelimit.ErrNoPricer
	}
	p.pricer = pr
	return nil
}

func build(p *Params, route policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
	set, groups := p.compile()
	if err := set.Err(); err != nil {
		return nil, err
	}
	eng, err := ratelimit.New(ratelimit.Options{Policy: Name, Route: route, Services: svc, Limits: set.Limits,
		Scope:  ratelimit.ScopeKindOf(p.ConsumerBased),
		Meters: []ratelimit.Meter{{Name: "cost", Unit: policies.UnitUSDMicros}}})
	if err != nil {
		return nil, err
	}
	return &Policy{eng: eng, svc: svc, route: route.RouteName, scoper: ratelimit.NewScoper(route.RouteName, p.ConsumerBased).PerResource(p.ResourceBased),
		overrideOf: set.OverrideOf, groups: groups, reserveOut: p.ReserveOutput != "none"}, nil
}

// Engine exposes the instance's engine.
func (p *Policy) Engine() *ratelimit.Engine { return p.eng }

func (p *Policy) sel(id string) []int { return p.groups[p.overrideOf[id]] }

// Estimate is the reserved cost of the request in micro-USD: the linked
// pricer's price of the estimated prompt plus, with reserveOutput maxTokens,
// max tokens times the number of choices (n per prompt) of output; at least
// MinReservation. ok is false when the pricer has no price for the request's
// model. The arithmetic saturates, so an absurd request is priced at most
// math.MaxInt64 pico-USD and denied as one that can never be admitted, never
// wrapped to a small amount.
func (p *Policy) Estimate(c *policies.Call) (micros int64, ok bool) {
	pricer := p.pricer
	if pricer == nil && p.svc.Pricing != nil {
		pricer = p.svc.Pricing
	}
	if pricer == nil {
		return 0, false
	}
	m, ok := pricer.Resolve(c.Shared.ServedModel())
	if !ok {
		return 0, false
	}
	prompt := policies.PromptTokens(c, p.svc.Tokens)
	var out int64
	if bound, n, ok := ratelimit.OutputBound(c, 0); ok && p.reserveOut {
		out = satmath.Mul(bound, n)
	}
	return max(m.Price.EstimateMicros(prompt, out), MinReservation), true
}

// OnRequest reserves the estimated cost, or refuses (400 model_not_priced,
// nothing reserved) a model without a price.
func (p *Policy) OnRequest(c *policies.Call) *gwerror.Error {
	est, ok := p.Estimate(c)
	if !ok {
		return ratelimit.ModelNotPriced(Name, p.route, c.Shared.ServedModel())
	}
	id := p.scoper.ID(c)
	a := ratelimit.Admission{Scope: p.scoper.ScopeOf(p.eng, c, id), Counters: p.sel(id)}
	a.Amounts[0] = est
	_, gerr := p.eng.Reserve(c, &a)
	return gerr
}

// OnFinal settles with x-llm-cost when llm-cost calculated it from complete
// usage, charges at least it when it is a lower bound, else keeps the
// estimate (see Actual and ratelimit.Engine.Finish).
func (p *Policy) OnFinal(c *policies.Call, o *policies.Outcome) { p.eng.Finish(c, o, p) }

// Actual is the cost llm-cost published, in micro-USD (sharedctx
// CostMicroUSD). Its trust is ratelimit.CostTrust: exact when priced from the
// provider's complete usage, a lower bound when priced from a partial n>1
// stream or from usage the gateway counted (x-llm-cost-status "estimated"),
// none otherwise.
func (p *Policy) Actual(c *policies.Call, o *policies.Outcome, _ *ratelimit.Reservation, a *ratelimit.Amounts) ratelimit.Trust {
	trust := ratelimit.CostTrust(c)
	if trust == ratelimit.TrustNone {
		return trust
	}
	micros, ok := c.Shared.CostMicroUSD()
	if !ok || micros < 0 {
		return ratelimit.TrustNone
	}
	a[0] = micros
	return trust
}

// Quota reports the caller's budgets.
func (p *Policy) Quota(c *policies.Call) []policies.QuotaLine {
	id := p.scoper.ID(c)
	return p.eng.Quota(c.Ctx, p.scoper.ScopeOf(p.eng, c, id), p.sel(id))
}
