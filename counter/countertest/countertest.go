// Package countertest is the conformance suite every counter.Store implementation
// must pass (memory and redisstore run it unchanged).
//
// Each subtest builds a fresh store with newStore and a fake clock that the
// suite sets and advances between calls. A store that follows the clock
// exactly (memory; a redis store that passes the time to its scripts)
// declares Caps{FrozenClock: true} and gets exact assertions on refill
// arithmetic. A store whose time also moves on its own (e.g. Redis TIME plus
// the fake clock's offset) declares FrozenClock false: the same scenarios run,
// and time-sensitive figures are asserted as bounds (a few ms of drift is
// tolerated; scenarios keep far from window edges). Keys are unique per Run,
// so a shared Redis database can be reused across runs.
package countertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/counter"
)

// Caps describes what a store under test guarantees beyond the contract.
type Caps struct {
	// FrozenClock: the store's time is exactly the injected clock, so refill
	// arithmetic is asserted exactly; otherwise as bounds.
	FrozenClock bool
}

// NewStore builds the store under test reading time from now. The suite
// closes it at the end of the subtest.
type NewStore func(t *testing.T, now func() time.Time) counter.Store

// drift is how far a non-frozen store's time may run ahead of the fake clock
// during one subtest.
const drift = 2 * time.Second

// start is where the fake clock starts: mid-minute, mid-hour, mid-day, so a
// drifting store stays inside the windows the scenarios use.
var start = time.Date(2025, time.March, 14, 12, 30, 30, 500_000_000, time.UTC)

