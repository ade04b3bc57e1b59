package admission

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

const up = "up" // the target of most tests

func oneSlot(extra ...func(*Config)) Config {
	cfg := Config{Targets: map[string]Capacity{up: {MaxConcurrent: 1}}}
	for _, f := range extra {
		f(&cfg)
	}
	return cfg
}

func tk(app string, in int64) Ticket { return Ticket{Target: up, App: app, InputTokens: in} }

func TestFastPath(t *testing.T) {
	h := newHarness(t, Config{Targets: map[string]Capacity{up: {MaxConcurrent: 2, MaxTokensInFlight: 1000}}})
	g1 := h.admit(Ticket{Target: up, App: "a", InputTokens: 100, OutputBound: 100})
	g2 := h.admit(Ticket{Target: up, App: "b", InputTokens: 300, OutputBound: 0})
	if !g1.Tracked() || g1.Waited() != 0 {
		t.Fatalf("grant: tracked %v, waited %v", g1.Tracked(), g1.Waited())
	}
	if ts := h.target(up); ts.InFlight != 2 || ts.TokensInFlight != 500 || ts.Queued != 0 {
		t.Fatalf("in flight %d, tokens %d, queued %d; want 2, 500, 0", ts.InFlight, ts.TokensInFlight, ts.Queued)
	}
	if n := len(h.rec.events); n != 0 {
		t.Fatalf("%d events on the fast path; want none", n)
	}

	// Both slots taken: the third waits, and starts when one ends.
	p := h.queue(Ticket{Target: up, App: "c", InputTokens: 10})
	h.clk.Advance(1500 * time.Millisecond)
	g1.Done(100, 100)
	g3, err := p.result(t)
	if err != nil || !g3.Tracked() || g3.Waited() != 1500*time.Millisecond {
		t.Fatalf("queued request: %v, tracked %v, waited %v; want 1.5s", err, g3.Tracked(), g3.Waited())
	}
	if ev := h.rec.last(EventAdmitted, "c"); ev.Waited != 1500*time.Millisecond {
		t.Fatalf("admitted event %+v", ev)
	}

	// A second Done of the same grant (or of a copy) frees nothing more.
	g1.Done(100, 100)
	copyOfG1 := g1
	copyOfG1.Done(0, 0)
	if ts := h.target(up); ts.InFlight != 2 || ts.TokensInFlight != 310 {
		t.Fatalf("after repeated Done: in flight %d, tokens %d; want 2, 310", ts.InFlight, ts.TokensInFlight)
	}
	g2.Done(300, 0)
	g3.Done(10, 16)
	if ts := h.target(up); ts.InFlight != 0 || ts.TokensInFlight != 0 || ts.Queued != 0 {
		t.Fatalf("after all Done: %+v", ts)
	}

	// A target without capacity: admitted at once, untracked, no-ops.
	g := h.admit(Ticket{Target: "elsewhere", App: "a", InputTokens: 1 << 40})
	if g.Tracked() {
		t.Fatal("grant on an unconfigured target is tracked")
	}
	g.Progress(5)
	g.Done(1, 1)
}

// serve releases the blocker, then completes n requests of ps one at a
// time (capacity 1), each with usage(app). It returns the order in which
// applications started and the request started after the n-th (running
// now; nil when ps ran out).
func (h *harness) serve(blocker Grant, ps []*pending, n int, usage func(app string) (in, out int64)) ([]string, *pending) {
	h.t.Helper()
	seen := map[*pending]bool{}
	var order []string
	blocker.Done(-1, -1)
	for i := 0; i <= n && i < len(ps); i++ {
		p := h.newlyDone(ps, seen)
		g, err := p.result(h.t)
		if err != nil {
			h.t.Fatalf("Admit(%+v): %v", p.tk, err)
		}
		if ts := h.target(up); ts.InFlight != 1 {
			h.t.Fatalf("in flight %d with capacity 1", ts.InFlight)
		}
		if i == n {
			return order, p
		}
		order = append(order, p.tk.App)
		in, out := usage(p.tk.App)
		g.Done(in, out)
	}
	return order, nil
}

