package mockllm

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"sluice/internal/clock"
)

// Capacity makes the mock a saturable model: a bounded number of sequences
// and KV tokens, a prefill stage and a decode speed, so that queueing and
// time to first token react to load as a real engine's do.
//
// The model: a request needs one sequence per choice and KV tokens for its
// prompt plus all of its output (reserved up front, so nothing is ever
// preempted). Requests that do not fit wait in one FIFO queue; the oldest
// is admitted first and nothing overtakes it. An admitted request's prompt
// goes through the one prefill stage (FIFO, PrefillTPS tokens per second,
// shared by all requests); its first token follows the end of its prefill,
// and every further token of each choice comes 1/DecodeTPS seconds after the
// previous one (decode speed per sequence does not depend on the batch). The
// sequences and KV tokens are freed when the response is written in full or
// the client goes away.
type Capacity struct {
	// Sequences is the number of choices that may be generated at once (> 0).
	Sequences int
	// KVTokens bounds prompt plus output tokens of admitted requests (0: no bound).
	KVTokens int64
	// PrefillTPS is the prompt tokens per second of the prefill stage (0: instant).
	PrefillTPS float64
	// DecodeTPS is the output tokens per second of each sequence (0: instant).
	DecodeTPS float64
}

// DefaultCapacity is the capacity of `--capacity default`: a small engine
// (16 sequences, 64Ki KV tokens, prefill 8,000 tokens/s, decode 50 tokens/s).
var DefaultCapacity = Capacity{Sequences: 16, KVTokens: 65536, PrefillTPS: 8000, DecodeTPS: 50}

// ParseCapacity reads a capacity spec: "default", or comma-separated
// key=value pairs among sequences, kv, prefill and decode; a key not given
// keeps its DefaultCapacity value ("sequences=4,decode=20").
func ParseCapacity(spec string) (Capacity, error) {
	c := DefaultCapacity
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "default" {
		return c, nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Capacity{}, fmt.Errorf("capacity %q: %q is not key=value (keys: sequences, kv, prefill, decode)", spec, part)
		}
		if seen[k] {
			return Capacity{}, fmt.Errorf("capacity %q: %s given twice", spec, k)
		}
		seen[k] = true
		switch k {
		case "sequences":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return Capacity{}, fmt.Errorf("capacity %q: sequences must be a positive integer", spec)
			}
			c.Sequences = n
		case "kv":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return Capacity{}, fmt.Errorf("capacity %q: kv must be a non-negative integer (0: no bound)", spec)
			}
			c.KVTokens = n
		case "prefill", "decode":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
				return Capacity{}, fmt.Errorf("capacity %q: %s must be a non-negative number of tokens per second (0: instant)", spec, k)
			}
			if k == "prefill" {
				c.PrefillTPS = f
			} else {
				c.DecodeTPS = f
			}
		default:
			return Capacity{}, fmt.Errorf("capacity %q: unknown key %q (keys: sequences, kv, prefill, decode)", spec, k)
		}
	}
	return c, nil
}

func (c Capacity) String() string {
	return fmt.Sprintf("sequences=%d,kv=%d,prefill=%g,decode=%g", c.Sequences, c.KVTokens, c.PrefillTPS, c.DecodeTPS)
}

// engine is the saturable model's state. mu guards every field below it.
type engine struct {
	capy Capacity
	clk  clock.Clock

	mu          sync.Mutex
	seqs        int   // sequences in use
	kv          int64 // KV tokens in use
	waiting     []*slotWait
	prefillFree time.Time // when the prefill stage is next idle
	admitted    uint64
	maxWaiting  int
	waitTotal   time.Duration
}

type slotWait struct {
	seqs    int
	kv      int64
	ready   chan struct{} // closed when admitted
	granted bool
}

func newEngine(c Capacity, clk clock.Clock) *engine { return &engine{capy: c, clk: clk} }

// fitsEver reports whether a request needing seqs sequences and kv tokens
// can ever be admitted.
func (e *engine) fitsEver(seqs int, kv int64) bool {
	return seqs <= e.capy.Sequences && (e.capy.KVTokens == 0 || kv <= e.capy.KVTokens)
}

func (e *engine) fitsNow(seqs int, kv int64) bool {
	return e.seqs+seqs <= e.capy.Sequences && (e.capy.KVTokens == 0 || e.kv+kv <= e.capy.KVTokens)
}

