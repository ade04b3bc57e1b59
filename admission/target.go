package admission

import (
	"sort"
	"sync"
	"time"

	"sluice/internal/clock"
)

// running is one admitted request. Records are reused: gen tells a Grant's
// record from its successors.
type running struct {
	t      *target
	flow   *flow
	gen    uint64
	in     int64 // input charged
	out    int64 // output charged
	tokens int64 // tokens in flight held
	start  time.Time
}

// flowKey names a flow: an application's requests in one class.
type flowKey struct{ app, class string }

// flow is one application's requests of one class on one target.
type flow struct {
	key     flowKey
	cls     *classState
	weight  float64
	counter float64 // service / weight: the fair order's key
	service float64 // service charged in total, in work units
	queue   []*waiter
	qWork   float64 // work queued (input and output bound, weighted)
	qTokens int64   // tokens queued
	running int
	tokens  int64 // tokens in flight held by its running requests
	bidx    int   // index in target.backlog, -1 when not backlogged
}

// classState is one class's accounting on one target.
type classState struct {
	name       string
	cfg        Class
	configured bool
	inFlight   int
	tokens     int64
	queued     int
	qWork      float64
	admitted   uint64
}

// waiter states
const (
	waitQueued uint8 = iota
	waitGranted
	waitLeft
)

type waiter struct {
	flow     *flow
	seq      uint64
	in       int64
	bound    int64
	tokens   int64
	work     float64
	enqueued time.Time
	deadline time.Duration
	timer    clock.Timer
	state    uint8
	ready    chan result // buffered: one send, made under the target's lock
}

type result struct {
	grant Grant
	err   error
}

// target is one upstream's capacity, queues and counters. mu guards all of it.
type target struct {
	s    *Scheduler
	name string

	mu       sync.Mutex
	set      *settings
	capy     Capacity
	limited  bool // false: not configured (admitted at once, untracked)
	inFlight int
	tokens   int64
	queued   int
	seq      uint64
	flows    map[flowKey]*flow
	classes  map[string]*classState
	clsList  []*classState // by name: a deterministic order for ties
	backlog  []*flow
	vmax     float64 // the highest counter of any flow (the lift when nobody is backlogged)
	active   int     // flows with requests running or queued
	activeW  float64 // the sum of their weights (the fair share's denominator)
	holds    holdEstimate
	free     []*running
	lease    *leaseState // nil: the whole capacity is this process's
	stopped  *leaseState // the last lease stopped (its release must come before a new lease's renewal)
}

func newTarget(s *Scheduler, name string) *target {
	return &target{s: s, name: name, flows: map[flowKey]*flow{}, classes: map[string]*classState{},
		holds: holdEstimate{tau: s.tau}}
}

func (t *target) reconfigure(set *settings, capy Capacity, limited bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.set, t.capy, t.limited = set, capy, limited
	for _, cs := range t.classes {
		cs.cfg, cs.configured = Class{MaxShare: 1}, false
	}
	for name, cl := range set.classes {
		cs := t.classes[name]
		if cs == nil {
			cs = &classState{name: name}
			t.classes[name] = cs
		}
		cs.cfg, cs.configured = cl, true
	}
	t.clsList = t.clsList[:0]
	for _, cs := range t.classes {
		t.clsList = append(t.clsList, cs)
	}
	sort.Slice(t.clsList, func(i, j int) bool { return t.clsList[i].name < t.clsList[j].name })
	t.activeW = 0
	for _, f := range t.flows {
		f.weight = set.weight(f.key.app)
		if f.active() {
			t.activeW += f.weight
		}
	}
	if s := t.s; s.ledger != nil && !s.closed {
		switch {
		case limited && t.lease == nil:
			t.startLease(t.stopped)
		case limited:
			t.lease.poke() // the capacity may have changed
		case t.lease != nil:
			t.stopped = t.stopLease()
		}
	}
	t.dispatch(t.s.clock.Now())
}

