// Package groupcommit batches the records that concurrent callers append to
// a file, so that one write(2) carries all the records that arrived while the
// previous write was under way, and each caller still returns only after its
// own record was written.
//
// Scheme (leader and followers, no goroutine of its own): an Append encodes
// its record at the end of the open batch. If no write is under way it takes
// the open batch and writes it at once (a lone Append writes itself with no
// added wait); otherwise it waits. When a write ends, its batch's callers are
// woken with the result and one caller of the batch that filled meanwhile
// takes the lead and writes that batch.
package groupcommit

import "sync"

// maxKeptBuffer is the largest batch buffer kept for reuse; a larger one
// (a burst of large records) is left to the garbage collector.
const maxKeptBuffer = 1 << 20

// Flush writes one batch: buf holds its records back to back, ends[i] is the
// offset in buf just after record i. It returns how many records, from the
// first, were written (and synced, per the sink's mode); err is the error of
// every record from the n-th on (nil when n == len(ends)). buf and ends are
// valid only during the call.
type Flush func(buf []byte, ends []int) (n int, err error)

// Group serialises the flushes of a sink and batches its appends.
//
// Concurrency: Append is safe for concurrent use; at most one Flush runs at a
// time, batches are flushed in the order they were opened, and records within
// a batch keep the order in which their Appends encoded them.
type Group struct {
	flush Flush

	mu      sync.Mutex
	open    *batch // collecting records; nil when none is
	writing bool   // a leader is in Flush
	free    []*batch
}

type batch struct {
	buf  []byte
	ends []int
	// wake is signalled for a leader to be found, broadcast when done.
	wake    sync.Cond
	done    bool
	n       int
	err     error
	waiters int // Appends of this batch that have not read the result yet
}

// New returns a group that writes its batches with flush.
func New(flush Flush) *Group {
	return &Group{flush: flush}
}

// Append adds a record to the open batch and returns once its batch was
// flushed: nil if the record was written, else Flush's error. encode appends
// the record to dst and returns the extended slice; if it returns an error,
// the record is not added and Append returns that error at once. encode runs
// under the group's lock: it must not call the group or block.
func (g *Group) Append(encode func(dst []byte) ([]byte, error)) error {
	g.mu.Lock()
	b := g.open
	if b == nil {
		b = g.newBatchLocked()
		g.open = b
	}
	start := len(b.buf)
	buf, err := encode(b.buf)
	if err != nil {
		b.buf = buf[:start]
		g.mu.Unlock()
		return err
	}
	b.buf = buf
	b.ends = append(b.ends, len(buf))
	i := len(b.ends) - 1
	b.waiters++
	for !b.done {
		if g.writing {
			b.wake.Wait()
			continue
		}
		// No write is under way, so b is the open batch: lead.
		g.writing = true
		g.open = nil
		g.mu.Unlock()
		n, ferr := g.flush(b.buf, b.ends)
		g.mu.Lock()
		b.n, b.err, b.done = n, ferr, true
		g.writing = false
		b.wake.Broadcast()
		if g.open != nil {
			g.open.wake.Signal()
		}
	}
	if i < b.n {
		err = nil
	} else {
		err = b.err
	}
	b.waiters--
	if b.waiters == 0 {
		g.recycleLocked(b)
	}
	g.mu.Unlock()
	return err
}

// Queued returns the number of records in the open batch, waiting for the
// write under way to end.
func (g *Group) Queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil {
		return 0
	}
	return len(g.open.ends)
}

func (g *Group) newBatchLocked() *batch {
	if n := len(g.free); n > 0 {
		b := g.free[n-1]
		g.free = g.free[:n-1]
		return b
	}
	b := &batch{}
	b.wake.L = &g.mu
	return b
}

// recycleLocked puts b, which no Append refers to any more, on the free list.
func (g *Group) recycleLocked(b *batch) {
	if cap(b.buf) > maxKeptBuffer {
		b.buf = nil
	}
	b.buf, b.ends = b.buf[:0], b.ends[:0]
	b.done, b.n, b.err, b.waiters = false, 0, nil, 0
	g.free = append(g.free, b)
}
