package ratelimit

import (
	"context"
	"sync/atomic"
	"time"

	"sluice/counter"
	"sluice/internal/satmath"
	"sluice/llmapi"
	"sluice/policies"
	"sluice/sharedctx"
)

// inlineDebits is how many counters a reservation holds without a second
// allocation.
const inlineDebits = 8

// Resolution is how a reservation ended.
type Resolution uint8

const (
	// Settled: the signed delta real - estimate was applied.
	Settled Resolution = iota
	// Closed: the estimate is the final charge (no trustworthy usage).
	Closed
	// Abandoned: the client went away; the estimate is the final charge.
	Abandoned
	// Released: nothing went upstream; everything was refunded.
	Released
	numResolutions
)

func (k Resolution) String() string {
	return [...]string{"settled", "closed", "abandoned", "released"}[k]
}

// Reservation is one request's charge on one engine. It is resolved exactly
// once: the first of Settle, Close, Abandon and Release wins, later calls are
// no-ops that return false. Methods are safe for concurrent use.
type Reservation struct {
	eng      *Engine
	resolved atomic.Bool
	sel      []int
	debits   []counter.Debit
	ticket   counter.Ticket
	deltas   []int64
	// Output is the output tokens per choice that were reserved (after any clamp).
	Output int64

	actual Amounts
}

// reservation1, reservation2 and reservationN are a Reservation allocated
// with room for its counters' debits, ticket windows and deltas (one, two,
// up to inlineDebits): most engines charge one or two counters, and a
// reservation sized for eight is zeroed and scanned at three times the
// bytes.
type reservation1 struct {
	Reservation
	debitArr [1]counter.Debit
	winArr   [1]int64
	deltaArr [1]int64
}

type reservation2 struct {
	Reservation
	debitArr [2]counter.Debit
	winArr   [2]int64
	deltaArr [2]int64
}

type reservationN struct {
	Reservation
	debitArr [inlineDebits]counter.Debit
	winArr   [inlineDebits]int64
	deltaArr [inlineDebits]int64
}

func (e *Engine) newReservation(a *Admission) *Reservation {
	var r *Reservation
	switch n := len(a.Counters); {
	case n <= 1:
		v := &reservation1{}
		r = &v.Reservation
		r.debits, r.ticket.Window, r.deltas = v.debitArr[:n], v.winArr[:n], v.deltaArr[:n]
	case n <= 2:
		v := &reservation2{}
		r = &v.Reservation
		r.debits, r.ticket.Window, r.deltas = v.debitArr[:n], v.winArr[:n], v.deltaArr[:n]
	case n <= inlineDebits:
		v := &reservationN{}
		r = &v.Reservation
		r.debits, r.ticket.Window, r.deltas = v.debitArr[:n], v.winArr[:n], v.deltaArr[:n]
	default:
		r = &Reservation{debits: make([]counter.Debit, n), ticket: counter.Ticket{Window: make([]int64, n)}, deltas: make([]int64, n)}
	}
	r.eng = e
	r.fill(e, a)
	return r
}

// fill (re)computes the debits of a. A debit above its counter's capacity is
// capped at capacity + 1: it is denied as one that can never be admitted all
// the same, and the store's arithmetic never sees an amount that could
// overflow when added to a counter.
func (r *Reservation) fill(e *Engine, a *Admission) {
	n := len(a.Counters)
	r.sel = a.Counters
	if len(r.debits) != n {
		r.debits = make([]counter.Debit, n)
		r.deltas = make([]int64, n)
		r.ticket.Window = make([]int64, n)
	}
	for j, i := range a.Counters {
		c := e.limits[i]
		amount := min(a.amount(c.Meter), satmath.Add(c.Capacity.Max, 1))
		r.debits[j] = counter.Debit{Key: a.Scope.Keys[i], Group: a.Scope.Group, Limit: c.Capacity, Amount: amount}
	}
}

