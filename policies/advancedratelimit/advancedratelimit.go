// Package advancedratelimit is the `advanced-ratelimit` policy, the general
// limit on the shared engine (policies/ratelimit): named quotas, each with
// its limits, a counter key built from request components (route, API,
// header, metadata, IP, constant; each with a fallback), and what one
// request costs (1, its prompt estimate, the provider's usage weighted, or
// a metadata value such as x-llm-cost), charged together all or nothing;
// and an optional custom denial.
package advancedratelimit

import (
	"encoding/json"
	"math"
	"strings"
	"time"

	"sluice/gwerror"
	"sluice/internal/satmath"
	"sluice/policies"
	"sluice/policies/ratelimit"
	"sluice/pricing"
	"sluice/sharedctx"
)

// Name is the policy name.
const Name = "advanced-ratelimit"

// MissingComponent is the key component used when a header or metadata
// component has no value and no fallback: such requests share one counter.
const MissingComponent = "none"

// Params configures advanced-ratelimit.
type Params struct {
	// Quotas are charged together, all or nothing, per request.
	Quotas []Quota `json:"quotas" jsonschema:"required,minItems=1,maxItems=16"`
	// Algorithm: token-bucket, fixed-window or calendar. Default: token bucket
	// for durations under 1 day, a UTC-aligned fixed window for longer ones.
	Algorithm string `json:"algorithm,omitempty" jsonschema:"enum=token-bucket,enum=fixed-window,enum=calendar"`
	// OnRateLimitExceeded replaces the 429 status and body of a denial.
	OnRateLimitExceeded *ExceededResponse `json:"onRateLimitExceeded,omitempty"`
}

// Quota is one named counter set with its key and cost extraction.
type Quota struct {
	// Name identifies the quota in counter keys, errors and quota reports.
	Name string `json:"name" jsonschema:"required,pattern=^[A-Za-z0-9_.-]+$"`
	// Limits are the quota's capacities per duration.
	Limits []QuotaLimit `json:"limits" jsonschema:"required,minItems=1"`
	// KeyExtraction builds the counter key from components joined with ":".
	// Default: the route name.
	KeyExtraction []KeyComponent `json:"keyExtraction,omitempty"`
	// CostExtraction says how much one request costs. Default: 1 per request.
	CostExtraction *CostExtraction `json:"costExtraction,omitempty"`
}

// QuotaLimit is a `{limit, duration}` entry.
type QuotaLimit struct {
	// Limit is the capacity in the quota's units per duration.
	Limit int64 `json:"limit" jsonschema:"required,minimum=1"`
	// Duration is the period: "1m", "1h", "1d"; with the calendar algorithm
	// "30d" (720h) is the UTC calendar month.
	Duration policies.Duration `json:"duration" jsonschema:"required"`
}

// KeyComponent is one part of a quota's counter key.
type KeyComponent struct {
	// Type: routename, apiname, header (Key names it), metadata (Key names
	// it), ip (the client address) or constant (Value).
	Type string `json:"type" jsonschema:"required,enum=routename,enum=apiname,enum=header,enum=metadata,enum=ip,enum=constant"`
	// Key is the header or metadata key.
	Key string `json:"key,omitempty"`
	// Value is the constant's value.
	Value string `json:"value,omitempty"`
	// Fallback is used when the header or metadata value is absent or empty;
	// without it the component is "none".
	Fallback string `json:"fallback,omitempty"`
}

// CostExtraction says how many units a request costs.
type CostExtraction struct {
	// Source: request (default; counted at admission), response (the
	// provider's usage, reserved from the prompt estimate and settled), or
	// metadata (a numeric Metadata value in the final phase, e.g. x-llm-cost).
	Source string `json:"source,omitempty" jsonschema:"enum=request,enum=response,enum=metadata"`
	// RequestTokens, for source request, counts the estimated prompt tokens
	// instead of 1 per request.
	RequestTokens bool `json:"requestTokens,omitempty"`
	// PromptMultiplier, CompletionMultiplier and TotalMultiplier weigh the
	// usage for source response (default: total tokens × 1).
	PromptMultiplier     float64 `json:"promptMultiplier,omitempty" jsonschema:"minimum=0"`
	CompletionMultiplier float64 `json:"completionMultiplier,omitempty" jsonschema:"minimum=0"`
	TotalMultiplier      float64 `json:"totalMultiplier,omitempty" jsonschema:"minimum=0"`
	// Key is the Metadata key for source metadata (e.g. x-llm-cost).
	Key string `json:"key,omitempty"`
	// Multiplier scales the metadata value (e.g. 1000000 for USD to micro-USD;
	// default 1). The result is rounded up.
	Multiplier float64 `json:"multiplier,omitempty" jsonschema:"minimum=0"`
}

