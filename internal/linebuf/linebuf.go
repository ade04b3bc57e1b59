// Package linebuf batches log lines into fewer write(2) calls: the gateway's
// access log (one line per request) would otherwise cost a system call per
// request.
package linebuf

import (
	"io"
	"sync"
	"time"
)

// Defaults of New.
const (
	DefaultSize     = 32 << 10
	DefaultInterval = 200 * time.Millisecond
)

// Writer buffers whole Write calls (a slog handler writes one line per
// call) and hands them to the underlying writer in one Write when the
// buffer would pass its size, every interval, and at Close. A line is never
// split across two writes of its own, so lines of this Writer and of
// others on the same file do not interleave within a line. Lines are held
// for at most the interval: a process killed with SIGKILL loses at most
// that much.
//
// Write, Flush and Close are safe for concurrent use, and lines reach the
// underlying writer in the order their Writes returned. A full buffer is
// swapped for a spare and written with the buffer's lock released, so the
// Writes of other goroutines append to the spare meanwhile instead of
// waiting for the system call. Write never fails: an error of the
// underlying writer is returned by the next Flush or Close and the lines of
// that write are dropped.
type Writer struct {
	w    io.Writer
	size int

	// mu guards the fields below; wmu is held while writing to w, taken
	// with mu held (lock order: mu, then wmu) so that buffers are written
	// in the order they were swapped out.
	mu     sync.Mutex
	buf    []byte
	spare  []byte // an empty buffer to swap in (nil while one is being written)
	err    error
	closed bool
	wmu    sync.Mutex

	stop chan struct{}
	done chan struct{}
}

// New returns a Writer over w flushing at size bytes (0: DefaultSize) and
// every interval (0: DefaultInterval).
func New(w io.Writer, size int, interval time.Duration) *Writer {
	if size <= 0 {
		size = DefaultSize
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	b := &Writer{w: w, size: size, buf: make([]byte, 0, size), spare: make([]byte, 0, size),
		stop: make(chan struct{}), done: make(chan struct{})}
	go b.loop(interval)
	return b
}

func (b *Writer) loop(interval time.Duration) {
	defer close(b.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			_ = b.Flush()
		}
	}
}

// Write appends p, writing the buffer out first when p would not fit; after
// Close it writes p through.
func (b *Writer) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.wmu.Lock()
		b.mu.Unlock()
		defer b.wmu.Unlock()
		return b.w.Write(p)
	}
	if len(b.buf)+len(p) <= b.size {
		b.buf = append(b.buf, p...)
		b.mu.Unlock()
		return len(p), nil
	}
	full := b.swapLocked()
	if len(p) >= b.size {
		// Too long to buffer: written after the buffer, in the same turn.
		b.writeOut(full, p)
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	b.writeOut(full, nil)
	return len(p), nil
}

// swapLocked takes the buffered lines out, putting the spare (or a new
// buffer) in their place. b.mu must be held.
func (b *Writer) swapLocked() []byte {
	full := b.buf
	b.buf = b.spare
	if b.buf == nil {
		b.buf = make([]byte, 0, b.size)
	}
	b.spare = nil
	return full
}

// writeOut writes full (buffered lines, possibly none) and then extra (a
// line too long to buffer, or nil) to w. It is called with b.mu held and
// releases it: it takes wmu first, so that writes keep their order, and
// holds only wmu during the system call. full becomes the spare again.
func (b *Writer) writeOut(full, extra []byte) {
	b.wmu.Lock()
	b.mu.Unlock()
	var err error
	if len(full) > 0 {
		_, err = b.w.Write(full)
	}
	if len(extra) > 0 {
		if _, e := b.w.Write(extra); err == nil {
			err = e
		}
	}
	b.wmu.Unlock()
	b.mu.Lock()
	if err != nil && b.err == nil {
		b.err = err
	}
	if b.spare == nil {
		b.spare = full[:0]
	}
	b.mu.Unlock()
}

// Flush writes what is buffered and returns the first error since the last
// Flush.
func (b *Writer) Flush() error {
	b.mu.Lock()
	if len(b.buf) > 0 {
		b.writeOut(b.swapLocked(), nil)
	} else {
		// Wait for a write under way, so that its error is returned.
		b.wmu.Lock()
		b.mu.Unlock()
		b.wmu.Unlock()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.err
	b.err = nil
	return err
}

// Close stops the flusher and flushes; later writes go straight through.
func (b *Writer) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	<-b.done
	b.mu.Lock()
	if len(b.buf) > 0 {
		b.writeOut(b.swapLocked(), nil)
	} else {
		b.wmu.Lock()
		b.mu.Unlock()
		b.wmu.Unlock()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}
