package admission

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
	"time"

	"sluice/internal/clock"
)

// The simulation drives the real scheduler on a manual clock with the load
// of `sluice bench fairness` (cmd/sluice/internal/fairbench) and an engine
// whose sequences hold a request for its prefill plus its output at the
// decode speed. One goroutine (the driver) makes every call in event order,
// so a run is deterministic for its seed.

// The tenants' roles, in order: tenant 0 is hot, 1 priority, 2 the victim,
// 3 to 12 heavy, the rest light.
var simRoles = []string{"hot", "priority", "victim", "heavy", "light"}

// simLoad is the bench's load for an engine of seqs sequences at decode
// tokens/s each.
type simLoad struct {
	tenants          int
	seqs             int
	kv               int64
	decode, prefill  float64
	unloaded, burst  time.Duration // the unloaded phase, then the burst
	seed             uint64
	progressEvery    int64
	standardHeadroom float64
	varyHeavy        bool // the hot and heavy tenants' outputs vary (0.5 to 1.5 times theirs) instead of being fixed
}

func (l simLoad) config() Config {
	cfg := Config{
		Targets: map[string]Capacity{up: {MaxConcurrent: l.seqs, MaxTokensInFlight: l.kv}},
		Classes: map[string]Class{
			DefaultClass: {DefaultDeadline: 60 * time.Second, MaxDeadline: 120 * time.Second, BurstHeadroom: l.standardHeadroom},
			"priority":   {ReservedShare: 0.1, MaxShare: 0.3, DefaultDeadline: 2 * time.Second, MaxDeadline: 5 * time.Second},
		},
		AppClasses: map[string]string{simTenant(1): "priority"},
	}
	return cfg
}

func simTenant(i int) string { return fmt.Sprintf("t%03d", i) }

type simReq struct {
	app     string
	role    string
	at      time.Duration
	in, out int64
	hangAt  int64 // > 0: the client leaves after this many tokens
}

func (l simLoad) plan() []*simReq {
	capTok := float64(l.seqs) * l.decode
	end := l.unloaded + l.burst
	var reqs []*simReq
	lights := l.tenants - 13
	for i := 0; i < l.tenants; i++ {
		rng := rand.New(rand.NewPCG(l.seed, uint64(i)))
		poisson := func(role string, from, to time.Duration, rate float64, mk func() *simReq) {
			at := from
			for {
				at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
				if at >= to {
					return
				}
				q := mk()
				q.app, q.role, q.at = simTenant(i), role, at
				reqs = append(reqs, q)
			}
		}
		switch {
		case i == 0:
			poisson("hot", l.unloaded, end, 0.6*capTok/256, func() *simReq {
				if l.varyHeavy {
					return &simReq{in: 1000, out: 128 + int64(rng.IntN(257))}
				}
				return &simReq{in: 1000, out: 256}
			})
		case i == 1:
			poisson("priority", 0, end, 0.5, func() *simReq { return &simReq{in: 200, out: 32} })
		case i == 2:
			poisson("victim", 0, end, 1, func() *simReq { return &simReq{in: 300, out: 32} })
		case i < 13:
			j := i - 3
			out := []int64{128, 256}[j%2]
			in := []int64{200, 800, 1600}[j%3]
			poisson("heavy", l.unloaded, end, (0.08+0.01*float64(j))*capTok/float64(out), func() *simReq {
				if l.varyHeavy {
					return &simReq{in: in, out: out/2 + int64(rng.IntN(int(out)+1))}
				}
				return &simReq{in: in, out: out}
			})
		default:
			poisson("light", 0, end, 0.3*capTok/72/float64(lights), func() *simReq {
				q := &simReq{in: 100 + int64(rng.IntN(1400)), out: 16 + int64(rng.IntN(113))}
				if rng.Float64() < 0.7 && rng.Float64() < 0.05 {
					q.hangAt = 2 + int64(rng.IntN(7))
				}
				return q
			})
		}
	}
	sort.SliceStable(reqs, func(a, b int) bool { return reqs[a].at < reqs[b].at })
	return reqs
}

