package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"sluice/deployment"
	"sluice/internal/redistest"
	"sluice/policies/ratelimit/store"
	"sluice/policies/ratelimit/store/storetest"
)

// The conformance suite with the scripts' clock pinned to the suite's fake
// clock: the Lua arithmetic must match package store exactly.
func TestConformanceFrozenClock(t *testing.T) {
	url := redistest.URL(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		s := newTestStore(t, Options{URL: url, Now: now})
		s.clockSpec = func() string { return fixedClock(now()) }
		return s
	}, storetest.Caps{FrozenClock: true})
}

// The conformance suite on redis TIME (the production path), shifted by the
// fake clock's offset from the wall clock: Redis time also moves on its own.
func TestConformanceRedisTime(t *testing.T) {
	url := redistest.URL(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		return redisTimeStore(t, Options{URL: url, Now: now}, now)
	})
}

// With Redis unreachable in failure mode open, every call is served by the
// local fallback, which must pass the suite too.
func TestConformanceFallback(t *testing.T) {
	dead := "redis://" + deadAddr(t) + "/0"
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		return newTestStore(t, Options{URL: dead, Now: now})
	}, storetest.Caps{FrozenClock: true})
}

func TestConformanceCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		return redisTimeStore(t, Options{Addrs: addrs, Now: now}, now)
	})
}

// redisTimeStore builds a store whose scripts read redis TIME shifted so
// that it starts at the fake clock and then runs ahead of it by the real
// time elapsed: TIME - created + now(). The drift is never negative and
// never shrinks, as the suite's bounds assume.
func redisTimeStore(t *testing.T, o Options, now func() time.Time) *Store {
	s := newTestStore(t, o)
	created := time.Now()
	s.clockSpec = func() string { return offsetClock(now().Sub(created)) }
	return s
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	srv := redistest.StartServer(t)
	srv.Stop()
	return srv.Addr()
}

// Random operation sequences on Redis (fixed script clock) and on memstore
// must give identical results: the Lua scripts mirror package store
// operation for operation (including a key listed twice in one call, a
// zero-amount charge that a settlement then adjusts, and limits whose Max
// is edited between operations, settlements included).
func TestLuaMatchesGoArithmetic(t *testing.T) {
	url := redistest.URL(t)
	ctx := context.Background()
	for seed, layout := range eachLayout(20) {
		t.Run(fmt.Sprint(layout, seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			now := time.Date(2025, time.January, 30, 23, 0, 0, 0, time.UTC)
			rs, ls := newMirror(t, url, &now)
			limits := mirrorLimits
			var rr, lr store.Result
			for step := range 400 {
				n := 1 + rng.IntN(3)
				ds := make([]store.Debit, n)
				for i := range ds {
					k := rng.IntN(len(limits))
					l := edited(rng, limits[k])
					ds[i] = layout.mirrorDebit(k, l, rng.Int64N(l.Max+2))
				}
				switch op := rng.IntN(4); op {
				case 0, 1:
					if err := rs.Reserve(ctx, ds, &rr); err != nil {
						t.Fatal(err)
					}
					if err := ls.Reserve(ctx, ds, &lr); err != nil {
						t.Fatal(err)
					}
					compare(t, step, "Reserve", &rr, &lr)
					if rr.Allowed && rng.IntN(2) == 0 {
						deltas := make([]int64, n)
						for i := range deltas {
							deltas[i] = rng.Int64N(21) - 10
							ds[i].Limit = edited(rng, ds[i].Limit)
						}
						lt := rr.Ticket
						lt.Origin = OriginLocal
						if err := rs.Adjust(ctx, ds, &rr.Ticket, deltas); err != nil {
							t.Fatal(err)
						}
						if err := ls.Adjust(ctx, ds, &lt, deltas); err != nil {
							t.Fatal(err)
						}
					}
				case 2:
					if err := rs.Peek(ctx, ds, &rr); err != nil {
						t.Fatal(err)
					}
					if err := ls.Peek(ctx, ds, &lr); err != nil {
						t.Fatal(err)
					}
					compare(t, step, "Peek", &rr, &lr)
				case 3:
					now = now.Add(time.Duration(rng.Int64N(int64(2 * time.Second))))
					if rng.IntN(20) == 0 {
						now = now.Add(time.Duration(rng.Int64N(int64(48 * time.Hour))))
					}
				}
			}
		})
	}
}