// Estimate returns the amount reserved on meter m (0 when no counter of the
// reservation counts that meter).
func (r *Reservation) Estimate(m int) int64 {
	for j, i := range r.sel {
		if r.eng.limits[i].Meter == m {
			return r.debits[j].Amount
		}
	}
	return 0
}

// Resolved reports whether the reservation has been resolved.
func (r *Reservation) Resolved() bool { return r.resolved.Load() }

// Settle applies, per counter, the signed delta actual[meter] - estimate: more
// than estimated goes into debt, less is refunded, but never more than was
// reserved (the delta is at least -estimate).
func (r *Reservation) Settle(actual *Amounts) bool { return r.resolve(Settled, actual) }

// Close keeps the estimate as the final charge.
func (r *Reservation) Close() bool { return r.resolve(Closed, nil) }

// Abandon keeps the estimate as the final charge (the client went away).
func (r *Reservation) Abandon() bool { return r.resolve(Abandoned, nil) }

// Release refunds everything that was reserved.
func (r *Reservation) Release() bool { return r.resolve(Released, nil) }

// resolveAtLeast resolves as kind (Closed or Abandoned) charging, per counter,
// max(estimate, atLeast[meter]): amounts that are only a lower bound of the
// real use may add to the estimate but never refund any of it.
func (r *Reservation) resolveAtLeast(kind Resolution, atLeast *Amounts) bool {
	if !r.resolved.CompareAndSwap(false, true) {
		return false
	}
	e := r.eng
	adjust := false
	for j, i := range r.sel {
		delta := max(atLeast[e.limits[i].Meter]-r.debits[j].Amount, 0)
		r.deltas[j] = delta
		adjust = adjust || delta != 0
	}
	return r.finishResolve(kind, adjust)
}

func (r *Reservation) resolve(kind Resolution, actual *Amounts) bool {
	if !r.resolved.CompareAndSwap(false, true) {
		return false
	}
	e := r.eng
	adjust := false
	switch kind {
	case Settled:
		var seen uint32
		for j, i := range r.sel {
			m := e.limits[i].Meter
			est := r.debits[j].Amount
			delta := max(actual[m]-est, -est)
			r.deltas[j] = delta
			adjust = adjust || delta != 0
			if seen&(1<<uint(m)) == 0 {
				seen |= 1 << uint(m)
				e.m.delta[m].Observe(float64(delta))
			}
		}
	case Released:
		for j := range r.debits {
			r.deltas[j] = -r.debits[j].Amount
			adjust = adjust || r.deltas[j] != 0
		}
	}
	return r.finishResolve(kind, adjust)
}

// finishResolve applies r.deltas when adjust is set and records the
// resolution.
func (r *Reservation) finishResolve(kind Resolution, adjust bool) bool {
	e := r.eng
	if adjust {
		e.adjust(r)
	}
	e.open.Add(-1)
	e.m.open.Dec()
	e.m.resolutions[kind].Inc()
	return true
}

// adjust applies r.deltas. It runs after the request, so it ignores the
// request's cancellation; failures are logged and counted, never surfaced.
func (e *Engine) adjust(r *Reservation) {
	start := time.Now()
	if err := e.observe(opAdjust, start, e.counters.Adjust(context.Background(), r.debits, &r.ticket, r.deltas)); err != nil {
		e.logger.Warn("rate-limit settlement failed", "policy", e.policy, "route", e.route.RouteName, "err", err)
	}
}

// Trust says how far the amounts a Settler computed can be trusted.
type Trust uint8

const (
	// TrustNone: no usable amounts; the estimate is the final charge.
	TrustNone Trust = iota
	// TrustLowerBound: the amounts are at least what the request used (usage
	// the gateway counted from the output it forwarded, or the provider's
	// usage of a stream with fewer finished choices than requested): each
	// counter is charged max(estimate, amount), never refunded below the
	// estimate.
	TrustLowerBound
	// TrustExact: the provider's complete usage; the reservation settles
	// (real - estimate, refunds allowed).
	TrustExact
)

