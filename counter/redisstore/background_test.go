package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/counter"
	"sluice/internal/redistest"
)

// heldStore returns a store (MaxInFlight 1) with one round trip in flight
// (a Reserve on its own key) and held until release is called; cnt counts
// the commands after that one.
func heldStore(t *testing.T, o Options) (s *Store, release func(), cnt *cmdCounter) {
	t.Helper()
	cnt = newCmdCounter()
	gate := &gateHook{}
	o.MaxInFlight, o.Hooks = 1, []redis.Hook{cnt, gate}
	s = newTestStore(t, o)
	// Load the script first, so that no NOSCRIPT retry blurs the counts.
	var warm counter.Result
	if err := s.Peek(context.Background(), []counter.Debit{{Key: "{h}warm", Limit: window(1, time.Hour)}}, &warm); err != nil {
		t.Fatal(err)
	}
	ch := holdFirst(gate)
	go func() {
		var res counter.Result
		_ = s.Reserve(context.Background(), []counter.Debit{{Key: "{h}first", Limit: window(100, time.Hour), Amount: 1}}, &res)
	}()
	eventually(t, 10*time.Second, "first call in flight", func() bool {
		s.co.mu.Lock()
		defer s.co.mu.Unlock()
		return s.co.inflight == 1
	})
	cnt.take()
	return s, func() { close(ch) }, cnt
}

// reserveW charges 10 of a window of 100 and returns the ticket.
func reserveW(t *testing.T, s *Store, ds []counter.Debit) counter.Ticket {
	t.Helper()
	var res counter.Result
	if err := s.Reserve(context.Background(), ds, &res); err != nil || !res.Allowed {
		t.Fatalf("Reserve: %v allowed=%v", err, res.Allowed)
	}
	return counter.Ticket{Window: append([]int64(nil), res.Ticket.Window...)}
}

// In failure mode open, a settlement made while every round trip is busy
// returns at once; a later call of the same store is sent with it (never
// before it) and sees it.
func TestBackgroundSettlementIsOrdered(t *testing.T) {
	ds := []counter.Debit{{Key: "{bg}w", Limit: window(100, time.Hour), Amount: 10}}
	url, prefix := redistest.URL(t), redistest.KeyPrefix(t)
	tk := reserveW(t, newTestStore(t, Options{URL: url, KeyPrefix: prefix}), ds)
	s2, release2, cnt2 := heldStore(t, Options{URL: url, KeyPrefix: prefix})
	adjusted := make(chan error, 1)
	go func() { adjusted <- s2.Adjust(context.Background(), ds, &tk, []int64{-4}) }()
	select {
	case err := <-adjusted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Adjust waited for a round trip held behind another")
	}
	if n := s2.co.queued(); n != 1 {
		t.Fatalf("%d calls queued, want the settlement", n)
	}
	peeked := make(chan counter.Result, 1)
	go func() {
		var res counter.Result
		if err := s2.Peek(context.Background(), ds, &res); err != nil {
			t.Error(err)
		}
		peeked <- res
	}()
	eventually(t, 10*time.Second, "peek queued behind the settlement", func() bool { return s2.co.queued() == 2 })
	release2()
	if res := <-peeked; res.Remaining[0] != 94 {
		t.Fatalf("Peek after the settlement: remaining %d, want 94", res.Remaining[0])
	}
	// After the held call (counted before the hold): the settlement and the
	// peek in one invocation.
	if counts, _, trips := cnt2.takeTrips(); counts["evalsha"] != 1 || trips != 1 {
		t.Fatalf("commands %v in %d round trips, want 1 EVALSHA in 1", counts, trips)
	}
}