func compare(t *testing.T, step int, op string, r, l *store.Result) {
	t.Helper()
	if r.Allowed != l.Allowed || r.Denied != l.Denied || r.RetryAfter != l.RetryAfter || r.Never != l.Never ||
		!reflect.DeepEqual(r.Remaining, l.Remaining) || !reflect.DeepEqual(r.ResetAfter, l.ResetAfter) ||
		!reflect.DeepEqual(r.Ticket.Window, l.Ticket.Window) {
		t.Fatalf("step %d %s:\nredis %+v\nlocal %+v", step, op, *r, *l)
	}
}

// The month arithmetic in Lua agrees with Go's calendar over four centuries
// of month edges, including leap years and the year 2100.
func TestLuaMonthBounds(t *testing.T) {
	url := redistest.URL(t)
	o, _ := redis.ParseURL(url)
	c := redis.NewClient(o)
	defer c.Close()
	script := redis.NewScript(luaCommon + `return {month_bounds(tonumber(ARGV[1]))}`)
	ctx := context.Background()
	check := func(at time.Time) {
		got, err := script.Run(ctx, c, nil, at.Unix()).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		ws, endUS := store.WindowBounds(store.CalendarMonth, 0, at.UnixMicro())
		if got[0] != ws || got[1]*1_000_000 != endUS {
			t.Fatalf("month_bounds(%v) = %v, want [%d %d]", at, got, ws, endUS/1_000_000)
		}
	}
	for y := 1970; y <= 2400; y += 7 {
		for m := time.January; m <= time.December; m++ {
			first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
			check(first)
			check(first.Add(-time.Second))
			check(first.Add(15*24*time.Hour + 7*time.Hour))
		}
	}
	check(time.Date(2100, time.February, 28, 23, 59, 59, 0, time.UTC))
	check(time.Date(2000, time.February, 29, 12, 0, 0, 0, time.UTC))
}

// The script is sent by EVALSHA; after the first call (or a SCRIPT FLUSH)
// the NOSCRIPT reply is followed by one EVAL that loads it again. Reserve
// and Adjust share the one script.
func TestScriptsLoadedOnceAndRecoverFromFlush(t *testing.T) {
	url := redistest.StartServer(t).URL()
	cnt := newCmdCounter()
	s := newTestStore(t, Options{URL: url, Hooks: []redis.Hook{cnt}})
	ctx := context.Background()
	ds := []store.Debit{{Key: "{a}x", Limit: window(100, time.Hour), Amount: 1}, {Key: "{a}y", Limit: bucket(100, time.Hour), Amount: 1}}
	var res store.Result
	reserve := func() {
		t.Helper()
		if err := s.Reserve(ctx, ds, &res); err != nil || !res.Allowed {
			t.Fatalf("Reserve: %v allowed=%v", err, res.Allowed)
		}
	}
	adjust := func() {
		t.Helper()
		if err := s.Adjust(ctx, ds, &res.Ticket, []int64{1, -1}); err != nil {
			t.Fatalf("Adjust: %v", err)
		}
	}
	want := func(what string, exp map[string]int) {
		t.Helper()
		got, _ := cnt.take()
		if !reflect.DeepEqual(got, exp) {
			t.Fatalf("%s: commands %v, want %v", what, got, exp)
		}
	}
	reserve()
	want("first reserve", map[string]int{"evalsha": 1, "eval": 1})
	adjust()
	want("first adjust", map[string]int{"evalsha": 1})
	for range 5 {
		reserve()
		adjust()
	}
	want("steady state", map[string]int{"evalsha": 10})

	flush := redis.NewClient(mustParse(t, url))
	defer flush.Close()
	if err := flush.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	reserve()
	want("reserve after SCRIPT FLUSH", map[string]int{"evalsha": 1, "eval": 1})
	reserve()
	want("reserve after reload", map[string]int{"evalsha": 1})
	// 8 reserves of 1 and 6 settlements of +1 on the window.
	if res.Remaining[0] != 100-14 {
		t.Fatalf("window remaining %d, want %d", res.Remaining[0], 100-14)
	}
}

