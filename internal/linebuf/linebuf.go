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
// Write, Flush and Close are safe for concurrent use. Write never fails: an
// error of the underlying writer is returned by the next Flush or Close and
// the lines of that write are dropped.
type Writer struct {
	w    io.Writer
	size int

	mu     sync.Mutex
	buf    []byte
	err    error
	closed bool

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
	b := &Writer{w: w, size: size, buf: make([]byte, 0, size), stop: make(chan struct{}), done: make(chan struct{})}
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

// Write appends p, flushing first when p would not fit; after Close it
// writes p through.
func (b *Writer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return b.w.Write(p)
	}
	if len(b.buf)+len(p) > b.size {
		b.flushLocked()
	}
	if len(p) >= b.size {
		if _, err := b.w.Write(p); err != nil && b.err == nil {
			b.err = err
		}
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *Writer) flushLocked() {
	if len(b.buf) == 0 {
		return
	}
	if _, err := b.w.Write(b.buf); err != nil && b.err == nil {
		b.err = err
	}
	b.buf = b.buf[:0]
}

// Flush writes what is buffered and returns the first error since the last
// Flush.
func (b *Writer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
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
	defer b.mu.Unlock()
	b.flushLocked()
	return b.err
}
