// Package admission is the fair-admission scheduler: a process-lifetime
// service that holds requests in per-application queues when an upstream
// target is at capacity and lets them start in weighted fair order of token
// work. It outlives configurations (Configure keeps queues, running requests
// and counters), like the counter store.
//
// # Capacity
//
// Each target (a provider upstream, named by the caller) has a Capacity:
// requests in flight, and tokens in flight (reserved prompt plus output bound
// of every admitted request). Below capacity, and with nobody waiting, Admit
// returns at once (the fast path: one mutex, no allocation). Otherwise the
// request waits in the queue of its flow: its application in its class.
//
// # Fair order: the virtual token counter
//
// Every flow has a counter of the service it received divided by its weight
// (Sheng et al., "Fairness in Serving Large Language Models", OSDI 2024):
// service = InputWeight*input tokens + OutputWeight*output tokens. Input is
// charged at admission (the estimate), output as the caller reports it
// (Grant.Progress) and both are settled with the real usage (Grant.Done).
// When capacity frees, the backlogged flow with the lowest counter starts its
// oldest request (ties: the flow with fewer requests running, then the oldest
// request). A flow that becomes backlogged has its counter lifted to
// the lowest counter among backlogged flows (or, with none, to the highest
// counter of any flow: a busy period starts with everyone equal), so
// idleness banks no credit. Starting is in strict
// order: when the chosen request does not fit the free capacity, nothing
// smaller overtakes it (a large request would otherwise starve), except
// around a burst headroom (below).
//
// # Classes
//
// A Class has a reserved share: while a class has work queued and holds less
// than its share of the capacity, its flows start before any other class's;
// while it has none, the share is lent out. Nothing running is ever
// preempted, so a class reclaims its share as running requests end. A class
// may also be capped (MaxShare), bound the work each application may queue
// (MaxQueuedWork), give requests a deadline for their start, and keep a
// burst headroom (BurstHeadroom): a fraction of the capacity that its flows
// holding at least their fair share leave free, for flows holding less. When
// the chosen request is held back by the headroom alone, the lowest-counter
// flow whose request may start does. The headroom is not work conserving.
//
// # Deadlines and expected start
//
// A request whose expected start is already past its deadline is refused at
// once (ReasonDeadlineUnmeetable); one whose deadline passes while it waits
// leaves the queue (ReasonDeadlineExceeded). The expected start is an
// estimate: the work the fair order puts ahead of the request (a fluid model
// of the counters), over the rate at which capacity frees (requests and
// tokens in flight over their mean holding time, measured on releases).
//
// # Several replicas
//
// With Options.Ledger, the replicas of a deployment share each target's
// capacity: a request fits when it fits this replica's lease, which one
// goroutine per target renews in the background (every LeaseOptions.Renew,
// faster while capacity should change hands); Admit never waits on the
// ledger. A replica over its entitlement admits nothing beyond it and gives
// the excess back as requests end. An expired lease falls back to the
// failure mode (LeaseOptions.FailClosed). Close releases the leases.
//
// # Contract with the caller
//
// Every Grant with Tracked() true must get exactly one Done, once the
// upstream request has really ended (its connection closed, not merely the
// client gone): capacity is freed only then. Extra calls are no-ops. A
// request cancelled while queued (its context done) leaves the queue at once
// and Admit returns the context's error.
//
// All methods are safe for concurrent use.
package admission

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/clock"
	"sluice/internal/satmath"
)

// DefaultRateWindow is the time constant of the release measurements behind
// the expected start.
const DefaultRateWindow = 10 * time.Second

// Options are the scheduler's services.
type Options struct {
	// Clock is the time source (nil: the real clock).
	Clock clock.Clock
	// Observer receives queue events (nil: none).
	Observer Observer
	// RateWindow is the time constant of the release measurements (0: DefaultRateWindow).
	RateWindow time.Duration
	// Ledger, when set, shares every target's capacity with the other
	// replicas of the deployment: the scheduler admits up to its lease (see
	// CapacityLedger), renewed in the background, and Close releases it.
	// nil: this process has each target's whole capacity.
	Ledger CapacityLedger
	// Leases are the lease timings and failure mode (with Ledger only).
	Leases LeaseOptions
}

// Ticket is a request asking to start on a target.
type Ticket struct {
	// Target names the upstream (a key of Config.Targets).
	Target string
	// App is the application id (the flow's owner, and its weight's key).
	App string
	// Class is the service class; "" (what the gateway sends) is the one
	// Config.AppClasses grants App, or DefaultClass. A class is granted by
	// configuration, never chosen by a request.
	Class string
	// InputTokens is the prompt estimate, charged at admission. Negative is 0.
	InputTokens int64
	// OutputBound is the most output the request may produce (the output
	// bound the gateway enforces). Negative is 0.
	OutputBound int64
	// Deadline is the wait for the start the client asked for (0: the
	// class default), capped by the class maximum.
	Deadline time.Duration
}

// Scheduler is the fair-admission service. Create it with New.
type Scheduler struct {
	clock clock.Clock
	obs   Observer
	tau   float64 // RateWindow in seconds

	ledger CapacityLedger // nil: no leases
	lopts  LeaseOptions

	mu      sync.Mutex // serialises Configure and Close
	closed  bool       // Close was called: no new leases
	targets atomic.Pointer[map[string]*target]
}