func TestShareAccounting(t *testing.T) {
	tests := []struct {
		name    string
		weights map[string]float64
		apps    []string
		// out is each application's real output per request (input 100).
		out    map[string]int64
		rounds int
		want   map[string]int
	}{
		{name: "equal weights, equal work", apps: []string{"a", "b"}, rounds: 20,
			want: map[string]int{"a": 10, "b": 10}},
		{name: "weight 3 gets 3 times the work", weights: map[string]float64{"b": 3}, apps: []string{"a", "b"}, rounds: 40,
			want: map[string]int{"a": 10, "b": 30}},
		{name: "three flows 1:1:2", weights: map[string]float64{"c": 2}, apps: []string{"a", "b", "c"}, rounds: 40,
			want: map[string]int{"a": 10, "b": 10, "c": 20}},
		{name: "output settled at Done counts twice", apps: []string{"a", "b"}, rounds: 40,
			// b: 100 in + 2*100 out = 300 work per request, a: 100.
			out:  map[string]int64{"b": 100},
			want: map[string]int{"a": 30, "b": 10}},
		{name: "weights and output together", weights: map[string]float64{"b": 3}, apps: []string{"a", "b"}, rounds: 40,
			out:  map[string]int64{"b": 100},
			want: map[string]int{"a": 20, "b": 20}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, oneSlot(func(c *Config) { c.Weights = tc.weights }))
			blocker := h.admit(tk("z", 100))
			var ps []*pending
			for _, app := range tc.apps {
				for i := 0; i < tc.rounds; i++ { // more than any flow can get
					ps = append(ps, h.queue(tk(app, 100)))
				}
			}
			order, next := h.serve(blocker, ps, tc.rounds, func(app string) (int64, int64) { return 100, tc.out[app] })
			got := map[string]int{}
			for _, app := range order {
				got[app]++
			}
			for app, want := range tc.want {
				if d := got[app] - want; d < -1 || d > 1 {
					t.Errorf("%s started %d of %d; want %d (±1); order %v", app, got[app], tc.rounds, want, order)
				}
			}
			// The flows' service is what was charged: input and output weighted.
			for _, app := range tc.apps {
				f := h.flowStats(up, app, "")
				want := float64(got[app]) * float64(100+2*tc.out[app])
				if next.tk.App == app {
					want += 100 // started: input charged
				}
				if math.Abs(f.Service-want) > 1e-6 {
					t.Errorf("%s service %v; want %v", app, f.Service, want)
				}
			}
		})
	}
}

func TestCounterLift(t *testing.T) {
	t.Run("joining a backlog", func(t *testing.T) {
		// a is served alone for 10 requests while b is idle. When b becomes
		// backlogged it is lifted to a's counter: without the lift it would
		// take the next 10 starts to itself.
		h := newHarness(t, oneSlot())
		blocker := h.admit(tk("z", 100))
		var as []*pending
		for i := 0; i < 30; i++ {
			as = append(as, h.queue(tk("a", 100)))
		}
		_, running := h.serve(blocker, as, 10, func(string) (int64, int64) { return 100, 0 })
		// a's 11th request is running now; b arrives.
		seen := map[*pending]bool{}
		for _, p := range granted(t, as) {
			seen[p] = true
		}
		cur := running.g
		var bs []*pending
		for i := 0; i < 10; i++ {
			bs = append(bs, h.queue(tk("b", 100)))
		}
		if a, b := h.flowStats(up, "a", ""), h.flowStats(up, "b", ""); b.Counter != a.Counter {
			t.Fatalf("b's counter %v on joining; want a's %v (the lowest backlogged)", b.Counter, a.Counter)
		}
		all := append(append([]*pending{}, as...), bs...)
		cur.Done(-1, -1)
		got := map[string]int{}
		for i := 0; i < 10; i++ {
			p := h.newlyDone(all, seen)
			got[p.tk.App]++
			p.g.Done(-1, -1)
		}
		if got["b"] != 5 {
			t.Fatalf("of the 10 starts after b joined, b got %d; want 5 (no banked credit)", got["b"])
		}
	})

	t.Run("busy period starts equal", func(t *testing.T) {
		// a used the target heavily while it was not saturated; b never did.
		// When saturation begins neither has credit: they alternate.
		h := newHarness(t, oneSlot())
		for i := 0; i < 10; i++ {
			h.admit(tk("a", 100)).Done(100, 0)
		}
		blocker := h.admit(tk("z", 100))
		var ps []*pending
		for i := 0; i < 10; i++ {
			ps = append(ps, h.queue(tk("b", 100)))
		}
		for i := 0; i < 10; i++ {
			ps = append(ps, h.queue(tk("a", 100)))
		}
		if a, b := h.flowStats(up, "a", ""), h.flowStats(up, "b", ""); b.Counter != a.Counter || a.Counter != 1000 {
			t.Fatalf("counters at the start of the busy period: a %v, b %v; want both 1000", a.Counter, b.Counter)
		}
		order, _ := h.serve(blocker, ps, 10, func(string) (int64, int64) { return 100, 0 })
		got := map[string]int{}
		for _, app := range order {
			got[app]++
		}
		if got["a"] != 5 || got["b"] != 5 {
			t.Fatalf("order %v; want a and b alternating", order)
		}
	})
}

