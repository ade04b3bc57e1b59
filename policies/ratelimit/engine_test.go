package ratelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"sluice/gwerror"
	"sluice/policies"
	"sluice/policies/policytest"
	"sluice/policies/ratelimit"
	"sluice/policies/ratelimit/ratelimittest"
	"sluice/policies/ratelimit/store"
)

// flakyStore fails the operations it is told to, and delegates the rest.
type flakyStore struct {
	store.Store
	failReserve, failAdjust bool
}

func (f *flakyStore) Reserve(ctx context.Context, d []store.Debit, r *store.Result) error {
	if f.failReserve {
		return fmt.Errorf("%w: connection refused", store.ErrUnavailable)
	}
	return f.Store.Reserve(ctx, d, r)
}

func (f *flakyStore) Adjust(ctx context.Context, d []store.Debit, t *store.Ticket, deltas []int64) error {
	if f.failAdjust {
		return fmt.Errorf("%w: timeout", store.ErrUnavailable)
	}
	return f.Store.Adjust(ctx, d, t, deltas)
}

func TestStoreFailures(t *testing.T) {
	h := ratelimittest.New(t, ratelimit.Definition())
	fs := &flakyStore{Store: h.Store, failReserve: true}
	h.Svc.Counters = fs
	ch := h.Chain(route, ratelimittest.Entry(ratelimit.AdvancedName, map[string]any{"quotas": []any{quota("q", 10, "1m", nil)}}))
	gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{}), ratelimittest.Completed(nil))
	if gerr == nil || gerr.Status != http.StatusServiceUnavailable || gerr.Code != gwerror.CodeStoreUnavailable || gerr.Policy != ratelimit.AdvancedName {
		t.Fatalf("want a 503 ratelimit_store_unavailable, got %+v", gerr)
	}
	// Settlement failures are counted and logged, never surfaced; the
	// reservation is still resolved.
	fs.failReserve, fs.failAdjust = false, true
	if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{}), ratelimittest.Completed(nil)); gerr != nil {
		t.Fatal(gerr)
	}
	h.Do(ch, h.Call(route, ratelimittest.Req{}), policytest.End{Outcome: policies.Outcome{Kind: policies.Failed}})
	if n := h.Gauge("sluice_ratelimit_store_errors_total", map[string]string{"op": "adjust"}); n != 1 {
		t.Fatalf("adjust errors %v, want 1", n)
	}
	if n := h.Gauge("sluice_ratelimit_store_errors_total", map[string]string{"op": "reserve"}); n != 1 {
		t.Fatalf("reserve errors %v, want 1", n)
	}
	if n := h.Gauge("sluice_ratelimit_open_reservations", nil); n != 0 {
		t.Fatalf("open %v", n)
	}
	if n := h.Gauge("sluice_ratelimit_denials_total", map[string]string{"reason": "store_unavailable"}); n != 1 {
		t.Fatalf("store denials %v", n)
	}
}

// peekStore answers peeks as a store whose shared counters cannot be read
// would: failing, or from a local fallback (Result.Local).
type peekStore struct {
	store.Store
	fail, local bool
}

func (p *peekStore) Peek(ctx context.Context, d []store.Debit, r *store.Result) error {
	if p.fail {
		return fmt.Errorf("%w: NOAUTH Authentication required.", store.ErrUnavailable)
	}
	err := p.Store.Peek(ctx, d, r)
	r.Local = p.local
	return err
}

// The quota report leaves out the lines of a policy whose counters cannot
// be read from the shared store: a failed peek, and figures of a local
// fallback, which count only this gateway's charges since the failure.
func TestQuotaLeavesOutUnreadCounters(t *testing.T) {
	h := ratelimittest.New(t, ratelimit.Definition())
	ps := &peekStore{Store: h.Store}
	h.Svc.Counters = ps
	ch := h.Chain(route, ratelimittest.Entry(ratelimit.AdvancedName, map[string]any{"quotas": []any{quota("q", 10, "1m", nil)}}))
	qr := ch.Entries()[0].Policy.(ratelimit.QuotaReporter)
	for _, tc := range []struct {
		name        string
		fail, local bool
		lines       int
	}{{"shared counters", false, false, 1}, {"failed", true, false, 0}, {"local fallback", false, true, 0}} {
		ps.fail, ps.local = tc.fail, tc.local
		if got := len(qr.Quota(h.Call(route, ratelimittest.Req{}))); got != tc.lines {
			t.Errorf("%s: %d lines, want %d", tc.name, got, tc.lines)
		}
	}
}

