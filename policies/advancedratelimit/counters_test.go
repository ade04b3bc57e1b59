package advancedratelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"sluice/counter"
	"sluice/gwerror"
	"sluice/policies"
	"sluice/policies/advancedratelimit"
	"sluice/policies/policytest"
	"sluice/policies/ratelimit/ratelimittest"
)

// flakyStore fails the operations it is told to, and delegates the rest.
type flakyStore struct {
	counter.Store
	failReserve, failAdjust bool
}

func (f *flakyStore) Reserve(ctx context.Context, d []counter.Debit, r *counter.Result) error {
	if f.failReserve {
		return fmt.Errorf("%w: connection refused", counter.ErrUnavailable)
	}
	return f.Store.Reserve(ctx, d, r)
}

func (f *flakyStore) Adjust(ctx context.Context, d []counter.Debit, t *counter.Ticket, deltas []int64) error {
	if f.failAdjust {
		return fmt.Errorf("%w: timeout", counter.ErrUnavailable)
	}
	return f.Store.Adjust(ctx, d, t, deltas)
}

func TestStoreFailures(t *testing.T) {
	h := ratelimittest.New(t, advancedratelimit.Definition())
	fs := &flakyStore{Store: h.Store, failReserve: true}
	h.Svc.Counters = fs
	ch := h.Chain(route, ratelimittest.Entry(advancedratelimit.Name, map[string]any{"quotas": []any{quota("q", 10, "1m", nil)}}))
	gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{}), ratelimittest.Completed(nil))
	if gerr == nil || gerr.Status != http.StatusServiceUnavailable || gerr.Code != gwerror.CodeStoreUnavailable || gerr.Policy != advancedratelimit.Name {
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
	counter.Store
	fail, local bool
}

func (p *peekStore) Peek(ctx context.Context, d []counter.Debit, r *counter.Result) error {
	if p.fail {
		return fmt.Errorf("%w: NOAUTH Authentication required.", counter.ErrUnavailable)
	}
	err := p.Store.Peek(ctx, d, r)
	r.Local = p.local
	return err
}

// The quota report leaves out the lines of a policy whose counters cannot
// be read from the shared store: a failed peek, and figures of a local
// fallback, which count only this gateway's charges since the failure.
func TestQuotaLeavesOutUnreadCounters(t *testing.T) {
	h := ratelimittest.New(t, advancedratelimit.Definition())
	ps := &peekStore{Store: h.Store}
	h.Svc.Counters = ps
	ch := h.Chain(route, ratelimittest.Entry(advancedratelimit.Name, map[string]any{"quotas": []any{quota("q", 10, "1m", nil)}}))
	qr := ch.Entries()[0].Policy.(policies.QuotaReporter)
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

// groupRecorder records the counter.Debit.Group of every call.
type groupRecorder struct {
	counter.Store
	groups []string
}

func (g *groupRecorder) note(ds []counter.Debit) {
	for _, d := range ds {
		g.groups = append(g.groups, d.Group)
	}
}

func (g *groupRecorder) Reserve(ctx context.Context, d []counter.Debit, r *counter.Result) error {
	g.note(d)
	return g.Store.Reserve(ctx, d, r)
}

func (g *groupRecorder) Adjust(ctx context.Context, d []counter.Debit, t *counter.Ticket, deltas []int64) error {
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
		{"standard keys", []any{quota("q", 10, "1m", nil), quota("r", 10, "1h", nil)}, "{r}:" + advancedratelimit.Name},
		{"quotas keyed differently", []any{quota("q", 10, "1m", team), quota("r", 10, "1h", nil)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := ratelimittest.New(t, advancedratelimit.Definition())
			rec := &groupRecorder{Store: h.Store}
			h.Svc.Counters = rec
			ch := h.Chain(route, ratelimittest.Entry(advancedratelimit.Name, map[string]any{"quotas": tc.quotas}))
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
