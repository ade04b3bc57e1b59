// Package tokenratelimit is the `token-based-ratelimit` policy: prompt,
// completion and total token limits per route (backend) or per application
// (consumer), with per-model rules and per-application overrides, enforced by
// reserve-then-settle on the ratelimit engine.
package tokenratelimit

import (
	"fmt"
	"time"

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
	var refs []policies.ParamRef
	for i, o := range p.Overrides {
		for j, app := range o.Applications {
			refs = append(refs, policies.ParamRef{Path: ratelimit.ParamPath("overrides", i, "applications", j), ID: app})
		}
	}
	return refs
}

var _ policies.ApplicationReferrer = (*Params)(nil)

func limitsOf(p, c, t []ratelimit.CountLimit) [3][]ratelimit.CountLimit {
	return [3][]ratelimit.CountLimit{p, c, t}
}

var fieldNames = [3]string{"promptTokenLimits", "completionTokenLimits", "totalTokenLimits"}

// Validate checks what the schema cannot.
func (p *Params) Validate() error {
	var errs policies.ParamErrors
	check := func(prefix []string, ls [3][]ratelimit.CountLimit) int {
		n := 0
		for d, list := range ls {
			ds := make([]time.Duration, len(list))
			for i, l := range list {
				ds[i] = l.Duration.D()
				if _, err := ratelimit.LimitFor(p.Algorithm, l.Duration.D(), l.Count); err != nil {
					errs = append(errs, &policies.ParamError{Path: append(append([]string(nil), prefix...), ratelimit.ParamPath(fieldNames[d], i, "duration")...), Message: err.Error()})
				}
			}
			if pe := ratelimit.ValidateDurations(fieldNames[d], ds); pe != nil {
				pe.Path = append(append([]string(nil), prefix...), pe.Path...)
				errs = append(errs, pe)
			}
			n += len(list)
		}
		return n
	}
	total := check(nil, limitsOf(p.PromptTokenLimits, p.CompletionTokenLimits, p.TotalTokenLimits))
	matches := make([]string, len(p.ModelRules))
	for i, r := range p.ModelRules {
		matches[i] = r.Match
		n := check(ratelimit.ParamPath("modelRules", i), limitsOf(r.PromptTokenLimits, r.CompletionTokenLimits, r.TotalTokenLimits))
		if n == 0 {
			errs = append(errs, &policies.ParamError{Path: ratelimit.ParamPath("modelRules", i), Message: "a model rule needs at least one limit"})
		}
		total += n
	}
	if _, err := ratelimit.NewModelMatcher(matches); err != nil {
		errs = append(errs, &policies.ParamError{Path: []string{"modelRules"}, Message: err.Error()})
	}
	if len(p.Overrides) > 0 && !p.ConsumerBased {
		errs = append(errs, &policies.ParamError{Path: []string{"overrides"}, Message: "overrides are per application: they need consumerBased: true"})
	}
	seen := map[string]bool{}
	for i, o := range p.Overrides {
		if check(ratelimit.ParamPath("overrides", i), limitsOf(o.PromptTokenLimits, o.CompletionTokenLimits, o.TotalTokenLimits)) == 0 {
			errs = append(errs, &policies.ParamError{Path: ratelimit.ParamPath("overrides", i), Message: "an override needs at least one limit"})
		}
		for j, app := range o.Applications {
			if app == "" || seen[app] {
				errs = append(errs, &policies.ParamError{Path: ratelimit.ParamPath("overrides", i, "applications", j),
					Message: fmt.Sprintf("application %q is empty or listed in two overrides", app)})
			}
			seen[app] = true
		}
	}
	if total == 0 {
		errs = append(errs, &policies.ParamError{Message: "set at least one of promptTokenLimits, completionTokenLimits, totalTokenLimits or modelRules"})
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

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
	var limits []ratelimit.Limit
	add := func(ls [3][]ratelimit.CountLimit, rule string) ([]int, error) {
		var idx []int
		for m, list := range ls {
			for _, l := range list {
				lim, err := ratelimit.LimitFor(p.Algorithm, l.Duration.D(), l.Count)
				if err != nil {
					return nil, err
				}
				idx = append(idx, len(limits))
				limits = append(limits, ratelimit.Limit{Meter: m, Capacity: lim, Rule: rule})
			}
		}
		return idx, nil
	}
	base, err := add(limitsOf(p.PromptTokenLimits, p.CompletionTokenLimits, p.TotalTokenLimits), "")
	if err != nil {
		return nil, err
	}
	groups := [][]int{base}
	overrideOf := map[string]int{}
	for i, o := range p.Overrides {
		own := limitsOf(o.PromptTokenLimits, o.CompletionTokenLimits, o.TotalTokenLimits)
		idx, err := add(own, "")
		if err != nil {
			return nil, err
		}
		// Dimensions the override does not list keep the default counters.
		for _, b := range base {
			if len(own[limits[b].Meter]) == 0 {
				idx = append(idx, b)
			}
		}
		groups = append(groups, idx)
		for _, app := range o.Applications {
			overrideOf[app] = i + 1
		}
	}
	matches := make([]string, len(p.ModelRules))
	ruleSel := make([][]int, len(p.ModelRules))
	for i, r := range p.ModelRules {
		matches[i] = r.Match
		if ruleSel[i], err = add(limitsOf(r.PromptTokenLimits, r.CompletionTokenLimits, r.TotalTokenLimits), r.Match); err != nil {
			return nil, err
		}
	}
	rules, err := ratelimit.NewModelMatcher(matches)
	if err != nil {
		return nil, err
	}
	eng, err := ratelimit.New(ratelimit.Options{
		Policy: Name, Route: route, Services: svc, Limits: limits,
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
	pol := &Policy{
		eng: eng, svc: svc, scoper: ratelimit.NewScoper(route.RouteName, p.ConsumerBased).PerResource(p.ResourceBased),
		rules: rules, overrideOf: overrideOf,
		reserveOut: p.ReserveOutput == "maxTokens", maxOut: p.MaxOutputTokens,
	}
	for _, g := range groups {
		row := make([][]int, len(ruleSel)+1)
		row[0] = g
		all := append([]int(nil), g...)
		for r, rs := range ruleSel {
			row[r+1] = append(append([]int(nil), g...), rs...)
			all = append(all, rs...)
		}
		pol.sel = append(pol.sel, row)
		pol.quotaSel = append(pol.quotaSel, all)
	}
	return pol, nil
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