func (t *target) flow(app string, cls *classState) *flow {
	k := flowKey{app, cls.name}
	f := t.flows[k]
	if f == nil {
		f = &flow{key: k, cls: cls, weight: t.set.weight(app), bidx: -1}
		t.flows[k] = f
	}
	return f
}

// ceiling is the capacity class cls may hold: its MaxShare of each bound
// (at least one request).
func (t *target) ceiling(cls *classState) (slots int, tokens int64) {
	share := cls.cfg.MaxShare
	if t.capy.MaxConcurrent > 0 {
		slots = max(1, int(share*float64(t.capy.MaxConcurrent)))
	}
	if t.capy.MaxTokensInFlight > 0 {
		tokens = int64(share * float64(t.capy.MaxTokensInFlight))
	}
	return slots, tokens
}

// canEverFit reports whether a request of tokens could ever run in cls.
func (t *target) canEverFit(tokens int64, cls *classState) bool {
	if t.capy.MaxTokensInFlight == 0 {
		return true
	}
	_, ceil := t.ceiling(cls)
	return tokens <= ceil
}

// fits reports whether a request of tokens of flow f may start now: it fits
// the capacity (fitsCapacity) and, when f's class keeps a burst headroom and
// f holds at least its fair share, it leaves the headroom free.
func (t *target) fits(f *flow, tokens int64) bool {
	return t.fitsCapacity(tokens, f.cls) && t.clearsHeadroom(f, tokens)
}

// fitsCapacity reports whether a request of tokens in cls fits the free
// capacity, the class's MaxShare and the lease.
func (t *target) fitsCapacity(tokens int64, cls *classState) bool {
	if !t.limited {
		return true
	}
	slots, ceil := t.ceiling(cls)
	if c := t.capy.MaxConcurrent; c > 0 && (t.inFlight >= c || cls.inFlight >= slots) {
		return false
	}
	if m := t.capy.MaxTokensInFlight; m > 0 && (t.tokens+tokens > m || cls.tokens+tokens > ceil) {
		return false
	}
	return t.lease == nil || t.lease.allows(t, tokens)
}

// room is the capacity this process may fill now: the configured bounds,
// within the lease when leased.
func (t *target) room() (slots int, tokens int64) {
	slots, tokens = t.capy.MaxConcurrent, t.capy.MaxTokensInFlight
	if ls := t.lease; ls != nil {
		if slots > 0 {
			slots = int(min(int64(slots), ls.limit.Requests))
		}
		if tokens > 0 {
			tokens = min(tokens, ls.limit.Tokens)
		}
	}
	return slots, tokens
}

// usage is the class's dominant share of the capacity in use.
func (t *target) usage(cls *classState) float64 {
	u := 0.0
	if c := t.capy.MaxConcurrent; c > 0 {
		u = float64(cls.inFlight) / float64(c)
	}
	if m := t.capy.MaxTokensInFlight; m > 0 {
		u = max(u, float64(cls.tokens)/float64(m))
	}
	return u
}

// clearsHeadroom reports whether a request of tokens of flow f may start
// under its class's BurstHeadroom: always when the class keeps none or f
// holds less than its fair share; otherwise only if it leaves the headroom
// of each bound free.
func (t *target) clearsHeadroom(f *flow, tokens int64) bool {
	h := f.cls.cfg.BurstHeadroom
	if h <= 0 || !t.limited || t.underFairShare(f) {
		return true
	}
	slots, toks := t.room()
	if c := t.capy.MaxConcurrent; c > 0 && t.inFlight+1 > slots-int(h*float64(c)) {
		return false
	}
	if m := t.capy.MaxTokensInFlight; m > 0 && t.tokens+tokens > toks-int64(h*float64(m)) {
		return false
	}
	return true
}

