package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// coalescer sends store calls made concurrently by many goroutines in shared
// round trips and shared script invocations: at most slots round trips are
// in flight; a call that finds them all busy queues, and when a round trip
// ends the queue goes out together. The queued calls are merged into one
// luaBatch invocation (on Redis Cluster, one per hash slot, since a script's
// keys must share a slot; and one per clock spec, which only tests vary),
// which Redis runs once: one EVALSHA, one MGET, at most one TIME, for all of
// them. Each call is still one operation of its own, run in order and
// atomically (the whole script is), with its own reply or error; merging
// concurrent calls only fixes an order among them, which they did not have.
// With one caller at a time nothing is ever queued and a call is one
// EVALSHA carrying one operation.
//
// There is no background goroutine: the caller whose round trip ends hands
// the queue to the first queued caller, which sends it (leader handoff).
type coalescer struct {
	client redis.UniversalClient
	script *redis.Script // luaBatch
	// slots bounds the round trips in flight (>= 1); maxBatch the calls per
	// round trip.
	slots    int
	maxBatch int

	mu       sync.Mutex
	inflight int           // round trips in flight, <= slots
	queue    []*scriptCall // waiting calls; non-empty only while a round trip is in flight
	// unsent counts the background calls (see post) whose round trip has
	// not ended; while it is not 0 every call queues, so that none
	// overtakes a background call made before it.
	unsent int
	idle   *sync.Cond // on mu: signalled when unsent drops to 0
	closed bool       // close was called: no more background calls
}

// maxQueued bounds the queue that background calls may join; beyond it
// they wait like any call (back-pressure while Redis is slow).
const maxQueued = 4 * maxBatch

// scriptCall is one store operation. The caller owns it until do returns.
type scriptCall struct {
	keys  []string
	num   []byte // the operation's header and packed numbers (see luaBatch)
	clock string // clock spec (see now_us)
	slot  int    // the keys' cluster hash slot (0 on a single node)

	// The operation's reply (a reserve/peek array or an adjust count) or its
	// error, set by the round trip that carried it.
	reply any
	err   error

	// Storage reused across calls (the pool): the keys, the arguments, and
	// the merged keys and numbers when this call carries a merged batch.
	keyBuf []string
	argArr [2]any
	mkeys  []string
	mnum   []byte

	// ready receives one signal per queued call: either the call's round trip
	// is done, or lead is set and the call must send that batch (itself
	// first).
	ready  chan struct{}
	lead   []*scriptCall
	queued bool // in c.queue (guarded by c.mu)

	// done, for a background call (see post), runs after its round trip in
	// place of waking a caller; it owns the call from then on. start is
	// when the call was made.
	done  func(*scriptCall)
	start time.Time
}

var callPool = sync.Pool{New: func() any { return &scriptCall{ready: make(chan struct{}, 1)} }}

func getCall() *scriptCall { return callPool.Get().(*scriptCall) }

// putCall returns sc to the pool once its reply has been read.
func putCall(sc *scriptCall) {
	clear(sc.keyBuf)
	clear(sc.argArr[:])
	clear(sc.mkeys)
	sc.keys, sc.reply, sc.err, sc.lead, sc.done = nil, nil, nil, nil, nil
	callPool.Put(sc)
}

func newCoalescer(client redis.UniversalClient, script *redis.Script, slots, maxBatch int) *coalescer {
	c := &coalescer{client: client, script: script, slots: max(slots, 1), maxBatch: max(maxBatch, 1)}
	c.idle = sync.NewCond(&c.mu)
	return c
}

// do runs sc and leaves its reply in sc.reply, or its error in sc.err. A call canceled (ctx) while
// still queued is withdrawn and never sent; once sent, do waits for the
// reply, which the read timeout bounds.
func (c *coalescer) do(ctx context.Context, sc *scriptCall) {
	c.mu.Lock()
	if c.inflight < c.slots && c.unsent == 0 {
		c.inflight++
		c.mu.Unlock()
		c.send(ctx, []*scriptCall{sc})
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
			sc.err = ctx.Err()
			return
		}
		c.mu.Unlock()
		<-sc.ready
	}
	if batch := sc.lead; batch != nil {
		sc.lead = nil
		// The batch was queued by many callers: a cancellation of this one
		// must not fail the others' commands.
		c.lead(context.WithoutCancel(ctx), batch, sc)
	}
}

// post queues sc as a background call: its caller does not wait, and done
// runs after its round trip (on another goroutine). It does so only when
// every round trip is busy (so sc would have queued anyway) and the queue
// is short; otherwise it returns false and the caller must use do. Calls
// made after post returns are sent after sc or in the same invocation, never
// before it (see unsent). Sent, not run: a later invocation goes out on
// another connection and may reach Redis first if sc's write is delayed
// (store.Store.Adjust allows a read to miss a settlement briefly).
func (c *coalescer) post(sc *scriptCall, done func(*scriptCall)) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.inflight < c.slots || len(c.queue) >= maxQueued {
		return false
	}
	sc.done = done
	sc.queued = true
	c.queue = append(c.queue, sc)
	c.unsent++
	return true
}

