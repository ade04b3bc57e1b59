package redisstore

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/counter"
	"sluice/counter/countertest"
	"sluice/counter/memory"
	"sluice/internal/redistest"
)

// newTestStore builds a store with a random key prefix, closed at cleanup.
// Unset timeouts are generous (5 s): the semantic tests must never see a
// slow round trip on a loaded machine (2 CPUs under -race) as an outage and
// fall back. The outage tests pass the production defaults explicitly.
func newTestStore(t testing.TB, o Options) *Store {
	t.Helper()
	o.DialTimeout = orDefault(o.DialTimeout, 5*time.Second)
	o.ReadTimeout = orDefault(o.ReadTimeout, 5*time.Second)
	o.WriteTimeout = orDefault(o.WriteTimeout, 5*time.Second)
	if o.KeyPrefix == "" {
		o.KeyPrefix = redistest.KeyPrefix(t)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// cmdCounter is a go-redis hook counting commands by name, whether sent
// alone or in a pipeline, and round trips (a command sent alone, or a whole
// pipeline, is one).
type cmdCounter struct {
	mu     sync.Mutex
	counts map[string]int
	total  int
	trips  int
}

// connSetup are the commands go-redis sends once per new connection; they
// are not part of an operation's round trips.
var connSetup = map[string]bool{"hello": true, "auth": true, "select": true, "client": true, "ping": true}

func newCmdCounter() *cmdCounter { return &cmdCounter{counts: map[string]int{}} }

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if connSetup[strings.ToLower(cmd.Name())] {
			return next(ctx, cmd)
		}
		c.mu.Lock()
		c.counts[strings.ToLower(cmd.Name())]++
		c.total++
		c.trips++
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		for _, cmd := range cmds {
			if !connSetup[strings.ToLower(cmd.Name())] {
				c.counts[strings.ToLower(cmd.Name())]++
				c.total++
			}
		}
		c.trips++
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns the counts since the last take and resets them.
func (c *cmdCounter) take() (map[string]int, int) {
	m, n, _ := c.takeTrips()
	return m, n
}

// takeTrips is take, with the number of round trips.
func (c *cmdCounter) takeTrips() (counts map[string]int, commands, trips int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, n, r := c.counts, c.total, c.trips
	c.counts, c.total, c.trips = map[string]int{}, 0, 0
	return m, n, r
}

var bucket, window, month = countertest.Bucket, countertest.Window, countertest.Month

// eventually polls cond every 20 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMain silences go-redis's own logger (a dial failure per attempt during
// the outage tests); the store's outage logs go to a discard slog.Logger.
func TestMain(m *testing.M) {
	redis.SetLogger(discardLogger{})
	os.Exit(m.Run())
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// fixedClock and offsetClock build clock specs for the scripts (see now_us).
func fixedClock(at time.Time) string { return "@" + strconv.FormatInt(at.UnixMicro(), 10) }

func offsetClock(d time.Duration) string { return "+" + strconv.FormatInt(counter.Micros(d), 10) }

// layout is how a test keeps its counters: "keys" (one Redis key each) or
// "groups" (counter.Debit.Group set: one value per group).
type layout string

// group returns g in the groups layout, else no group.
func (l layout) group(g string) string {
	if l == "groups" {
		return g
	}
	return ""
}

// eachLayout yields seeds 0..n-1 in each layout.
func eachLayout(n uint64) iter.Seq2[uint64, layout] {
	return func(yield func(uint64, layout) bool) {
		for _, l := range []layout{"keys", "groups"} {
			for seed := range n {
				if !yield(seed, l) {
					return
				}
			}
		}
	}
}

// mirrorLimits are what the randomized Lua-against-memory tests charge:
// buckets and windows of several sizes, one far below a millisecond's
// refill, and a month.
var mirrorLimits = []counter.Limit{
	bucket(7, 3*time.Second), bucket(1000, time.Minute), bucket(3, 7*time.Millisecond+3*time.Microsecond),
	window(10, time.Second), window(100, 7*time.Second), month(50),
}

// edited returns l, or now and then (one call in four) l with another Max
// (1 to 3 times the original): a limit edited between operations, which
// must keep the usage counted the same way in both stores.
func edited(rng *rand.Rand, l counter.Limit) counter.Limit {
	if rng.IntN(4) == 0 {
		l.Max = 1 + rng.Int64N(3*l.Max)
	}
	return l
}

// newMirror returns a redis store whose scripts' clock is *now and a
// the memory store on the same clock, for tests that replay one operation sequence
// on both.
func newMirror(t *testing.T, url string, now *time.Time) (*Store, *memory.Store) {
	rs := newTestStore(t, Options{URL: url})
	rs.clockSpec = func() string { return fixedClock(*now) }
	return rs, memory.New(memory.Options{Now: func() time.Time { return *now }, SweepEvery: -1})
}

// mirrorDebit is counter k ("{s}k<k>") of the randomized tests under limit
// lim, in layout l.
func (l layout) mirrorDebit(k int, lim counter.Limit, amount int64) counter.Debit {
	return counter.Debit{Key: fmt.Sprintf("{s}k%d", k), Group: l.group("{s}g"), Limit: lim, Amount: amount}
}

// peekRemaining peeks ds on s and returns the remaining units per debit.
func peekRemaining(t testing.TB, s counter.Store, ds []counter.Debit) []int64 {
	t.Helper()
	var res counter.Result
	if err := s.Peek(context.Background(), ds, &res); err != nil {
		t.Fatalf("Peek: %v", err)
	}
	return res.Remaining
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	srv := redistest.StartServer(t)
	srv.Stop()
	return srv.Addr()
}

func mustParse(t *testing.T, url string) *redis.Options {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