// underFairShare reports whether flow f holds (its dominant share of
// requests and tokens in flight) less than its fair share of the capacity:
// its weight over the weights of the flows with requests running or queued,
// its own included.
func (t *target) underFairShare(f *flow) bool {
	w := t.activeW
	if !f.active() {
		w += f.weight
	}
	held := 0.0
	if c := t.capy.MaxConcurrent; c > 0 {
		held = float64(f.running) / float64(c)
	}
	if m := t.capy.MaxTokensInFlight; m > 0 {
		held = max(held, float64(f.tokens)/float64(m))
	}
	return held < f.weight/w
}

func (f *flow) active() bool { return f.running > 0 || len(f.queue) > 0 }

// activity keeps the active flows' weight current after f's running or
// queued requests changed; was is whether f was active before.
func (t *target) activity(f *flow, was bool) {
	switch now := f.active(); {
	case now && !was:
		t.active++
		t.activeW += f.weight
	case was && !now:
		t.active--
		t.activeW -= f.weight
		if t.active == 0 {
			t.activeW = 0 // no float residue
		}
	}
}

func (t *target) belowShare(cls *classState) bool {
	return cls.cfg.ReservedShare > 0 && t.usage(cls) < cls.cfg.ReservedShare
}

func (t *target) newRunning() *running {
	if n := len(t.free); n > 0 {
		r := t.free[n-1]
		t.free = t.free[:n-1]
		return r
	}
	return &running{t: t}
}

// start admits a request of flow f: capacity taken, input charged.
func (t *target) start(f *flow, in, bound, tokens int64, now time.Time) *running {
	r := t.newRunning()
	r.flow, r.in, r.out, r.tokens, r.start = f, in, 0, tokens, now
	was := f.active()
	t.inFlight++
	t.tokens += tokens
	f.cls.inFlight++
	f.cls.tokens += tokens
	f.cls.admitted++
	f.running++
	f.tokens += tokens
	t.activity(f, was)
	t.charge(f, t.set.wIn*float64(in))
	return r
}

func (t *target) charge(f *flow, work float64) {
	f.service += work
	f.counter += work / f.weight
	t.vmax = max(t.vmax, f.counter)
}

// finish releases r's capacity and starts whatever now fits.
func (t *target) finish(r *running, now time.Time) {
	f := r.flow
	was := f.active()
	t.inFlight--
	t.tokens -= r.tokens
	f.cls.inFlight--
	f.cls.tokens -= r.tokens
	f.running--
	f.tokens -= r.tokens
	t.activity(f, was)
	t.holds.observe(now, now.Sub(r.start), r.tokens)
	r.gen++
	r.flow = nil
	t.free = append(t.free, r)
	t.dispatch(now)
}

// liftTo is the counter flow f (not backlogged) starts waiting with: the
// lowest counter among backlogged flows, so that it neither jumps ahead of
// the flows being served nor keeps credit from idleness; with none
// backlogged (a busy period begins), the highest counter of any flow, so
// that the period starts with everyone equal. Never lower than f's own.
func (t *target) liftTo(f *flow) float64 {
	floor := t.vmax
	for i, v := range t.backlog {
		if i == 0 || v.counter < floor {
			floor = v.counter
		}
	}
	return max(floor, f.counter)
}

// pick chooses the flow whose oldest request starts next, or nil: the
// lowest counter among the flows of the class furthest below its reserved
// share, or, with no class owed, among all backlogged flows. Flows whose
// class cannot take their oldest request under its MaxShare are passed
// over; ties go to the oldest request.
func (t *target) pick() *flow {
	var owed *classState
	owedRatio := 0.0
	for _, cs := range t.clsList {
		if cs.queued == 0 || !t.belowShare(cs) {
			continue
		}
		if r := t.usage(cs) / cs.cfg.ReservedShare; owed == nil || r < owedRatio {
			owed, owedRatio = cs, r
		}
	}
	if owed != nil {
		if f := t.lowest(owed); f != nil {
			return f
		}
	}
	return t.lowest(nil)
}

