// Package ratelimit is the rate-limit engine that the limit policies
// (basic-ratelimit, token-based-ratelimit, llm-cost-based-ratelimit,
// advanced-ratelimit; one package each) share: their configured limits and
// meters, counter scopes and keys, reservations and their resolution, and
// the quota report. It charges the counter store (package counter).
//
// An Engine belongs to one policy instance. For each request the policy picks a
// scope (route, route:app, or extracted keys), the counters that apply, and the
// estimated amounts; Engine.Reserve charges them all or nothing with one store
// call and keeps the resulting Reservation in the request's Metadata under the
// instance's own key. Engine.Finish maps the request's final Outcome to exactly
// one resolution of that reservation: Settle (real amounts), Close or Abandon
// (keep the estimate) or Release (refund everything). See docs/ratelimit.md.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"sluice/counter"
	"sluice/dialect"
	"sluice/gwerror"
	"sluice/internal/satmath"
	"sluice/policies"
	"sluice/sharedctx"
)

// ReservationSlot is the base of the Metadata key holding an instance's
// reservation; the full key is sharedctx.InstanceKey(instanceID, ReservationSlot).
const ReservationSlot = "ratelimit.reservation"

// maxCachedScopes bounds the per-engine key cache; past it the cache is
// cleared and rebuilt from the live traffic.
const maxCachedScopes = 1 << 18

// Options configures an Engine.
type Options struct {
	// Policy is the policy name: in keys, X-Sluice-Policy, metrics.
	Policy   string
	Route    policies.RouteInfo
	Services *policies.Services
	Meters   []Meter
	Limits   []Limit
	// Key, when set, builds the key of the counter of limit i under a scope
	// (advanced-ratelimit uses it for quotas with their own key extraction).
	// Default: StandardKey.
	Key func(scope string, i int) string
	// Scope says what the engine's scopes are, for denial messages and
	// X-Sluice-Policy (default ScopeRoute).
	Scope ScopeKind
}

// ScopeKind is what an engine's counter scopes stand for.
type ScopeKind uint8

const (
	// ScopeRoute: one counter set shared by every application on the route.
	ScopeRoute ScopeKind = iota
	// ScopeApplication: one counter set per application (Scope.ID is the
	// application id, or "default").
	ScopeApplication
	// ScopeQuota: advanced-ratelimit quotas with their own keys.
	ScopeQuota
)

// Engine reserves and resolves one policy instance's counters. It is safe for
// concurrent use.
type Engine struct {
	policy   string
	route    policies.RouteInfo
	slot     string
	limits   []Limit
	meters   []Meter
	counters counter.Store
	logger   *slog.Logger
	keyFn    func(scope string, i int) string
	// standardKeys: keyFn is StandardKey, so a scope's counters share its
	// hash tag and are kept in one store group (Scope.Group).
	standardKeys bool
	scopeKind    ScopeKind
	now          func() time.Time

	scopes    sync.Map // scope id -> *Scope
	scopeN    atomic.Int64
	results   sync.Pool // *counter.Result
	open      atomic.Int64
	m         *metrics
	allCounts []int
}

// Scope is a resolved counter scope: its name, the key of every counter of
// the engine under it, and the counter.Debit.Group they are kept in. Immutable
// once built.
type Scope struct {
	// ID is what Engine.Scope was called with (the application id of a
	// consumer scope).
	ID   string
	Name string
	Keys []string
	// Group is "{scope}:<policy>" with the standard keys; empty with a custom
	// key function, whose keys need not share a scope.
	Group string
}

