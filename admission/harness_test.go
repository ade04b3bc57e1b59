package admission

import (
	"context"
	"sync"
	"testing"
	"time"

	"sluice/internal/clock"
)

var epoch = time.Date(2025, time.June, 2, 9, 0, 0, 0, time.UTC)

// safety bounds how long a test waits for something that must happen; it
// is a guard against a hang, never a measure of speed.
const safety = 10 * time.Second

// recorder is an Observer that counts events per kind and application.
type recorder struct {
	mu     sync.Mutex
	cond   *sync.Cond
	events []Event
}

func newRecorder() *recorder {
	r := &recorder{}
	r.cond = sync.NewCond(&r.mu)
	return r
}

func (r *recorder) Observe(ev Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.cond.Broadcast()
	r.mu.Unlock()
}

func (r *recorder) countLocked(kind EventKind, app string) int {
	n := 0
	for _, ev := range r.events {
		if ev.Kind == kind && (app == "" || ev.App == app) {
			n++
		}
	}
	return n
}

func (r *recorder) last(kind EventKind, app string) Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0; i-- {
		if ev := r.events[i]; ev.Kind == kind && (app == "" || ev.App == app) {
			return ev
		}
	}
	return Event{}
}

// harness is a scheduler on a manual clock.
type harness struct {
	t   *testing.T
	s   *Scheduler
	clk *clock.Manual
	rec *recorder
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	return newHarnessWith(t, cfg, Options{})
}

// newHarnessWith is newHarness with the scheduler's other options.
func newHarnessWith(t *testing.T, cfg Config, opts Options) *harness {
	t.Helper()
	h := &harness{t: t, clk: clock.NewManual(epoch), rec: newRecorder()}
	opts.Clock, opts.Observer = h.clk, h.rec
	s, err := New(cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.s = s
	return h
}

// pending is an Admit running on its own goroutine.
type pending struct {
	tk     Ticket
	cancel context.CancelFunc
	done   chan struct{}
	g      Grant
	err    error
}

func (p *pending) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// result waits for Admit to return.
func (p *pending) result(t *testing.T) (Grant, error) {
	t.Helper()
	select {
	case <-p.done:
		return p.g, p.err
	case <-time.After(safety):
		t.Fatalf("Admit(%+v) did not return", p.tk)
		return Grant{}, nil
	}
}

// submit starts Admit(tk) and returns once it has either returned or
// queued. Calls are sequential per test, so the next queued event of tk.App
// is this request's.
func (h *harness) submit(tk Ticket) *pending {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	p := &pending{tk: tk, cancel: cancel, done: make(chan struct{})}
	h.rec.mu.Lock()
	before := h.rec.countLocked(EventQueued, tk.App)
	h.rec.mu.Unlock()
	go func() {
		p.g, p.err = h.s.Admit(ctx, tk)
		close(p.done)
		h.rec.mu.Lock()
		h.rec.cond.Broadcast()
		h.rec.mu.Unlock()
	}()
	deadline := time.AfterFunc(safety, func() {
		h.rec.mu.Lock()
		h.rec.cond.Broadcast()
		h.rec.mu.Unlock()
	})
	defer deadline.Stop()
	start := time.Now()
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	for !p.finished() && h.rec.countLocked(EventQueued, tk.App) == before {
		if time.Since(start) > safety {
			h.t.Fatalf("Admit(%+v) neither returned nor queued", tk)
		}
		h.rec.cond.Wait()
	}
	return p
}

// admit is submit for a request that must start at once.
func (h *harness) admit(tk Ticket) Grant {
	h.t.Helper()
	p := h.submit(tk)
	if !p.finished() {
		h.t.Fatalf("Admit(%+v) queued; want it admitted at once", tk)
	}
	g, err := p.result(h.t)
	if err != nil {
		h.t.Fatalf("Admit(%+v): %v", tk, err)
	}
	return g
}

// queue is submit for a request that must wait.
func (h *harness) queue(tk Ticket) *pending {
	h.t.Helper()
	p := h.submit(tk)
	if p.finished() {
		h.t.Fatalf("Admit(%+v) returned (%v); want it queued", tk, p.err)
	}
	return p
}

// refuse is submit for a request that must be refused at once.
func (h *harness) refuse(tk Ticket) *Refusal {
	h.t.Helper()
	p := h.submit(tk)
	if !p.finished() {
		h.t.Fatalf("Admit(%+v) queued; want a refusal", tk)
	}
	_, err := p.result(h.t)
	r, ok := err.(*Refusal)
	if !ok {
		h.t.Fatalf("Admit(%+v) = %v; want a *Refusal", tk, err)
	}
	return r
}

func (h *harness) target(name string) TargetStats {
	for _, ts := range h.s.Snapshot().Targets {
		if ts.Name == name {
			return ts
		}
	}
	h.t.Fatalf("no target %q in the snapshot", name)
	return TargetStats{}
}

func (h *harness) flowStats(target, app, class string) FlowStats {
	if class == "" {
		class = DefaultClass
	}
	for _, f := range h.target(target).Flows {
		if f.App == app && f.Class == class {
			return f
		}
	}
	h.t.Fatalf("no flow %s/%s on %s", app, class, target)
	return FlowStats{}
}

func (h *harness) classStats(target, class string) ClassStats {
	for _, c := range h.target(target).Classes {
		if c.Name == class {
			return c
		}
	}
	h.t.Fatalf("no class %s on %s", class, target)
	return ClassStats{}
}

// granted returns the pendings that have been admitted, in the order given,
// and fails on any that returned an error.
func granted(t *testing.T, ps []*pending) []*pending {
	t.Helper()
	var out []*pending
	for _, p := range ps {
		if p.finished() {
			if p.err != nil {
				t.Fatalf("Admit(%+v): %v", p.tk, p.err)
			}
			out = append(out, p)
		}
	}
	return out
}

// await waits until n of ps have returned and returns those, in ps order.
func (h *harness) await(ps []*pending, n int) []*pending {
	h.t.Helper()
	deadline := time.AfterFunc(safety, func() {
		h.rec.mu.Lock()
		h.rec.cond.Broadcast()
		h.rec.mu.Unlock()
	})
	defer deadline.Stop()
	start := time.Now()
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	for {
		var done []*pending
		for _, p := range ps {
			if p.finished() {
				done = append(done, p)
			}
		}
		if len(done) >= n {
			return done
		}
		if time.Since(start) > safety {
			h.t.Fatalf("%d of %d requests returned; want %d", len(done), len(ps), n)
		}
		h.rec.cond.Wait()
	}
}

// newlyDone waits for exactly one more of ps to return than in seen, marks
// it seen and returns it.
func (h *harness) newlyDone(ps []*pending, seen map[*pending]bool) *pending {
	h.t.Helper()
	done := h.await(ps, len(seen)+1)
	var fresh []*pending
	for _, p := range done {
		if !seen[p] {
			fresh = append(fresh, p)
		}
	}
	if len(fresh) != 1 {
		h.t.Fatalf("%d requests started at once; want 1", len(fresh))
	}
	seen[fresh[0]] = true
	return fresh[0]
}
