// Package tokenratelimit is the `token-based-ratelimit` policy: prompt,
// completion and total token limits per route (backend) or per application
// (consumer), with per-model rules and per-application overrides, enforced by
// reserve-then-settle on the ratelimit engine.
package tokenratelimit

import (
	"slices"

	"sluice/dialect"
	"sluice/gwerror"
	"sluice/policies"
	"sluice/policies/ratelimit"
	"sluice/sharedctx"
)

// Name is the policy name.
const Name = "token-based-ratelimit"

// Meter indexes of the engine.
const (
	meterPrompt = iota
	meterCompletion
	meterTotal
)

// Params configures token-based-ratelimit.
type Params struct {
	// PromptTokenLimits caps prompt (input) tokens per duration.
	PromptTokenLimits []ratelimit.CountLimit `json:"promptTokenLimits,omitempty"`
	// CompletionTokenLimits caps completion (output) tokens per duration. Output
	// is only known after the response unless reserveOutput is maxTokens.
	CompletionTokenLimits []ratelimit.CountLimit `json:"completionTokenLimits,omitempty"`
	// TotalTokenLimits caps prompt plus completion tokens per duration.
	TotalTokenLimits []ratelimit.CountLimit `json:"totalTokenLimits,omitempty"`
	// ConsumerBased keeps one counter per application (route:appid; route:default
	// without an application id) instead of one shared by the route.
	ConsumerBased bool `json:"consumerBased,omitempty"`
	// ResourceBased keeps one counter per resource (the endpoint, e.g.
	// /chat/completions: scope route/chat/completions, or
	// route/chat/completions:appid with consumerBased) instead of one across
	// the route's resources.
	ResourceBased bool `json:"resourceBased,omitempty"`
	// Algorithm: token-bucket, fixed-window or calendar. Default: token bucket
	// for durations under 1 day, a UTC-aligned fixed window for longer ones.
	Algorithm string `json:"algorithm,omitempty" jsonschema:"enum=token-bucket,enum=fixed-window,enum=calendar"`
	// ReserveOutput: none (default) reserves only the prompt estimate;
	// maxTokens also reserves the request's max tokens times its number of
	// choices (n per prompt; a batched completions prompt counts each prompt).
	ReserveOutput string `json:"reserveOutput,omitempty" jsonschema:"enum=none,enum=maxTokens"`
	// MaxOutputTokens caps the request's max tokens (set when absent or
	// higher). With reserveOutput maxTokens the bound is also lowered to what
	// the limits still afford, when that is at least 1. At most 10000000, the
	// largest bound the gateway accepts in a request.
	MaxOutputTokens int64 `json:"maxOutputTokens,omitempty" jsonschema:"minimum=1,maximum=10000000"`
	// ModelRules adds limits for models matching an exact name or a prefix
	// ending in "*". At most one rule applies (exact beats prefix, the longest
	// prefix wins); a request then debits the policy's limits and the rule's.
	ModelRules []ModelRule `json:"modelRules,omitempty"`
	// Overrides give the listed applications other limits than the default
	// (consumerBased only). An override replaces the dimensions it lists; the
	// others keep the default limits.
	Overrides []Override `json:"overrides,omitempty"`
}

// ModelRule is one per-model limit set.
type ModelRule struct {
	// Match is a model name ("gpt-4o") or a prefix ending in "*" ("gpt-4*").
	Match                 string                 `json:"match" jsonschema:"required,minLength=1"`
	PromptTokenLimits     []ratelimit.CountLimit `json:"promptTokenLimits,omitempty"`
	CompletionTokenLimits []ratelimit.CountLimit `json:"completionTokenLimits,omitempty"`
	TotalTokenLimits      []ratelimit.CountLimit `json:"totalTokenLimits,omitempty"`
}

// Override is a per-application limit set.
type Override struct {
	// Applications lists the application ids that get these limits: each an
	// applications[].id of the deployment, or "default" for requests without
	// an application.
	Applications          []string               `json:"applications" jsonschema:"required,minItems=1"`
	PromptTokenLimits     []ratelimit.CountLimit `json:"promptTokenLimits,omitempty"`
	CompletionTokenLimits []ratelimit.CountLimit `json:"completionTokenLimits,omitempty"`
	TotalTokenLimits      []ratelimit.CountLimit `json:"totalTokenLimits,omitempty"`
}

// ApplicationRefs names the applications of overrides, for the deployment
// check ("default", the scope of requests without an application, may be
// overridden too).
func (p *Params) ApplicationRefs() []policies.ParamRef {
	return ratelimit.OverrideRefs(len(p.Overrides), func(i int) []string { return p.Overrides[i].Applications })
}

