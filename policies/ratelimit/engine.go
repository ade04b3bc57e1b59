// Package ratelimit is the rate-limit engine that every limit policy uses, and
// the general `advanced-ratelimit` policy built on it.
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

	"sluice/gwerror"
	"sluice/internal/satmath"
	"sluice/policies"
	"sluice/policies/ratelimit/store"
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
	Counters []Counter
	// Key, when set, builds the key of counter i for a scope (advanced-ratelimit
	// uses it for quotas with their own key extraction). Default: StandardKey.
	Key func(scope string, counter int) string
}

// Engine reserves and resolves one policy instance's counters. It is safe for
// concurrent use.
type Engine struct {
	policy   string
	route    policies.RouteInfo
	slot     string
	counters []Counter
	meters   []Meter
	store    store.Store
	logger   *slog.Logger
	keyFn    func(scope string, counter int) string
	// standardKeys: keyFn is StandardKey, so a scope's counters share its
	// hash tag and are kept in one store group (Scope.Group).
	standardKeys bool

	scopes    sync.Map // scope id -> *Scope
	scopeN    atomic.Int64
	results   sync.Pool // *store.Result
	open      atomic.Int64
	m         *metrics
	allCounts []int
}

// Scope is a resolved counter scope: its name, the key of every counter of
// the engine under it, and the store.Debit.Group they are kept in. Immutable
// once built.
type Scope struct {
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
	for i, c := range o.Counters {
		if c.Meter < 0 || c.Meter >= len(o.Meters) {
			return nil, fmt.Errorf("ratelimit: counter %d has no meter", i)
		}
		if err := c.Limit.Validate(); err != nil {
			return nil, err
		}
	}
	logger := svc.Logger
	if logger == nil {
		logger = slog.Default()
	}
	e := &Engine{
		policy:   o.Policy,
		route:    o.Route,
		slot:     sharedctx.InstanceKey(o.Route.InstanceID, ReservationSlot),
		counters: o.Counters,
		meters:   o.Meters,
		store:    svc.Counters,
		logger:   logger,
		keyFn:    o.Key,
	}
	if e.keyFn == nil {
		e.keyFn = e.StandardKey
		e.standardKeys = true
	}
	e.results.New = func() any { return new(store.Result) }
	e.m = newMetrics(svc.Metrics, o.Route.RouteName, o.Policy, o.Meters)
	e.allCounts = make([]int, len(o.Counters))
	for i := range e.allCounts {
		e.allCounts[i] = i
	}
	return e, nil
}

// Slot is the Metadata key holding this instance's reservation.
func (e *Engine) Slot() string { return e.slot }

// Policy is the policy name.
func (e *Engine) Policy() string { return e.policy }

// Counters returns the engine's counters (read-only).
func (e *Engine) Counters() []Counter { return e.counters }

// Meters returns the engine's meters (read-only).
func (e *Engine) Meters() []Meter { return e.meters }

// OpenReservations is the number of reservations this engine made that are not
// resolved yet. It returns to zero when traffic stops; anything else is a leak.
func (e *Engine) OpenReservations() int64 { return e.open.Load() }

// StandardKey is `{scope}:<policy>:<meter>:<period>`, plus `:model:<match>`
// for a model rule's counter. The braces are a Redis Cluster hash tag: all
// counters of one scope live in one slot, so one reservation is one script.
func (e *Engine) StandardKey(scope string, i int) string {
	c := e.counters[i]
	k := GroupKey(scope, e.policy) + ":" + e.meters[c.Meter].Name + ":" + PeriodLabel(c.Limit)
	if c.Rule != "" {
		k += ":model:" + c.Rule
	}
	return k
}

// GroupKey is "{scope}:<policy>": the store.Debit.Group of policy's counters
// under scope with the standard keys, and the start of each of their keys.
func GroupKey(scope, policy string) string { return "{" + scope + "}:" + policy }

