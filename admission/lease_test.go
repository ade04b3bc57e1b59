package admission

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fakeLedger is a CapacityLedger the test answers by hand: each Renew is
// handed to the test (take) and waits for its answer (give).
type fakeLedger struct {
	calls    chan LeaseRequest
	answers  chan leaseAnswer
	released chan string
}

type leaseAnswer struct {
	l   Lease
	err error
}

func newFakeLedger() *fakeLedger {
	return &fakeLedger{calls: make(chan LeaseRequest), answers: make(chan leaseAnswer), released: make(chan string, 16)}
}

func (f *fakeLedger) Renew(ctx context.Context, r LeaseRequest) (Lease, error) {
	select {
	case f.calls <- r:
	case <-ctx.Done():
		return Lease{}, ctx.Err()
	}
	select {
	case a := <-f.answers:
		return a.l, a.err
	case <-ctx.Done():
		return Lease{}, ctx.Err()
	}
}

func (f *fakeLedger) Release(_ context.Context, target string) error {
	f.released <- target
	return nil
}

var errLedgerDown = errors.New("ledger down")

var leaseOpts = LeaseOptions{TTL: 3 * time.Second, Renew: time.Second, QueuedRenew: 100 * time.Millisecond}

// leaseHarness is a harness whose scheduler leases target "t" from a fake ledger.
type leaseHarness struct {
	*harness
	fl *fakeLedger
}

func newLeaseHarness(t *testing.T, capy Capacity, o LeaseOptions) *leaseHarness {
	t.Helper()
	fl := newFakeLedger()
	h := newHarnessWith(t, Config{Targets: map[string]Capacity{"t": capy}}, Options{Ledger: fl, Leases: o})
	s := h.s
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { _ = s.Close(); close(done) }()
		for {
			select {
			case <-done:
				return
			case <-fl.calls: // a renewal in flight when the test ended
				fl.answers <- leaseAnswer{err: errLedgerDown}
			}
		}
	})
	return &leaseHarness{harness: h, fl: fl}
}

// take returns the next renewal the scheduler sends.
func (h *leaseHarness) take() LeaseRequest {
	h.t.Helper()
	select {
	case r := <-h.fl.calls:
		return r
	case <-time.After(safety):
		h.t.Fatal("no lease renewal")
		return LeaseRequest{}
	}
}

// takeQueued advances the clock by QueuedRenew, as a queued request's
// wake-up asks, and returns the renewal it brings. The renewal goroutine
// re-arms its timer when it sees the wake-up, with a delay computed from
// the clock it read: an Advance that lands in between moves the timer one
// QueuedRenew later (a few nanoseconds on a real clock). So at most three
// steps are taken, still well inside the regular period (leaseOpts: 300 ms
// against a 1 s Renew).
func (h *leaseHarness) takeQueued() LeaseRequest {
	h.t.Helper()
	for range 2 {
		h.clk.Advance(leaseOpts.QueuedRenew)
		select {
		case r := <-h.fl.calls:
			return r
		case <-time.After(time.Second):
		}
	}
	h.clk.Advance(leaseOpts.QueuedRenew)
	return h.take()
}

// answer answers the renewal in flight and waits until the scheduler has
// applied it.
func (h *leaseHarness) answer(l Lease, err error) {
	h.t.Helper()
	before := h.lease().Renewals
	h.fl.answers <- leaseAnswer{l, err}
	start := time.Now()
	for h.lease().Renewals == before {
		if time.Since(start) > safety {
			h.t.Fatal("the renewal was not applied")
		}
		time.Sleep(time.Millisecond)
	}
}

// renew takes the next renewal, answers it and returns it.
func (h *leaseHarness) renew(l Lease, err error) LeaseRequest {
	h.t.Helper()
	r := h.take()
	h.answer(l, err)
	return r
}

func (h *leaseHarness) lease() LeaseStats {
	h.t.Helper()
	ls := h.target("t").Lease
	if ls == nil {
		h.t.Fatal("target t has no lease")
	}
	return *ls
}

func grant(reqs, tokens int64, replicas int) Lease {
	a := Amount{Requests: reqs, Tokens: tokens}
	return Lease{Granted: a, Entitlement: a, Replicas: replicas}
}