// close waits until every background call's round trip has ended and
// refuses new ones.
func (c *coalescer) close() {
	c.mu.Lock()
	c.closed = true
	for c.unsent > 0 {
		c.idle.Wait()
	}
	c.mu.Unlock()
}

// lead sends a batch handed over by release (leader: the caller sending it,
// nil for a goroutine of its own), ends the round trip, and then completes
// the other calls: wakes their callers, or runs their done.
func (c *coalescer) lead(ctx context.Context, batch []*scriptCall, leader *scriptCall) {
	c.send(ctx, batch)
	background := 0
	for _, m := range batch {
		if m.done != nil {
			background++
		}
	}
	if background > 0 {
		c.mu.Lock()
		c.unsent -= background
		if c.unsent == 0 {
			c.idle.Broadcast()
		}
		c.mu.Unlock()
	}
	c.release()
	for _, m := range batch {
		switch {
		case m == leader:
		case m.done != nil:
			m.done(m)
		default:
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
// one batch led by the first of them that has a caller waiting (or by a
// goroutine of its own when all are background calls); else it is freed.
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
	for _, m := range batch {
		if m.done == nil {
			m.lead = batch
			m.ready <- struct{}{}
			return
		}
	}
	go c.lead(context.Background(), batch, nil)
}

// send runs calls in one round trip: one luaBatch invocation per group of
// calls that may share one (see group), pipelined when there are several.
// Scripts go out as EVALSHA; those that meet NOSCRIPT (after a restart or
// SCRIPT FLUSH) are sent again as EVAL, which loads the script, in a second
// round trip. Every call gets its own reply or error.
func (c *coalescer) send(ctx context.Context, calls []*scriptCall) {
	groups := group(calls)
	cmds := make([]*redis.Cmd, len(groups))
	if len(groups) == 1 {
		keys, args := invocation(groups[0])
		cmds[0] = c.script.EvalSha(ctx, c.client, keys, args...)
		if redis.HasErrorPrefix(cmds[0].Err(), "NOSCRIPT") {
			cmds[0] = c.script.Eval(ctx, c.client, keys, args...)
		}
	} else {
		pipe := c.client.Pipeline()
		for i, g := range groups {
			keys, args := invocation(g)
			cmds[i] = c.script.EvalSha(ctx, pipe, keys, args...)
		}
		_, _ = pipe.Exec(ctx)
		var again redis.Pipeliner
		for i, g := range groups {
			if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
				if again == nil {
					again = c.client.Pipeline()
				}
				keys, args := invocation(g)
				cmds[i] = c.script.Eval(ctx, again, keys, args...)
			}
		}
		if again != nil {
			_, _ = again.Exec(ctx)
		}
	}
	for i, g := range groups {
		distribute(g, cmds[i])
	}
}

// group splits calls into the sets that one invocation may carry: same
// cluster slot and same clock spec, in their queue order. On a single node
// in production that is always one set.
func group(calls []*scriptCall) [][]*scriptCall {
	first := calls[0]
	same := true
	for _, m := range calls[1:] {
		if m.slot != first.slot || m.clock != first.clock {
			same = false
			break
		}
	}
	if same {
		return [][]*scriptCall{calls}
	}
	var groups [][]*scriptCall
next:
	for _, m := range calls {
		for i, g := range groups {
			if g[0].slot == m.slot && g[0].clock == m.clock {
				groups[i] = append(g, m)
				continue next
			}
		}
		groups = append(groups, []*scriptCall{m})
	}
	return groups
}

// invocation returns the keys and arguments of one luaBatch invocation
// carrying calls (one group), built in the first call's buffers.
func invocation(calls []*scriptCall) (keys []string, args []any) {
	lead := calls[0]
	if len(calls) == 1 {
		keys, lead.argArr[1] = lead.keys, lead.num
	} else {
		lead.mkeys, lead.mnum = lead.mkeys[:0], lead.mnum[:0]
		for _, m := range calls {
			lead.mkeys = append(lead.mkeys, m.keys...)
			lead.mnum = append(lead.mnum, m.num...)
		}
		keys, lead.argArr[1] = lead.mkeys, lead.mnum
	}
	lead.argArr[0] = lead.clock
	return keys, lead.argArr[:]
}

// distribute hands each call of one invocation its reply: the invocation's
// error to all, or its own element of the reply (an array holds the message
// of an operation that failed on its own).
func distribute(calls []*scriptCall, cmd *redis.Cmd) {
	err := cmd.Err()
	var vals []any
	if err == nil {
		var ok bool
		if vals, ok = cmd.Val().([]any); !ok || len(vals) != len(calls) {
			err = fmt.Errorf("%w: batch reply for %d operations: %T", errMalformedReply, len(calls), cmd.Val())
		}
	}
	for i, m := range calls {
		if err != nil {
			m.err = err
			continue
		}
		if failed, ok := vals[i].([]any); ok {
			m.err = scriptError(fmt.Sprint(failed...))
			continue
		}
		m.reply = vals[i]
	}
}

// scriptError is the message of one operation of a batch that failed inside
// the script (the operations before and after it are unaffected).
type scriptError string

func (e scriptError) Error() string { return string(e) }
