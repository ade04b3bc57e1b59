package redisstore

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"sluice/counter"
	"sluice/internal/redistest"
)

// The benchmarks run against one local redis-server started by the helper
// (or REDIS_URL), in the same run:
//
//   - ReserveAdjust: one Reserve over three counters of one scope (a
//     per-minute token bucket, a day window, a month budget; one hash tag,
//     one counter.Debit.Group as the limit engine sets it) followed by one
//     Adjust of all three, as a request does.
//   - ReserveAdjustKeys: the same in the per-key layout (no group: one
//     Redis key per counter).
//   - ReserveAdjustBusy: the same with a bucket that stays below full.
//   - ReserveAdjust1: the same over one counter (the per-minute bucket),
//     the shape of redis_rate's single key.
//   - RedisRate: github.com/go-redis/redis_rate/v10 Allow (GCRA, one key),
//     the usual single-counter baseline.
//
// Each reports ns/op, ops/s, p50 and p99 latency of one op; Redis commands
// per op counted by a client hook (connection setup excluded): 2 for
// ReserveAdjust with one goroutine (one EVALSHA each), fewer when calls are
// merged into one invocation, and 1 for RedisRate; round trips per op (a
// pipeline shared by several ops counts once); and the CPU time per op of
// this process and of redis-server, which unlike ops/s hardly depends on the
// machine's other load. Settlements still queued in the background when the
// last op returns (a batch or two) are not counted. BENCH_INFLIGHT sets
// Options.MaxInFlight.
//
//	go test -run '^$' -bench . -benchtime 20000x ./counter/redisstore/
//
// BenchmarkLeases (below) measures leases on the full chain's shape.

const benchScopes = 1000

func BenchmarkReserveAdjust(b *testing.B) {
	benchReserveAdjust(b, threeCounters, []int64{-120, -120, -480})
}

// BenchmarkReserveAdjustKeys is ReserveAdjust with the counters in the
// per-key layout (no counter.Debit.Group: one Redis key per counter).
func BenchmarkReserveAdjustKeys(b *testing.B) {
	benchReserveAdjust(b, func(tag string) []counter.Debit {
		ds := threeCounters(tag)
		for i := range ds {
			ds[i].Group = ""
		}
		return ds
	}, []int64{-120, -120, -480})
}

func threeCounters(tag string) []counter.Debit {
	g := tag + ":bench"
	return []counter.Debit{
		{Key: tag + ":total:1m", Group: g, Limit: bucket(1<<40, time.Minute), Amount: 500},
		{Key: tag + ":total:1d", Group: g, Limit: window(1<<40, 24*time.Hour), Amount: 500},
		{Key: tag + ":cost:month", Group: g, Limit: month(1 << 40), Amount: 2000},
	}
}

// BenchmarkReserveAdjustBusy is ReserveAdjust with a bucket that stays in
// use (10M per hour: each request leaves it below full), as a busy
// consumer's is; ReserveAdjust's per-minute bucket of 2^40 is full again
// before the next request, so each reservation creates its key and each
// settlement deletes it.
func BenchmarkReserveAdjustBusy(b *testing.B) {
	benchReserveAdjust(b, func(tag string) []counter.Debit {
		g := tag + ":bench"
		return []counter.Debit{
			{Key: tag + ":total:1h", Group: g, Limit: bucket(1e7, time.Hour), Amount: 500},
			{Key: tag + ":total:1d", Group: g, Limit: window(1<<40, 24*time.Hour), Amount: 500},
			{Key: tag + ":cost:month", Group: g, Limit: month(1 << 40), Amount: 2000},
		}
	}, []int64{-120, -120, -480})
}

// BenchmarkReserveAdjust1 is ReserveAdjust over one counter per
// reservation (a per-minute token bucket), the shape of redis_rate's one
// key.
func BenchmarkReserveAdjust1(b *testing.B) {
	benchReserveAdjust(b, func(tag string) []counter.Debit {
		return []counter.Debit{{Key: tag + ":total:1m", Group: tag + ":bench", Limit: bucket(1<<40, time.Minute), Amount: 500}}
	}, []int64{-120})
}

