package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"sluice/counter"
	"sluice/counter/countertest"
)

var ctx = context.Background()

func tokens(key string, n int64) counter.Debit {
	return counter.Debit{Key: key, Limit: counter.Limit{Algorithm: counter.TokenBucket, Max: 1000, Period: time.Minute}, Amount: n}
}

func minute(key string, n int64) counter.Debit {
	return counter.Debit{Key: key, Limit: counter.Limit{Algorithm: counter.FixedWindow, Max: 1000, Period: time.Minute}, Amount: n}
}

func mustReserve(t *testing.T, s *Store, r *counter.Result, ds ...counter.Debit) {
	t.Helper()
	if err := s.Reserve(ctx, ds, r); err != nil {
		t.Fatal(err)
	}
}

func TestShardsRoundedToPowerOfTwo(t *testing.T) {
	for _, tt := range []struct{ in, want int }{{0, defaultShards}, {1, 1}, {3, 4}, {64, 64}, {65, 128}} {
		s := New(Options{Shards: tt.in, SweepEvery: -1})
		if len(s.shards) != tt.want || s.mask != uint64(tt.want-1) {
			t.Errorf("Shards %d: got %d shards mask %d", tt.in, len(s.shards), s.mask)
		}
	}
}

func TestEvictionFreesEntries(t *testing.T) {
	clk := countertest.NewClock(time.Date(2025, 3, 14, 12, 0, 30, 0, time.UTC))
	s := New(Options{Now: clk.Now, SweepEvery: -1})
	const n = 20_000
	var r counter.Result
	for i := range n {
		mustReserve(t, s, &r, tokens(fmt.Sprintf("{t%d}:b", i), 10), minute(fmt.Sprintf("{t%d}:w", i), 10))
	}
	if got := s.Len(); got != 2*n {
		t.Fatalf("Len = %d, want %d", got, 2*n)
	}
	// Peek and a zero debit on a full bucket store nothing.
	if err := s.Peek(ctx, []counter.Debit{tokens("{p}:b", 5), minute("{p}:w", 5)}, &r); err != nil {
		t.Fatal(err)
	}
	mustReserve(t, s, &r, tokens("{z}:b", 0))
	if got := s.Len(); got != 2*n {
		t.Fatalf("Len after Peek = %d, want %d", got, 2*n)
	}

	if got := s.Sweep(); got != 0 {
		t.Fatalf("early Sweep evicted %d", got)
	}
	// 0.6 s refills 10 of 1000/min: buckets are full, the window is not over.
	clk.Advance(600 * time.Millisecond)
	if got := s.Sweep(); got != n {
		t.Fatalf("Sweep after refill evicted %d, want %d", got, n)
	}
	heapBefore := heapInUse()
	clk.Advance(30 * time.Second) // past the minute window's end
	if got := s.Sweep(); got != n {
		t.Fatalf("Sweep after window end evicted %d, want %d", got, n)
	}
	if got := s.Len(); got != 0 {
		t.Fatalf("Len after sweeps = %d", got)
	}
	// The shard maps were rebuilt: the heap shrank by most of what the
	// window counters held (>= 100 bytes each).
	if after := heapInUse(); heapBefore-after < 100*n {
		t.Errorf("heap %d -> %d after evicting %d counters", heapBefore, after, n)
	}
	// An evicted counter behaves as absent.
	mustReserve(t, s, &r, tokens("{t1}:b", 1000), minute("{t1}:w", 1000))
	if !r.Allowed {
		t.Fatalf("reserve on evicted keys denied")
	}
	runtime.KeepAlive(s)
}

func heapInUse() int {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int(m.HeapAlloc)
}

func TestRefundToFullDeletesBucket(t *testing.T) {
	s := New(Options{SweepEvery: -1, Now: countertest.NewClock(time.Unix(1e9, 0)).Now})
	var r counter.Result
	ds := []counter.Debit{tokens("{a}:b", 10)}
	mustReserve(t, s, &r, ds...)
	if s.Len() != 1 {
		t.Fatalf("Len = %d", s.Len())
	}
	if err := s.Adjust(ctx, ds, &r.Ticket, []int64{-10}); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 0 {
		t.Fatalf("full bucket kept: Len = %d", s.Len())
	}
}

