package memory

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"sluice/counter"
	"sluice/counter/countertest"
)

// benchKeys returns n key pairs shaped like a policy's: a token bucket for a
// per-minute rate and a daily window, hash-tagged by scope.
func benchKeys(n int) [][]counter.Debit {
	sets := make([][]counter.Debit, n)
	for i := range sets {
		scope := fmt.Sprintf("{openai-prod:app-%06d}", i)
		sets[i] = []counter.Debit{
			{Key: scope + ":total:60", Limit: counter.Limit{Algorithm: counter.TokenBucket, Max: 100_000, Period: time.Minute}, Amount: 500},
			{Key: scope + ":requests:86400", Limit: counter.Limit{Algorithm: counter.FixedWindow, Max: 1 << 40, Period: 24 * time.Hour}, Amount: 1},
		}
	}
	return sets
}

func benchStore(sets [][]counter.Debit) *Store {
	clk := countertest.NewClock(time.Date(2025, 3, 14, 12, 0, 30, 0, time.UTC))
	s := New(Options{Now: clk.Now, SweepEvery: -1})
	var r counter.Result
	for _, ds := range sets {
		_ = s.Reserve(ctx, ds, &r)
	}
	return s
}

// BenchmarkReserveAdjust measures one 2-debit Reserve plus its settlement
// (Adjust) on existing counters, sequentially and in parallel, on one key set
// and spread over 100,000.
func BenchmarkReserveAdjust(b *testing.B) {
	for _, n := range []int{1, 100_000} {
		sets := benchKeys(n)
		deltas := []int64{-500, 0} // refund the estimate: counters stay affordable
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			s := benchStore(sets)
			var r counter.Result
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				ds := sets[i%n]
				i++
				if err := s.Reserve(ctx, ds, &r); err != nil || !r.Allowed {
					b.Fatal("denied", err)
				}
				_ = s.Adjust(ctx, ds, &r.Ticket, deltas)
			}
		})
		b.Run(fmt.Sprintf("keys=%d/parallel", n), func(b *testing.B) {
			s := benchStore(sets)
			var next atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var r counter.Result
				i := int(next.Add(7919))
				for pb.Next() {
					ds := sets[i%n]
					i++
					_ = s.Reserve(ctx, ds, &r)
					_ = s.Adjust(ctx, ds, &r.Ticket, deltas)
				}
			})
		})
	}
}

// BenchmarkBytesPerCounter reports the heap held per live counter, key
// included (keys here are ~35 bytes, cloned by the store).
func BenchmarkBytesPerCounter(b *testing.B) {
	const n = 100_000
	for b.Loop() {
		sets := benchKeys(n / 2)
		before := heapAlloc()
		s := benchStore(sets)
		after := heapAlloc()
		if s.Len() != n {
			b.Fatalf("Len = %d", s.Len())
		}
		b.ReportMetric(float64(after-before)/n, "B/counter")
		runtime.KeepAlive(s)
		runtime.KeepAlive(sets)
	}
}

func heapAlloc() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