// New builds an engine. The store is required.
func New(o Options) (*Engine, error) {
	svc := o.Services
	if svc == nil || svc.Counters == nil {
		return nil, errors.New("ratelimit: no counter store configured")
	}
	if len(o.Meters) == 0 || len(o.Meters) > MaxMeters {
		return nil, fmt.Errorf("ratelimit: %d meters (want 1..%d)", len(o.Meters), MaxMeters)
	}
	for i, c := range o.Limits {
		if c.Meter < 0 || c.Meter >= len(o.Meters) {
			return nil, fmt.Errorf("ratelimit: limit %d has no meter", i)
		}
		if err := c.Capacity.Validate(); err != nil {
			return nil, err
		}
	}
	logger := svc.Logger
	if logger == nil {
		logger = slog.Default()
	}
	e := &Engine{
		policy:    o.Policy,
		route:     o.Route,
		slot:      sharedctx.InstanceKey(o.Route.InstanceID, ReservationSlot),
		limits:    o.Limits,
		meters:    o.Meters,
		counters:  svc.Counters,
		logger:    logger,
		keyFn:     o.Key,
		scopeKind: o.Scope,
		now:       svc.Now,
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.keyFn == nil {
		e.keyFn = e.StandardKey
		e.standardKeys = true
	}
	e.results.New = func() any { return new(counter.Result) }
	e.m = newMetrics(svc.Metrics, o.Route.RouteName, o.Policy, o.Meters)
	e.allCounts = make([]int, len(o.Limits))
	for i := range e.allCounts {
		e.allCounts[i] = i
	}
	return e, nil
}

// Slot is the Metadata key holding this instance's reservation.
func (e *Engine) Slot() string { return e.slot }

// Policy is the policy name.
func (e *Engine) Policy() string { return e.policy }

// Limits returns the engine's limits (read-only).
func (e *Engine) Limits() []Limit { return e.limits }

// Meters returns the engine's meters (read-only).
func (e *Engine) Meters() []Meter { return e.meters }

// OpenReservations is the number of reservations this engine made that are not
// resolved yet. It returns to zero when traffic stops; anything else is a leak.
func (e *Engine) OpenReservations() int64 { return e.open.Load() }

// StandardKey is `{scope}:<policy>:<meter>:<period>`, plus `:model:<match>`
// for a model rule's counter. The braces are a Redis Cluster hash tag: all
// counters of one scope live in one slot, so one reservation is one script.
func (e *Engine) StandardKey(scope string, i int) string {
	c := e.limits[i]
	k := GroupKey(scope, e.policy) + ":" + e.meters[c.Meter].Name + ":" + PeriodLabel(c.Capacity)
	if c.Rule != "" {
		k += ":model:" + c.Rule
	}
	return k
}

// GroupKey is "{scope}:<policy>": the counter.Debit.Group of policy's counters
// under scope with the standard keys, and the start of each of their keys.
func GroupKey(scope, policy string) string { return counter.Group(scope, policy) }

// Scope returns the cached scope for id, building it with name(id) on first
// use. id is whatever identifies the scope cheaply (the application id for a
// consumer limit) so that the hot path neither concatenates nor allocates.
func (e *Engine) Scope(id string, name func(id string) string) *Scope {
	if v, ok := e.scopes.Load(id); ok {
		return v.(*Scope)
	}
	s := &Scope{ID: id, Name: name(id), Keys: make([]string, len(e.limits))}
	for i := range e.limits {
		s.Keys[i] = e.keyFn(s.Name, i)
	}
	if e.standardKeys {
		s.Group = GroupKey(s.Name, e.policy)
	}
	if e.scopeN.Add(1) > maxCachedScopes {
		e.scopes.Clear()
		e.scopeN.Store(1)
	}
	v, _ := e.scopes.LoadOrStore(id, s)
	return v.(*Scope)
}

// Admission is one request's charge: where, which counters, how much.
type Admission struct {
	Scope *Scope
	// Counters selects the counters of Scope charged: indexes into the
	// engine's limits (read-only; policies precompute these selections).
	Counters []int
	// Amounts is the estimate per meter, excluding the output reservation.
	Amounts Amounts
	// Output is the output tokens reserved per choice, Choices the number of
	// choices; Output*Choices is added to every meter in OutputMeters (a bit
	// mask). The arithmetic saturates: an amount that does not fit in int64 is
	// math.MaxInt64, more than any counter holds, so the request is denied as
	// one that can never be admitted.
	Output       int64
	Choices      int64
	OutputMeters uint32
	// ClampOutput: when a counter of an output meter denies the request, lower
	// Output to what every counter still affords (at least 1) and try once more.
	ClampOutput bool
}

func (a *Admission) amount(m int) int64 {
	v := a.Amounts[m]
	if a.OutputMeters&(1<<uint(m)) != 0 {
		v = satmath.Add(v, satmath.Mul(a.Output, a.Choices))
	}
	return v
}

// Reserve charges a, all or nothing, stores the reservation in the request's
// Metadata and records its counters in the request's Limits. When this instance
// already holds a reservation for the request (a retried request phase), that
// one is returned and nothing is charged again. A denial is a 429 (or the
// store's 503) *gwerror.Error; nothing was charged.
func (e *Engine) Reserve(c *policies.Call, a *Admission) (*Reservation, *gwerror.Error) {
	if r, ok := c.Shared.Metadata[e.slot].(*Reservation); ok {
		return r, nil
	}
	if len(a.Counters) == 0 {
		// Nothing applies (e.g. only model rules, none matching): admit
		// without a reservation to resolve.
		r := &Reservation{eng: e, Output: a.Output}
		r.resolved.Store(true)
		return r, nil
	}
	r := e.newReservation(a)
	ctx := c.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	res := e.results.Get().(*counter.Result)
	defer e.results.Put(res)
	if err := e.storeReserve(ctx, r.debits, res); err != nil {
		return nil, e.storeError(c, err)
	}
	if !res.Allowed && a.ClampOutput && a.Output > 1 {
		// affordableOutput peeks into res; whatever it finds, the decision is
		// taken by a second Reserve (clamped or not), never by the peek.
		if out, ok := e.affordableOutput(ctx, r, a, res); ok {
			a.Output = out
			r.fill(e, a)
		}
		if err := e.storeReserve(ctx, r.debits, res); err != nil {
			return nil, e.storeError(c, err)
		}
	}
	if !res.Allowed {
		return nil, e.denial(r, a, res)
	}
	r.Output = a.Output
	copy(r.ticket.Window, res.Ticket.Window)
	r.ticket.Origin = res.Ticket.Origin
	e.open.Add(1)
	e.m.open.Inc()
	e.m.admitted.Inc()
	e.setHeaders(c, r, res)
	c.Shared.Metadata[e.slot] = r
	return r, nil
}

// Peek fills res with the state of counters sel under scope without charging.
func (e *Engine) Peek(ctx context.Context, scope *Scope, sel []int, res *counter.Result) error {
	var arr [inlineDebits]counter.Debit
	debits := arr[:0]
	for _, i := range sel {
		debits = append(debits, counter.Debit{Key: scope.Keys[i], Group: scope.Group, Limit: e.limits[i].Capacity})
	}
	return e.storePeek(ctx, debits, res)
}

func (e *Engine) storeReserve(ctx context.Context, debits []counter.Debit, res *counter.Result) error {
	start := time.Now()
	return e.observe(opReserve, start, e.counters.Reserve(ctx, debits, res))
}

// observe records a store call of op that started at start and returns its
// error.
func (e *Engine) observe(op int, start time.Time, err error) error {
	e.m.storeLatency[op].Observe(time.Since(start).Seconds())
	if err != nil {
		e.m.storeErrors[op].Inc()
	}
	return err
}

// affordableOutput peeks the counters and returns the largest per-choice
// output (>= 1, < a.Output) that every counter of an output meter affords
// together with the rest of the estimate. ok is false when clamping cannot
// help (a counter without output is the one short, or not even 1 fits).
func (e *Engine) affordableOutput(ctx context.Context, r *Reservation, a *Admission, res *counter.Result) (int64, bool) {
	d := res.Denied
	if d < 0 || d >= len(r.sel) || a.OutputMeters&(1<<uint(e.limits[r.sel[d]].Meter)) == 0 || a.Choices < 1 {
		return 0, false
	}
	if err := e.storePeek(ctx, r.debits, res); err != nil {
		return 0, false
	}
	best := a.Output - 1
	for i, db := range r.debits {
		rem := res.Remaining[i]
		if a.OutputMeters&(1<<uint(e.limits[r.sel[i]].Meter)) == 0 {
			if rem < db.Amount {
				return 0, false
			}
			continue
		}
		// What the counter affords beyond the rest of the estimate, per choice.
		base, fit := a.Amounts[e.limits[r.sel[i]].Meter], int64(0)
		if rem > base {
			fit = (rem - base) / a.Choices
		}
		best = min(best, fit)
	}
	if best < 1 {
		return 0, false
	}
	return best, true
}

func (e *Engine) storePeek(ctx context.Context, debits []counter.Debit, res *counter.Result) error {
	start := time.Now()
	return e.observe(opPeek, start, e.counters.Peek(ctx, debits, res))
}

func (e *Engine) storeError(c *policies.Call, err error) *gwerror.Error {
	e.m.denied[reasonStore].Inc()
	if errors.Is(err, counter.ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// The store logs its outage, rate-limited; a line per request
		// here would flood the log for as long as it lasts.
		e.logger.Debug("rate-limit store unavailable", "policy", e.policy, "route", e.route.RouteName,
			"request_id", c.Shared.RequestID, "err", err)
		return &gwerror.Error{Status: http.StatusServiceUnavailable, Type: gwerror.TypeServer,
			Code: gwerror.CodeStoreUnavailable, Policy: e.policy,
			Message: "the rate-limit counter store is unavailable; try again shortly"}
	}
	e.logger.Error("rate-limit store error", "policy", e.policy, "route", e.route.RouteName,
		"request_id", c.Shared.RequestID, "err", err)
	g := gwerror.Internal(c.Shared.RequestID)
	g.Policy = e.policy
	return g
}

// denial builds the 429 for the first counter that could not be afforded:
// its message names the scope that denied and when the counter resets, its
// headers report that counter as a 200 would (x-ratelimit-reset-* is the
// time until it is full again or its window ends, Retry-After the time until
// this request could be afforded), and x-should-retry tells SDKs whether a
// retry is worth it: yes for a rate whose wait is at most MaxRetryWait, no
// for a budget, a longer wait, or a request that can never fit.
func (e *Engine) denial(r *Reservation, a *Admission, res *counter.Result) *gwerror.Error {
	d := max(res.Denied, 0)
	cnt := e.limits[r.sel[d]]
	meter := e.meters[cnt.Meter]
	what := meter.Name
	if cnt.Rule != "" {
		what += " (model rule " + cnt.Rule + ")"
	}
	code, reason := gwerror.CodeRateLimitExceeded, reasonRate
	if IsBudget(meter.Unit, cnt.Capacity) {
		code, reason = gwerror.CodeBudgetExceeded, reasonBudget
	}
	g := &gwerror.Error{Status: http.StatusTooManyRequests, Type: gwerror.TypeRateLimit, Code: code, Policy: e.policy,
		Scope: e.scopeLabel(meter), ShouldRetry: gwerror.RetryNo}
	now := e.now()
	if d < len(res.Remaining) {
		g.Limits.Set(kindOf(meter), dialect.Counter{Limit: cnt.Capacity.Max, Remaining: res.Remaining[d], Reset: res.ResetAfter[d], At: now})
	}
	need := a.amount(cnt.Meter) // the debit itself may be capped (Reservation.fill)
	where := e.scopePhrase(a.Scope, meter)
	if res.Never {
		e.m.denied[reasonNever].Inc()
		g.Message = fmt.Sprintf("%s: this request needs %s of %s, more than the limit of %s %s for %s; it can never be admitted",
			e.policy, formatUnits(meter.Unit, need), what, formatUnits(meter.Unit, cnt.Capacity.Max), HumanPeriod(cnt.Capacity), where)
		return g
	}
	e.m.denied[reason].Inc()
	g.RetryAfter = res.RetryAfter
	kind := "rate limit"
	if reason == reasonBudget {
		kind = "budget"
	} else if g.RetryAfter <= MaxRetryWait {
		g.ShouldRetry = gwerror.RetryYes
	}
	g.Message = fmt.Sprintf("%s: %s exceeded for %s: %s limit %s %s; this request needs %s",
		e.policy, kind, where, what, formatUnits(meter.Unit, cnt.Capacity.Max), HumanPeriod(cnt.Capacity), formatUnits(meter.Unit, need))
	if reason == reasonRate && g.RetryAfter > 0 {
		g.Message += fmt.Sprintf("; retry after %ds", int64((g.RetryAfter+time.Second-1)/time.Second))
	}
	if d < len(res.ResetAfter) {
		g.Message += "; resets at " + ceilSecond(now.Add(max(res.ResetAfter[d], 0))).UTC().Format(time.RFC3339)
	}
	return g
}

// MaxRetryWait is the longest Retry-After of a rate denial that still tells
// SDKs to retry (x-should-retry: true); longer waits, like budgets, say false
// so that a client does not sleep for hours inside one call.
const MaxRetryWait = 60 * time.Second

// scopeLabel is the scope parameter of X-Sluice-Policy for a denial by a
// counter of meter.
func (e *Engine) scopeLabel(meter Meter) string {
	switch e.scopeKind {
	case ScopeApplication:
		return "application"
	case ScopeQuota:
		return meter.Name
	}
	return "route"
}

// scopePhrase names the denying scope in a message.
func (e *Engine) scopePhrase(s *Scope, meter Meter) string {
	switch e.scopeKind {
	case ScopeApplication:
		return "application " + s.ID + " on route " + e.route.RouteName
	case ScopeQuota:
		return "quota " + meter.Name + " on route " + e.route.RouteName
	}
	return "route " + e.route.RouteName + " (shared by every application)"
}

func formatUnits(u policies.Unit, n int64) string {
	if u == policies.UnitUSDMicros {
		return "$" + dialect.Dollars(n)
	}
	return strconv.FormatInt(n, 10) + " " + string(u)
}

// kindOf is the header kind that reports meter's counters: its own Kind, or
// by unit (tokens, requests, cost).
func kindOf(m Meter) dialect.Kind {
	if m.Kind != 0 {
		return m.Kind
	}
	switch m.Unit {
	case policies.UnitRequests:
		return dialect.Requests
	case policies.UnitUSDMicros:
		return dialect.Cost
	}
	return dialect.Tokens
}

// setHeaders records, per header kind, the tightest (lowest remaining)
// counter of the reservation in the request's Limits, unless an earlier
// instance already recorded a tighter one.
func (e *Engine) setHeaders(c *policies.Call, r *Reservation, res *counter.Result) {
	now := e.now()
	lim := c.Limits()
	for i := range r.debits {
		cnt := e.limits[r.sel[i]]
		lim.Offer(kindOf(e.meters[cnt.Meter]), dialect.Counter{Limit: cnt.Capacity.Max, Remaining: res.Remaining[i], Reset: res.ResetAfter[i], At: now})
	}
}

// clearHeaders forgets the rate-limit state of every kind r counts. It runs
// when a later policy rejected the request: r was released, so the admission
// figures this or another instance recorded no longer hold; the denying
// policy's own counters travel in its error.
func (e *Engine) clearHeaders(c *policies.Call, r *Reservation) {
	lim := c.Limits()
	for i := range r.debits {
		lim.Clear(kindOf(e.meters[e.limits[r.sel[i]].Meter]))
	}
}

func ceilSecond(t time.Time) time.Time {
	if tr := t.Truncate(time.Second); !tr.Equal(t) {
		return tr.Add(time.Second)
	}
	return t
}

// ResetString formats a reset delay the way OpenAI does (see
// dialect.ResetString).
func ResetString(d time.Duration) string { return dialect.ResetString(d) }