var _ policies.ApplicationReferrer = (*Params)(nil)

func limitsOf(p, c, t []ratelimit.CountLimit) [3][]ratelimit.CountLimit {
	return [3][]ratelimit.CountLimit{p, c, t}
}

var fieldNames = [3]string{"promptTokenLimits", "completionTokenLimits", "totalTokenLimits"}

// plan is what the params compile to, for Validate and build alike: the
// engine's limits, the params errors, the model rules and the counter
// selections (see Policy).
type plan struct {
	set      *ratelimit.LimitSet
	rules    *ratelimit.ModelMatcher
	sel      [][][]int
	quotaSel [][]int
}

// compile computes the plan in one pass over the params. The limits are the
// default ones, then each model rule's, then each override's (an index is
// only a position in the engine; a counter's key names its meter, period
// and rule).
func (p *Params) compile() *plan {
	s := &ratelimit.LimitSet{Algorithm: p.Algorithm}
	// add appends the three lists under prefix; n counts their entries.
	add := func(prefix []string, ls [3][]ratelimit.CountLimit, rule string) (idx []int, n int) {
		for m, list := range ls {
			idx = append(idx, ratelimit.AddLimits(s, append(slices.Clip(prefix), fieldNames[m]), m, rule, list)...)
			n += len(list)
		}
		return idx, n
	}
	base, total := add(nil, limitsOf(p.PromptTokenLimits, p.CompletionTokenLimits, p.TotalTokenLimits), "")
	matches := make([]string, len(p.ModelRules))
	ruleSel := make([][]int, len(p.ModelRules))
	for i, r := range p.ModelRules {
		matches[i] = r.Match
		var n int
		ruleSel[i], n = add(ratelimit.ParamPath("modelRules", i), limitsOf(r.PromptTokenLimits, r.CompletionTokenLimits, r.TotalTokenLimits), r.Match)
		if n == 0 {
			s.Errorf(ratelimit.ParamPath("modelRules", i), "a model rule needs at least one limit")
		}
		total += n
	}
	rules, err := ratelimit.NewModelMatcher(matches)
	if err != nil {
		s.Errorf([]string{"modelRules"}, "%v", err)
	}
	s.CheckOverrides(p.ConsumerBased, len(p.Overrides))
	groups := [][]int{base}
	for i, o := range p.Overrides {
		own := limitsOf(o.PromptTokenLimits, o.CompletionTokenLimits, o.TotalTokenLimits)
		idx, n := add(ratelimit.ParamPath("overrides", i), own, "")
		if n == 0 {
			s.Errorf(ratelimit.ParamPath("overrides", i), "an override needs at least one limit")
		}
		// Dimensions the override does not list keep the default counters.
		for _, b := range base {
			if len(own[s.Limits[b].Meter]) == 0 {
				idx = append(idx, b)
			}
		}
		groups = append(groups, idx)
		s.AddOverride(i, o.Applications)
	}
	if total == 0 {
		s.Errorf(nil, "set at least one of promptTokenLimits, completionTokenLimits, totalTokenLimits or modelRules")
	}
	pl := &plan{set: s, rules: rules}
	pl.selections(groups, ruleSel)
	return pl
}

// selections fills sel and quotaSel from the limits of each limit group
// (groups[g]) and of each model rule (ruleSel[r]).
func (pl *plan) selections(groups, ruleSel [][]int) {
	for _, g := range groups {
		row := make([][]int, len(ruleSel)+1)
		row[0] = g
		all := append([]int(nil), g...)
		for r, rs := range ruleSel {
			row[r+1] = append(append([]int(nil), g...), rs...)
			all = append(all, rs...)
		}
		pl.sel = append(pl.sel, row)
		pl.quotaSel = append(pl.quotaSel, all)
	}
}

// Validate checks what the schema cannot.
func (p *Params) Validate() error { return p.compile().set.Err() }

// Definition is the policy's catalog entry.
func Definition() policies.Definition {
	d := policies.Define(Name, "v1",
		"Token limits (prompt, completion, total) per route or per application, reserved before the request and settled with the provider's usage.",
		build)
	d.Reads = []policies.MetaKey{{Key: sharedctx.KeyApplicationID, Phase: policies.PhaseRequest, Optional: true}}
	return d
}