func TestBorrowAndReclaim(t *testing.T) {
	h := newHarness(t, Config{
		Targets: map[string]Capacity{up: {MaxConcurrent: 4}},
		Classes: map[string]Class{"standard": {}, "priority": {ReservedShare: 0.5}},
	})
	std := func() Ticket { return Ticket{Target: up, App: "s", InputTokens: 100} }
	prio := func() Ticket { return Ticket{Target: up, App: "p", Class: "priority", InputTokens: 100} }

	// Priority is idle: standard borrows its share and fills the target.
	var running []Grant
	for i := 0; i < 4; i++ {
		running = append(running, h.admit(std()))
	}
	if c := h.classStats(up, "priority"); c.ReservedSlots != 2 || c.StrandedSlots != 2 {
		t.Fatalf("priority idle: reserved %v, stranded %v; want 2, 2", c.ReservedSlots, c.StrandedSlots)
	}
	var waiting []*pending
	for i := 0; i < 4; i++ {
		waiting = append(waiting, h.queue(std()))
	}
	// Priority work arrives: nothing running is preempted...
	var prios []*pending
	for i := 0; i < 3; i++ {
		prios = append(prios, h.queue(prio()))
	}
	if ts := h.target(up); ts.InFlight != 4 || h.classStats(up, "standard").InFlight != 4 {
		t.Fatalf("priority arrival preempted: %+v", ts)
	}
	if c := h.classStats(up, "priority"); c.StrandedSlots != 0 {
		t.Fatalf("priority has work: stranded %v; want 0", c.StrandedSlots)
	}
	// ...but the next two slots that free go to it, ahead of older standard work.
	all := append(append([]*pending{}, waiting...), prios...)
	seen := map[*pending]bool{}
	for i := 0; i < 2; i++ {
		running[i].Done(-1, -1)
		if p := h.newlyDone(all, seen); p.tk.Class != "priority" {
			t.Fatalf("release %d started %+v; want priority work (reclaim)", i+1, p.tk)
		}
	}
	if c := h.classStats(up, "priority"); c.InFlight != 2 {
		t.Fatalf("priority in flight %d; want its share, 2", c.InFlight)
	}
	// At its share, priority competes by counter: it has been charged 200
	// since joining, standard nothing, so standard goes next.
	running[2].Done(-1, -1)
	if p := h.newlyDone(all, seen); p.tk.Class == "priority" {
		t.Fatalf("release 3 started priority work above its share while standard's counter is lower")
	}
}

