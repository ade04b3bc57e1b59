package clock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func TestManualFiresInOrder(t *testing.T) {
	m := NewManual(t0)
	var mu sync.Mutex
	var got []string
	at := map[string]time.Time{}
	add := func(name string, d time.Duration) Timer {
		return m.AfterFunc(d, func() {
			mu.Lock()
			got = append(got, name)
			at[name] = m.Now()
			mu.Unlock()
		})
	}
	add("c", 3*time.Second)
	add("a", time.Second)
	add("b", 2*time.Second)
	add("b2", 2*time.Second) // same due time: registration order
	stopped := add("x", 1500*time.Millisecond)
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop: want true once, then false")
	}
	if m.Pending() != 4 {
		t.Fatalf("pending %d; want 4", m.Pending())
	}
	if next, ok := m.Next(); !ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("Next = %v, %v; want a's due time", next, ok)
	}
	m.Advance(2 * time.Second)
	mu.Lock()
	if len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "b2" {
		t.Fatalf("fired %v; want a b b2", got)
	}
	if !at["a"].Equal(t0.Add(time.Second)) {
		t.Fatalf("a fired at %v; want its due time", at["a"])
	}
	mu.Unlock()
	if !m.Now().Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("now %v", m.Now())
	}
	m.Set(t0) // never backwards
	if !m.Now().Equal(t0.Add(2 * time.Second)) {
		t.Fatal("Set moved the clock backwards")
	}
	m.Advance(time.Hour)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 4 || got[3] != "c" {
		t.Fatalf("fired %v", got)
	}
}

func TestManualTimerSchedulesAnother(t *testing.T) {
	m := NewManual(t0)
	fired := make(chan time.Time, 2)
	m.AfterFunc(time.Second, func() {
		fired <- m.Now()
		m.AfterFunc(time.Second, func() { fired <- m.Now() })
	})
	m.Advance(5 * time.Second)
	if a, b := <-fired, <-fired; !a.Equal(t0.Add(time.Second)) || !b.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("fired at %v and %v", a, b)
	}
}

func TestSleepAndWaitPending(t *testing.T) {
	m := NewManual(t0)
	done := make(chan error, 1)
	go func() { done <- Sleep(context.Background(), m, time.Minute) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.WaitPending(ctx, 1); err != nil {
		t.Fatal(err)
	}
	m.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Fatalf("Sleep: %v", err)
	}

	cctx, ccancel := context.WithCancel(context.Background())
	go func() { done <- Sleep(cctx, m, time.Minute) }()
	if err := m.WaitPending(ctx, 1); err != nil {
		t.Fatal(err)
	}
	ccancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Sleep: %v", err)
	}
	if m.Pending() != 0 {
		t.Fatal("a cancelled Sleep left its timer")
	}
	if err := Sleep(context.Background(), m, 0); err != nil {
		t.Fatal(err)
	}

	short, scancel := context.WithCancel(context.Background())
	scancel()
	if err := m.WaitPending(short, 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitPending on a done context: %v", err)
	}
}

func TestReal(t *testing.T) {
	ch := make(chan struct{})
	Real.AfterFunc(0, func() { close(ch) })
	<-ch
	if Real.Now().IsZero() {
		t.Fatal("zero time")
	}
}