// Close waits for the settlements still queued in the background.
func TestCloseFlushesBackgroundSettlements(t *testing.T) {
	ds := []counter.Debit{{Key: "{cl}w", Limit: window(100, time.Hour), Amount: 10}}
	url, prefix := redistest.URL(t), redistest.KeyPrefix(t)
	plain := newTestStore(t, Options{URL: url, KeyPrefix: prefix})
	tk := reserveW(t, plain, ds)
	s, release, _ := heldStore(t, Options{URL: url, KeyPrefix: prefix})
	if err := s.Adjust(context.Background(), ds, &tk, []int64{-7}); err != nil {
		t.Fatal(err)
	}
	if n := s.co.queued(); n != 1 {
		t.Fatalf("%d calls queued, want the settlement", n)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	eventually(t, 10*time.Second, "close waiting", func() bool {
		s.co.mu.Lock()
		defer s.co.mu.Unlock()
		return s.co.closed
	})
	select {
	case <-closed:
		t.Fatal("Close returned with a settlement unsent")
	default:
	}
	release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if rem := peekRemaining(t, plain, ds); rem[0] != 97 {
		t.Fatalf("after Close: remaining %v, want 97", rem)
	}
}

// In failure mode closed a settlement waits for its round trip, so that an
// outage can be returned as ErrUnavailable.
func TestClosedModeSettlementWaits(t *testing.T) {
	ds := []counter.Debit{{Key: "{cw}w", Limit: window(100, time.Hour), Amount: 10}}
	url, prefix := redistest.URL(t), redistest.KeyPrefix(t)
	plain := newTestStore(t, Options{URL: url, KeyPrefix: prefix})
	tk := reserveW(t, plain, ds)
	s, release, _ := heldStore(t, Options{URL: url, KeyPrefix: prefix, FailureMode: FailClosed})
	adjusted := make(chan error, 1)
	go func() { adjusted <- s.Adjust(context.Background(), ds, &tk, []int64{-7}) }()
	eventually(t, 10*time.Second, "settlement queued", func() bool { return s.co.queued() == 1 })
	select {
	case err := <-adjusted:
		t.Fatalf("Adjust returned (%v) before its round trip", err)
	default:
	}
	release()
	if err := <-adjusted; err != nil {
		t.Fatal(err)
	}
}

// A call made after a background settlement never overtakes it, even when
// a round trip slot frees up while the settlement's own round trip has not
// yet reached Redis.
func TestFreeSlotDoesNotOvertakeSettlement(t *testing.T) {
	ds := []counter.Debit{{Key: "{ov}w", Limit: window(100, time.Hour), Amount: 10}}
	url, prefix := redistest.URL(t), redistest.KeyPrefix(t)
	tk := reserveW(t, newTestStore(t, Options{URL: url, KeyPrefix: prefix}), ds)
	gate := &gateHook{}
	s := newTestStore(t, Options{URL: url, KeyPrefix: prefix, MaxInFlight: 2, Hooks: []redis.Hook{gate}})
	var warm counter.Result
	if err := s.Peek(context.Background(), ds, &warm); err != nil {
		t.Fatal(err)
	}
	// The next three commands sent wait for hold[0..2].
	hold := []chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	var opened [3]sync.Once
	open := func(i int) { opened[i].Do(func() { close(hold[i]) }) }
	// On failure, free the held commands before Close waits for them.
	t.Cleanup(func() { open(0); open(1); open(2) })
	var sent atomic.Int64
	gate.beforeCmd = func(redis.Cmder) {
		if n := sent.Add(1); n <= 3 {
			<-hold[n-1]
		}
	}
	for i := range 2 {
		go func() {
			var res counter.Result
			_ = s.Reserve(context.Background(), []counter.Debit{{Key: fmt.Sprintf("{ov}busy%d", i), Limit: window(100, time.Hour), Amount: 1}}, &res)
		}()
	}
	eventually(t, 10*time.Second, "both round trips held", func() bool { return sent.Load() == 2 })
	if err := s.Adjust(context.Background(), ds, &tk, []int64{-3}); err != nil {
		t.Fatal(err)
	}
	open(0) // the settlement goes out on this slot, held before Redis
	eventually(t, 10*time.Second, "settlement sent", func() bool { return sent.Load() == 3 })
	open(1) // the other slot frees up
	eventually(t, 10*time.Second, "slot free", func() bool {
		s.co.mu.Lock()
		defer s.co.mu.Unlock()
		return s.co.inflight == 1
	})
	peeked := make(chan counter.Result, 1)
	go func() {
		var res counter.Result
		if err := s.Peek(context.Background(), ds, &res); err != nil {
			t.Error(err)
		}
		peeked <- res
	}()
	eventually(t, 10*time.Second, "peek queued", func() bool { return s.co.queued() == 1 })
	open(2)
	if res := <-peeked; res.Remaining[0] != 93 {
		t.Fatalf("Peek: remaining %d, want 93: it overtook the settlement", res.Remaining[0])
	}
}