func TestMaxShare(t *testing.T) {
	h := newHarness(t, Config{
		Targets: map[string]Capacity{up: {MaxConcurrent: 4, MaxTokensInFlight: 1000}},
		Classes: map[string]Class{"batch": {MaxShare: 0.25}},
	})
	batch := func(in int64) Ticket { return Ticket{Target: up, App: "b", Class: "batch", InputTokens: in} }
	g := h.admit(batch(100))
	p := h.queue(batch(100)) // one slot of four: the class's cap
	// Standard work passes the capped class's queue.
	h.admit(Ticket{Target: up, App: "s", InputTokens: 100})
	h.admit(Ticket{Target: up, App: "s", InputTokens: 100})
	if p.finished() {
		t.Fatal("batch passed its cap")
	}
	g.Done(-1, -1)
	if _, err := p.result(t); err != nil {
		t.Fatal(err)
	}
	// Tokens: a request above the class's 250-token cap can never run.
	if r := h.refuse(batch(251)); r.Reason != ReasonTooLarge || r.ShouldRetry() {
		t.Fatalf("refusal %+v", r)
	}
}

func TestTooLargeAndUnknownClass(t *testing.T) {
	h := newHarness(t, Config{Targets: map[string]Capacity{up: {MaxTokensInFlight: 1000}}})
	r := h.refuse(Ticket{Target: up, App: "a", InputTokens: 900, OutputBound: 101})
	if r.Reason != ReasonTooLarge || r.ShouldRetry() {
		t.Fatalf("too large: %+v", r)
	}
	if _, ok := r.RetryAfter(); ok {
		t.Fatal("too large carries a Retry-After")
	}
	// Exactly the bound fits.
	h.admit(Ticket{Target: up, App: "a", InputTokens: 900, OutputBound: 100}).Done(-1, -1)
	if r := h.refuse(Ticket{Target: up, App: "a", Class: "gold"}); r.Reason != ReasonUnknownClass {
		t.Fatalf("unknown class: %+v", r)
	}
	// Overflowing figures saturate instead of wrapping into a small request.
	if r := h.refuse(Ticket{Target: up, App: "a", InputTokens: math.MaxInt64, OutputBound: math.MaxInt64}); r.Reason != ReasonTooLarge {
		t.Fatalf("overflow: %+v", r)
	}
	// Negative figures count as zero.
	g := h.admit(Ticket{Target: up, App: "a", InputTokens: -5, OutputBound: -5})
	if ts := h.target(up); ts.TokensInFlight != 0 {
		t.Fatalf("negative ticket holds %d tokens", ts.TokensInFlight)
	}
	g.Done(-1, -1)
}

// TestGrantedClass: a ticket that names no class gets the class the
// configuration grants its application, and a reload that grants another
// applies to the next request.
func TestGrantedClass(t *testing.T) {
	cfg := Config{
		Targets:    map[string]Capacity{up: {MaxConcurrent: 4}},
		Classes:    map[string]Class{"priority": {ReservedShare: 0.5}},
		AppClasses: map[string]string{"p": "priority"},
	}
	h := newHarness(t, cfg)
	h.admit(Ticket{Target: up, App: "p", InputTokens: 1}).Done(-1, -1)
	h.admit(Ticket{Target: up, App: "s", InputTokens: 1}).Done(-1, -1)
	if c := h.classStats(up, "priority"); c.Admitted != 1 {
		t.Fatalf("priority admitted %d; want the granted application's request", c.Admitted)
	}
	if c := h.classStats(up, DefaultClass); c.Admitted != 1 {
		t.Fatalf("standard admitted %d; want the other application's request", c.Admitted)
	}
	cfg.AppClasses = map[string]string{"s": "priority"}
	if err := h.s.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	h.admit(Ticket{Target: up, App: "s", InputTokens: 1}).Done(-1, -1)
	if c := h.classStats(up, "priority"); c.Admitted != 2 {
		t.Fatalf("after the reload priority admitted %d; want 2", c.Admitted)
	}
}