type simEvent struct {
	at   time.Duration
	seq  int
	kind int // 0 arrival, 1 progress, 2 done
	req  *simReq
	run  *simRun
	out  int64
}

type simRun struct {
	req   *simReq
	g     Grant
	start time.Duration
}

type simHeap []*simEvent

func (h simHeap) Len() int { return len(h) }
func (h simHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h simHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *simHeap) Push(x any)   { *h = append(*h, x.(*simEvent)) }
func (h *simHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// simObserver signals each queued event to the driver.
type simObserver struct{ queued chan struct{} }

func (o simObserver) Observe(ev Event) {
	if ev.Kind == EventQueued {
		o.queued <- struct{}{}
	}
}

type simPending struct {
	req *simReq
	g   Grant
	err error
}

// simResult is what a run measured.
type simResult struct {
	waits     map[string][]time.Duration // per role, requests sent during the burst that started (0: at once)
	refused   map[string]int
	whyLower  int // releases, while a newcomer waited, that went to a backlogged flow (lower counter or tie)
	whyOther  int // ... to another newcomer
	whyNone   int // ... to nobody (the chosen request did not fit)
	busyNs    float64
	burstNs   float64
	idleQueue float64 // slot-seconds free while requests waited, during the burst
	releases  []simRelease
	victims   []simVictim
}

type simRelease struct {
	at time.Duration
	to string // the role of what started, or "none"
	nq int    // newcomers waiting
}

type simVictim struct{ at, wait time.Duration }

func runSim(t *testing.T, l simLoad) simResult {
	obs := simObserver{queued: make(chan struct{}, 1)}
	clk := clock.NewManual(epoch)
	s, err := New(l.config(), Options{Clock: clk, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	tg := (*s.targets.Load())[up]
	fin := make(chan *simPending, 1<<16)
	res := simResult{waits: map[string][]time.Duration{}, refused: map[string]int{}}
	var events simHeap
	seq := 0
	push := func(e *simEvent) { seq++; e.seq = seq; heap.Push(&events, e) }
	for _, q := range l.plan() {
		push(&simEvent{at: q.at, kind: 0, req: q})
	}
	newcomer := func(r string) bool { return r == "victim" || r == "light" }
	roleOf := map[*flow]string{}
	inBurst := func(at time.Duration) bool { return at >= l.unloaded && at < l.unloaded+l.burst }
	startRun := func(p *simPending, now time.Duration) {
		q := p.req
		if p.err != nil {
			if inBurst(q.at) {
				res.refused[q.role]++
			}
			return
		}
		if inBurst(q.at) {
			res.waits[q.role] = append(res.waits[q.role], p.g.Waited())
			if q.role == "victim" {
				res.victims = append(res.victims, simVictim{q.at, p.g.Waited()})
			}
		}
		run := &simRun{req: q, g: p.g, start: now}
		prefill := time.Duration(float64(q.in) / l.prefill * float64(time.Second))
		tok := time.Duration(float64(time.Second) / l.decode)
		n := q.out
		if q.hangAt > 0 {
			n = q.hangAt
		}
		for k := l.progressEvery; k < n; k += l.progressEvery {
			push(&simEvent{at: now + prefill + time.Duration(k)*tok, kind: 1, run: run, out: k})
		}
		push(&simEvent{at: now + prefill + time.Duration(n)*tok, kind: 2, run: run, out: n})
	}
	newcomersWaiting := func() int {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		nq := 0
		for _, f := range tg.backlog {
			if newcomer(roleOf[f]) {
				nq++
			}
		}
		return nq
	}
	queued := func() int { tg.mu.Lock(); defer tg.mu.Unlock(); return tg.queued }
	drain := func(n int, now time.Duration) {
		for i := 0; i < n; i++ {
			startRun(<-fin, now)
		}
	}
	var last time.Duration
	for events.Len() > 0 {
		e := heap.Pop(&events).(*simEvent)
		if e.at > l.unloaded+l.burst {
			break
		}
		if inBurst(e.at) {
			tg.mu.Lock()
			dt := float64(e.at - last)
			res.busyNs += dt * float64(tg.inFlight)
			res.burstNs += dt
			if tg.queued > 0 {
				res.idleQueue += dt / 1e9 * float64(l.seqs-tg.inFlight)
			}
			tg.mu.Unlock()
		}
		last = e.at
		before := queued()
		clk.Set(epoch.Add(e.at))
		drain(before-queued(), e.at)
		now := e.at
		switch e.kind {
		case 0:
			q := e.req
			p := &simPending{req: q}
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			go func() {
				p.g, p.err = s.Admit(ctx, Ticket{Target: up, App: q.app, InputTokens: q.in, OutputBound: q.out})
				fin <- p
			}()
			select {
			case got := <-fin:
				startRun(got, now)
			case <-obs.queued:
				if q.role == "victim" && os.Getenv("SLUICE_ADMISSION_SIM") == "trace" {
					tg.mu.Lock()
					f := tg.flows[flowKey{q.app, DefaultClass}]
					line := fmt.Sprintf("victim queued at %v: counter %.0f running %d under share %v; in flight %d;", now, f.counter, f.running, tg.underFairShare(f), tg.inFlight)
					for _, v := range tg.backlog {
						if v != f && v.counter <= f.counter {
							line += fmt.Sprintf(" %s(%s) %.0f running %d under %v;", v.key.app, roleOf[v], v.counter, v.running, tg.underFairShare(v))
						}
					}
					tg.mu.Unlock()
					t.Log(line)
				}
			}
			tg.mu.Lock()
			f := tg.flows[flowKey{q.app, tg.set.class(q.app, "")}]
			roleOf[f] = q.role
			tg.mu.Unlock()
		case 1:
			e.run.g.Progress(e.out)
		case 2:
			waitingNew := newcomersWaiting() > 0
			before := queued()
			e.run.g.Done(e.run.req.in, e.out)
			n := before - queued()
			started := make([]*simPending, 0, n)
			for i := 0; i < n; i++ {
				started = append(started, <-fin)
			}
			if inBurst(now) {
				to := "none"
				for _, p := range started {
					if p.err == nil {
						to = p.req.role
					}
				}
				if waitingNew {
					switch {
					case n == 0:
						res.whyNone++
					case to == "victim" || to == "light":
						res.whyOther++
					default:
						res.whyLower++ // a backlogged flow's request, by counter or by tie
					}
				}
				res.releases = append(res.releases, simRelease{at: now, to: to, nq: newcomersWaiting()})
			}
			for _, p := range started {
				startRun(p, now)
			}
		}
	}
	return res
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// TestSimulateBench is an exploration tool, not a check: with
// SLUICE_ADMISSION_SIM=1 it runs the bench's load through the scheduler and
// logs each role's waits during the burst, whom the releases went to while
// a light request or the victim waited, and the mean in flight.
// SLUICE_ADMISSION_SIM=trace also logs the releases around the victim's
// longest wait and the state each time the victim queues.
// SLUICE_ADMISSION_SIM_HEADROOM sets the standard class's BurstHeadroom,
// SLUICE_ADMISSION_SIM_SEED the seed, and SLUICE_ADMISSION_SIM_VARY=1 varies
// the hot and heavy tenants' outputs (0.5 to 1.5 times theirs).
func TestSimulateBench(t *testing.T) {
	if os.Getenv("SLUICE_ADMISSION_SIM") == "" {
		t.Skip("set SLUICE_ADMISSION_SIM=1 to run the simulation")
	}
	l := simLoad{tenants: 200, seqs: 128, kv: 524288, decode: 50, prefill: 150000,
		unloaded: 10 * time.Second, burst: 75 * time.Second, seed: 1, progressEvery: 16}
	if v := os.Getenv("SLUICE_ADMISSION_SIM_HEADROOM"); v != "" {
		fmt.Sscan(v, &l.standardHeadroom)
	}
	if v := os.Getenv("SLUICE_ADMISSION_SIM_SEED"); v != "" {
		fmt.Sscan(v, &l.seed)
	}
	l.varyHeavy = os.Getenv("SLUICE_ADMISSION_SIM_VARY") != ""
	r := runSim(t, l)
	for _, role := range simRoles {
		ws := r.waits[role]
		waited := 0
		for _, w := range ws {
			if w > 0 {
				waited++
			}
		}
		t.Logf("%-8s n %5d waited %5d refused %5d  p50 %v p90 %v p99 %v max %v", role, len(ws), waited, r.refused[role],
			quantile(ws, 0.5), quantile(ws, 0.9), quantile(ws, 0.99), quantile(ws, 1))
	}
	t.Logf("releases while a newcomer waited: to a backlogged flow %d, to a newcomer %d, to nobody %d",
		r.whyLower, r.whyOther, r.whyNone)
	vs := append([]simVictim(nil), r.victims...)
	sort.Slice(vs, func(i, j int) bool { return vs[i].wait > vs[j].wait })
	for _, v := range vs[:min(6, len(vs))] {
		t.Logf("victim waited %v from %v", v.wait, v.at)
	}
	cats := map[string]int{}
	for _, rel := range r.releases {
		cats[rel.to]++
	}
	t.Logf("release categories: %v", cats)
	if os.Getenv("SLUICE_ADMISSION_SIM") == "trace" {
		worst := r.victims[0]
		for _, v := range r.victims {
			if v.wait > worst.wait {
				worst = v
			}
		}
		t.Logf("worst victim wait %v from %v", worst.wait, worst.at)
		for _, rel := range r.releases {
			if rel.at >= worst.at-200*time.Millisecond && rel.at <= worst.at+worst.wait+50*time.Millisecond {
				t.Logf("  %v %s (newcomers waiting after: %d)", rel.at, rel.to, rel.nq)
			}
		}
	}
	t.Logf("mean in flight during the burst %.1f of %d; slot-seconds idle while requests waited %.1f",
		r.busyNs/r.burstNs, l.seqs, r.idleQueue)
}

// TestSimulatedHeadroom runs a shortened bench load with and without a
// burst headroom: with it, light requests rarely wait while the backlogged
// tenants fill the target, and the target is idle by about the headroom.
func TestSimulatedHeadroom(t *testing.T) {
	l := simLoad{tenants: 200, seqs: 128, kv: 524288, decode: 50, prefill: 150000,
		unloaded: 5 * time.Second, burst: 20 * time.Second, seed: 1, progressEvery: 16}
	waited := func(r simResult) (n, of int) {
		for _, w := range r.waits["light"] {
			if w > 0 {
				n++
			}
		}
		return n, len(r.waits["light"])
	}
	base := runSim(t, l)
	l.standardHeadroom = 0.1
	kept := runSim(t, l)
	bw, bn := waited(base)
	kw, kn := waited(kept)
	busyBase, busyKept := base.busyNs/base.burstNs, kept.busyNs/kept.burstNs
	t.Logf("light requests that waited: %d of %d without headroom, %d of %d with 0.1; mean in flight %.1f and %.1f",
		bw, bn, kw, kn, busyBase, busyKept)
	if bw < bn/2 {
		t.Fatalf("without headroom %d of %d light requests waited; want most (the target is full)", bw, bn)
	}
	if kw*10 > kn {
		t.Fatalf("with headroom 0.1, %d of %d light requests waited; want under a tenth", kw, kn)
	}
	if busyKept > busyBase || busyKept < 0.85*128 {
		t.Fatalf("mean in flight %.1f with headroom, %.1f without; want less, and no less than 0.85 of 128", busyKept, busyBase)
	}
}