// benchReserveAdjust runs one op = Reserve(mk(scope tag)) then Adjust by
// deltas, over benchScopes scopes.
func benchReserveAdjust(b *testing.B, mk func(tag string) []counter.Debit, deltas []int64) {
	url := redistest.URL(b)
	tags := make([]string, benchScopes)
	for i := range tags {
		tags[i] = fmt.Sprintf("{route:app%d}", i)
	}
	for _, par := range []int{1, 16} {
		b.Run(fmt.Sprintf("conc=%d", par), func(b *testing.B) {
			cnt := newCmdCounter()
			s := newTestStore(b, Options{URL: url, Hooks: []redis.Hook{cnt}, PoolSize: 2 * par, MaxInFlight: benchInFlight()})
			ctx := context.Background()
			// Warm up: load the scripts and open connections.
			var warm counter.Result
			if err := s.Reserve(ctx, mk(tags[0]), &warm); err != nil {
				b.Fatal(err)
			}
			cnt.take()
			cpu := newServerCPU(b, url)
			runLatency(b, par, func(i int) error {
				var res counter.Result
				ds := mk(tags[i%benchScopes])
				if err := s.Reserve(ctx, ds, &res); err != nil {
					return err
				}
				if !res.Allowed || res.Ticket.Origin != OriginRedis {
					return fmt.Errorf("not admitted on redis: %+v", res)
				}
				return s.Adjust(ctx, ds, &res.Ticket, deltas)
			})
			cpu.report(b)
			reportCommands(b, cnt)
		})
	}
}

// BenchmarkLeases: one op is what a request of the full chain of
// docs/benchmarks.md section 5 costs the store, with leases on: three
// reservations of one counter each (a backend and a consumer token bucket
// per hour, a consumer budget window per day, each its own group, of one
// busy application), each settled 10% above its estimate. "far": limits
// far above what the run spends, so the counters are served from leases;
// "near": each counter starts within the last tenth of its limit (and the
// settlements refund what keeps it there), where no lease is granted and
// every reservation is exact in Redis; "near-off": the same with leases
// off (what asking for leases costs there). Reports the Redis operations per
// request (store calls sent to Redis: sluice_redis_store_operations_total)
// and the EVALSHA commands per request (operations merged into one
// invocation share one), besides the usual figures.
func BenchmarkLeases(b *testing.B) {
	url := redistest.URL(b)
	chain := func(max int64) [][]counter.Debit {
		return [][]counter.Debit{
			{{Key: "{bench}:token-based-ratelimit:total:1h", Group: "{bench}:token-based-ratelimit", Limit: bucket(max, time.Hour), Amount: 500}},
			{{Key: "{bench:app}:token-based-ratelimit:total:1h", Group: "{bench:app}:token-based-ratelimit", Limit: bucket(max, time.Hour), Amount: 500}},
			{{Key: "{bench:app}:llm-cost-based-ratelimit:cost:1d", Group: "{bench:app}:llm-cost-based-ratelimit", Limit: window(max, 24*time.Hour), Amount: 2000}},
		}
	}
	for _, c := range []struct {
		name        string
		near, lease bool
	}{{"far", false, true}, {"near", true, true}, {"near-off", true, false}} {
		near := c.near
		b.Run(c.name+"/conc=16", func(b *testing.B) {
			const max = 1_000_000_000
			calls := chain(1e13)
			if near {
				calls = chain(max)
			}
			cnt := newCmdCounter()
			s := newTestStore(b, Options{URL: url, Hooks: []redis.Hook{cnt}, PoolSize: 32, MaxInFlight: benchInFlight(), Leases: LeaseOptions{Enabled: c.lease}})
			ctx := context.Background()
			// Per call, its settlement: 10% above the estimate, or (near) a
			// refund of all of it, so that the counter stays where it is.
			deltas := make([][]int64, len(calls))
			for i, ds := range calls {
				var res counter.Result
				warm := slices.Clone(ds)
				warm[0].Amount = 0
				deltas[i] = []int64{ds[0].Amount / 10}
				if near {
					warm[0].Amount = max * 95 / 100
					deltas[i] = []int64{-ds[0].Amount}
				}
				if err := s.Reserve(ctx, warm, &res); err != nil || !res.Allowed {
					b.Fatalf("warm-up: %v %+v", err, res)
				}
			}
			cnt.take()
			var ops0 float64
			for _, c := range s.m.ops {
				ops0 += testutil.ToFloat64(c)
			}
			cpu := newServerCPU(b, url)
			runLatency(b, 16, func(int) error {
				for i, ds := range calls {
					var res counter.Result
					if err := s.Reserve(ctx, ds, &res); err != nil {
						return err
					}
					if !res.Allowed {
						return fmt.Errorf("denied: %+v", res)
					}
					if err := s.Adjust(ctx, ds, &res.Ticket, deltas[i]); err != nil {
						return err
					}
				}
				return nil
			})
			cpu.report(b)
			m, _ := cnt.take()
			var ops float64
			for _, c := range s.m.ops {
				ops += testutil.ToFloat64(c)
			}
			b.ReportMetric((ops-ops0)/float64(b.N), "redis-ops/request")
			b.ReportMetric(float64(m["evalsha"]+m["eval"])/float64(b.N), "evalsha/request")
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
			keys := make([]string, benchScopes)
			for i := range keys {
				keys[i] = fmt.Sprintf("%s{route:app%d}", prefix, i)
			}
			cpu := newServerCPU(b, url)
			runLatency(b, par, func(i int) error {
				r, err := lim.Allow(ctx, keys[i%benchScopes], limit)
				if err == nil && r.Allowed == 0 {
					err = fmt.Errorf("not allowed: %+v", r)
				}
				return err
			})
			cpu.report(b)
			reportCommands(b, cnt)
		})
	}
}

