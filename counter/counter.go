// Package counter defines the counter Store that every limit policy charges, and
// the algorithm arithmetic shared by its implementations (package memory in process,
// redisstore cluster-wide; the Lua scripts of the latter mirror this file).
//
// Units are whatever the caller counts: tokens, requests, or micro-USD for
// budgets. A reservation charges several counters (a policy's limits, windows
// and model rule) all or nothing; settlement applies a signed delta to the same
// counters and windows.
package counter

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Algorithm selects how a counter refills.
type Algorithm uint8

const (
	// TokenBucket holds up to Max units and refills continuously at Max per
	// Period. Debt (a negative remaining) is repaid by the refill. What is
	// stored is the amount consumed, not the level, so a counter whose Max
	// is edited keeps its usage: remaining is the new Max minus what was
	// consumed and not yet refilled (at the new Max per Period).
	TokenBucket Algorithm = iota + 1
	// FixedWindow counts usage in windows of length Period aligned to the Unix
	// epoch, hence to UTC midnight for whole days; windows of whole weeks
	// start on Monday 00:00 UTC (ISO weeks). Debt does not carry over.
	FixedWindow
	// CalendarMonth counts usage per UTC calendar month. Period is ignored.
	CalendarMonth
)

func (a Algorithm) String() string {
	switch a {
	case TokenBucket:
		return "token-bucket"
	case FixedWindow:
		return "fixed-window"
	case CalendarMonth:
		return "calendar-month"
	}
	return "unknown"
}

// Limit is the capacity of one counter.
type Limit struct {
	Algorithm Algorithm
	// Max is the capacity (bucket size, or allowance per window), > 0.
	Max int64
	// Period is the refill period (bucket) or window length (fixed window).
	Period time.Duration
}

// Debit is one counter charged by a reservation.
type Debit struct {
	// Key identifies the counter: scope, dimension and period, never the limit
	// value, so editing a limit keeps the usage counted. It carries a Redis
	// hash tag ("{scope}...") shared by all debits of one Reserve call.
	Key string
	// Group, when not empty, names the set of counters Key is kept with: one
	// policy instance's counters of one scope (the engine sets it to
	// Group(scope, policy), "{scope}:<policy>"). It carries the same hash tag as Key. A store may
	// keep a group's counters in one record (redisstore keeps them in one
	// Redis value, so that a reservation reads and writes one key however
	// many counters it charges); the memory store ignores it. A counter is still
	// identified by Key within its group, so adding or removing counters of
	// a group keeps the others' usage. Contract: a counter is given the same
	// Group on every call, and the debits of one call share one Group or
	// have none.
	Group  string
	Limit  Limit
	Amount int64 // >= 0
}

// Group is the counter.Debit.Group of a policy's counters under a scope:
// "{scope}:<policy>". The limit engine's scopes start with the route's name
// (route, route:app, route/resource...), and route names hold neither ':'
// nor '/' (see SplitGroup).
func Group(scope, policy string) string { return "{" + scope + "}:" + policy }

// SplitGroup returns the route, scope and policy of a group made by Group;
// ok is false for any other string.
func SplitGroup(group string) (route, scope, policy string, ok bool) {
	end := strings.Index(group, "}:")
	if len(group) < 4 || group[0] != '{' || end < 2 {
		return "", "", "", false
	}
	scope, policy = group[1:end], group[end+2:]
	if policy == "" {
		return "", "", "", false
	}
	route = scope
	if i := strings.IndexAny(scope, ":/"); i >= 0 {
		route = scope[:i]
	}
	return route, scope, policy, true
}

// Result reports a Reserve or Peek. Its slices are reused: callers size them
// with Reset to avoid allocations on the hot path.
type Result struct {
	// Allowed is true when every debit was charged.
	Allowed bool
	// Denied is the index of the first debit that could not be afforded (-1
	// when allowed). Nothing was charged on denial.
	Denied int
	// RetryAfter is, on denial, how long until the denied debit could be
	// afforded, if nothing else is charged meanwhile. Zero when Never.
	RetryAfter time.Duration
	// Never is true on denial when the amount exceeds the limit's capacity.
	Never bool

	// Per debit, after the operation:
	// Remaining units (negative when in debt).
	Remaining []int64
	// ResetAfter is the time until the counter is full again (bucket) or its
	// window ends (windows).
	ResetAfter []time.Duration
	// Ticket says where the charges landed; Adjust needs it back.
	Ticket Ticket
	// Local is true when the figures come from a store's local fallback
	// rather than its shared counters (redisstore in failure mode open while
	// Redis is unavailable): they count only this process's charges since
	// the failure began. A report of the shared counters leaves them out.
	Local bool
}

// Ticket identifies where a reservation's charges landed, so that settlement
// adjusts the same windows on the same backend.
type Ticket struct {
	// Window is, per debit, the start (Unix seconds) of the window charged; 0
	// for buckets.
	Window []int64
	// Origin is implementation-defined (e.g. redisstore marks reservations
	// served by its local fallback while Redis was unavailable).
	Origin uint8
}

// Reset sizes r's slices for n debits, reusing their storage.
func (r *Result) Reset(n int) {
	r.Allowed, r.Denied, r.RetryAfter, r.Never, r.Local = false, -1, 0, false, false
	r.Remaining = grow(r.Remaining, n)
	r.ResetAfter = growD(r.ResetAfter, n)
	r.Ticket.Window = grow(r.Ticket.Window, n)
	r.Ticket.Origin = 0
}

func grow(s []int64, n int) []int64 {
	if cap(s) < n {
		return make([]int64, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func growD(s []time.Duration, n int) []time.Duration {
	if cap(s) < n {
		return make([]time.Duration, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// Store is a set of counters. Implementations are safe for concurrent use.
type Store interface {
	// Reserve charges every debit's Amount, all or nothing, and fills res
	// (which it Resets). A denial is not an error.
	Reserve(ctx context.Context, debits []Debit, res *Result) error
	// Adjust applies deltas[i] (signed; positive charges more, into debt if
	// need be; negative refunds, never above the capacity) to debits[i]'s
	// counter in the window t.Window[i] (t from the Reserve result). Adjusting
	// a window that has ended is a no-op for that debit. An implementation may
	// apply it after returning (redisstore sends settlements in the
	// background under load): a read of the same counter may briefly not
	// reflect it, but it is applied exactly once.
	Adjust(ctx context.Context, debits []Debit, t *Ticket, deltas []int64) error
	// Peek fills res with the counters' state without charging (Amount is used
	// only to compute Allowed/RetryAfter as Reserve would).
	Peek(ctx context.Context, debits []Debit, res *Result) error
	// Close releases resources (connections, background goroutines).
	Close() error
}

// ErrUnavailable wraps store failures (e.g. Redis unreachable, or refusing
// the call); limit policies answer 503 ratelimit_store_unavailable when they
// see it.
var ErrUnavailable = errors.New("counter store unavailable")