// ExceededResponse is a custom denial.
type ExceededResponse struct {
	// Status replaces 429 (400-599).
	Status int `json:"status,omitempty" jsonschema:"minimum=400,maximum=599"`
	// Body replaces the error envelope; it must be JSON (sent as application/json).
	Body string `json:"body,omitempty"`
}

func sameExtraction(a, b []KeyComponent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Capacity is the entry's limit per duration (ratelimit.LimitEntry).
func (l QuotaLimit) Capacity() (int64, time.Duration, *policies.ParamError) {
	return l.Limit, l.Duration.D(), nil
}

// plan is what the params compile to, for Validate and build alike: the
// engine's limits and meters (meter i is quota i), the params errors, and
// what each quota runs with.
type plan struct {
	set    *ratelimit.LimitSet
	meters []ratelimit.Meter
	quotas []quotaRT
	// shared: every quota has the same key extraction.
	shared bool
	// costQuota: a quota settles with x-llm-cost.
	costQuota bool
}

// compile computes the plan in one pass over the params.
func (p *Params) compile() *plan {
	pl := &plan{set: &ratelimit.LimitSet{Algorithm: p.Algorithm}, shared: true}
	names := map[string]bool{}
	for qi := range p.Quotas {
		q := &p.Quotas[qi]
		if names[q.Name] {
			pl.set.Errorf(ratelimit.ParamPath("quotas", qi, "name"), "quota %q is listed twice", q.Name)
		}
		names[q.Name] = true
		ratelimit.AddLimits(pl.set, ratelimit.ParamPath("quotas", qi, "limits"), qi, "", q.Limits)
		rt, m := compileQuota(pl.set, qi, q)
		if qi > 0 && !sameExtraction(rt.keys, pl.quotas[0].keys) {
			pl.shared = false
		}
		pl.costQuota = pl.costQuota || rt.src == srcCost
		pl.quotas = append(pl.quotas, rt)
		pl.meters = append(pl.meters, m)
	}
	if r := p.OnRateLimitExceeded; r != nil && r.Body != "" && !json.Valid([]byte(r.Body)) {
		pl.set.Errorf([]string{"onRateLimitExceeded", "body"}, "body must be valid JSON")
	}
	return pl
}

// compileQuota checks the key and cost extraction of q, quotas[qi], into s
// and returns what q runs with and its meter.
func compileQuota(s *ratelimit.LimitSet, qi int, q *Quota) (quotaRT, ratelimit.Meter) {
	at := func(parts ...any) []string { return ratelimit.ParamPath(append([]any{"quotas", qi}, parts...)...) }
	for ki, k := range q.KeyExtraction {
		switch {
		case (k.Type == "header" || k.Type == "metadata") && k.Key == "":
			s.Errorf(at("keyExtraction", ki, "key"), "%s components need a key", k.Type)
		case k.Type == "constant" && k.Value == "":
			s.Errorf(at("keyExtraction", ki, "value"), "constant components need a value")
		}
	}
	rt := quotaRT{keys: q.KeyExtraction, mult: 1}
	if len(rt.keys) == 0 {
		rt.keys = []KeyComponent{{Type: "routename"}}
	}
	m := ratelimit.Meter{Name: q.Name, Unit: policies.UnitRequests}
	ce := q.CostExtraction
	if ce == nil {
		return rt, m
	}
	if ce.Source == "metadata" && ce.Key == "" {
		s.Errorf(at("costExtraction", "key"), "source metadata needs a key")
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"promptMultiplier", ce.PromptMultiplier}, {"completionMultiplier", ce.CompletionMultiplier},
		{"totalMultiplier", ce.TotalMultiplier}, {"multiplier", ce.Multiplier}} {
		if math.IsInf(f.v, 0) || math.IsNaN(f.v) {
			s.Errorf(at("costExtraction", f.name), "must be a finite number")
		}
	}
	switch ce.Source {
	case "response":
		rt.src, rt.needUsage = srcResponse, true
		rt.pm, rt.cm, rt.tm = ce.PromptMultiplier, ce.CompletionMultiplier, ce.TotalMultiplier
		if rt.pm == 0 && rt.cm == 0 && rt.tm == 0 {
			rt.tm = 1
		}
		m.Unit = policies.UnitTokens
	case "metadata":
		rt.src, rt.needsMetadata, rt.metaKey = srcMetadata, true, ce.Key
		if ce.Key == sharedctx.KeyLLMCost {
			rt.src = srcCost
		}
		if ce.Multiplier > 0 {
			rt.mult = ce.Multiplier
		}
		if ce.Key == sharedctx.KeyLLMCost && rt.mult == 1e6 {
			m.Unit = policies.UnitUSDMicros
		}
	default:
		rt.reqTokens = ce.RequestTokens
		if rt.reqTokens {
			m.Unit = policies.UnitTokens
		}
	}
	return rt, m
}