func TestBoundedQueue(t *testing.T) {
	h := newHarness(t, oneSlot(func(c *Config) {
		c.Classes = map[string]Class{"standard": {MaxQueuedWork: 1000}, "other": {MaxQueuedWork: 1000}}
	}))
	blocker := h.admit(tk("z", 1))
	req := func(app, class string) Ticket { // 100 + 2*100 = 300 work
		return Ticket{Target: up, App: app, Class: class, InputTokens: 100, OutputBound: 100}
	}
	for i := 0; i < 3; i++ {
		h.queue(req("a", ""))
	}
	before := h.flowStats(up, "a", "")
	r := h.refuse(req("a", ""))
	if r.Reason != ReasonQueueFull || r.App != "a" || r.Class != "standard" || !r.ShouldRetry() {
		t.Fatalf("refusal %+v", r)
	}
	if after := h.flowStats(up, "a", ""); after != before {
		t.Fatalf("a refusal changed the flow: %+v -> %+v", before, after)
	}
	if ev := h.rec.last(EventRefused, "a"); ev.Reason != ReasonQueueFull {
		t.Fatalf("refused event %+v", ev)
	}
	// The bound is per application and per class.
	h.queue(req("b", ""))
	h.queue(req("a", "other"))
	// One request may always wait, however large.
	h.queue(Ticket{Target: up, App: "c", InputTokens: 5000})
	if ts := h.target(up); ts.Queued != 6 {
		t.Fatalf("queued %d; want 6", ts.Queued)
	}
	h.clk.Advance(3 * time.Second)
	if c := h.classStats(up, "standard"); c.Queued != 5 || c.OldestWait != 3*time.Second || c.QueuedWork != 3*300+300+5000 {
		t.Fatalf("standard class: %+v", c)
	}
	_ = blocker
}

// withHoldTime runs n requests on h's target (capacity 1) that each hold
// their slot for d, so the release rate is known.
func (h *harness) withHoldTime(n int, d time.Duration) {
	for i := 0; i < n; i++ {
		g := h.admit(tk("warmup", 1))
		h.clk.Advance(d)
		g.Done(-1, -1)
	}
}

func TestDeadlines(t *testing.T) {
	timed := Class{DefaultDeadline: 800 * time.Millisecond, MaxDeadline: 5 * time.Second}
	tests := []struct {
		name  string
		asked time.Duration
		// refused: at once (the expected start, 1s, is past the deadline);
		// else queued, and it expires after wantDeadline.
		refused      bool
		wantDeadline time.Duration
	}{
		{name: "class default shorter than the expected start", asked: 0, refused: true, wantDeadline: 800 * time.Millisecond},
		{name: "client asks less", asked: 200 * time.Millisecond, refused: true, wantDeadline: 200 * time.Millisecond},
		{name: "client asks more, within the maximum", asked: 2 * time.Second, wantDeadline: 2 * time.Second},
		{name: "client asks above the maximum: capped", asked: time.Hour, wantDeadline: 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, oneSlot(func(c *Config) { c.Classes = map[string]Class{"timed": timed} }))
			h.withHoldTime(3, time.Second)
			blocker := h.admit(tk("z", 1))
			ticket := Ticket{Target: up, App: "a", Class: "timed", InputTokens: 100, Deadline: tc.asked}
			if tc.refused {
				r := h.refuse(ticket)
				if r.Reason != ReasonDeadlineUnmeetable || !r.Known || r.ExpectedWait != time.Second || r.Deadline != tc.wantDeadline {
					t.Fatalf("refusal %+v; want deadline_unmeetable, expected wait 1s, deadline %v", r, tc.wantDeadline)
				}
				if d, ok := r.RetryAfter(); !ok || d != time.Second || r.ShouldRetry() {
					t.Fatalf("retry after %v %v, should retry %v", d, ok, r.ShouldRetry())
				}
				if ts := h.target(up); ts.Queued != 0 {
					t.Fatalf("a refused request is queued: %+v", ts)
				}
				return
			}
			p := h.queue(ticket)
			if ev := h.rec.last(EventQueued, "a"); !ev.Known || ev.ExpectedWait != time.Second || ev.Position != 0 {
				t.Fatalf("queued event %+v; want expected wait 1s, position 0", ev)
			}
			before := h.flowStats(up, "a", "timed")
			h.clk.Advance(tc.wantDeadline - time.Millisecond)
			if p.finished() {
				t.Fatalf("left the queue before its deadline: %v", p.err)
			}
			h.clk.Advance(time.Millisecond)
			_, err := p.result(t)
			var r *Refusal
			if !errors.As(err, &r) || r.Reason != ReasonDeadlineExceeded || r.Waited != tc.wantDeadline || r.ShouldRetry() {
				t.Fatalf("after the deadline: %v; want deadline_exceeded after %v", err, tc.wantDeadline)
			}
			after := h.flowStats(up, "a", "timed")
			if after.Service != before.Service || after.Counter != before.Counter || after.Queued != 0 {
				t.Fatalf("an expired request was charged: %+v -> %+v", before, after)
			}
			// The target carries on: the slot frees, the next request starts at once.
			blocker.Done(-1, -1)
			h.admit(ticket).Done(-1, -1)
		})
	}
}