// New returns a scheduler enforcing cfg.
func New(cfg Config, opts Options) (*Scheduler, error) {
	s := &Scheduler{clock: opts.Clock, obs: opts.Observer, tau: opts.RateWindow.Seconds(),
		ledger: opts.Ledger, lopts: opts.Leases.withDefaults()}
	if s.clock == nil {
		s.clock = clock.Real
	}
	if s.tau <= 0 {
		s.tau = DefaultRateWindow.Seconds()
	}
	empty := map[string]*target{}
	s.targets.Store(&empty)
	if err := s.Configure(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// Configure replaces the configuration. Queues, running requests and
// counters are kept: a target keeps its state while it is configured, and
// when it leaves the configuration its waiting requests start at once and new
// ones are no longer tracked (its state comes back if it returns). Weights
// apply to service charged from now on; a class that leaves the
// configuration keeps its waiting requests (with no share and no cap) and
// refuses new ones (ReasonUnknownClass). A capacity lowered below what is
// running preempts nothing: requests start again once below it. On error
// nothing changes.
func (s *Scheduler) Configure(cfg Config) error {
	set, err := compile(cfg)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.targets.Load()
	next := make(map[string]*target, len(cur)+len(set.targets))
	for name, t := range cur {
		next[name] = t
	}
	for name, capy := range set.targets {
		if next[name] == nil {
			t := newTarget(s, name)
			t.reconfigure(set, capy, true)
			next[name] = t
		}
	}
	s.targets.Store(&next)
	for name, t := range cur {
		capy, ok := set.targets[name]
		t.reconfigure(set, capy, ok)
	}
	return nil
}

// Admit waits until tk may start on its target and returns its Grant, or
// returns a *Refusal, or ctx's error when ctx is done while it waits (it has
// then left the queue). A ticket for a target without capacity configured
// gets an untracked Grant at once.
func (s *Scheduler) Admit(ctx context.Context, tk Ticket) (Grant, error) {
	t := (*s.targets.Load())[tk.Target]
	if t == nil {
		return Grant{}, nil
	}
	in, bound := max(tk.InputTokens, 0), max(tk.OutputBound, 0)
	tokens := satmath.Add(in, bound)

	t.mu.Lock()
	if !t.limited {
		t.mu.Unlock()
		return Grant{}, nil
	}
	class := t.set.class(tk.App, tk.Class)
	cls := t.classes[class]
	if cls == nil || !cls.configured {
		t.mu.Unlock()
		return Grant{}, s.refuse(&Refusal{Reason: ReasonUnknownClass, Target: tk.Target, App: tk.App, Class: class})
	}
	if !t.canEverFit(tokens, cls) {
		t.mu.Unlock()
		return Grant{}, s.refuse(&Refusal{Reason: ReasonTooLarge, Target: tk.Target, App: tk.App, Class: class})
	}
	f := t.flow(tk.App, cls)
	now := s.clock.Now()
	if t.queued == 0 && t.fits(f, tokens) {
		r := t.start(f, in, bound, tokens, now)
		t.mu.Unlock()
		return Grant{r: r, gen: r.gen}, nil
	}
	return t.wait(ctx, tk, f, in, bound, tokens, now)
}

func (s *Scheduler) refuse(r *Refusal) *Refusal {
	s.observe(Event{Kind: EventRefused, Target: r.Target, App: r.App, Class: r.Class,
		ExpectedWait: r.ExpectedWait, Known: r.Known, Reason: r.Reason})
	return r
}

func (s *Scheduler) observe(ev Event) {
	if s.obs != nil {
		s.obs.Observe(ev)
	}
}

// Grant is an admitted request's hold on its target's capacity. It is a
// value: copies refer to the same hold, and every call after the first Done
// is a no-op.
type Grant struct {
	r      *running
	gen    uint64
	waited time.Duration
}

// Tracked reports whether the grant holds capacity (false for a target
// without capacity configured; its methods are then no-ops).
func (g Grant) Tracked() bool { return g.r != nil }

// Waited is how long the request waited in the queue (0 on the fast path).
func (g Grant) Waited() time.Duration { return g.waited }

// Progress reports the output generated so far (cumulative, over all
// choices); the new part is charged to the flow's counter. Lower values than
// already reported change nothing. Cheap (one mutex): call it as output
// arrives.
func (g Grant) Progress(output int64) {
	r := g.r
	if r == nil {
		return
	}
	t := r.t
	t.mu.Lock()
	if r.gen == g.gen && output > r.out {
		t.charge(r.flow, t.set.wOut*float64(output-r.out))
		r.out = output
	}
	t.mu.Unlock()
}

// Done ends the hold once the upstream request has really ended, and settles
// the flow's counter with the real usage: the difference from the input
// estimate and from the output reported by Progress is charged (or
// refunded). A negative figure is unknown: the estimate (input) or the
// output reported so far stands. Done(0, 0) refunds everything (nothing went
// upstream). Capacity is freed and waiting requests start.
func (g Grant) Done(input, output int64) {
	r := g.r
	if r == nil {
		return
	}
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.gen != g.gen {
		return
	}
	if input < 0 {
		input = r.in
	}
	if output < 0 {
		output = r.out
	}
	t.charge(r.flow, t.set.wIn*float64(input-r.in)+t.set.wOut*float64(output-r.out))
	t.finish(r, t.s.clock.Now())
}