func TestLeaseFitsAndGrows(t *testing.T) {
	h := newLeaseHarness(t, Capacity{MaxConcurrent: 4}, leaseOpts)
	first := h.take()
	if first.Capacity.MaxConcurrent != 4 || first.Held != (Amount{}) || first.Demand != (Amount{}) || first.TTL != leaseOpts.TTL {
		t.Fatalf("first renewal %+v", first)
	}
	// Before the first grant nothing is admitted: the lease is 0.
	early := h.queue(Ticket{Target: "t", App: "a"})
	h.answer(Lease{Granted: Amount{Requests: 2}, Entitlement: Amount{Requests: 3}, Replicas: 2}, nil)
	if _, err := early.result(t); err != nil {
		t.Fatal(err)
	}
	g2 := h.admit(Ticket{Target: "t", App: "a"})
	// The lease (2) is full; the whole capacity (4) is not.
	p := h.queue(Ticket{Target: "t", App: "b", InputTokens: 10})
	// The queued request makes the scheduler renew within QueuedRenew with its demand.
	r := h.takeQueued()
	if r.Held != (Amount{Requests: 2, Tokens: 0}) || r.Demand != (Amount{Requests: 3, Tokens: 10}) {
		t.Fatalf("renewal with a request queued: held %+v demand %+v; want 2 held, 3 (10 tokens) demanded", r.Held, r.Demand)
	}
	h.answer(Lease{Granted: Amount{Requests: 3}, Entitlement: Amount{Requests: 3}, Replicas: 2}, nil)
	if _, err := p.result(t); err != nil {
		t.Fatal(err)
	}
	if ls := h.lease(); ls.Limit.Requests != 3 || ls.Entitlement.Requests != 3 || ls.Replicas != 2 || !ls.Valid {
		t.Fatalf("lease %+v", ls)
	}
	g2.Done(-1, -1)
}

func TestLeaseShrinkWithoutPreemption(t *testing.T) {
	h := newLeaseHarness(t, Capacity{MaxConcurrent: 4}, leaseOpts)
	h.renew(grant(4, 0, 1), nil)
	var gs []Grant
	for range 4 {
		gs = append(gs, h.admit(Ticket{Target: "t", App: "a"}))
	}
	// Another replica arrived: this one is entitled to 2 and holds 4.
	h.clk.Advance(leaseOpts.Renew)
	h.renew(grant(2, 0, 2), nil)
	if st := h.target("t"); st.InFlight != 4 {
		t.Fatalf("in flight %d after the lease shrank; want 4 (nothing preempted)", st.InFlight)
	}
	p := h.queue(Ticket{Target: "t", App: "a"})
	// Over its entitlement, the replica renews fast, reporting what it holds.
	gs[0].Done(-1, -1)
	if r := h.takeQueued(); r.Held.Requests != 3 || r.Demand.Requests != 4 {
		t.Fatalf("renewal while over the entitlement: %+v", r)
	}
	h.answer(grant(2, 0, 2), nil)
	gs[1].Done(-1, -1)
	if p.finished() {
		t.Fatal("a request started at 2 in flight with a lease of 2")
	}
	gs[2].Done(-1, -1)
	if _, err := p.result(t); err != nil {
		t.Fatal(err)
	}
	gs[3].Done(-1, -1)
}

func TestLeaseTokens(t *testing.T) {
	h := newLeaseHarness(t, Capacity{MaxConcurrent: 10, MaxTokensInFlight: 1000}, leaseOpts)
	h.renew(grant(10, 300, 2), nil)
	g := h.admit(Ticket{Target: "t", App: "a", InputTokens: 100, OutputBound: 100})
	p := h.queue(Ticket{Target: "t", App: "a", InputTokens: 100, OutputBound: 100})
	if r := h.takeQueued(); r.Held.Tokens != 200 || r.Demand.Tokens != 400 {
		t.Fatalf("renewal %+v; want 200 tokens held, 400 demanded", r)
	}
	h.answer(grant(10, 400, 2), nil)
	if _, err := p.result(t); err != nil {
		t.Fatal(err)
	}
	g.Done(-1, -1)
}