// Validate checks what the schema cannot.
func (p *Params) Validate() error { return p.compile().set.Err() }

// Definition is the advanced-ratelimit catalog entry.
func Definition() policies.Definition {
	return policies.Define(Name, "v1",
		"General rate limiting: named quotas with limits, key extraction (route, API, header, metadata, IP, constant), cost extraction (request, response usage, metadata) and a custom denial.",
		build)
}

type costSource uint8

const (
	srcRequest costSource = iota
	srcResponse
	srcMetadata
	// srcCost is source metadata on x-llm-cost: the request's cost, read
	// with sharedctx CostMicroUSD.
	srcCost
)

type quotaRT struct {
	keys                     []KeyComponent
	src                      costSource
	reqTokens                bool
	pm, cm, tm               float64
	metaKey                  string
	mult                     float64
	needUsage, needsMetadata bool
}

// Policy is one advanced-ratelimit instance.
type Policy struct {
	eng    *ratelimit.Engine
	svc    *policies.Services
	route  policies.RouteInfo
	quotas []quotaRT
	// shared: every quota has the same key extraction (one scope, standard keys).
	shared   bool
	exceeded *ExceededResponse
	// costQuota: a quota settles with x-llm-cost; pricer is then the linked
	// llm-cost's (LinkChain), which must price the request's model.
	costQuota bool
	pricer    pricing.Pricer
}

var (
	_ policies.Finalizer     = (*Policy)(nil)
	_ policies.ChainLinker   = (*Policy)(nil)
	_ policies.QuotaReporter = (*Policy)(nil)
)

// LinkChain links an instance with a quota that settles with x-llm-cost to
// the llm-cost whose cost it reads (ratelimit.LinkedPricer), so that a model
// without a price is refused instead of settling at the 1-unit reservation.
func (a *Policy) LinkChain(entries []policies.Entry, self int) error {
	if !a.costQuota {
		return nil
	}
	pr, ok := ratelimit.LinkedPricer(entries, self)
	if !ok {
		return ratelimit.ErrNoPricer
	}
	a.pricer = pr
	return nil
}

func build(p *Params, route policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
	pl := p.compile()
	if err := pl.set.Err(); err != nil {
		return nil, err
	}
	limits, meters := pl.set.Limits, pl.meters
	opts := ratelimit.Options{Policy: Name, Route: route, Services: svc, Meters: meters, Limits: limits, Scope: ratelimit.ScopeQuota}
	if !pl.shared {
		// Quotas keyed differently cannot share a hash tag built from their own
		// keys; the route name is the tag and each quota's key follows the period.
		opts.Key = func(scope string, i int) string {
			c := limits[i]
			parts := strings.Split(scope, scopeSep)
			return ratelimit.GroupKey(route.RouteName, Name) + ":" + meters[c.Meter].Name + ":" + ratelimit.PeriodLabel(c.Capacity) + ":" + parts[c.Meter]
		}
	}
	eng, err := ratelimit.New(opts)
	if err != nil {
		return nil, err
	}
	return &Policy{eng: eng, svc: svc, route: route, quotas: pl.quotas, shared: pl.shared,
		exceeded: p.OnRateLimitExceeded, costQuota: pl.costQuota}, nil
}

const scopeSep = " | "

// Engine exposes the instance's engine.
func (a *Policy) Engine() *ratelimit.Engine { return a.eng }

func escapeComponent(s string) string {
	if !strings.ContainsAny(s, "%:{}|") {
		return s
	}
	return strings.NewReplacer("%", "%25", ":", "%3A", "{", "%7B", "}", "%7D", "|", "%7C").Replace(s)
}

func (a *Policy) component(c *policies.Call, k KeyComponent) string {
	var v string
	switch k.Type {
	case "routename":
		return a.route.RouteName
	case "apiname":
		if v = c.Shared.APIName; v == "" {
			v = a.route.APIName
		}
	case "constant":
		return escapeComponent(k.Value)
	case "ip":
		if c.Request != nil {
			v = c.Request.RemoteIP
		}
	case "header":
		if c.Request != nil {
			v = c.Request.Header.Get(k.Key)
		}
	case "metadata":
		if k.Key == sharedctx.KeyApplicationID {
			v = c.Shared.ApplicationID()
		} else {
			v = c.Shared.String(k.Key)
		}
	}
	if v == "" {
		v = k.Fallback
	}
	if v == "" {
		v = MissingComponent
	}
	return escapeComponent(v)
}

func (a *Policy) quotaKey(c *policies.Call, q *quotaRT) string {
	if len(q.keys) == 1 {
		return a.component(c, q.keys[0])
	}
	var b strings.Builder
	for i, k := range q.keys {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(a.component(c, k))
	}
	return b.String()
}