// Policy is one token-based-ratelimit instance.
type Policy struct {
	eng        *ratelimit.Engine
	svc        *policies.Services
	scoper     *ratelimit.Scoper
	rules      *ratelimit.ModelMatcher
	overrideOf map[string]int
	// sel[g][r+1] is the counter selection for limit group g (0: default,
	// 1..: overrides) and model rule r (-1: none).
	sel        [][][]int
	quotaSel   [][]int
	reserveOut bool
	maxOut     int64
}

var (
	_ policies.Finalizer     = (*Policy)(nil)
	_ policies.QuotaReporter = (*Policy)(nil)
)

func build(p *Params, route policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
	pl := p.compile()
	if err := pl.set.Err(); err != nil {
		return nil, err
	}
	eng, err := ratelimit.New(ratelimit.Options{
		Policy: Name, Route: route, Services: svc, Limits: pl.set.Limits,
		Scope: ratelimit.ScopeKindOf(p.ConsumerBased),
		Meters: []ratelimit.Meter{
			{Name: "prompt", Unit: policies.UnitTokens, Kind: dialect.InputTokens},
			{Name: "completion", Unit: policies.UnitTokens, Kind: dialect.OutputTokens},
			{Name: "total", Unit: policies.UnitTokens, Kind: dialect.Tokens},
		},
	})
	if err != nil {
		return nil, err
	}
	return &Policy{
		eng: eng, svc: svc, scoper: ratelimit.NewScoper(route.RouteName, p.ConsumerBased).PerResource(p.ResourceBased),
		rules: pl.rules, overrideOf: pl.set.OverrideOf, sel: pl.sel, quotaSel: pl.quotaSel,
		reserveOut: p.ReserveOutput == "maxTokens", maxOut: p.MaxOutputTokens,
	}, nil
}

// Engine exposes the instance's engine (tests, metrics).
func (p *Policy) Engine() *ratelimit.Engine { return p.eng }

func (p *Policy) group(id string) int {
	if g, ok := p.overrideOf[id]; ok {
		return g
	}
	return 0
}

// OnRequest reserves the estimate on the request's scope and model rule.
func (p *Policy) OnRequest(c *policies.Call) *gwerror.Error {
	id := p.scoper.ID(c)
	a := ratelimit.Admission{
		Scope:    p.scoper.ScopeOf(p.eng, c, id),
		Counters: p.sel[p.group(id)][p.rules.Match(c.Shared.ServedModel())+1],
	}
	prompt := policies.PromptTokens(c, p.svc.Tokens)
	a.Amounts[meterPrompt] = prompt
	a.Amounts[meterTotal] = prompt
	bound, choices, outputs := ratelimit.OutputBound(c, p.maxOut)
	if outputs && p.reserveOut {
		a.Output, a.Choices = bound, choices
		a.OutputMeters = 1<<meterCompletion | 1<<meterTotal
		a.ClampOutput = p.maxOut > 0
	}
	r, gerr := p.eng.Reserve(c, &a)
	if gerr != nil {
		return gerr
	}
	if outputs {
		if p.reserveOut {
			bound = r.Output
		}
		if err := ratelimit.ApplyOutputBound(c, bound); err != nil {
			return gwerror.Internal(c.Shared.RequestID)
		}
	}
	return nil
}

// OnFinal resolves the reservation (see ratelimit.Engine.Finish).
func (p *Policy) OnFinal(c *policies.Call, o *policies.Outcome) {
	p.eng.Finish(c, o, p)
}

// Actual takes the request's usage: prompt counted once, completions summed
// over choices (as providers report them), total = prompt + completion when
// the provider omits it. Its trust is ratelimit.UsageTrust: exact for the
// provider's complete usage, a lower bound for a partial n>1 stream or for
// usage the gateway counted (whose prompt is the provider's report when one
// arrived, else the same prompt estimate this policy reserved).
func (p *Policy) Actual(c *policies.Call, o *policies.Outcome, _ *ratelimit.Reservation, a *ratelimit.Amounts) ratelimit.Trust {
	u := c.Shared.Usage()
	trust := ratelimit.UsageTrust(c)
	if trust == ratelimit.TrustNone {
		return trust
	}
	a[meterPrompt] = u.PromptTokens
	a[meterCompletion] = u.CompletionTokens
	a[meterTotal] = u.TotalTokens
	if u.TotalTokens == 0 {
		a[meterTotal] = u.PromptTokens + u.CompletionTokens
	}
	return trust
}

// Quota reports the caller's counters (its limit group and every model rule).
func (p *Policy) Quota(c *policies.Call) []policies.QuotaLine {
	id := p.scoper.ID(c)
	return p.eng.Quota(c.Ctx, p.scoper.ScopeOf(p.eng, c, id), p.quotaSel[p.group(id)])
}