func TestLeaseExpiry(t *testing.T) {
	for _, tc := range []struct {
		name       string
		failClosed bool
		after      int64 // requests admitted once the lease expired
	}{
		{"open", false, 3}, // capacity 6 over the 2 replicas last seen
		{"closed", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := leaseOpts
			o.FailClosed = tc.failClosed
			h := newLeaseHarness(t, Capacity{MaxConcurrent: 6}, o)
			h.renew(grant(5, 0, 2), nil)
			// Renewals fail: the last lease stands (never more) until it expires.
			h.clk.Advance(o.Renew)
			h.renew(Lease{}, errLedgerDown)
			if ls := h.lease(); ls.Limit.Requests != 5 || !ls.Valid || ls.RenewErrors != 1 {
				t.Fatalf("lease after a failed renewal %+v; want the last (5) still valid", ls)
			}
			h.clk.Advance(o.Renew)
			h.renew(Lease{}, errLedgerDown)
			h.clk.Advance(o.TTL - 2*o.Renew) // the expiry (TTL after the last grant's renewal was sent)
			if ls := h.lease(); ls.Valid || ls.Limit.Requests != tc.after {
				t.Fatalf("lease after expiry %+v; want invalid, limit %d", ls, tc.after)
			}
			for range tc.after {
				h.admit(Ticket{Target: "t", App: "a"})
			}
			p := h.queue(Ticket{Target: "t", App: "a"})
			// The ledger answers again: the new grant applies at once.
			h.clk.Advance(o.QueuedRenew)
			h.renew(grant(6, 0, 1), nil)
			if _, err := p.result(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLeaseUnreachableAtStart(t *testing.T) {
	for _, tc := range []struct {
		name       string
		failClosed bool
		limit      int64
	}{{"open", false, 4}, {"closed", true, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			o := leaseOpts
			o.FailClosed = tc.failClosed
			h := newLeaseHarness(t, Capacity{MaxConcurrent: 4}, o)
			h.renew(Lease{}, errLedgerDown)
			if ls := h.lease(); ls.Valid || ls.Limit.Requests != tc.limit {
				t.Fatalf("lease %+v; want invalid with limit %d (no replica seen yet)", ls, tc.limit)
			}
		})
	}
}

func TestLeaseReleased(t *testing.T) {
	h := newLeaseHarness(t, Capacity{MaxConcurrent: 4}, leaseOpts)
	h.renew(grant(4, 0, 1), nil)
	// The target leaves the configuration: its lease is released.
	if err := h.s.Configure(Config{}); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-h.fl.released:
		if name != "t" {
			t.Fatalf("released %q", name)
		}
	case <-time.After(safety):
		t.Fatal("the lease of a target that left the configuration was not released")
	}
	// It comes back: a new lease, renewed only after the release.
	if err := h.s.Configure(Config{Targets: map[string]Capacity{"t": {MaxConcurrent: 2}}}); err != nil {
		t.Fatal(err)
	}
	if r := h.take(); r.Capacity.MaxConcurrent != 2 {
		t.Fatalf("renewal %+v", r)
	}
	h.answer(grant(2, 0, 1), nil)
	done := make(chan struct{})
	go func() { _ = h.s.Close(); close(done) }()
	select {
	case <-h.fl.released:
	case <-time.After(safety):
		t.Fatal("Close did not release the lease")
	}
	<-done
	if p := h.submit(Ticket{Target: "t", App: "a"}); p.finished() {
		t.Fatal("admitted after Close")
	}
}

// TestLeaseRenewalPeriod: a replica renews every Renew, and every
// QueuedRenew while capacity should change hands: it holds more than its
// entitlement, or has queued work its grant does not cover.
func TestLeaseRenewalPeriod(t *testing.T) {
	for _, tc := range []struct {
		name   string
		held   int   // requests admitted under a first grant of 4
		queued int   // requests queued after the second answer
		second Lease // the second renewal's answer
		err    error
		want   time.Duration
	}{
		{"idle within its entitlement", 0, 0, grant(4, 0, 2), nil, leaseOpts.Renew},
		{"busy within its entitlement", 2, 0, grant(2, 0, 2), nil, leaseOpts.Renew},
		{"above its entitlement", 3, 0, grant(2, 0, 2), nil, leaseOpts.QueuedRenew},
		{"granted less than its entitlement, nothing queued", 2, 0, Lease{Granted: Amount{Requests: 2}, Entitlement: Amount{Requests: 3}, Replicas: 2}, nil, leaseOpts.Renew},
		{"renewal failed, nothing queued", 0, 0, Lease{}, errLedgerDown, leaseOpts.Renew},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newLeaseHarness(t, Capacity{MaxConcurrent: 4}, leaseOpts)
			h.renew(grant(4, 0, 1), nil)
			for range tc.held {
				h.admit(Ticket{Target: "t", App: "a"})
			}
			h.clk.Advance(leaseOpts.Renew)
			h.renew(tc.second, tc.err)
			next, ok := h.clk.Next()
			if got := next.Sub(h.clk.Now()); !ok || got != tc.want {
				t.Fatalf("next renewal in %v; want %v", got, tc.want)
			}
		})
	}
	// Queued work the grant does not cover: the fast period.
	h := newLeaseHarness(t, Capacity{MaxConcurrent: 4}, leaseOpts)
	h.renew(grant(1, 0, 2), nil)
	h.admit(Ticket{Target: "t", App: "a"})
	h.queue(Ticket{Target: "t", App: "a"})
	h.takeQueued() // the queued request's wake-up
	h.answer(grant(1, 0, 2), nil)
	next, _ := h.clk.Next()
	if got := next.Sub(h.clk.Now()); got != leaseOpts.QueuedRenew {
		t.Fatalf("next renewal with work queued beyond the grant in %v; want %v", got, leaseOpts.QueuedRenew)
	}
}