// Settler computes the real amounts of a request that went upstream.
type Settler interface {
	// Actual fills a with the amount per meter and reports how far they can
	// be trusted. It is called for every outcome that went upstream
	// (Completed, Cancelled, UpstreamFailed, Failed after an attempt).
	Actual(c *policies.Call, o *policies.Outcome, r *Reservation, a *Amounts) Trust
}

// FixedTrust is the Trust of amounts known at admission (a request count,
// request-source quotas): exact for a Completed request (it settles), none
// otherwise (the outcome's resolution keeps the estimate, which is the same
// amount).
func FixedTrust(o *policies.Outcome) Trust {
	if o.Kind == policies.Completed {
		return TrustExact
	}
	return TrustNone
}

// Finish resolves this instance's reservation for the request's outcome:
//
//   - Rejected (by a later policy; a policy that rejected itself holds none): Release.
//   - Failed or Cancelled before anything went upstream: Release. Nothing
//     was consumed: a client that left while it waited (for fair admission,
//     or for a later policy) is not charged its estimate.
//   - Any other outcome asks s for the amounts (s nil: TrustNone):
//     TrustExact settles; TrustLowerBound and TrustNone resolve by outcome,
//     Abandon for Cancelled, Close for the rest (Completed, UpstreamFailed,
//     Failed), charging max(estimate, amount) per counter for a lower
//     bound and the estimate for none.
//
// It returns the resolution applied, and false when there was nothing to resolve.
func (e *Engine) Finish(c *policies.Call, o *policies.Outcome, s Settler) (Resolution, bool) {
	r, ok := c.Shared.Metadata[e.slot].(*Reservation)
	if !ok {
		return 0, false
	}
	delete(c.Shared.Metadata, e.slot)
	switch {
	case o.Kind == policies.Rejected:
		e.clearHeaders(c, r)
		return Released, r.resolve(Released, nil)
	case (o.Kind == policies.Failed || o.Kind == policies.Cancelled) && !o.WentUpstream:
		return Released, r.resolve(Released, nil)
	}
	kind := Closed
	if o.Kind == policies.Cancelled {
		kind = Abandoned
	}
	trust := TrustNone
	if s != nil {
		// r.actual is scratch inside the reservation: a local would escape
		// through the Settler interface and cost an allocation per request.
		trust = s.Actual(c, o, r, &r.actual)
	}
	switch trust {
	case TrustExact:
		return Settled, r.Settle(&r.actual)
	case TrustLowerBound:
		return kind, r.resolveAtLeast(kind, &r.actual)
	}
	return kind, r.resolve(kind, nil)
}

// usageTrust is the Trust of amounts taken from u: exact when u is the
// provider's complete usage, a lower bound when it is partial (fewer finished
// choices than requested) or counted by the gateway, none without usage.
func usageTrust(u *llmapi.Usage) Trust {
	switch {
	case u.Complete():
		return TrustExact
	case u != nil && (u.Authoritative || u.Counted):
		return TrustLowerBound
	}
	return TrustNone
}

// UsageTrust is the Trust of amounts a policy takes from the request's usage
// (sharedctx Usage); see TrustExact and TrustLowerBound.
func UsageTrust(c *policies.Call) Trust { return usageTrust(c.Shared.Usage()) }

// CostTrust is the Trust of the cost llm-cost published (sharedctx
// CostMicroUSD): "calculated" is as trustworthy as the usage it was priced
// from (a partial stream's cost is a lower bound), "estimated" (priced from
// usage the gateway counted) is a lower bound, any other status is none.
func CostTrust(c *policies.Call) Trust {
	switch c.Shared.CostStatus() {
	case sharedctx.CostStatusCalculated:
		return max(UsageTrust(c), TrustLowerBound)
	case sharedctx.CostStatusEstimated:
		return TrustLowerBound
	}
	return TrustNone
}