func (a *Policy) scope(c *policies.Call) *ratelimit.Scope {
	id := a.quotaKey(c, &a.quotas[0])
	if !a.shared {
		var b strings.Builder
		b.WriteString(id)
		for i := 1; i < len(a.quotas); i++ {
			b.WriteString(scopeSep)
			b.WriteString(a.quotaKey(c, &a.quotas[i]))
		}
		id = b.String()
	}
	return a.eng.Scope(id, identity)
}

func identity(s string) string { return s }

// OnRequest reserves every quota's estimate; with a quota that settles with
// x-llm-cost, a model the linked llm-cost cannot price is refused first.
func (a *Policy) OnRequest(c *policies.Call) *gwerror.Error {
	if a.pricer != nil {
		if _, ok := a.pricer.Resolve(c.Shared.ServedModel()); !ok {
			return ratelimit.ModelNotPriced(Name, a.route.RouteName, c.Shared.ServedModel())
		}
	}
	adm := ratelimit.Admission{Scope: a.scope(c), Counters: a.eng.AllCounters()}
	for i := range a.quotas {
		q := &a.quotas[i]
		switch q.src {
		case srcRequest:
			adm.Amounts[i] = 1
			if q.reqTokens {
				adm.Amounts[i] = policies.PromptTokens(c, a.svc.Tokens)
			}
		case srcResponse:
			// Saturating: a product beyond int64 cannot fit any counter.
			adm.Amounts[i] = satmath.Ceil(float64(policies.PromptTokens(c, a.svc.Tokens)) * (q.pm + q.tm))
		case srcMetadata, srcCost:
			adm.Amounts[i] = 1
		}
	}
	_, gerr := a.eng.Reserve(c, &adm)
	if gerr != nil && gerr.Status == 429 && a.exceeded != nil {
		if a.exceeded.Status != 0 {
			gerr.Status = a.exceeded.Status
		}
		if a.exceeded.Body != "" {
			gerr.Body = []byte(a.exceeded.Body)
		}
	}
	return gerr
}

// OnFinal resolves the reservation (see ratelimit.Engine.Finish).
func (a *Policy) OnFinal(c *policies.Call, o *policies.Outcome) { a.eng.Finish(c, o, a) }

// Actual computes each quota's real cost. Request-source quotas keep their
// estimate and do not lower the trust. A response quota is exact with the
// provider's complete usage and a lower bound with partial or
// gateway-counted usage; a metadata quota on x-llm-cost follows
// x-llm-cost-status (calculated: as its usage, estimated: a lower bound), any
// other metadata quota is exact for a Completed request. The result is the
// least trusted quota's: when one has no trustworthy number the whole
// reservation keeps its estimate. With request quotas only it is
// ratelimit.FixedTrust.
func (a *Policy) Actual(c *policies.Call, o *policies.Outcome, r *ratelimit.Reservation, am *ratelimit.Amounts) ratelimit.Trust {
	u := c.Shared.Usage()
	trust, usageBased := ratelimit.TrustExact, false
	for i := range a.quotas {
		q := &a.quotas[i]
		switch q.src {
		case srcRequest:
			am[i] = r.Estimate(i)
			continue
		case srcResponse:
			t := ratelimit.UsageTrust(c)
			if t == ratelimit.TrustNone {
				return ratelimit.TrustNone
			}
			trust = min(trust, t)
			am[i] = satmath.Ceil(float64(u.PromptTokens)*q.pm + float64(u.CompletionTokens)*q.cm + float64(u.TotalTokens)*q.tm - 1e-9)
		case srcCost:
			t := ratelimit.CostTrust(c)
			micros, ok := c.Shared.CostMicroUSD()
			if t == ratelimit.TrustNone || !ok || micros < 0 {
				return ratelimit.TrustNone
			}
			trust = min(trust, t)
			// The metadata value is the cost in USD: micros/1e6 × mult.
			// Scaling the integer by mult/1e6 keeps the usual multiplier
			// 1000000 (micro-USD) exact.
			am[i] = satmath.Ceil(float64(micros)*(q.mult/1e6) - 1e-9)
		case srcMetadata:
			t := ratelimit.FixedTrust(o)
			if t == ratelimit.TrustNone {
				return ratelimit.TrustNone
			}
			v, ok := c.Shared.Float(q.metaKey)
			if !ok || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return ratelimit.TrustNone
			}
			trust = min(trust, t)
			am[i] = satmath.Ceil(v*q.mult - 1e-9)
		}
		usageBased = true
	}
	if !usageBased {
		return ratelimit.FixedTrust(o)
	}
	return trust
}

// Quota reports the caller's counters.
func (a *Policy) Quota(c *policies.Call) []policies.QuotaLine {
	return a.eng.Quota(c.Ctx, a.scope(c), a.eng.AllCounters())
}
