package redisstore

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// coalescer sends script calls made concurrently by many goroutines in
// shared round trips: at most slots round trips are in flight; a call that
// finds them all busy queues, and when a round trip ends the queue goes out
// as one pipeline. Each call is still exactly one EVALSHA (plus one EVAL
// after NOSCRIPT) and its caller still waits for its own reply, so the
// semantics are those of one command per call; only the writes and reads on
// the socket are shared, which is what costs most, in Redis and here, for
// small scripts. With one caller at a time nothing is ever queued and a call
// is a plain EVALSHA.
//
// There is no background goroutine: the caller whose round trip ends hands
// the queue to the first queued caller, which sends it (leader handoff).
type coalescer struct {
	client redis.UniversalClient
	// slots bounds the round trips in flight (>= 1); maxBatch the calls per
	// pipeline.
	slots    int
	maxBatch int

	mu       sync.Mutex
	inflight int           // round trips in flight, <= slots
	queue    []*scriptCall // waiting calls; non-empty only while inflight == slots
}

// scriptCall is one script invocation. The caller owns it until do returns.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd // the reply, set by the round trip that carried the call

	// Storage reused across calls (the pool): keys, args and the packed
	// numeric argument (see packReserve).
	keyBuf []string
	argArr [3]any
	num    []byte

	// ready receives one signal per queued call: either the call's round trip
	// is done, or lead is set and the call must send that batch (itself
	// first).
	ready  chan struct{}
	lead   []*scriptCall
	queued bool // in c.queue (guarded by c.mu)
}

var callPool = sync.Pool{New: func() any { return &scriptCall{ready: make(chan struct{}, 1)} }}

func getCall(script *redis.Script) *scriptCall {
	sc := callPool.Get().(*scriptCall)
	sc.script = script
	return sc
}

// putCall returns sc to the pool once its reply has been read.
func putCall(sc *scriptCall) {
	clear(sc.keyBuf)
	clear(sc.argArr[:])
	sc.script, sc.keys, sc.args, sc.cmd, sc.lead = nil, nil, nil, nil, nil
	callPool.Put(sc)
}

func newCoalescer(client redis.UniversalClient, slots, maxBatch int) *coalescer {
	return &coalescer{client: client, slots: max(slots, 1), maxBatch: max(maxBatch, 1)}
}

// do runs sc and leaves its reply in sc.cmd. A call canceled (ctx) while
// still queued is withdrawn and never sent; once sent, do waits for the
// reply, which the read timeout bounds.
func (c *coalescer) do(ctx context.Context, sc *scriptCall) {
	c.mu.Lock()
	if c.inflight < c.slots {
		c.inflight++
		c.mu.Unlock()
		sc.cmd = run(ctx, c.client, sc)
		c.release()
		return
	}
	sc.queued = true
	c.queue = append(c.queue, sc)
	c.mu.Unlock()
	select {
	case <-sc.ready:
	case <-ctx.Done():
		c.mu.Lock()
		if sc.queued {
			c.withdraw(sc)
			c.mu.Unlock()
			sc.cmd = redis.NewCmd(ctx)
			sc.cmd.SetErr(ctx.Err())
			return
		}
		c.mu.Unlock()
		<-sc.ready
	}
	if batch := sc.lead; batch != nil {
		sc.lead = nil
		// The batch was queued by many callers: a cancellation of this one
		// must not fail the others' commands.
		runBatch(context.WithoutCancel(ctx), c.client, batch)
		c.release()
		for _, m := range batch[1:] {
			m.ready <- struct{}{}
		}
	}
}

// withdraw removes a queued call (c.mu held).
func (c *coalescer) withdraw(sc *scriptCall) {
	for i, q := range c.queue {
		if q == sc {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			break
		}
	}
	sc.queued = false
}

// release ends a round trip: the slot passes to the queued calls, if any, as
// one batch led by the first of them; else it is freed.
func (c *coalescer) release() {
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.inflight--
		c.mu.Unlock()
		return
	}
	n := min(len(c.queue), c.maxBatch)
	batch := make([]*scriptCall, n)
	copy(batch, c.queue)
	for _, m := range batch {
		m.queued = false
	}
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:])
	c.queue = c.queue[:rest]
	c.mu.Unlock()
	batch[0].lead = batch
	batch[0].ready <- struct{}{}
}

// run sends one call: EVALSHA, and EVAL when the server does not know the
// script (after a restart or SCRIPT FLUSH), which loads it again.
func run(ctx context.Context, client redis.UniversalClient, sc *scriptCall) *redis.Cmd {
	cmd := sc.script.EvalSha(ctx, client, sc.keys, sc.args...)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = sc.script.Eval(ctx, client, sc.keys, sc.args...)
	}
	return cmd
}

// runBatch sends several calls in one pipeline, then the EVALs of those
// that met NOSCRIPT in a second one. Every call gets its own reply or error.
func runBatch(ctx context.Context, client redis.UniversalClient, batch []*scriptCall) {
	if len(batch) == 1 {
		batch[0].cmd = run(ctx, client, batch[0])
		return
	}
	pipe := client.Pipeline()
	for _, m := range batch {
		m.cmd = m.script.EvalSha(ctx, pipe, m.keys, m.args...)
	}
	_, _ = pipe.Exec(ctx)
	var again redis.Pipeliner
	for _, m := range batch {
		if redis.HasErrorPrefix(m.cmd.Err(), "NOSCRIPT") {
			if again == nil {
				again = client.Pipeline()
			}
			m.cmd = m.script.Eval(ctx, again, m.keys, m.args...)
		}
	}
	if again != nil {
		_, _ = again.Exec(ctx)
	}
}