func mustParse(t *testing.T, url string) *redis.Options {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// 200 goroutines reserve against one key through three Store instances (as
// three gateway replicas would): no more than Max is ever admitted. Timeouts
// are generous: this is about exactness, and a burst of dials on a small
// machine under -race can exceed the production defaults.
func TestExactUnderConcurrencyThreeReplicas(t *testing.T) {
	url := redistest.URL(t)
	prefix := redistest.KeyPrefix(t)
	var replicas []*Store
	for range 3 {
		replicas = append(replicas, newTestStore(t, Options{URL: url, KeyPrefix: prefix, PoolSize: 32}))
	}
	exactness(t, replicas, "{hot}")
}

func TestExactUnderConcurrencyCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	prefix := redistest.KeyPrefix(t)
	var replicas []*Store
	for range 3 {
		replicas = append(replicas, newTestStore(t, Options{Addrs: addrs, KeyPrefix: prefix, PoolSize: 32}))
	}
	exactness(t, replicas, "{hot}")
}

// exactness runs 200 goroutines, 20 reserves each, spread over replicas,
// against a bucket that does not measurably refill and a day window charged
// in the same calls, and checks the admitted totals against Max.
func exactness(t *testing.T, replicas []*Store, tag string) {
	const (
		workers = 200
		each    = 20
		max     = 1000
	)
	b := store.Debit{Key: tag + ":bucket", Limit: bucket(max, 100_000*time.Hour)}
	w := store.Debit{Key: tag + ":window", Limit: window(10*max, 24*time.Hour)}
	var admitted atomic.Int64
	perWindow := sync.Map{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := replicas[i%len(replicas)]
			rng := rand.New(rand.NewPCG(uint64(i), 3))
			ds := []store.Debit{b, w}
			var res store.Result
			for range each {
				amt := 1 + rng.Int64N(3)
				ds[0].Amount, ds[1].Amount = amt, amt
				if err := s.Reserve(context.Background(), ds, &res); err != nil {
					errs <- err
					return
				}
				if res.Ticket.Origin != OriginRedis {
					errs <- errors.New("served locally")
					return
				}
				if res.Allowed {
					admitted.Add(amt)
					v, _ := perWindow.LoadOrStore(res.Ticket.Window[1], new(atomic.Int64))
					v.(*atomic.Int64).Add(amt)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Reserve: %v", err)
	}
	got := admitted.Load()
	// 200*20 reserves of mean 2 ask for ~8000: the bucket fills; it may end
	// short of Max by less than the largest amount (3).
	if got > max || got < max-2 {
		t.Fatalf("admitted %d, want in [%d, %d]", got, max-2, max)
	}
	var res store.Result
	p := []store.Debit{b, w}
	p[0].Amount, p[1].Amount = 0, 0
	if err := replicas[0].Peek(context.Background(), p, &res); err != nil {
		t.Fatal(err)
	}
	if used := max - res.Remaining[0]; used != got {
		t.Fatalf("bucket used %d, admitted %d", used, got)
	}
	perWindow.Range(func(k, v any) bool {
		if n := v.(*atomic.Int64).Load(); n > 10*max {
			t.Errorf("window %v admitted %d > %d", k, n, 10*max)
		}
		return true
	})
}

// On Redis Cluster the keys of one call must share a slot; a call that
// breaks this fails at once with an error that is not ErrUnavailable.
func TestClusterCrossSlotFailsLoudly(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	s := newTestStore(t, Options{Addrs: addrs})
	var res store.Result
	// "a" and "b" hash to different slots (15495, 3300).
	ds := []store.Debit{{Key: "a", Limit: window(5, time.Minute), Amount: 1}, {Key: "b", Limit: window(5, time.Minute), Amount: 1}}
	err := s.Reserve(context.Background(), ds, &res)
	if err == nil || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Reserve across slots: err = %v, want a wiring error", err)
	}
	// So must a group's key and its counters' keys (read by the group's
	// first reservation).
	ds = []store.Debit{{Key: "a", Group: "b", Limit: window(5, time.Minute), Amount: 1}}
	err = s.Reserve(context.Background(), ds, &res)
	if err == nil || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Reserve of a group across slots: err = %v, want a wiring error", err)
	}
	// Our slot function agrees with the cluster's.
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	for _, k := range []string{"a", "b", "sluice:{route:app}tokens", "{}x", "x{}y{z}", "{user1000}.following", "foo"} {
		want, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, cluster says %d", k, got, want)
		}
	}
}

