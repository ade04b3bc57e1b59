// Package clock is the time source of services that wait: the real clock, and
// a manual clock for tests that must not depend on wall-clock speed. It is a
// leaf (standard library only).
package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock reads the time and runs functions after a duration.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed (at once when
	// d <= 0), unless the returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it did.
	Stop() bool
}

// Real is the system clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Sleep waits until d has passed on c or ctx is done, and returns ctx.Err()
// in the second case. d <= 0 returns at once (nil unless ctx is done).
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	ch := make(chan struct{})
	t := c.AfterFunc(d, func() { close(ch) })
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}

// Manual is a clock that moves only when told to. Timers fire, in order of
// their due time, from Advance and Set. Safe for concurrent use.
type Manual struct {
	mu      sync.Mutex
	cond    *sync.Cond
	now     time.Time
	seq     uint64
	pending []*manualTimer
}

type manualTimer struct {
	m   *Manual
	due time.Time
	seq uint64
	f   func()
}

// NewManual returns a manual clock reading at.
func NewManual(at time.Time) *Manual {
	m := &Manual{now: at}
	m.cond = sync.NewCond(&m.mu)
	return m
}

// Now reads the clock.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// AfterFunc registers f to run when the clock reaches now+d. With d <= 0 it
// runs f at once (in its own goroutine, as time.AfterFunc does).
func (m *Manual) AfterFunc(d time.Duration, f func()) Timer {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	t := &manualTimer{m: m, due: m.now.Add(d), seq: m.seq, f: f}
	if d <= 0 {
		go f()
		return t
	}
	m.pending = append(m.pending, t)
	m.cond.Broadcast()
	return t
}

func (t *manualTimer) Stop() bool {
	m := t.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, p := range m.pending {
		if p == t {
			m.pending = append(m.pending[:i], m.pending[i+1:]...)
			m.cond.Broadcast()
			return true
		}
	}
	return false
}

// Advance moves the clock forward by d, firing due timers in order; each
// fires with the clock reading its due time, and runs to completion (on the
// caller's goroutine) before the next one.
func (m *Manual) Advance(d time.Duration) { m.Set(m.Now().Add(d)) }

// Set moves the clock to at (never backwards), firing due timers as Advance does.
func (m *Manual) Set(at time.Time) {
	for {
		m.mu.Lock()
		sort.Slice(m.pending, func(i, j int) bool {
			a, b := m.pending[i], m.pending[j]
			if !a.due.Equal(b.due) {
				return a.due.Before(b.due)
			}
			return a.seq < b.seq
		})
		if len(m.pending) == 0 || m.pending[0].due.After(at) {
			if at.After(m.now) {
				m.now = at
			}
			m.mu.Unlock()
			return
		}
		t := m.pending[0]
		m.pending = m.pending[1:]
		if t.due.After(m.now) {
			m.now = t.due
		}
		m.cond.Broadcast()
		m.mu.Unlock()
		t.f()
	}
}

// Next is the due time of the earliest timer waiting to fire.
func (m *Manual) Next() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Time
	for i, t := range m.pending {
		if i == 0 || t.due.Before(next) {
			next = t.due
		}
	}
	return next, len(m.pending) > 0
}

// Pending is the number of timers waiting to fire.
func (m *Manual) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pending)
}

// WaitPending blocks until at least n timers are waiting to fire, or ctx is
// done (then it returns ctx.Err()). Tests use it to know that goroutines have
// reached their wait before they advance the clock.
func (m *Manual) WaitPending(ctx context.Context, n int) error {
	stop := context.AfterFunc(ctx, func() {
		m.mu.Lock()
		m.cond.Broadcast()
		m.mu.Unlock()
	})
	defer stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.pending) < n {
		if err := ctx.Err(); err != nil {
			return err
		}
		m.cond.Wait()
	}
	return nil
}