// reportCommands reports the Redis commands and the round trips per op
// (a pipeline carrying several ops' commands is one round trip).
func reportCommands(b *testing.B, cnt *cmdCounter) {
	_, n, trips := cnt.takeTrips()
	b.ReportMetric(float64(n)/float64(b.N), "cmds/op")
	b.ReportMetric(float64(trips)/float64(b.N), "trips/op")
}

// serverCPU measures the CPU time redis-server spent (INFO cpu, user+sys).
// Unlike Redis's own per-command µs it does not count the time the server
// was waiting for a CPU, so it stays meaningful on a busy machine. Reported
// only for a server of our own (not REDIS_URL, which may be shared), or
// when BENCH_REDIS_CPU=1 says REDIS_URL's server serves this benchmark
// alone.
type serverCPU struct {
	c     *redis.Client
	start float64
}

func newServerCPU(b *testing.B, url string) *serverCPU {
	if os.Getenv("REDIS_URL") != "" && os.Getenv("BENCH_REDIS_CPU") != "1" {
		return nil
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	s := &serverCPU{c: redis.NewClient(o)}
	b.Cleanup(func() { _ = s.c.Close() })
	s.start = s.read(b)
	return s
}

func (s *serverCPU) read(b *testing.B) float64 {
	info, err := s.c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return total
}

func (s *serverCPU) report(b *testing.B) {
	if s == nil {
		return
	}
	b.ReportMetric((s.read(b)-s.start)*1e6/float64(b.N), "redis-cpu-µs/op")
}

// benchInFlight is Options.MaxInFlight for the benchmark (BENCH_INFLIGHT,
// default: the store's default).
func benchInFlight() int {
	n, _ := strconv.Atoi(os.Getenv("BENCH_INFLIGHT"))
	return n
}

// cpuTime is this process's CPU time (user+sys): with go-cpu-µs/op it shows
// the client's cost per op independently of how busy the machine is.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
	cpu0 := cpuTime()
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
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Microsecond)/float64(b.N), "go-cpu-µs/op")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	_ = runtime.GOMAXPROCS(0)
}