func TestSlot(t *testing.T) {
	tests := []struct {
		key  string
		want int
	}{
		{"123456789", 0x31C3 % 16384}, // CRC-16/XMODEM check value
		{"foo", 12182},
		{"{foo}bar", 12182},
		{"{}foo", Slot("{}foo")},
	}
	for _, tc := range tests {
		if got := Slot(tc.key); got != tc.want {
			t.Errorf("Slot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
	if Slot("sluice:{r:a}tokens:1h") != Slot("sluice:{r:a}cost:month") {
		t.Error("keys with one hash tag hash to different slots")
	}
	// slotOf(prefix, key) is Slot(prefix + key), tag or no tag, braces in
	// the prefix or not.
	for _, prefix := range []string{"", "sluice:", "a{b", "{p}", "x}"} {
		for _, key := range []string{"", "foo", "{foo}bar", "{}foo", "}{a}", "{r:a}w", "b}c", "{open"} {
			if got, want := slotOf(prefix, key), Slot(prefix+key); got != want {
				t.Errorf("slotOf(%q, %q) = %d, Slot of the two = %d", prefix, key, got, want)
			}
		}
	}
}

// Stopping the server mid-load: open mode keeps answering from the local
// store, closed mode fails fast with ErrUnavailable; after a restart both
// go back to Redis by themselves.
func TestOutageAndRecovery(t *testing.T) {
	srv := redistest.StartServer(t)
	reg := prometheus.NewRegistry()
	open := newTestStore(t, Options{URL: srv.URL(), FailureMode: FailOpen, Metrics: reg, DialTimeout: DefaultDialTimeout, ReadTimeout: DefaultReadTimeout, WriteTimeout: DefaultWriteTimeout})
	closed := newTestStore(t, Options{URL: srv.URL(), FailureMode: FailClosed, Metrics: reg, DialTimeout: DefaultDialTimeout, ReadTimeout: DefaultReadTimeout, WriteTimeout: DefaultWriteTimeout})
	ctx := context.Background()
	ds := []store.Debit{{Key: "{o}w", Limit: window(1_000_000, 24*time.Hour), Amount: 1}}

	// A reservation made on Redis before the outage.
	var before store.Result
	if err := open.Reserve(ctx, ds, &before); err != nil || before.Ticket.Origin != OriginRedis {
		t.Fatalf("Reserve before outage: %v origin=%d", err, before.Ticket.Origin)
	}

	type obs struct {
		origin uint8
		err    error
		n      int
	}
	var mu sync.Mutex
	last := map[*Store]obs{}
	var slow atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		s := open
		if i%2 == 1 {
			s = closed
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res store.Result
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				err := s.Reserve(ctx, ds, &res)
				if time.Since(start) > time.Second {
					slow.Add(1)
				}
				if s == open && err != nil {
					t.Errorf("open mode Reserve: %v", err)
				}
				if s == closed && err != nil && !errors.Is(err, store.ErrUnavailable) {
					t.Errorf("closed mode Reserve: %v, want ErrUnavailable", err)
				}
				mu.Lock()
				last[s] = obs{res.Ticket.Origin, err, last[s].n + 1}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	state := func(s *Store) obs {
		mu.Lock()
		defer mu.Unlock()
		return last[s]
	}
	eventually(t, 10*time.Second, "load running on redis", func() bool {
		o, c := state(open), state(closed)
		return o.n > 0 && o.origin == OriginRedis && c.n > 0 && c.err == nil
	})

	srv.Stop()
	eventually(t, 10*time.Second, "open mode serving locally", func() bool { return state(open).origin == OriginLocal })
	eventually(t, 10*time.Second, "closed mode failing", func() bool { return errors.Is(state(closed).err, store.ErrUnavailable) })

	// Settling the pre-outage reservation is dropped and counted; open
	// mode swallows the error, closed mode reports it.
	if err := open.Adjust(ctx, ds, &before.Ticket, []int64{5}); err != nil {
		t.Errorf("open Adjust during outage: %v", err)
	}
	if err := closed.Adjust(ctx, ds, &before.Ticket, []int64{5}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("closed Adjust during outage: %v, want ErrUnavailable", err)
	}
	if n := testutil.ToFloat64(open.m.dropped); n < 2 {
		t.Errorf("dropped adjustments = %v, want >= 2", n)
	}
	if testutil.ToFloat64(open.m.fallback) != 1 {
		t.Error("fallback gauge not set during the outage")
	}
	// A local reservation settles locally.
	var loc store.Result
	if err := open.Reserve(ctx, []store.Debit{{Key: "{o}only-local", Limit: window(10, 24*time.Hour), Amount: 4}}, &loc); err != nil || loc.Ticket.Origin != OriginLocal {
		t.Fatalf("local Reserve: %v origin=%d", err, loc.Ticket.Origin)
	}
	onlyLocal := []store.Debit{{Key: "{o}only-local", Limit: window(10, 24*time.Hour)}}
	if err := open.Adjust(ctx, onlyLocal, &loc.Ticket, []int64{-3}); err != nil {
		t.Fatal(err)
	}
	var pk store.Result
	if err := open.local.Peek(ctx, onlyLocal, &pk); err != nil || pk.Remaining[0] != 9 {
		t.Fatalf("local counter after settle: remaining %v (%v), want 9", pk.Remaining, err)
	}

	srv.Start()
	eventually(t, 15*time.Second, "open mode back on redis", func() bool { return state(open).origin == OriginRedis })
	eventually(t, 15*time.Second, "closed mode back on redis", func() bool { return state(closed).err == nil })
	close(stop)
	wg.Wait()
	if n := slow.Load(); n > 0 {
		t.Errorf("%d calls took more than 1s", n)
	}
	if testutil.ToFloat64(open.m.fallback) != 0 {
		t.Error("fallback gauge still set after recovery")
	}
	if n := testutil.CollectAndCount(reg, "sluice_redis_store_errors_total"); n == 0 {
		t.Error("no store errors counted")
	}
}

// A dead address fails fast in closed mode: the first call within the dial
// timeout, later ones without touching the network during the back-off.
func TestClosedModeDeadServer(t *testing.T) {
	s := newTestStore(t, Options{URL: "redis://" + deadAddr(t) + "/0", FailureMode: FailClosed, DialTimeout: DefaultDialTimeout, ReadTimeout: DefaultReadTimeout, WriteTimeout: DefaultWriteTimeout})
	var res store.Result
	for range 20 {
		start := time.Now()
		err := s.Reserve(context.Background(), []store.Debit{{Key: "k", Limit: window(5, time.Minute), Amount: 1}}, &res)
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("call took %v", d)
		}
	}
}

func TestNewValidation(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		ok   bool
	}{
		{"url", Options{URL: "redis://127.0.0.1:1/0"}, true},
		{"addrs", Options{Addrs: []string{"127.0.0.1:1"}}, true},
		{"cluster addrs", Options{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}, true},
		{"none", Options{}, false},
		{"both", Options{URL: "redis://127.0.0.1:1", Addrs: []string{"127.0.0.1:1"}}, false},
		{"bad mode", Options{URL: "redis://127.0.0.1:1", FailureMode: "maybe"}, false},
		{"bad url", Options{URL: "http://x"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.o)
			if (err == nil) != tc.ok {
				t.Fatalf("New err = %v, want ok=%v", err, tc.ok)
			}
			if s != nil {
				if tc.o.KeyPrefix == "" && s.prefix != DefaultKeyPrefix {
					t.Errorf("prefix %q", s.prefix)
				}
				if s.cluster != (len(tc.o.Addrs) > 1) {
					t.Errorf("cluster = %v", s.cluster)
				}
				_ = s.Close()
			}
		})
	}
}

func TestOptionsFromConfig(t *testing.T) {
	c := deployment.Redis{
		URL: "redis://h:1/2", Cluster: true, Username: "u", Password: "p", TLS: true, KeyPrefix: "x:", FailureMode: "closed",
		DialTimeout: deployment.Duration(time.Second), ReadTimeout: deployment.Duration(2 * time.Second),
		WriteTimeout: deployment.Duration(3 * time.Second), PoolSize: 7,
	}
	got := OptionsFromConfig(c)
	want := Options{URL: "redis://h:1/2", Cluster: true, Username: "u", Password: "p", TLS: true, KeyPrefix: "x:", FailureMode: "closed",
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 3 * time.Second, PoolSize: 7}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("OptionsFromConfig = %+v, want %+v", got, want)
	}
}

