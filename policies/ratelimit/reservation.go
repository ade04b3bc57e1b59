package ratelimit

import (
	"context"
	"sync/atomic"
	"time"

	"sluice/internal/satmath"
	"sluice/llmapi"
	"sluice/policies"
	"sluice/policies/ratelimit/store"
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
	debits   []store.Debit
	ticket   store.Ticket
	deltas   []int64
	// Output is the output tokens per choice that were reserved (after any clamp).
	Output int64

	actual   Amounts
	debitArr [inlineDebits]store.Debit
	winArr   [inlineDebits]int64
	deltaArr [inlineDebits]int64
}

func (e *Engine) newReservation(a *Admission) *Reservation {
	r := &Reservation{eng: e}
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
	if n <= inlineDebits {
		r.debits = r.debitArr[:n]
		r.deltas = r.deltaArr[:n]
		r.ticket.Window = r.winArr[:n]
	} else {
		r.debits = make([]store.Debit, n)
		r.deltas = make([]int64, n)
		r.ticket.Window = make([]int64, n)
	}
	for j, i := range a.Counters {
		c := e.counters[i]
		amount := min(a.amount(c.Meter), satmath.Add(c.Limit.Max, 1))
		r.debits[j] = store.Debit{Key: a.Scope.Keys[i], Group: a.Scope.Group, Limit: c.Limit, Amount: amount}
	}
}

// Estimate returns the amount reserved on meter m (0 when no counter of the
// reservation counts that meter).
func (r *Reservation) Estimate(m int) int64 {
	for j, i := range r.sel {
		if r.eng.counters[i].Meter == m {
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
			m := e.counters[i].Meter
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
	if err := e.observe(opAdjust, start, e.store.Adjust(context.Background(), r.debits, &r.ticket, r.deltas)); err != nil {
		e.logger.Warn("rate-limit settlement failed", "policy", e.policy, "route", e.route.RouteName, "err", err)
	}
}

// Settler computes the real amounts of a Completed request for Finish.
type Settler interface {
	// Actual fills a with the real amount per meter and reports whether they
	// are authoritative; false closes the reservation at its estimate.
	Actual(c *policies.Call, o *policies.Outcome, r *Reservation, a *Amounts) bool
}

// Finish resolves this instance's reservation for the request's outcome:
//
//   - Rejected (by a later policy; a policy that rejected itself holds none): Release.
//   - Completed: Settle with s's amounts when authoritative, else Close.
//   - UpstreamFailed: Close. Cancelled: Abandon.
//   - Failed: Release when nothing went upstream, else Close.
//
// It returns the resolution applied, and false when there was nothing to resolve.
func (e *Engine) Finish(c *policies.Call, o *policies.Outcome, s Settler) (Resolution, bool) {
	r, ok := c.Shared.Metadata[e.slot].(*Reservation)
	if !ok {
		return 0, false
	}
	delete(c.Shared.Metadata, e.slot)
	var kind Resolution
	switch o.Kind {
	case policies.Rejected:
		kind = Released
		e.clearHeaders(c, r)
	case policies.Completed:
		// r.actual is scratch inside the reservation: a local would escape
		// through the Settler interface and cost an allocation per request.
		if s != nil && s.Actual(c, o, r, &r.actual) {
			return Settled, r.Settle(&r.actual)
		}
		kind = Closed
	case policies.Cancelled:
		kind = Abandoned
	case policies.Failed:
		kind = Closed
		if !o.WentUpstream {
			kind = Released
		}
	default:
		kind = Closed
	}
	return kind, r.resolve(kind, nil)
}

// Usage returns the request's usage: the Outcome's, else the gateway's
// Metadata x-llm-usage; nil when neither is set.
func Usage(c *policies.Call, o *policies.Outcome) *llmapi.Usage {
	if o != nil && o.Usage != nil {
		return o.Usage
	}
	u, _ := c.Shared.Metadata[sharedctx.KeyLLMUsage].(*llmapi.Usage)
	return u
}