func TestBackgroundSweepAndClose(t *testing.T) {
	clk := countertest.NewClock(time.Date(2025, 3, 14, 12, 0, 30, 0, time.UTC))
	s := New(Options{Now: clk.Now, SweepEvery: time.Millisecond})
	var r counter.Result
	mustReserve(t, s, &r, minute("{a}:w", 1))
	clk.Advance(time.Minute)
	deadline := time.Now().Add(30 * time.Second)
	for s.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("background sweep did not evict within 30s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returns only once the goroutine has exited.
	select {
	case <-s.done:
	default:
		t.Fatal("sweep goroutine still running after Close")
	}
	sweeps := s.sweeps.Load()
	if err := s.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if s.sweeps.Load() != sweeps {
		t.Fatal("sweep ran after Close")
	}
	// Disabled sweeper: Close is a no-op.
	if err := New(Options{SweepEvery: -1}).Close(); err != nil {
		t.Fatal(err)
	}
}

func TestDuplicateKeysCharge(t *testing.T) {
	s := New(Options{SweepEvery: -1, Now: countertest.NewClock(time.Unix(1e9, 0)).Now})
	var r counter.Result
	// 600 + 600 on one key of 1000 does not fit although each alone does.
	mustReserve(t, s, &r, minute("{a}:w", 600), minute("{a}:w", 600))
	if r.Allowed || r.Denied != 1 {
		t.Fatalf("duplicate key over capacity: Allowed=%v Denied=%d", r.Allowed, r.Denied)
	}
	mustReserve(t, s, &r, minute("{a}:w", 300), tokens("{a}:b", 1), minute("{a}:w", 300))
	if !r.Allowed || r.Remaining[2] != 400 {
		t.Fatalf("duplicates: Allowed=%v Remaining=%v", r.Allowed, r.Remaining)
	}
	if err := s.Peek(ctx, []counter.Debit{minute("{a}:w", 0)}, &r); err != nil || r.Remaining[0] != 400 {
		t.Fatalf("after duplicate charge Remaining=%v err=%v, want 400", r.Remaining, err)
	}
}

// TestMultiShardConcurrency reserves and settles random overlapping key sets
// in random order across few shards: it must not deadlock, and every
// counter's usage must equal what was admitted on it.
func TestMultiShardConcurrency(t *testing.T) {
	clk := countertest.NewClock(time.Date(2025, 3, 14, 12, 0, 30, 0, time.UTC))
	s := New(Options{Now: clk.Now, Shards: 4, SweepEvery: -1})
	const keys, workers, each = 16, 16, 500
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("{k%d}:w", i)
	}
	var mu sync.Mutex
	charged := make(map[string]int64)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			var r counter.Result
			ds := make([]counter.Debit, 0, 4)
			deltas := make([]int64, 4)
			for range each {
				ds = ds[:0]
				for _, k := range rng.Perm(keys)[:1+rng.IntN(4)] {
					ds = append(ds, minute(names[k], 1+rng.Int64N(5)))
				}
				if err := s.Reserve(ctx, ds, &r); err != nil {
					t.Error(err)
					return
				}
				if !r.Allowed {
					continue
				}
				for i := range ds {
					deltas[i] = rng.Int64N(3) - 1
				}
				if err := s.Adjust(ctx, ds, &r.Ticket, deltas[:len(ds)]); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for i, d := range ds {
					charged[d.Key] += d.Amount + deltas[i]
				}
				mu.Unlock()
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("deadlock: workers did not finish in 60s")
	}
	var r counter.Result
	for _, k := range names {
		if err := s.Peek(ctx, []counter.Debit{minute(k, 0)}, &r); err != nil {
			t.Fatal(err)
		}
		if used := 1000 - r.Remaining[0]; used != charged[k] {
			t.Errorf("%s: used %d, charged %d", k, used, charged[k])
		}
	}
}

func TestZeroAllocs(t *testing.T) {
	clk := countertest.NewClock(time.Date(2025, 3, 14, 12, 0, 30, 0, time.UTC))
	s := New(Options{Now: clk.Now, SweepEvery: -1})
	ds := []counter.Debit{tokens("{app}:tokens", 1), minute("{app}:requests", 1)}
	deltas := []int64{1, 0}
	var r counter.Result
	mustReserve(t, s, &r, ds...)
	allocs := testing.AllocsPerRun(200, func() {
		_ = s.Reserve(ctx, ds, &r)
		_ = s.Adjust(ctx, ds, &r.Ticket, deltas)
		_ = s.Peek(ctx, ds, &r)
	})
	if allocs != 0 {
		t.Errorf("Reserve+Adjust+Peek allocate %v per run", allocs)
	}
}