// Every error text Redis answers with is given a kind; the texts are those
// of Redis 7 (CLUSTERDOWN, TRYAGAIN and BUSY are hard to provoke for real;
// errors_test.go provokes OOM, NOAUTH, WRONGPASS, READONLY, MASTERDOWN and a
// script error on a real server, and LOADING from a stand-in).
func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		kind string
	}{
		{redis.ErrClosed, kindClosed},
		{redis.ErrPoolTimeout, kindPool},
		{context.DeadlineExceeded, kindTimeout},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, kindConnection},
		{io.EOF, kindConnection},
		{errors.New("LOADING Redis is loading the dataset in memory"), kindServer},
		{errors.New("CLUSTERDOWN The cluster is down"), kindServer},
		{errors.New("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), kindServer},
		{errors.New("TRYAGAIN Multiple keys request during rehashing of slot"), kindServer},
		{errors.New("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), kindServer},
		{errors.New("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), kindServer},
		{errors.New("ERR max number of clients reached"), kindServer},
		{scriptError("READONLY You can't write against a read only replica."), kindServer},
		{errors.New("NOAUTH Authentication required."), kindAuth},
		{errors.New("WRONGPASS invalid username-password pair or user is disabled."), kindAuth},
		{errors.New("NOPERM User sluice has no permissions to run the 'evalsha' command"), kindAuth},
		{scriptError("OOM command not allowed when used memory > 'maxmemory'."), kindOOM},
		{errors.New("OOM command not allowed when used memory > 'maxmemory'."), kindOOM},
		{errors.New("CROSSSLOT Keys in request don't hash to the same slot"), kindCrossSlot},
		{errors.New("NOSCRIPT No matching script. Please use EVAL."), kindScript},
		{scriptError("user_script:12: attempt to perform arithmetic on a nil value"), kindScript},
		{scriptError("ERR value is not an integer or out of range"), kindScript},
		{fmt.Errorf("x: %w", errors.New("ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: 6b1e, on @user_script:1.")), kindScript},
		{fmt.Errorf("%w: batch reply for 2 operations: string", errMalformedReply), kindReply},
		{errors.New("BUSYKEY Target key name already exists."), kindOther},
		{errors.New("ERR Protocol error: invalid bulk length"), kindOther},
	}
	for _, tc := range tests {
		if kind := classify(tc.err); kind != tc.kind {
			t.Errorf("classify(%v) = %s, want %s", tc.err, kind, tc.kind)
		}
	}
}

// Counters written in the earliest formats (text "<alg>|a|b", and the 17-byte
// bucket without its expiry; both hold a bucket's level) are read as before,
// so an upgrade keeps the usage counted; the next write replaces them with
// the current form, and gives the bucket a TTL that covers its refill. A
// state of another algorithm counts as absent. (upgrade_test.go covers the
// level-based formats of the release before consumed-based buckets.)
func TestReadsEarlierFormatStates(t *testing.T) {
	url := redistest.URL(t)
	ctx := context.Background()
	now := time.Date(2025, time.March, 10, 12, 0, 30, 0, time.UTC)
	s := newTestStore(t, Options{URL: url})
	s.clockSpec = func() string { return fixedClock(now) }
	c := redis.NewClient(mustParse(t, url))
	defer c.Close()
	day := now.Truncate(24 * time.Hour).Unix()
	monthStart := time.Date(2025, time.March, 1, 0, 0, 0, 0, time.UTC).Unix()
	lastTS := now.Add(-30 * time.Second).UnixMicro()
	seed := map[string]string{
		"{x}w":     fmt.Sprintf("2|%d|40", day),
		"{x}m":     fmt.Sprintf("3|%d|7", monthStart),
		"{x}b":     fmt.Sprintf("1|%.17g|%d", 2.5, lastTS),
		"{x}other": fmt.Sprintf("2|%d|40", day), // read as a bucket: absent
		"{x}b17":   string(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64([]byte{1}, math.Float64bits(2.5)), math.Float64bits(float64(lastTS)))),
	}
	for k, v := range seed {
		if err := c.Set(ctx, s.prefix+k, v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ds := []store.Debit{
		{Key: "{x}w", Limit: window(100, 24*time.Hour), Amount: 1},
		{Key: "{x}m", Limit: month(100), Amount: 1},
		{Key: "{x}b", Limit: bucket(60, time.Minute), Amount: 1},
		{Key: "{x}other", Limit: bucket(10, time.Minute), Amount: 1},
		{Key: "{x}b17", Limit: bucket(60, time.Minute), Amount: 1},
	}
	want := []int64{100 - 41, 100 - 8, 31, 9, 31} // bucket: floor(2.5 + 30 s * 1/s - 1)
	for round := range 2 {
		var res store.Result
		if err := s.Reserve(ctx, ds, &res); err != nil || !res.Allowed {
			t.Fatalf("round %d: Reserve: %v allowed=%v", round, err, res.Allowed)
		}
		if !reflect.DeepEqual(res.Remaining, want) {
			t.Fatalf("round %d: remaining %v, want %v", round, res.Remaining, want)
		}
		raw, err := c.Get(ctx, s.prefix+"{x}w").Result()
		if err != nil || len(raw) != 17 || raw[0] != 2 {
			t.Fatalf("round %d: window state %q (%v), want the 17-byte binary form", round, raw, err)
		}
		for _, k := range []string{"{x}b", "{x}b17"} {
			raw, err = c.Get(ctx, s.prefix+k).Result()
			if err != nil || len(raw) != 25 || raw[0] != 4 {
				t.Fatalf("round %d: bucket state %s %q (%v), want the 25-byte consumed form", round, k, raw, err)
			}
			// 29.5 units missing at 1/s, plus 1 s, plus at most one period.
			if ttl := c.PTTL(ctx, s.prefix+k).Val(); ttl < 25*time.Second || ttl > 92*time.Second {
				t.Fatalf("round %d: bucket %s TTL %v, want 30.5 s to 91.5 s", round, k, ttl)
			}
		}
		for i := range want {
			want[i]--
		}
	}
}