// Scope returns the cached scope for id, building it with name(id) on first
// use. id is whatever identifies the scope cheaply (the application id for a
// consumer limit) so that the hot path neither concatenates nor allocates.
func (e *Engine) Scope(id string, name func(id string) string) *Scope {
	if v, ok := e.scopes.Load(id); ok {
		return v.(*Scope)
	}
	s := &Scope{Name: name(id), Keys: make([]string, len(e.counters))}
	for i := range e.counters {
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
	// Counters are indexes into the engine's counters (read-only; policies
	// precompute these selections).
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
// Metadata and sets the x-ratelimit-* client headers. When this instance
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
	res := e.results.Get().(*store.Result)
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
func (e *Engine) Peek(ctx context.Context, scope *Scope, sel []int, res *store.Result) error {
	var arr [inlineDebits]store.Debit
	debits := arr[:0]
	for _, i := range sel {
		debits = append(debits, store.Debit{Key: scope.Keys[i], Group: scope.Group, Limit: e.counters[i].Limit})
	}
	return e.storePeek(ctx, debits, res)
}

func (e *Engine) storeReserve(ctx context.Context, debits []store.Debit, res *store.Result) error {
	start := time.Now()
	return e.observe(opReserve, start, e.store.Reserve(ctx, debits, res))
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
func (e *Engine) affordableOutput(ctx context.Context, r *Reservation, a *Admission, res *store.Result) (int64, bool) {
	d := res.Denied
	if d < 0 || d >= len(r.sel) || a.OutputMeters&(1<<uint(e.counters[r.sel[d]].Meter)) == 0 || a.Choices < 1 {
		return 0, false
	}
	if err := e.storePeek(ctx, r.debits, res); err != nil {
		return 0, false
	}
	best := a.Output - 1
	for i, db := range r.debits {
		rem := res.Remaining[i]
		if a.OutputMeters&(1<<uint(e.counters[r.sel[i]].Meter)) == 0 {
			if rem < db.Amount {
				return 0, false
			}
			continue
		}
		// What the counter affords beyond the rest of the estimate, per choice.
		base, fit := a.Amounts[e.counters[r.sel[i]].Meter], int64(0)
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

func (e *Engine) storePeek(ctx context.Context, debits []store.Debit, res *store.Result) error {
	start := time.Now()
	return e.observe(opPeek, start, e.store.Peek(ctx, debits, res))
}

func (e *Engine) storeError(c *policies.Call, err error) *gwerror.Error {
	e.m.denied[reasonStore].Inc()
	if errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		e.logger.Warn("rate-limit store unavailable", "policy", e.policy, "route", e.route.RouteName,
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

// denial builds the 429 for the first counter that could not be afforded.
func (e *Engine) denial(r *Reservation, a *Admission, res *store.Result) *gwerror.Error {
	d := max(res.Denied, 0)
	cnt := e.counters[r.sel[d]]
	meter := e.meters[cnt.Meter]
	what := meter.Name
	if cnt.Rule != "" {
		what += " (model rule " + cnt.Rule + ")"
	}
	code, reason := gwerror.CodeRateLimitExceeded, reasonRate
	if IsBudget(meter.Unit, cnt.Limit) {
		code, reason = gwerror.CodeBudgetExceeded, reasonBudget
	}
	g := &gwerror.Error{Status: http.StatusTooManyRequests, Type: gwerror.TypeRateLimit, Code: code, Policy: e.policy}
	need := a.amount(cnt.Meter) // the debit itself may be capped (Reservation.fill)
	if res.Never {
		e.m.denied[reasonNever].Inc()
		g.Message = fmt.Sprintf("%s: this request needs %s of %s, more than the limit of %s %s for %s; it can never be admitted",
			e.policy, formatUnits(meter.Unit, need), what, formatUnits(meter.Unit, cnt.Limit.Max), HumanPeriod(cnt.Limit), a.Scope.Name)
		return g
	}
	e.m.denied[reason].Inc()
	g.RetryAfter = res.RetryAfter
	kind := "rate limit"
	if reason == reasonBudget {
		kind = "budget"
	}
	g.Message = fmt.Sprintf("%s: %s exceeded for %s: limit %s %s; this request needs %s",
		e.policy, kind, what, formatUnits(meter.Unit, cnt.Limit.Max), HumanPeriod(cnt.Limit), formatUnits(meter.Unit, need))
	if g.RetryAfter > 0 {
		g.Message += fmt.Sprintf("; retry after %ds", int64((g.RetryAfter+time.Second-1)/time.Second))
	}
	g.Header = http.Header{}
	if d < len(res.Remaining) {
		setUnitHeaders(g.Header, meter.Unit, cnt.Limit.Max, res.Remaining[d], res.RetryAfter, false)
	}
	return g
}

func formatUnits(u Unit, n int64) string {
	if u == UnitUSDMicros {
		return "$" + strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64)
	}
	return strconv.FormatInt(n, 10) + " " + string(u)
}

// Canonical header names (written pre-canonicalised to avoid per-request work).
const (
	hLimitTokens       = "X-Ratelimit-Limit-Tokens"
	hRemainingTokens   = "X-Ratelimit-Remaining-Tokens"
	hResetTokens       = "X-Ratelimit-Reset-Tokens"
	hLimitRequests     = "X-Ratelimit-Limit-Requests"
	hRemainingRequests = "X-Ratelimit-Remaining-Requests"
	hResetRequests     = "X-Ratelimit-Reset-Requests"
	hCostLimit         = "X-Ratelimit-Cost-Limit-Dollars"
	hCostRemaining     = "X-Ratelimit-Cost-Remaining-Dollars"
)

// setHeaders writes, per unit, the tightest (lowest remaining) counter of the
// reservation, unless an earlier instance already wrote a tighter one.
func (e *Engine) setHeaders(c *policies.Call, r *Reservation, res *store.Result) {
	var best [3]int
	best[0], best[1], best[2] = -1, -1, -1
	for i := range r.debits {
		u := unitIndex(e.meters[e.counters[r.sel[i]].Meter].Unit)
		if best[u] < 0 || res.Remaining[i] < res.Remaining[best[u]] {
			best[u] = i
		}
	}
	if c.ClientHeader == nil {
		c.ClientHeader = http.Header{}
	}
	for u, i := range best {
		if i < 0 {
			continue
		}
		unit := units[u]
		setUnitHeaders(c.ClientHeader, unit, e.counters[r.sel[i]].Limit.Max, res.Remaining[i], res.ResetAfter[i], true)
	}
}

var units = [3]Unit{UnitTokens, UnitRequests, UnitUSDMicros}

// clearHeaders removes the x-ratelimit-* headers of every unit r counts. It
// runs when a later policy rejected the request: r was released, so the
// admission figures this or another instance wrote no longer hold; the denying
// policy's own headers travel in its error, not in ClientHeader.
func (e *Engine) clearHeaders(c *policies.Call, r *Reservation) {
	if c.ClientHeader == nil {
		return
	}
	for i := range r.debits {
		switch e.meters[e.counters[r.sel[i]].Meter].Unit {
		case UnitRequests:
			delete(c.ClientHeader, hLimitRequests)
			delete(c.ClientHeader, hRemainingRequests)
			delete(c.ClientHeader, hResetRequests)
		case UnitUSDMicros:
			delete(c.ClientHeader, hCostLimit)
			delete(c.ClientHeader, hCostRemaining)
		default:
			delete(c.ClientHeader, hLimitTokens)
			delete(c.ClientHeader, hRemainingTokens)
			delete(c.ClientHeader, hResetTokens)
		}
	}
}

func unitIndex(u Unit) int {
	switch u {
	case UnitRequests:
		return 1
	case UnitUSDMicros:
		return 2
	}
	return 0
}

// setUnitHeaders writes the x-ratelimit-* headers of one unit. With onlyTighter
// it leaves headers alone that already report a lower remaining.
func setUnitHeaders(h http.Header, u Unit, limit, remaining int64, reset time.Duration, onlyTighter bool) {
	remaining = max(remaining, 0)
	switch u {
	case UnitUSDMicros:
		if onlyTighter {
			if old, ok := h[hCostRemaining]; ok && len(old) > 0 {
				if v, err := strconv.ParseFloat(old[0], 64); err == nil && v*1e6 <= float64(remaining) {
					return
				}
			}
		}
		h[hCostLimit] = []string{dollars(limit)}
		h[hCostRemaining] = []string{dollars(remaining)}
	case UnitRequests:
		if onlyTighter && !tighter(h, hRemainingRequests, remaining) {
			return
		}
		h[hLimitRequests] = []string{strconv.FormatInt(limit, 10)}
		h[hRemainingRequests] = []string{strconv.FormatInt(remaining, 10)}
		h[hResetRequests] = []string{ResetString(reset)}
	default:
		if onlyTighter && !tighter(h, hRemainingTokens, remaining) {
			return
		}
		h[hLimitTokens] = []string{strconv.FormatInt(limit, 10)}
		h[hRemainingTokens] = []string{strconv.FormatInt(remaining, 10)}
		h[hResetTokens] = []string{ResetString(reset)}
	}
}

func tighter(h http.Header, key string, remaining int64) bool {
	old, ok := h[key]
	if !ok || len(old) == 0 {
		return true
	}
	v, err := strconv.ParseInt(old[0], 10, 64)
	return err != nil || remaining < v
}

func dollars(micros int64) string {
	return strconv.FormatFloat(float64(micros)/1e6, 'f', -1, 64)
}

// ResetString formats a reset delay the way OpenAI does: Go duration syntax,
// milliseconds below one second ("250ms"), whole seconds above ("6m0s", "1s"),
// always rounded up.
func ResetString(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	if d < time.Second {
		return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
	}
	return ((d + time.Second - 1) / time.Second * time.Second).String()
}