func TestDeadlineResolution(t *testing.T) {
	for _, tc := range []struct {
		cl    Class
		asked time.Duration
		want  time.Duration
	}{
		{Class{}, 0, 0},
		{Class{}, time.Second, time.Second},
		{Class{DefaultDeadline: 3 * time.Second}, 0, 3 * time.Second},
		{Class{DefaultDeadline: 3 * time.Second}, time.Second, time.Second},
		{Class{DefaultDeadline: 3 * time.Second}, time.Minute, time.Minute},
		{Class{MaxDeadline: 5 * time.Second}, 0, 5 * time.Second},
		{Class{DefaultDeadline: 3 * time.Second, MaxDeadline: 5 * time.Second}, time.Hour, 5 * time.Second},
		{Class{DefaultDeadline: 3 * time.Second, MaxDeadline: 5 * time.Second}, -time.Second, 3 * time.Second},
	} {
		if got := tc.cl.deadline(tc.asked); got != tc.want {
			t.Errorf("%+v asked %v: %v; want %v", tc.cl, tc.asked, got, tc.want)
		}
	}
}

func TestExpectedStart(t *testing.T) {
	h := newHarness(t, oneSlot())
	h.withHoldTime(4, 2*time.Second)
	blocker := h.admit(tk("z", 1))
	for i := 0; i < 3; i++ {
		h.queue(tk("a", 100))
	}
	// Three of a's ahead, one running, two seconds each: the fourth starts in 8s.
	h.queue(tk("a", 100))
	if ev := h.rec.last(EventQueued, "a"); !ev.Known || ev.ExpectedWait != 8*time.Second || ev.Position != 3 {
		t.Fatalf("queued event %+v; want expected wait 8s, position 3", ev)
	}
	// b joins with a's counter: in the fair order it comes next (its own
	// queue is empty), so it expects only the running request.
	h.queue(tk("b", 100))
	if ev := h.rec.last(EventQueued, "b"); ev.ExpectedWait != 2*time.Second || ev.Position != 0 {
		t.Fatalf("b's queued event %+v; want 2s, position 0", ev)
	}
	_ = blocker
}

func TestExpectedStartUnknownBeforeReleases(t *testing.T) {
	h := newHarness(t, oneSlot(func(c *Config) {
		c.Classes = map[string]Class{"standard": {DefaultDeadline: time.Second, MaxQueuedWork: 100}}
	}))
	h.admit(tk("z", 1))
	// Nothing has ended yet: the wait is unknown, so no early refusal.
	h.queue(tk("a", 100))
	if ev := h.rec.last(EventQueued, "a"); ev.Known {
		t.Fatalf("expected wait known before any release: %+v", ev)
	}
	r := h.refuse(tk("a", 100))
	if r.Reason != ReasonQueueFull || r.Known || !r.ShouldRetry() {
		t.Fatalf("refusal %+v", r)
	}
	if _, ok := r.RetryAfter(); ok {
		t.Fatal("Retry-After without an estimate")
	}
}