// Clock is the fake clock handed to stores. Safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock reading at.
func NewClock(at time.Time) *Clock { return &Clock{now: at} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to at.
func (c *Clock) Set(at time.Time) {
	c.mu.Lock()
	c.now = at
	c.mu.Unlock()
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var runSeq atomic.Uint64

// Run runs the suite. caps defaults to Caps{} (bounds only).
func Run(t *testing.T, newStore NewStore, caps ...Caps) {
	t.Helper()
	var c Caps
	if len(caps) > 0 {
		c = caps[0]
	}
	prefix := fmt.Sprintf("st%x.%d", time.Now().UnixNano(), runSeq.Add(1))
	for _, layout := range []string{"Keys", "Groups"} {
		for _, tc := range cases {
			t.Run(layout+"/"+tc.name, func(t *testing.T) {
				clk := NewClock(start)
				var s counter.Store = newStore(t, clk.Now)
				t.Cleanup(func() {
					if err := s.Close(); err != nil {
						t.Errorf("Close: %v", err)
					}
				})
				if layout == "Groups" {
					s = grouped{s}
				}
				tc.run(&env{T: t, s: s, clk: clk, caps: c, scope: prefix + "." + t.Name()})
			})
		}
	}
}

// grouped runs the suite with every call's debits in one counter.Debit.Group
// per hash tag: "{scope}:group" for keys "{scope}:<name>". Every case's keys
// share the subtest's tag, so all its counters are kept in one group.
type grouped struct{ counter.Store }

func (g grouped) Reserve(ctx context.Context, ds []counter.Debit, res *counter.Result) error {
	return g.Store.Reserve(ctx, inGroup(ds), res)
}

func (g grouped) Peek(ctx context.Context, ds []counter.Debit, res *counter.Result) error {
	return g.Store.Peek(ctx, inGroup(ds), res)
}

func (g grouped) Adjust(ctx context.Context, ds []counter.Debit, t *counter.Ticket, deltas []int64) error {
	return g.Store.Adjust(ctx, inGroup(ds), t, deltas)
}

func inGroup(ds []counter.Debit) []counter.Debit {
	out := make([]counter.Debit, len(ds))
	for i, d := range ds {
		if j := strings.IndexByte(d.Key, '}'); j > 0 {
			d.Group = d.Key[:j+1] + ":group"
		}
		out[i] = d
	}
	return out
}

type env struct {
	*testing.T
	s     counter.Store
	clk   *Clock
	caps  Caps
	scope string
}

// key returns a counter key of this subtest, hash-tagged by scope.
func (e *env) key(name string) string { return "{" + e.scope + "}:" + name }

func (e *env) reserve(ds ...counter.Debit) *counter.Result {
	e.Helper()
	var r counter.Result
	if err := e.s.Reserve(context.Background(), ds, &r); err != nil {
		e.Fatalf("Reserve: %v", err)
	}
	checkShape(e, &r, len(ds))
	return &r
}

func (e *env) peek(ds ...counter.Debit) *counter.Result {
	e.Helper()
	var r counter.Result
	if err := e.s.Peek(context.Background(), ds, &r); err != nil {
		e.Fatalf("Peek: %v", err)
	}
	checkShape(e, &r, len(ds))
	return &r
}

func (e *env) adjust(ds []counter.Debit, t *counter.Ticket, deltas ...int64) {
	e.Helper()
	if err := e.s.Adjust(context.Background(), ds, t, deltas); err != nil {
		e.Fatalf("Adjust: %v", err)
	}
}

func checkShape(e *env, r *counter.Result, n int) {
	e.Helper()
	if len(r.Remaining) != n || len(r.ResetAfter) != n || len(r.Ticket.Window) != n {
		e.Fatalf("result slices sized %d/%d/%d, want %d", len(r.Remaining), len(r.ResetAfter), len(r.Ticket.Window), n)
	}
	if r.Allowed != (r.Denied == -1) {
		e.Fatalf("Allowed=%v but Denied=%d", r.Allowed, r.Denied)
	}
	if r.Allowed && (r.RetryAfter != 0 || r.Never) {
		e.Fatalf("allowed with RetryAfter=%v Never=%v", r.RetryAfter, r.Never)
	}
	if r.Never && r.RetryAfter != 0 {
		e.Fatalf("Never with RetryAfter=%v", r.RetryAfter)
	}
}

// remaining asserts r's Remaining[i]: exactly want when frozen, else within
// [want, want+slack] (a drifting clock can only have refilled more).
func (e *env) remaining(r *counter.Result, i int, want, slack int64) {
	e.Helper()
	got := r.Remaining[i]
	if e.caps.FrozenClock || slack == 0 {
		if got != want {
			e.Errorf("Remaining[%d] = %d, want %d", i, got, want)
		}
		return
	}
	if got < want || got > want+slack {
		e.Errorf("Remaining[%d] = %d, want in [%d, %d]", i, got, want, want+slack)
	}
}

// duration asserts got == want when frozen, else want-drift <= got <= want
// (time left can only have shrunk).
func (e *env) duration(what string, got, want time.Duration) {
	e.Helper()
	if e.caps.FrozenClock {
		if got != want {
			e.Errorf("%s = %v, want %v", what, got, want)
		}
		return
	}
	if got > want || got < want-drift {
		e.Errorf("%s = %v, want in [%v, %v]", what, got, want-drift, want)
	}
}

func (e *env) allowed(r *counter.Result) {
	e.Helper()
	if !r.Allowed {
		e.Fatalf("denied (Denied=%d RetryAfter=%v Never=%v), want allowed", r.Denied, r.RetryAfter, r.Never)
	}
}

func (e *env) denied(r *counter.Result, idx int, never bool) {
	e.Helper()
	if r.Allowed || r.Denied != idx || r.Never != never {
		e.Fatalf("got Allowed=%v Denied=%d Never=%v, want denied at %d Never=%v", r.Allowed, r.Denied, r.Never, idx, never)
	}
	if !never && r.RetryAfter <= 0 {
		e.Fatalf("finite denial with RetryAfter=%v", r.RetryAfter)
	}
}

// Bucket is a token bucket of max per period.
func Bucket(max int64, period time.Duration) counter.Limit {
	return counter.Limit{Algorithm: counter.TokenBucket, Max: max, Period: period}
}

// Window is a fixed window of max per period.
func Window(max int64, period time.Duration) counter.Limit {
	return counter.Limit{Algorithm: counter.FixedWindow, Max: max, Period: period}
}

// Month is a calendar-month limit of max.
func Month(max int64) counter.Limit {
	return counter.Limit{Algorithm: counter.CalendarMonth, Max: max}
}

func debit(key string, l counter.Limit, amount int64) counter.Debit {
	return counter.Debit{Key: key, Limit: l, Amount: amount}
}

type testCase struct {
	name string
	run  func(e *env)
}

var cases = []testCase{
	{"TokenBucket/Boundary", testBucketBoundary},
	{"TokenBucket/RetryAfterCeil", testBucketRetryCeil},
	{"TokenBucket/Never", testBucketNever},
	{"TokenBucket/DebtRepaidByRefill", testBucketDebt},
	{"TokenBucket/RefundCappedAtCapacity", testBucketRefundCap},
	{"TokenBucket/CapacityRaised", testBucketRaised},
	{"TokenBucket/CapacityLowered", testBucketLowered},
	{"FixedWindow/Boundary", testWindowBoundary},
	{"FixedWindow/Rollover", testWindowRollover},
	{"FixedWindow/DebtAndRefund", testWindowDebt},
	{"FixedWindow/AdjustEndedWindowIsNoop", testWindowAdjustEnded},
	{"FixedWindow/CapacityChanged", testWindowCapacity},
	{"CalendarMonth/JanToFeb", testMonthJanFeb},
	{"CalendarMonth/DecToJan", testMonthDecJan},
	{"CalendarMonth/CapacityChanged", testMonthCapacity},
	{"FixedWindow/WeekStartsMonday", testWeekMonday},
	{"AllOrNothing", testAllOrNothing},
	{"PeekDoesNotCharge", testPeek},
	{"KeysIndependent", testKeysIndependent},
	{"OtherAlgorithmIsAbsent", testOtherAlgorithm},
	{"InvalidLimit", testInvalid},
	{"Concurrent/FixedWindowNeverOverAdmits", testConcurrentWindow},
	{"Concurrent/ReserveAdjustInvariant", testConcurrentAdjust},
}

func testBucketBoundary(e *env) {
	l := Bucket(10, 10*time.Second) // 1 unit/s
	d := func(n int64) counter.Debit { return debit(e.key("b"), l, n) }

	r := e.reserve(d(10))
	e.allowed(r)
	e.remaining(r, 0, 0, 2)
	e.duration("ResetAfter", r.ResetAfter[0], 10*time.Second)
	if r.Ticket.Window[0] != 0 {
		e.Errorf("bucket Ticket.Window = %d, want 0", r.Ticket.Window[0])
	}

	r = e.reserve(d(1))
	e.denied(r, 0, false)
	e.duration("RetryAfter", r.RetryAfter, time.Second)

	e.clk.Advance(time.Second)
	r = e.reserve(d(1))
	e.allowed(r)
	e.remaining(r, 0, 0, 2)
	e.duration("ResetAfter", r.ResetAfter[0], 10*time.Second)

	if e.caps.FrozenClock {
		// Half a unit refilled: still denied, half a second to go. (Values
		// chosen so that the float arithmetic is exact.)
		e.clk.Advance(time.Second / 2)
		r = e.reserve(d(1))
		e.denied(r, 0, false)
		e.duration("RetryAfter", r.RetryAfter, time.Second/2)
		e.duration("ResetAfter", r.ResetAfter[0], 19*time.Second/2)
		e.clk.Advance(time.Second/2 - time.Microsecond)
		e.denied(e.reserve(d(1)), 0, false)
		e.clk.Advance(time.Microsecond)
		e.allowed(e.reserve(d(1)))
	}

	// Refill stops at Max.
	e.clk.Advance(time.Hour)
	r = e.peek(d(0))
	e.remaining(r, 0, 10, 0)
	if r.ResetAfter[0] != 0 {
		e.Errorf("full bucket ResetAfter = %v, want 0", r.ResetAfter[0])
	}
	e.denied(e.reserve(d(11)), 0, true)
	e.allowed(e.reserve(d(10)))
}

func testBucketRetryCeil(e *env) {
	if !e.caps.FrozenClock {
		e.Skip("exact µs rounding needs a frozen clock")
	}
	l := Bucket(3, time.Second) // 3 units per 1e6 µs
	k := e.key("b")
	e.allowed(e.reserve(debit(k, l, 3)))
	r := e.reserve(debit(k, l, 1))
	e.denied(r, 0, false)
	// ceil(1 * 1e6 / 3) = 333334 µs
	e.duration("RetryAfter", r.RetryAfter, 333334*time.Microsecond)
	r = e.reserve(debit(k, l, 2))
	e.duration("RetryAfter", r.RetryAfter, 666667*time.Microsecond)
}

func testBucketNever(e *env) {
	k := e.key("b")
	l := Bucket(5, time.Minute)
	r := e.reserve(debit(k, l, 6))
	e.denied(r, 0, true)
	e.remaining(r, 0, 5, 0)
	// Never wins even when the bucket is also short.
	e.allowed(e.reserve(debit(k, l, 5)))
	e.denied(e.reserve(debit(k, l, 6)), 0, true)
	e.denied(e.reserve(debit(k, l, 1)), 0, false)
}

func testBucketDebt(e *env) {
	l := Bucket(10, 10*time.Second)
	ds := []counter.Debit{debit(e.key("b"), l, 4)}
	r := e.reserve(ds...)
	e.allowed(r)
	e.remaining(r, 0, 6, 2)
	// Real usage was 14: 10 more than reserved.
	e.adjust(ds, &r.Ticket, 10)
	r = e.peek(debit(ds[0].Key, l, 1))
	e.remaining(r, 0, -4, 2)
	e.denied(r, 0, false)
	// level -4 -> 1 needs 5 units: 5 s.
	e.duration("RetryAfter", r.RetryAfter, 5*time.Second)
	e.duration("ResetAfter", r.ResetAfter[0], 14*time.Second)

	e.clk.Advance(5 * time.Second)
	r = e.reserve(debit(ds[0].Key, l, 1))
	e.allowed(r)
	e.remaining(r, 0, 0, 2)
}

func testBucketRefundCap(e *env) {
	l := Bucket(10, time.Hour)
	ds := []counter.Debit{debit(e.key("b"), l, 2)}
	r := e.reserve(ds...)
	e.allowed(r)
	e.adjust(ds, &r.Ticket, -5)
	r = e.peek(debit(ds[0].Key, l, 0))
	e.remaining(r, 0, 10, 0)
	e.denied(e.reserve(debit(ds[0].Key, l, 11)), 0, true)
	e.allowed(e.reserve(debit(ds[0].Key, l, 10)))
	e.denied(e.reserve(debit(ds[0].Key, l, 1)), 0, false)

	// A refund on a bucket with no state (never charged, or full and
	// evicted) also stops at Max.
	k2 := []counter.Debit{debit(e.key("b2"), l, 0)}
	e.adjust(k2, &counter.Ticket{Window: []int64{0}}, -7)
	e.remaining(e.peek(k2...), 0, 10, 0)
}

// A bucket whose capacity is raised keeps the usage it counted: a bucket in
// debt under the old Max has the new Max minus what it consumed, not its
// old (negative) level. Settlements of reservations made under the old Max
// apply to the same usage.
func testBucketRaised(e *env) {
	long := 1000 * time.Hour // 3 units per 1000 h: drift refills nothing
	old, raised := Bucket(3000, long), Bucket(10000, long)
	k := e.key("b")
	ds := []counter.Debit{debit(k, old, 2900)}
	r := e.reserve(ds...)
	e.allowed(r)
	e.adjust(ds, &r.Ticket, 205) // real usage 3105: 105 in debt
	p := e.peek(debit(k, old, 1))
	e.remaining(p, 0, -105, 1)
	e.denied(p, 0, false)

	p = e.peek(debit(k, raised, 6895))
	e.allowed(p)
	e.remaining(p, 0, 6895, 1)
	e.duration("ResetAfter", p.ResetAfter[0], long/10000*3105)
	e.denied(e.peek(debit(k, raised, 6897)), 0, false)

	// The reservation made under the old Max settles under the new one:
	// 100 refunded.
	e.adjust([]counter.Debit{debit(k, raised, 0)}, &r.Ticket, -100)
	r = e.reserve(debit(k, raised, 6995))
	e.allowed(r)
	e.remaining(r, 0, 0, 1)
	// And back to the old Max: consumed 10000, 7000 in debt.
	e.remaining(e.peek(debit(k, old, 0)), 0, -7000, 1)
	// A refund never goes past full, under any Max.
	e.adjust([]counter.Debit{debit(k, old, 0)}, &counter.Ticket{Window: []int64{0}, Origin: r.Ticket.Origin}, -20000)
	e.remaining(e.peek(debit(k, raised, 0)), 0, 10000, 0)
}

// A bucket whose capacity is lowered keeps the usage it counted: not a full
// bucket of the new Max, and it refills at the new Max per period.
func testBucketLowered(e *env) {
	per := 10 * time.Hour
	old, lowered := Bucket(2000, per), Bucket(500, per) // 500 per 10 h: 1 unit per 72 s
	k, fresh := e.key("b"), e.key("fresh")
	e.allowed(e.reserve(debit(k, old, 400)))
	e.remaining(e.peek(debit(fresh, lowered, 0)), 0, 500, 0)

	p := e.peek(debit(k, lowered, 100))
	e.allowed(p)
	e.remaining(p, 0, 100, 1)
	e.duration("ResetAfter", p.ResetAfter[0], 400*per/500)
	p = e.peek(debit(k, lowered, 102))
	e.denied(p, 0, false)
	e.duration("RetryAfter", p.RetryAfter, 2*per/500)

	// Refill runs at the new Max: 72 min give back 60 units (at the old
	// Max they would have given 240).
	e.clk.Advance(72 * time.Minute)
	e.remaining(e.peek(debit(k, lowered, 0)), 0, 160, 1)

	// A settlement under the new Max that charges more than it has left:
	// in debt, denied until the refill repays it.
	ds := []counter.Debit{debit(k, lowered, 100)} // consumed 340 + 100
	r := e.reserve(ds...)
	e.allowed(r)
	e.remaining(r, 0, 60, 1)
	e.adjust(ds, &r.Ticket, 1000) // consumed 1440
	p = e.peek(debit(k, lowered, 1))
	e.remaining(p, 0, -940, 1)
	e.denied(p, 0, false)
	e.duration("RetryAfter", p.RetryAfter, 941*per/500)
	e.denied(e.reserve(debit(k, lowered, 1)), 0, false)
	// Under the old Max the same usage leaves 560.
	e.remaining(e.peek(debit(k, old, 0)), 0, 560, 1)
}

// A window's usage is kept across a capacity change: lowered below what
// was used, it is denied until the window ends; raised, it has more room.
func testWindowCapacity(e *env) {
	old, lowered, raised := Window(100, time.Hour), Window(50, time.Hour), Window(200, time.Hour)
	k := e.key("w")
	_, end := counter.WindowStart(counter.FixedWindow, time.Hour, start)
	r := e.reserve(debit(k, old, 70))
	e.allowed(r)

	p := e.peek(debit(k, lowered, 0))
	e.remaining(p, 0, -20, 0)
	e.denied(p, 0, false)
	e.duration("RetryAfter", p.RetryAfter, end.Sub(start))
	e.denied(e.reserve(debit(k, lowered, 1)), 0, false)

	r2 := e.reserve(debit(k, raised, 130))
	e.allowed(r2)
	e.remaining(r2, 0, 0, 0)
	// A settlement of the reservation made under the old Max applies to
	// the same window.
	e.adjust([]counter.Debit{debit(k, lowered, 0)}, &r.Ticket, -30)
	e.remaining(e.peek(debit(k, raised, 0)), 0, 30, 0)
	e.remaining(e.peek(debit(k, lowered, 0)), 0, -120, 0)

	// The next window starts empty under the new Max.
	e.clk.Set(end)
	r = e.reserve(debit(k, lowered, 50))
	e.allowed(r)
	e.remaining(r, 0, 0, 0)
}

func testMonthCapacity(e *env) {
	k := e.key("m")
	e.clk.Set(time.Date(2025, time.April, 30, 23, 0, 0, 0, time.UTC))
	e.allowed(e.reserve(debit(k, Month(1000), 800)))
	p := e.peek(debit(k, Month(500), 0))
	e.remaining(p, 0, -300, 0)
	e.denied(p, 0, false)
	e.duration("RetryAfter", p.RetryAfter, time.Hour)
	r := e.reserve(debit(k, Month(5000), 4200))
	e.allowed(r)
	e.remaining(r, 0, 0, 0)
	e.clk.Set(time.Date(2025, time.May, 1, 0, 0, 0, 0, time.UTC))
	e.remaining(e.peek(debit(k, Month(500), 0)), 0, 500, 0)
}

// minuteBounds returns the minute window around the fake clock's start.
func minuteBounds() (ws int64, end time.Time) {
	s, e := counter.WindowStart(counter.FixedWindow, time.Minute, start)
	return s.Unix(), e
}

func testWindowBoundary(e *env) {
	l := Window(5, time.Minute)
	k := e.key("w")
	ws, end := minuteBounds()
	left := end.Sub(start) // 29.5 s

	r := e.reserve(debit(k, l, 3))
	e.allowed(r)
	e.remaining(r, 0, 2, 0)
	e.duration("ResetAfter", r.ResetAfter[0], left)
	if r.Ticket.Window[0] != ws {
		e.Errorf("Ticket.Window = %d, want %d", r.Ticket.Window[0], ws)
	}
	r = e.reserve(debit(k, l, 2))
	e.allowed(r)
	e.remaining(r, 0, 0, 0)

	r = e.reserve(debit(k, l, 1))
	e.denied(r, 0, false)
	e.duration("RetryAfter", r.RetryAfter, left)
	e.remaining(r, 0, 0, 0)

	r = e.reserve(debit(k, l, 6))
	e.denied(r, 0, true)

	if e.caps.FrozenClock {
		e.clk.Set(end.Add(-time.Microsecond))
		r = e.reserve(debit(k, l, 1))
		e.denied(r, 0, false)
		e.duration("RetryAfter", r.RetryAfter, time.Microsecond)
	}
	e.clk.Set(end)
	r = e.reserve(debit(k, l, 5))
	e.allowed(r)
	if r.Ticket.Window[0] != ws+60 {
		e.Errorf("next Ticket.Window = %d, want %d", r.Ticket.Window[0], ws+60)
	}
}

func testWindowRollover(e *env) {
	l := Window(100, time.Hour)
	k := e.key("w")
	s, end := counter.WindowStart(counter.FixedWindow, time.Hour, start)
	if s.Minute() != 0 || s.Second() != 0 || end.Sub(s) != time.Hour {
		e.Fatalf("WindowStart(hour) = %v..%v", s, end)
	}
	e.allowed(e.reserve(debit(k, l, 70)))
	e.clk.Set(end.Add(10 * time.Minute))
	r := e.peek(debit(k, l, 100))
	e.allowed(r)
	e.remaining(r, 0, 100, 0)
	e.duration("ResetAfter", r.ResetAfter[0], 50*time.Minute)
	r = e.reserve(debit(k, l, 100))
	e.allowed(r)
	e.remaining(r, 0, 0, 0)
	// Skipping several windows also starts empty.
	e.clk.Advance(5 * time.Hour)
	e.remaining(e.peek(debit(k, l, 0)), 0, 100, 0)
}

func testWindowDebt(e *env) {
	l := Window(10, time.Hour)
	ds := []counter.Debit{debit(e.key("w"), l, 4)}
	r := e.reserve(ds...)
	e.allowed(r)
	e.adjust(ds, &r.Ticket, 10) // used 14
	p := e.peek(debit(ds[0].Key, l, 0))
	e.remaining(p, 0, -4, 0)
	// Even a zero debit is refused while over the allowance.
	e.denied(p, 0, false)
	e.adjust(ds, &r.Ticket, -6) // used 8
	e.remaining(e.peek(ds...), 0, 2, 0)
	e.adjust(ds, &r.Ticket, -100) // floor at 0
	e.remaining(e.peek(ds...), 0, 10, 0)
	e.allowed(e.reserve(debit(ds[0].Key, l, 10)))
}

func testWindowAdjustEnded(e *env) {
	l := Window(10, time.Minute)
	k := e.key("w")
	ds := []counter.Debit{debit(k, l, 4)}
	r1 := e.reserve(ds...)
	e.allowed(r1)
	_, end := minuteBounds()

	// The window ended with nothing charged since: a settlement is lost.
	e.clk.Set(end.Add(10 * time.Second))
	e.adjust(ds, &r1.Ticket, 5)
	e.remaining(e.peek(ds...), 0, 10, 0)

	// A new window has usage: old tickets must not touch it.
	r2 := e.reserve(debit(k, l, 3))
	e.allowed(r2)
	e.adjust(ds, &r1.Ticket, 5)
	e.adjust(ds, &r1.Ticket, -3)
	e.remaining(e.peek(ds...), 0, 7, 0)
	// The current ticket still settles.
	e.adjust(ds, &r2.Ticket, -1)
	e.remaining(e.peek(ds...), 0, 8, 0)
}

func testMonthJanFeb(e *env) {
	l := Month(1000)
	k := e.key("m")
	e.clk.Set(time.Date(2025, time.January, 31, 23, 59, 50, 0, time.UTC))
	r := e.reserve(debit(k, l, 1000))
	e.allowed(r)
	jan1 := time.Date(2025, time.January, 1, 0, 0, 0, 0, time.UTC).Unix()
	if r.Ticket.Window[0] != jan1 {
		e.Errorf("Ticket.Window = %d, want %d (Jan 1)", r.Ticket.Window[0], jan1)
	}
	e.duration("ResetAfter", r.ResetAfter[0], 10*time.Second)
	r = e.reserve(debit(k, l, 1))
	e.denied(r, 0, false)
	e.duration("RetryAfter", r.RetryAfter, 10*time.Second)
	e.denied(e.reserve(debit(k, l, 1001)), 0, true)

	e.clk.Set(time.Date(2025, time.February, 1, 0, 0, 0, 0, time.UTC))
	r = e.reserve(debit(k, l, 1000))
	e.allowed(r)
	feb1 := time.Date(2025, time.February, 1, 0, 0, 0, 0, time.UTC).Unix()
	if r.Ticket.Window[0] != feb1 {
		e.Errorf("Ticket.Window = %d, want %d (Feb 1)", r.Ticket.Window[0], feb1)
	}
	// February 2025 has 28 days.
	e.duration("ResetAfter", r.ResetAfter[0], 28*24*time.Hour)
	// Settling January's ticket in February changes nothing.
	e.adjust([]counter.Debit{debit(k, l, 0)}, &counter.Ticket{Window: []int64{jan1}}, -500)
	e.remaining(e.peek(debit(k, l, 0)), 0, 0, 0)
}

// A window of whole weeks is the UTC ISO week: Monday 00:00 to Monday 00:00.
func testWeekMonday(e *env) {
	l := Window(10, 7*24*time.Hour)
	k := e.key("week")
	// Sunday 2025-03-16 23:59:50 UTC: the week began Monday 2025-03-10.
	e.clk.Set(time.Date(2025, time.March, 16, 23, 59, 50, 0, time.UTC))
	r := e.reserve(debit(k, l, 10))
	e.allowed(r)
	mon := time.Date(2025, time.March, 10, 0, 0, 0, 0, time.UTC).Unix()
	if r.Ticket.Window[0] != mon {
		e.Errorf("Ticket.Window = %d, want %d (Monday)", r.Ticket.Window[0], mon)
	}
	e.duration("ResetAfter", r.ResetAfter[0], 10*time.Second)
	e.denied(e.reserve(debit(k, l, 1)), 0, false)
	e.clk.Set(time.Date(2025, time.March, 17, 0, 0, 0, 0, time.UTC))
	r = e.reserve(debit(k, l, 10))
	e.allowed(r)
	e.duration("ResetAfter", r.ResetAfter[0], 7*24*time.Hour)
}

func testMonthDecJan(e *env) {
	l := Month(50)
	k := e.key("m")
	e.clk.Set(time.Date(2024, time.December, 31, 23, 0, 0, 0, time.UTC))
	r := e.reserve(debit(k, l, 30))
	e.allowed(r)
	dec1 := time.Date(2024, time.December, 1, 0, 0, 0, 0, time.UTC).Unix()
	if r.Ticket.Window[0] != dec1 {
		e.Errorf("Ticket.Window = %d, want %d (Dec 1)", r.Ticket.Window[0], dec1)
	}
	e.duration("ResetAfter", r.ResetAfter[0], time.Hour)
	e.denied(e.reserve(debit(k, l, 21)), 0, false)

	e.clk.Set(time.Date(2025, time.January, 1, 0, 30, 0, 0, time.UTC))
	r = e.reserve(debit(k, l, 50))
	e.allowed(r)
	jan1 := time.Date(2025, time.January, 1, 0, 0, 0, 0, time.UTC).Unix()
	if r.Ticket.Window[0] != jan1 {
		e.Errorf("Ticket.Window = %d, want %d (Jan 1)", r.Ticket.Window[0], jan1)
	}
	e.duration("ResetAfter", r.ResetAfter[0], 31*24*time.Hour-30*time.Minute)
}

func testAllOrNothing(e *env) {
	a := debit(e.key("a"), Bucket(10, time.Hour), 5)
	b := debit(e.key("b"), Window(10, time.Hour), 5)
	c := debit(e.key("c"), Month(10), 5)

	// Pre-charge c so that 5 more does not fit.
	e.allowed(e.reserve(debit(c.Key, c.Limit, 8)))

	r := e.reserve(a, b, c)
	e.denied(r, 2, false)
	p := e.peek(a, b, c)
	e.remaining(p, 0, 10, 0)
	e.remaining(p, 1, 10, 0)
	e.remaining(p, 2, 2, 0)

	// The first unaffordable debit is reported, and Never only for it.
	r = e.reserve(debit(a.Key, a.Limit, 11), b, c)
	e.denied(r, 0, true)
	r = e.reserve(a, b, debit(c.Key, c.Limit, 11))
	e.denied(r, 2, true)
	p = e.peek(a, b, c)
	e.remaining(p, 0, 10, 0)
	e.remaining(p, 1, 10, 0)

	// Affordable: all three charged.
	r = e.reserve(a, b, debit(c.Key, c.Limit, 2))
	e.allowed(r)
	e.remaining(r, 0, 5, 0)
	e.remaining(r, 1, 5, 0)
	e.remaining(r, 2, 0, 0)
	e.adjust([]counter.Debit{a, b, c}, &r.Ticket, 1, -2, 0)
	p = e.peek(a, b, c)
	e.remaining(p, 0, 4, 0)
	e.remaining(p, 1, 7, 0)
	e.remaining(p, 2, 0, 0)
}

func testPeek(e *env) {
	bk := debit(e.key("b"), Bucket(10, time.Hour), 4)
	wk := debit(e.key("w"), Window(10, time.Hour), 4)
	for range 3 {
		p := e.peek(bk, wk)
		e.allowed(p)
		e.remaining(p, 0, 10, 0)
		e.remaining(p, 1, 10, 0)
	}
	e.allowed(e.reserve(bk, wk))
	p := e.peek(debit(bk.Key, bk.Limit, 7), wk)
	e.denied(p, 0, false)
	e.duration("RetryAfter", p.RetryAfter, time.Hour/10)
	p = e.peek(bk, debit(wk.Key, wk.Limit, 11))
	e.denied(p, 1, true)
	p = e.peek(bk, wk)
	e.allowed(p)
	e.remaining(p, 0, 6, 0)
	e.remaining(p, 1, 6, 0)
	// Peek fills the ticket with the windows Reserve would charge.
	ws, _ := counter.WindowStart(counter.FixedWindow, time.Hour, start)
	if p.Ticket.Window[1] != ws.Unix() {
		e.Errorf("Peek Ticket.Window = %d, want %d", p.Ticket.Window[1], ws.Unix())
	}
}

func testKeysIndependent(e *env) {
	for _, l := range []counter.Limit{Bucket(3, time.Hour), Window(3, time.Hour), Month(3)} {
		k1, k2 := e.key("x."+l.Algorithm.String()), e.key("y."+l.Algorithm.String())
		e.allowed(e.reserve(debit(k1, l, 3)))
		e.denied(e.reserve(debit(k1, l, 1)), 0, false)
		r := e.reserve(debit(k2, l, 3))
		e.allowed(r)
		e.remaining(r, 0, 0, 0)
	}
}

// A counter holding a state of another algorithm than the debit's counts as
// absent, whether the state was stored by an earlier call or by an earlier
// debit of the same call; the last debit's state is what stays.
func testOtherAlgorithm(e *env) {
	k := e.key("o")
	b, w := debit(k, Bucket(10, time.Minute), 4), debit(k, Window(10, time.Hour), 3)
	e.allowed(e.reserve(b))
	r := e.reserve(w)
	e.allowed(r)
	e.remaining(r, 0, 7, 0)
	e.remaining(e.peek(b), 0, 10, 0)

	k2 := e.key("o2")
	b.Key, w.Key = k2, k2
	r = e.reserve(b, w)
	e.allowed(r)
	e.remaining(r, 0, 6, 0)
	e.remaining(r, 1, 7, 0)
	if ws, _ := counter.WindowBounds(counter.FixedWindow, time.Hour, e.clk.Now().UnixMicro()); r.Ticket.Window[1] != ws {
		e.Errorf("Ticket.Window[1] = %d, want the window's start %d", r.Ticket.Window[1], ws)
	}
	e.remaining(e.peek(w), 0, 7, 0)
	e.remaining(e.peek(b), 0, 10, 0)
	// A zero delta changes nothing, not even under another algorithm.
	e.adjust([]counter.Debit{b}, &counter.Ticket{Window: []int64{0}, Origin: r.Ticket.Origin}, 0)
	e.remaining(e.peek(w), 0, 7, 0)

	// A bucket refunded to full is absent, so a later debit of the same
	// adjustment on that key under another capacity starts from full.
	k3 := e.key("o3")
	b3, b7 := debit(k3, Bucket(3, time.Minute), 1), debit(k3, Bucket(7, time.Minute), 0)
	r = e.reserve(b3)
	e.allowed(r)
	e.adjust([]counter.Debit{b3, b7}, &counter.Ticket{Window: []int64{0, 0}, Origin: r.Ticket.Origin}, -10, 1)
	e.remaining(e.peek(b7), 0, 6, 1)
}

func testInvalid(e *env) {
	bad := []counter.Debit{
		debit(e.key("i0"), Bucket(0, time.Minute), 1),
		debit(e.key("i1"), Bucket(5, 0), 1),
		debit(e.key("i2"), Window(5, 1500*time.Millisecond), 1),
		debit(e.key("i3"), Window(5, time.Minute), -1),
		debit(e.key("i4"), counter.Limit{Max: 5, Period: time.Minute}, 1),
	}
	good := debit(e.key("ok"), Window(5, time.Minute), 1)
	for _, d := range bad {
		var r counter.Result
		err := e.s.Reserve(context.Background(), []counter.Debit{good, d}, &r)
		if err == nil || errors.Is(err, counter.ErrUnavailable) {
			e.Errorf("Reserve(%+v) err = %v, want a non-ErrUnavailable error", d.Limit, err)
		}
	}
	// Nothing was charged by the failed calls.
	e.remaining(e.peek(good), 0, 5, 0)
	var r counter.Result
	if err := e.s.Adjust(context.Background(), []counter.Debit{good}, &r.Ticket, []int64{1, 2}); err == nil {
		e.Errorf("Adjust with mismatched lengths: no error")
	}
}

// inParallel runs work(0) to work(n-1) on n goroutines and returns, once all
// have returned, the first error any of them reported.
func inParallel(n int, work func(w int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range n {
		wg.Go(func() {
			if err := work(w); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func testConcurrentWindow(e *env) {
	const (
		workers = 64
		each    = 200
		max     = 50_000
	)
	l := Window(max, time.Hour)
	k := e.key("hot")
	var admitted atomic.Int64
	err := inParallel(workers, func(w int) error {
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		ds := []counter.Debit{{Key: k, Limit: l}}
		var r counter.Result
		for range each {
			ds[0].Amount = 1 + rng.Int64N(7)
			if err := e.s.Reserve(context.Background(), ds, &r); err != nil {
				return err
			}
			if r.Allowed {
				admitted.Add(ds[0].Amount)
			}
		}
		return nil
	})
	if err != nil {
		e.Fatalf("Reserve: %v", err)
	}
	sum := admitted.Load()
	if sum > max {
		e.Fatalf("admitted %d > Max %d", sum, max)
	}
	// 64*200 reserves of mean 4 ask for ~51200: the window must be nearly
	// full, and exactly as full as admitted.
	if sum < max-7*workers {
		e.Errorf("admitted only %d of %d", sum, max)
	}
	used := max - e.peek(debit(k, l, 0)).Remaining[0]
	if used != sum {
		e.Errorf("counter used = %d, sum admitted = %d", used, sum)
	}
}

func testConcurrentAdjust(e *env) {
	const (
		workers = 32
		each    = 100
	)
	for _, l := range []counter.Limit{Window(1_000_000, time.Hour), Bucket(1_000_000, 1000*time.Hour)} {
		k := e.key("mix." + l.Algorithm.String())
		var charged atomic.Int64
		err := inParallel(workers, func(w int) error {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			ds := []counter.Debit{{Key: k, Limit: l}}
			var r counter.Result
			deltas := []int64{0}
			for range each {
				ds[0].Amount = 1 + rng.Int64N(100)
				if err := e.s.Reserve(context.Background(), ds, &r); err != nil {
					return err
				}
				if !r.Allowed {
					continue
				}
				// Settle to a real usage in [0, 2*amount].
				deltas[0] = rng.Int64N(2*ds[0].Amount+1) - ds[0].Amount
				if err := e.s.Adjust(context.Background(), ds, &r.Ticket, deltas); err != nil {
					return err
				}
				charged.Add(ds[0].Amount + deltas[0])
			}
			return nil
		})
		if err != nil {
			e.Fatalf("%v: %v", l.Algorithm, err)
		}
		want := charged.Load()
		ok := func(used int64) bool {
			if l.Algorithm == counter.TokenBucket && !e.caps.FrozenClock {
				// Refill (1 unit per 3.6 s here) can only lower the usage.
				return used <= want && used >= want-int64(drift/(3600*time.Millisecond))-1
			}
			return used == want
		}
		// A store may apply an Adjust after it returns (redisstore sends
		// settlements in the background under load), so a read may briefly
		// miss the last ones: the invariant must hold once they land.
		used := l.Max - e.peek(debit(k, l, 0)).Remaining[0]
		for deadline := time.Now().Add(3 * time.Second); !ok(used) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			used = l.Max - e.peek(debit(k, l, 0)).Remaining[0]
		}
		if !ok(used) {
			e.Errorf("%v: used %d, sum of final charges %d", l.Algorithm, used, want)
		}
	}
}
