// Package basicratelimit is the `basic-ratelimit` policy: request-count limits
// per route (backend) or per application (consumer). One request is one unit;
// it counts once admitted, and is refunded only when a later policy rejects
// the request (nothing went upstream).
package basicratelimit

import (
	"time"

	"sluice/gwerror"
	"sluice/policies"
	"sluice/policies/ratelimit"
	"sluice/sharedctx"
)

// Name is the policy name.
const Name = "basic-ratelimit"

// Params configures basic-ratelimit.
type Params struct {
	// Limits caps requests per duration.
	Limits []RequestLimit `json:"limits" jsonschema:"required,minItems=1"`
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
}

// RequestLimit is a `{requests, duration}` entry.
type RequestLimit struct {
	// Requests is the number of requests allowed per duration.
	Requests int64 `json:"requests" jsonschema:"required,minimum=1"`
	// Duration is the period: "1s", "1m", "1h", "1d".
	Duration policies.Duration `json:"duration" jsonschema:"required"`
}

// Capacity is the entry's requests per duration (ratelimit.LimitEntry).
func (l RequestLimit) Capacity() (int64, time.Duration, *policies.ParamError) {
	return l.Requests, l.Duration.D(), nil
}

// compile computes the engine's limits and the params errors in one pass,
// for Validate and build alike.
func (p *Params) compile() *ratelimit.LimitSet {
	s := &ratelimit.LimitSet{Algorithm: p.Algorithm}
	ratelimit.AddLimits(s, []string{"limits"}, 0, "", p.Limits)
	return s
}

// Validate checks what the schema cannot.
func (p *Params) Validate() error { return p.compile().Err() }

// Definition is the policy's catalog entry.
func Definition() policies.Definition {
	d := policies.Define(Name, "v1", "Request-count limits per route or per application.", build)
	d.Reads = []policies.MetaKey{{Key: sharedctx.KeyApplicationID, Phase: policies.PhaseRequest, Optional: true}}
	return d
}

// Policy is one basic-ratelimit instance.
type Policy struct {
	eng    *ratelimit.Engine
	scoper *ratelimit.Scoper
}

var (
	_ policies.Finalizer     = (*Policy)(nil)
	_ policies.QuotaReporter = (*Policy)(nil)
)

func build(p *Params, route policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
	set := p.compile()
	if err := set.Err(); err != nil {
		return nil, err
	}
	eng, err := ratelimit.New(ratelimit.Options{Policy: Name, Route: route, Services: svc, Limits: set.Limits,
		Scope:  ratelimit.ScopeKindOf(p.ConsumerBased),
		Meters: []ratelimit.Meter{{Name: "requests", Unit: policies.UnitRequests}}})
	if err != nil {
		return nil, err
	}
	return &Policy{eng: eng, scoper: ratelimit.NewScoper(route.RouteName, p.ConsumerBased).PerResource(p.ResourceBased)}, nil
}

// Engine exposes the instance's engine.
func (p *Policy) Engine() *ratelimit.Engine { return p.eng }

// OnRequest counts the request.
func (p *Policy) OnRequest(c *policies.Call) *gwerror.Error {
	a := ratelimit.Admission{Scope: p.scoper.ScopeOf(p.eng, c, p.scoper.ID(c)), Counters: p.eng.AllCounters()}
	a.Amounts[0] = 1
	_, gerr := p.eng.Reserve(c, &a)
	return gerr
}

// OnFinal resolves the reservation: an admitted request keeps its unit
// (settled at 1) unless nothing went upstream.
func (p *Policy) OnFinal(c *policies.Call, o *policies.Outcome) { p.eng.Finish(c, o, p) }

// Actual reports one request, known at admission (ratelimit.FixedTrust).
func (p *Policy) Actual(_ *policies.Call, o *policies.Outcome, _ *ratelimit.Reservation, a *ratelimit.Amounts) ratelimit.Trust {
	a[0] = 1
	return ratelimit.FixedTrust(o)
}

// Quota reports the caller's counters.
func (p *Policy) Quota(c *policies.Call) []policies.QuotaLine {
	return p.eng.Quota(c.Ctx, p.scoper.ScopeOf(p.eng, c, p.scoper.ID(c)), p.eng.AllCounters())
}