func TestCancelWhileQueued(t *testing.T) {
	h := newHarness(t, Config{Targets: map[string]Capacity{up: {MaxTokensInFlight: 1000}}})
	h.admit(Ticket{Target: up, App: "z", InputTokens: 600})
	// b's large request heads the queue and does not fit; c's small one
	// would, but does not overtake it.
	pb := h.queue(Ticket{Target: up, App: "b", InputTokens: 800})
	pc := h.queue(Ticket{Target: up, App: "c", InputTokens: 100})
	if ts := h.target(up); ts.Queued != 2 || ts.InFlight != 1 {
		t.Fatalf("the small request overtook the large head: %+v", ts)
	}
	before := h.flowStats(up, "b", "")
	pb.cancel()
	if _, err := pb.result(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while queued: %v; want context.Canceled", err)
	}
	// Its leaving unblocks the queue at once.
	if _, err := pc.result(t); err != nil {
		t.Fatal(err)
	}
	after := h.flowStats(up, "b", "")
	if after.Service != before.Service || after.Counter != before.Counter || after.Queued != 0 || after.Running != 0 {
		t.Fatalf("a cancelled request was charged: %+v -> %+v", before, after)
	}
	if ev := h.rec.last(EventCancelled, "b"); ev.Kind != EventCancelled {
		t.Fatal("no cancelled event")
	}
	// A context already done never queues.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.s.Admit(ctx, Ticket{Target: up, App: "d", InputTokens: 900}); !errors.Is(err, context.Canceled) {
		t.Fatalf("done context: %v", err)
	}
}

func TestCancelWhileRunning(t *testing.T) {
	h := newHarness(t, oneSlot())
	p := h.submit(Ticket{Target: up, App: "a", InputTokens: 100, OutputBound: 500})
	g, err := p.result(t)
	if err != nil {
		t.Fatal(err)
	}
	g.Progress(40)
	next := h.queue(tk("b", 100))
	// The client goes away mid-stream: its context ends, but the capacity
	// stays taken until the caller says the upstream request has ended.
	p.cancel()
	if next.finished() {
		t.Fatal("capacity freed by the context, before Done")
	}
	if ts := h.target(up); ts.InFlight != 1 {
		t.Fatalf("in flight %d; want 1 until Done", ts.InFlight)
	}
	g.Done(-1, 55) // the upstream connection closed after 55 tokens
	if _, err := next.result(t); err != nil {
		t.Fatal(err)
	}
	if f := h.flowStats(up, "a", ""); f.Service != 100+2*55 {
		t.Fatalf("service %v; want 100 + 2*55", f.Service)
	}
}

func TestProgressAndSettle(t *testing.T) {
	h := newHarness(t, oneSlot(func(c *Config) { c.Weights = map[string]float64{"a": 2} }))
	g := h.admit(Ticket{Target: up, App: "a", InputTokens: 100, OutputBound: 1000})
	check := func(service float64) {
		t.Helper()
		if f := h.flowStats(up, "a", ""); f.Service != service || f.Counter != service/2 {
			t.Fatalf("service %v, counter %v; want %v, %v", f.Service, f.Counter, service, service/2)
		}
	}
	check(100)
	g.Progress(50)
	check(200)
	g.Progress(30) // lower than reported: nothing
	check(200)
	g.Done(80, 60) // real input 80 (-20), output 60 (+10 * 2)
	check(200)
	g.Progress(500) // after Done: nothing
	check(200)
	g2 := h.admit(Ticket{Target: up, App: "a", InputTokens: 100})
	g2.Done(0, 0) // nothing went upstream: refunded
	check(200)
}

