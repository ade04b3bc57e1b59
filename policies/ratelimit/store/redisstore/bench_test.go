package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"sluice/internal/redistest"
	"sluice/policies/ratelimit/store"
)

// The benchmarks run against one local redis-server started by the helper
// (or REDIS_URL), in the same run:
//
//   - ReserveAdjust: one Reserve over three counters of one scope (a
//     per-minute token bucket, a day window, a month budget; one hash tag)
//     followed by one Adjust of all three, as a request does.
//   - RedisRate: github.com/go-redis/redis_rate/v10 Allow (GCRA, one key),
//     the usual single-counter baseline.
//
// Each reports ns/op, ops/s, p99 latency of one op, and Redis commands per
// op counted by a client hook (connection setup excluded): the target is 2
// for ReserveAdjust (one round trip each) and 1 for RedisRate.
//
//	go test -run '^$' -bench . -benchtime 20000x ./policies/ratelimit/store/redisstore/

const benchScopes = 1000

func BenchmarkReserveAdjust(b *testing.B) {
	url := redistest.URL(b)
	for _, par := range []int{1, 16} {
		b.Run(fmt.Sprintf("conc=%d", par), func(b *testing.B) {
			cnt := newCmdCounter()
			s := newTestStore(b, Options{URL: url, Hooks: []redis.Hook{cnt}, PoolSize: 2 * par})
			ctx := context.Background()
			mk := func(i int) []store.Debit {
				tag := fmt.Sprintf("{route:app%d}", i)
				return []store.Debit{
					{Key: tag + ":total:1m", Limit: bucket(1<<40, time.Minute), Amount: 500},
					{Key: tag + ":total:1d", Limit: window(1<<40, 24*time.Hour), Amount: 500},
					{Key: tag + ":cost:month", Limit: month(1 << 40), Amount: 2000},
				}
			}
			deltas := []int64{-120, -120, -480}
			// Warm up: load the scripts and open connections.
			var warm store.Result
			if err := s.Reserve(ctx, mk(0), &warm); err != nil {
				b.Fatal(err)
			}
			cnt.take()
			runLatency(b, par, func(i int) error {
				var res store.Result
				ds := mk(i % benchScopes)
				if err := s.Reserve(ctx, ds, &res); err != nil {
					return err
				}
				if !res.Allowed || res.Ticket.Origin != OriginRedis {
					return fmt.Errorf("not admitted on redis: %+v", res)
				}
				return s.Adjust(ctx, ds, &res.Ticket, deltas)
			})
			_, n := cnt.take()
			b.ReportMetric(float64(n)/float64(b.N), "cmds/op")
		})
	}
}

func BenchmarkRedisRate(b *testing.B) {
	url := redistest.URL(b)
	for _, par := range []int{1, 16} {
		b.Run(fmt.Sprintf("conc=%d", par), func(b *testing.B) {
			o, err := redis.ParseURL(url)
			if err != nil {
				b.Fatal(err)
			}
			o.PoolSize = 2 * par
			c := redis.NewClient(o)
			defer c.Close()
			cnt := newCmdCounter()
			c.AddHook(cnt)
			lim := redis_rate.NewLimiter(c)
			prefix := redistest.KeyPrefix(b)
			limit := redis_rate.PerMinute(1 << 30)
			ctx := context.Background()
			if _, err := lim.Allow(ctx, prefix+"warm", limit); err != nil {
				b.Fatal(err)
			}
			cnt.take()
			runLatency(b, par, func(i int) error {
				r, err := lim.Allow(ctx, fmt.Sprintf("%s{route:app%d}", prefix, i%benchScopes), limit)
				if err == nil && r.Allowed == 0 {
					err = fmt.Errorf("not allowed: %+v", r)
				}
				return err
			})
			_, n := cnt.take()
			b.ReportMetric(float64(n)/float64(b.N), "cmds/op")
		})
	}
}

// runLatency runs op b.N times over par goroutines, timing each call, and
// reports ops/s and the p50/p99 latency in µs.
func runLatency(b *testing.B, par int, op func(i int) error) {
	b.Helper()
	lat := make([][]time.Duration, par)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	next := make(chan int, 1024)
	b.ResetTimer()
	start := time.Now()
	for g := range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, b.N/par+1)
			for i := range next {
				t0 := time.Now()
				if err := op(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
				mine = append(mine, time.Since(t0))
			}
			lat[g] = mine
		}()
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) float64 {
		return float64(all[int(p*float64(len(all)-1))]) / float64(time.Microsecond)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	_ = runtime.GOMAXPROCS(0)
}