// lowest is the backlogged flow (of class only, when not nil) with the
// lowest counter whose oldest request its class may take.
func (t *target) lowest(only *classState) *flow {
	var best *flow
	for _, f := range t.backlog {
		if only != nil && f.cls != only {
			continue
		}
		if !t.underCeiling(f.cls, f.queue[0].tokens) {
			continue
		}
		if best == nil || before(f, best) {
			best = f
		}
	}
	return best
}

// lowestStartable is the backlogged flow with the lowest counter whose
// oldest request may start now, or nil.
func (t *target) lowestStartable() *flow {
	var best *flow
	for _, f := range t.backlog {
		if (best == nil || before(f, best)) && t.fits(f, f.queue[0].tokens) {
			best = f
		}
	}
	return best
}

// before reports whether backlogged flow f comes before g in the fair
// order: the lower counter; on a tie the flow with fewer requests running
// (a flow that has just become backlogged is lifted to the lowest counter,
// and should not lose the tie to the flow it was lifted to), then the
// oldest request.
func before(f, g *flow) bool {
	if f.counter != g.counter {
		return f.counter < g.counter
	}
	if f.running != g.running {
		return f.running < g.running
	}
	return f.queue[0].seq < g.queue[0].seq
}

// underCeiling reports whether cls may add a request of tokens under its MaxShare.
func (t *target) underCeiling(cls *classState, tokens int64) bool {
	if !t.limited || cls.cfg.MaxShare >= 1 {
		return true
	}
	slots, ceil := t.ceiling(cls)
	if t.capy.MaxConcurrent > 0 && cls.inFlight >= slots {
		return false
	}
	return t.capy.MaxTokensInFlight == 0 || cls.tokens+tokens <= ceil
}

// dispatch starts waiting requests in fair order while the next one fits.
func (t *target) dispatch(now time.Time) {
	for t.queued > 0 {
		f := t.pick()
		if f == nil {
			return
		}
		if !t.fits(f, f.queue[0].tokens) {
			// Strict order, except around the burst headroom: when the
			// chosen request is held back only by its class's headroom,
			// the flows that may use the headroom start in fair order.
			if !t.fitsCapacity(f.queue[0].tokens, f.cls) {
				return
			}
			if f = t.lowestStartable(); f == nil {
				return
			}
		}
		w := f.queue[0]
		t.unqueue(w)
		w.state = waitGranted
		if w.timer != nil {
			w.timer.Stop()
		}
		r := t.start(f, w.in, w.bound, w.tokens, now)
		w.ready <- result{grant: Grant{r: r, gen: r.gen, waited: now.Sub(w.enqueued)}}
	}
}

func (t *target) enqueue(w *waiter) {
	f := w.flow
	defer t.activity(f, f.active())
	if len(f.queue) == 0 {
		f.bidx = len(t.backlog)
		t.backlog = append(t.backlog, f)
	}
	f.queue = append(f.queue, w)
	f.qWork += w.work
	f.qTokens += w.tokens
	f.cls.queued++
	f.cls.qWork += w.work
	t.queued++
}

func (t *target) unqueue(w *waiter) {
	f := w.flow
	defer t.activity(f, f.active())
	for i, q := range f.queue {
		if q == w {
			copy(f.queue[i:], f.queue[i+1:])
			f.queue[len(f.queue)-1] = nil
			f.queue = f.queue[:len(f.queue)-1]
			break
		}
	}
	f.qWork -= w.work
	f.qTokens -= w.tokens
	f.cls.queued--
	f.cls.qWork -= w.work
	t.queued--
	if len(f.queue) == 0 {
		f.qWork, f.qTokens = 0, 0 // no float residue on an empty queue
		last := t.backlog[len(t.backlog)-1]
		t.backlog[f.bidx] = last
		last.bidx = f.bidx
		t.backlog = t.backlog[:len(t.backlog)-1]
		f.bidx = -1
	}
}