func TestReloadKeepsQueuesAndCounters(t *testing.T) {
	cfg := Config{
		Targets: map[string]Capacity{up: {MaxConcurrent: 1}},
		Classes: map[string]Class{"priority": {ReservedShare: 0.5}},
	}
	h := newHarness(t, cfg)
	blocker := h.admit(tk("z", 100))
	var ps []*pending
	for _, app := range []string{"a", "b", "a", "b"} {
		ps = append(ps, h.queue(tk(app, 100)))
	}
	pp := h.queue(Ticket{Target: up, App: "p", Class: "priority", InputTokens: 100})
	a0, b0 := h.flowStats(up, "a", ""), h.flowStats(up, "b", "")

	// More capacity and a new weight: the queue stays, one more starts (the
	// priority request, owed its share), counters are untouched.
	cfg.Targets = map[string]Capacity{up: {MaxConcurrent: 2}}
	cfg.Weights = map[string]float64{"b": 2}
	if err := h.s.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := pp.result(t); err != nil {
		t.Fatal(err)
	}
	ts := h.target(up)
	if ts.Queued != 4 || ts.InFlight != 2 || ts.Capacity.MaxConcurrent != 2 {
		t.Fatalf("after reload: %+v", ts)
	}
	a1, b1 := h.flowStats(up, "a", ""), h.flowStats(up, "b", "")
	if a1.Counter != a0.Counter || b1.Counter != b0.Counter || b1.Weight != 2 || a1.Queued != 2 || b1.Queued != 2 {
		t.Fatalf("reload changed the flows: a %+v -> %+v, b %+v -> %+v", a0, a1, b0, b1)
	}

	// An invalid configuration changes nothing.
	bad := cfg
	bad.Targets = map[string]Capacity{up: {MaxConcurrent: -1}}
	if err := h.s.Configure(bad); err == nil {
		t.Fatal("invalid configuration accepted")
	}
	if ts := h.target(up); ts.Capacity.MaxConcurrent != 2 {
		t.Fatalf("invalid configuration applied: %+v", ts)
	}

	// The priority class leaves the configuration: new tickets naming it are
	// refused.
	cfg.Classes = nil
	if err := h.s.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	if r := h.refuse(Ticket{Target: up, App: "p", Class: "priority"}); r.Reason != ReasonUnknownClass {
		t.Fatalf("removed class: %+v", r)
	}

	// The target leaves the configuration: what waited starts, new requests
	// are untracked, running grants still end cleanly.
	cfg.Targets = nil
	if err := h.s.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	h.await(ps, len(ps))
	if g := h.admit(tk("a", 100)); g.Tracked() {
		t.Fatal("grant on a removed target is tracked")
	}
	blocker.Done(-1, -1)
	for _, p := range ps {
		p.g.Done(-1, -1)
	}
	pp.g.Done(-1, -1)
	ts = h.target(up)
	if ts.Limited || ts.InFlight != 0 || ts.Queued != 0 {
		t.Fatalf("removed target: %+v", ts)
	}
	// It comes back with its counters.
	aGone := h.flowStats(up, "a", "")
	cfg.Targets = map[string]Capacity{up: {MaxConcurrent: 1}}
	if err := h.s.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	if back := h.flowStats(up, "a", ""); back.Counter != aGone.Counter || !h.target(up).Limited {
		t.Fatalf("re-added target lost its counters: %+v -> %+v", aGone, back)
	}
}

func TestStranded(t *testing.T) {
	h := newHarness(t, Config{
		Targets: map[string]Capacity{up: {MaxConcurrent: 10, MaxTokensInFlight: 10000}},
		Classes: map[string]Class{"priority": {ReservedShare: 0.3}},
	})
	c := h.classStats(up, "priority")
	if c.ReservedSlots != 3 || c.ReservedTokens != 3000 || c.StrandedSlots != 3 || c.StrandedTokens != 3000 {
		t.Fatalf("idle: %+v", c)
	}
	g := h.admit(Ticket{Target: up, App: "p", Class: "priority", InputTokens: 1000})
	if c := h.classStats(up, "priority"); c.StrandedSlots != 2 || c.StrandedTokens != 2000 || c.Admitted != 1 {
		t.Fatalf("one running: %+v", c)
	}
	g.Done(-1, -1)
	if c := h.classStats(up, "standard"); c.ReservedSlots != 0 || c.StrandedSlots != 0 {
		t.Fatalf("standard: %+v", c)
	}
}