func TestLimitFor(t *testing.T) {
	cases := []struct {
		alg    string
		d      time.Duration
		want   store.Algorithm
		label  string
		budget bool
		err    bool
	}{
		{"", time.Minute, store.TokenBucket, "bucket-1m", false, false},
		{"", 24 * time.Hour, store.FixedWindow, "window-1d", true, false},
		{"", 90 * time.Minute, store.TokenBucket, "bucket-90m", false, false},
		{"fixed-window", time.Hour, store.FixedWindow, "window-1h", false, false},
		{"token-bucket", 48 * time.Hour, store.TokenBucket, "bucket-2d", false, false},
		{"calendar", 720 * time.Hour, store.CalendarMonth, "month", true, false},
		{"calendar", 7 * 24 * time.Hour, store.FixedWindow, "window-7d", true, false},
		{"fixed-window", 1500 * time.Millisecond, 0, "", false, true},
		{"sliding", time.Minute, 0, "", false, true},
	}
	for _, tc := range cases {
		l, err := ratelimit.LimitFor(tc.alg, tc.d, 10)
		if tc.err {
			if err == nil {
				t.Errorf("%s %v: no error", tc.alg, tc.d)
			}
			continue
		}
		if err != nil || l.Algorithm != tc.want || ratelimit.PeriodLabel(l) != tc.label || ratelimit.IsBudget(ratelimit.UnitTokens, l) != tc.budget {
			t.Errorf("%s %v: got %+v %q budget=%v err=%v", tc.alg, tc.d, l, ratelimit.PeriodLabel(l), ratelimit.IsBudget(ratelimit.UnitTokens, l), err)
		}
	}
	if !ratelimit.IsBudget(ratelimit.UnitUSDMicros, store.Limit{Algorithm: store.TokenBucket, Max: 1, Period: time.Minute}) {
		t.Error("money is always a budget")
	}
}

func TestResetString(t *testing.T) {
	cases := map[time.Duration]string{
		0:                       "0s",
		17 * time.Millisecond:   "17ms",
		1500 * time.Microsecond: "2ms",
		time.Second:             "1s",
		1001 * time.Millisecond: "2s",
		6 * time.Minute:         "6m0s",
		time.Hour + time.Second: "1h0m1s",
	}
	for d, want := range cases {
		if got := ratelimit.ResetString(d); got != want {
			t.Errorf("ResetString(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestModelMatcher(t *testing.T) {
	m, err := ratelimit.NewModelMatcher([]string{"gpt-4*", "gpt-4o", "gpt-4o*", "*"})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]int{"gpt-4o": 1, "gpt-4o-mini": 2, "gpt-4.1": 0, "claude": 3}
	for model, want := range cases {
		if got := m.Match(model); got != want {
			t.Errorf("Match(%q) = %d, want %d", model, got, want)
		}
	}
	for _, bad := range [][]string{{""}, {"a", "a"}, {"a*b"}} {
		if _, err := ratelimit.NewModelMatcher(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// groupRecorder records the store.Debit.Group of every call.
type groupRecorder struct {
	store.Store
	groups []string
}

func (g *groupRecorder) note(ds []store.Debit) {
	for _, d := range ds {
		g.groups = append(g.groups, d.Group)
	}
}

func (g *groupRecorder) Reserve(ctx context.Context, d []store.Debit, r *store.Result) error {
	g.note(d)
	return g.Store.Reserve(ctx, d, r)
}

func (g *groupRecorder) Adjust(ctx context.Context, d []store.Debit, t *store.Ticket, deltas []int64) error {
	g.note(d)
	return g.Store.Adjust(ctx, d, t, deltas)
}

// With the standard keys every counter of a scope is charged and settled in
// the group "{scope}:<policy>"; quotas keyed differently (their keys share
// only the route's tag) are charged without a group.
func TestDebitGroups(t *testing.T) {
	team := map[string]any{"keyExtraction": []any{map[string]any{"type": "header", "key": "X-Team"}}}
	cases := []struct {
		name   string
		quotas []any
		want   string
	}{
		{"standard keys", []any{quota("q", 10, "1m", nil), quota("r", 10, "1h", nil)}, "{r}:" + ratelimit.AdvancedName},
		{"quotas keyed differently", []any{quota("q", 10, "1m", team), quota("r", 10, "1h", nil)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := ratelimittest.New(t, ratelimit.Definition())
			rec := &groupRecorder{Store: h.Store}
			h.Svc.Counters = rec
			ch := h.Chain(route, ratelimittest.Entry(ratelimit.AdvancedName, map[string]any{"quotas": tc.quotas}))
			call := h.Call(route, ratelimittest.Req{})
			call.Request.Header.Set("X-Team", "blue")
			if gerr, _ := h.Do(ch, call, ratelimittest.Completed(nil)); gerr != nil {
				t.Fatal(gerr)
			}
			if len(rec.groups) < 2 {
				t.Fatalf("%d debits recorded, want a reservation's", len(rec.groups))
			}
			for _, g := range rec.groups {
				if g != tc.want {
					t.Fatalf("groups %q, want all %q", rec.groups, tc.want)
				}
			}
		})
	}
}