// acquire waits, in FIFO order, until the request fits, and takes its
// sequences and KV tokens; release gives them back. It fails only when ctx
// is done first (the request then left the queue).
func (e *engine) acquire(ctx context.Context, seqs int, kv int64) (release func(), err error) {
	e.mu.Lock()
	start := e.clk.Now()
	if len(e.waiting) == 0 && e.fitsNow(seqs, kv) {
		e.take(seqs, kv)
		e.mu.Unlock()
		return e.releaser(seqs, kv), nil
	}
	w := &slotWait{seqs: seqs, kv: kv, ready: make(chan struct{})}
	e.waiting = append(e.waiting, w)
	e.maxWaiting = max(e.maxWaiting, len(e.waiting))
	e.mu.Unlock()
	select {
	case <-w.ready:
		e.mu.Lock()
		e.waitTotal += e.clk.Now().Sub(start)
		e.mu.Unlock()
		return e.releaser(seqs, kv), nil
	case <-ctx.Done():
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if w.granted {
		e.give(seqs, kv)
		return nil, ctx.Err()
	}
	for i, q := range e.waiting {
		if q == w {
			e.waiting = append(e.waiting[:i], e.waiting[i+1:]...)
			break
		}
	}
	e.admitLocked() // w may have been the head that did not fit
	return nil, ctx.Err()
}

func (e *engine) take(seqs int, kv int64) {
	e.seqs += seqs
	e.kv += kv
	e.admitted++
}

func (e *engine) releaser(seqs int, kv int64) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			e.give(seqs, kv)
			e.mu.Unlock()
		})
	}
}

// give returns capacity and admits waiting requests in order.
func (e *engine) give(seqs int, kv int64) {
	e.seqs -= seqs
	e.kv -= kv
	e.admitLocked()
}

func (e *engine) admitLocked() {
	for len(e.waiting) > 0 && e.fitsNow(e.waiting[0].seqs, e.waiting[0].kv) {
		w := e.waiting[0]
		e.waiting = e.waiting[1:]
		e.take(w.seqs, w.kv)
		w.granted = true
		close(w.ready)
	}
}

// prefill books the prefill stage for tokens and waits until they are
// processed; it returns the time the first token is ready. The stage's time
// stays booked if ctx ends first (an engine finishes the batch it started).
func (e *engine) prefill(ctx context.Context, tokens int64) (time.Time, error) {
	e.mu.Lock()
	now := e.clk.Now()
	start := now
	if e.prefillFree.After(start) {
		start = e.prefillFree
	}
	end := start
	if e.capy.PrefillTPS > 0 && tokens > 0 {
		end = start.Add(secs(float64(tokens) / e.capy.PrefillTPS))
	}
	e.prefillFree = end
	e.mu.Unlock()
	return end, clock.Sleep(ctx, e.clk, end.Sub(now))
}

// tokenAt is when token k (0-based, per choice) is ready, given the first's time.
func (e *engine) tokenAt(first time.Time, k int64) time.Time {
	if e.capy.DecodeTPS <= 0 || k <= 0 {
		return first
	}
	return first.Add(secs(float64(k) / e.capy.DecodeTPS))
}

// waitUntil sleeps on the engine's clock until at.
func (e *engine) waitUntil(ctx context.Context, at time.Time) error {
	return clock.Sleep(ctx, e.clk, at.Sub(e.clk.Now()))
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// EngineStats is the saturable model's state in GET /mock/usage.
type EngineStats struct {
	Capacity         string  `json:"capacity"`
	Sequences        int     `json:"sequences"`
	KVTokens         int64   `json:"kv_tokens"`
	RunningSequences int     `json:"running_sequences"`
	KVInUse          int64   `json:"kv_in_use"`
	Waiting          int     `json:"waiting"`
	MaxWaiting       int     `json:"max_waiting"`
	Admitted         uint64  `json:"admitted"`
	QueueWaitSeconds float64 `json:"queue_wait_seconds_total"`
}

func (e *engine) stats() EngineStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return EngineStats{Capacity: e.capy.String(), Sequences: e.capy.Sequences, KVTokens: e.capy.KVTokens,
		RunningSequences: e.seqs, KVInUse: e.kv, Waiting: len(e.waiting), MaxWaiting: e.maxWaiting,
		Admitted: e.admitted, QueueWaitSeconds: e.waitTotal.Seconds()}
}
