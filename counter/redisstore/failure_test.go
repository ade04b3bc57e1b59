package redisstore

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"sluice/counter"
	"sluice/internal/proctest"
	"sluice/internal/redistest"
)

// serverFault is an error condition provoked on a real redis-server.
type serverFault struct {
	name string
	kind string // the kind the store counts it as
	// opts adjusts the stores' options (credentials).
	opts func(o *Options)
	// start provokes the fault; stop undoes it (also registered as a
	// cleanup, so it must be safe to call twice).
	start, stop func(t *testing.T)
	// reads: peeks still work on Redis during the fault (only writes are
	// refused).
	reads bool
}

// adminFor returns a client of srv authenticated with password pw ("" for
// none), closed at cleanup.
func adminFor(t *testing.T, srv *redistest.Server, pw string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: pw, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// serverFaults are the faults provoked for real: a full Redis, credentials
// that changed under a running gateway, a server turned into a replica (a
// failover seen from the old master), a replica whose master is gone, and a
// bug in the script (a Lua runtime error, from a clock spec the script
// cannot read: the nearest to a script bug that can be provoked from
// outside).
func serverFaults(t *testing.T, srv *redistest.Server, scriptBug *atomic.Bool) []serverFault {
	ctx := context.Background()
	admin := adminFor(t, srv, "")
	other := redistest.StartServer(t)
	// The master of the READONLY fault serves a new replica at once.
	must(t, adminFor(t, other, "").ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err())
	port := func(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }
	dead := redistest.StartServer(t)
	dead.Stop()
	return []serverFault{
		{name: "OOM", kind: kindOOM, reads: true,
			start: func(t *testing.T) {
				must(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
				must(t, admin.ConfigSet(ctx, "maxmemory", "1").Err())
			},
			stop: func(t *testing.T) { must(t, admin.ConfigSet(ctx, "maxmemory", "0").Err()) }},
		{name: "NOAUTH", kind: kindAuth,
			start: func(t *testing.T) {
				// Connections authenticated before stay so: new ones are
				// refused, as after a restart with a password.
				must(t, admin.ConfigSet(ctx, "requirepass", "sekrit").Err())
				must(t, adminFor(t, srv, "sekrit").ClientKillByFilter(ctx, "TYPE", "normal").Err())
			},
			stop: func(t *testing.T) {
				if err := adminFor(t, srv, "sekrit").ConfigSet(ctx, "requirepass", "").Err(); err != nil && !strings.Contains(err.Error(), "without any password") {
					t.Error(err)
				}
			}},
		{name: "WRONGPASS", kind: kindAuth,
			opts: func(o *Options) { o.Username, o.Password = "sluice", "pw" },
			start: func(t *testing.T) {
				must(t, admin.Do(ctx, "ACL", "SETUSER", "sluice", "resetpass", ">rotated").Err())
				must(t, admin.ClientKillByFilter(ctx, "USER", "sluice").Err())
			},
			stop: func(t *testing.T) { must(t, admin.Do(ctx, "ACL", "SETUSER", "sluice", "resetpass", ">pw").Err()) }},
		{name: "READONLY", kind: kindServer, reads: true,
			start: func(t *testing.T) {
				must(t, admin.Do(ctx, "REPLICAOF", "127.0.0.1", port(other.Addr())).Err())
				eventually(t, 10*time.Second, "replica in sync", func() bool {
					info, err := admin.Info(ctx, "replication").Result()
					return err == nil && strings.Contains(info, "master_link_status:up")
				})
			},
			stop: func(t *testing.T) { must(t, admin.Do(ctx, "REPLICAOF", "NO", "ONE").Err()) }},
		{name: "MASTERDOWN", kind: kindServer,
			start: func(t *testing.T) {
				must(t, admin.ConfigSet(ctx, "replica-serve-stale-data", "no").Err())
				must(t, admin.Do(ctx, "REPLICAOF", "127.0.0.1", port(dead.Addr())).Err())
			},
			stop: func(t *testing.T) {
				must(t, admin.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
				must(t, admin.ConfigSet(ctx, "replica-serve-stale-data", "yes").Err())
			}},
		{name: "script", kind: kindScript,
			start: func(*testing.T) { scriptBug.Store(true) },
			stop:  func(*testing.T) { scriptBug.Store(false) }},
	}
}

// Every error Redis answers with follows the failure mode, not only
// connection errors: in mode open the call is served by the local fallback
// (its figures marked Local) and its charges are copied to Redis once the
// fault is gone; in mode closed it fails with ErrUnavailable. A settlement
// of a reservation charged on Redis is dropped and counted (open) or
// returns ErrUnavailable (closed). The error is counted by kind and
// logged: outages at warn level, a script bug at error level.
func TestEveryRedisErrorFollowsFailureMode(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	must(t, adminFor(t, srv, "").Do(ctx, "ACL", "SETUSER", "sluice", "on", ">pw", "~*", "&*", "+@all").Err())
	var scriptBug atomic.Bool
	for _, f := range serverFaults(t, srv, &scriptBug) {
		t.Run(f.name, func(t *testing.T) {
			type side struct {
				s   *Store
				log *proctest.Buffer
			}
			prefix := redistest.KeyPrefix(t) // both stores charge the same counters
			mk := func(mode string) side {
				o := Options{URL: srv.URL(), KeyPrefix: prefix, FailureMode: mode, Metrics: prometheus.NewRegistry(),
					DialTimeout: DefaultDialTimeout, ReadTimeout: time.Second, WriteTimeout: time.Second}
				if f.opts != nil {
					f.opts(&o)
				}
				buf := &proctest.Buffer{}
				o.Logger = slog.New(slog.NewTextHandler(buf, nil))
				s := newTestStore(t, o)
				s.clockSpec = func() string {
					if scriptBug.Load() {
						return "@not-a-number"
					}
					return ""
				}
				return side{s, buf}
			}
			open, closed := mk(FailOpen), mk(FailClosed)
			ds := []counter.Debit{
				{Key: "{f}:p:w", Group: "{f}:p", Limit: window(1_000_000, 24*time.Hour), Amount: 10},
				{Key: "{f}:p:b", Group: "{f}:p", Limit: bucket(1_000_000, 1000*time.Hour), Amount: 10},
			}
			var res counter.Result
			tickets := map[*Store]counter.Ticket{}
			for _, sd := range []side{open, closed} {
				if err := sd.s.Reserve(ctx, ds, &res); err != nil || res.Ticket.Origin != OriginRedis || res.Local {
					t.Fatalf("before the fault: Reserve: %v origin %d local %v", err, res.Ticket.Origin, res.Local)
				}
				tickets[sd.s] = counter.Ticket{Window: append([]int64(nil), res.Ticket.Window...)}
			}

			f.start(t)
			t.Cleanup(func() { f.stop(t) })

			// Open: served locally, counted by kind; several calls, some in
			// the back-off, some trying Redis again.
			var local counter.Result
			for i := range 3 {
				if err := open.s.Reserve(ctx, ds, &local); err != nil || !local.Allowed || local.Ticket.Origin != OriginLocal || !local.Local {
					t.Fatalf("open: Reserve %d during the fault: %v allowed %v origin %d local %v", i, err, local.Allowed, local.Ticket.Origin, local.Local)
				}
				if i < 2 {
					time.Sleep(probeInterval)
				}
			}
			if n := testutil.ToFloat64(open.s.m.errors.WithLabelValues(opReserve, f.kind)); n < 1 {
				t.Errorf("open: errors{reserve,%s} = %v, want >= 1", f.kind, n)
			}
			if n := testutil.ToFloat64(open.s.m.local.WithLabelValues(opReserve)); n != 3 {
				t.Errorf("open: fallback calls = %v, want 3", n)
			}
			// Closed: ErrUnavailable, never another error.
			if err := closed.s.Reserve(ctx, ds, &res); !errors.Is(err, counter.ErrUnavailable) {
				t.Fatalf("closed: Reserve during the fault: %v, want ErrUnavailable", err)
			}
			if n := testutil.ToFloat64(closed.s.m.errors.WithLabelValues(opReserve, f.kind)); n != 1 {
				t.Errorf("closed: errors{reserve,%s} = %v, want 1", f.kind, n)
			}
			// Peek: open answers (from Redis when it still reads, else
			// locally), closed answers or fails with ErrUnavailable.
			for _, sd := range []side{open, closed} {
				err := sd.s.Peek(ctx, ds, &res)
				switch {
				case sd.s == open.s && err != nil:
					t.Errorf("open: Peek during the fault: %v", err)
				case sd.s == closed.s && err != nil && !errors.Is(err, counter.ErrUnavailable):
					t.Errorf("closed: Peek during the fault: %v, want nil or ErrUnavailable", err)
				case !f.reads && err == nil && !res.Local:
					t.Errorf("Peek during the fault answered from Redis, which refuses reads")
				}
			}
			// Settlements of reservations charged on Redis: dropped.
			deltas := []int64{5, 5}
			for _, sd := range []side{open, closed} {
				tk := tickets[sd.s]
				err := sd.s.Adjust(ctx, ds, &tk, deltas)
				if sd.s == open.s && err != nil || sd.s == closed.s && !errors.Is(err, counter.ErrUnavailable) {
					t.Errorf("mode closed=%v: Adjust during the fault: %v", sd.s.closed, err)
				}
				if n := testutil.ToFloat64(sd.s.m.dropped); n != 1 {
					t.Errorf("mode closed=%v: dropped settlements %v, want 1", sd.s.closed, n)
				}
			}
			// The local ticket settles locally (and is journaled).
			if err := open.s.Adjust(ctx, ds, &local.Ticket, []int64{-4, -4}); err != nil {
				t.Fatal(err)
			}
			level := "level=WARN"
			if isBug(f.kind) {
				level = "level=ERROR"
			}
			for _, sd := range []side{open, closed} {
				if l := sd.log.String(); !strings.Contains(l, level) || !strings.Contains(l, "kind="+f.kind) {
					t.Errorf("mode closed=%v: log %q, want a %s line of kind %s", sd.s.closed, l, level, f.kind)
				}
			}

			f.stop(t)
			// Both go back to Redis; the open store copies its local
			// charges there: 3 reservations of 10, settled -4 once.
			eventually(t, 10*time.Second, "closed store back on redis", func() bool {
				return closed.s.Reserve(ctx, ds[:1], &res) == nil
			})
			wantW := int64(10+10) + 3*10 - 4 + 10 // both stores' first reservations, the copies, closed's last
			if f.name == "READONLY" {
				// Turning into a replica replaced the dataset with the
				// (empty) master's: only what came after is in Redis.
				wantW = 3*10 - 4 + 10
			}
			var used int64
			eventually(t, 10*time.Second, "local charges copied to redis", func() bool {
				if err := open.s.Peek(ctx, ds, &res); err != nil || res.Local {
					return false
				}
				used = 1_000_000 - res.Remaining[0]
				return used == wantW
			})
			if n := testutil.ToFloat64(open.s.m.copied.WithLabelValues("copied")); n < 1 {
				t.Errorf("copied charges = %v, want >= 1", n)
			}
		})
	}
}

// replyMangler is a go-redis hook that replaces every script reply with a
// value the store cannot read.
type replyMangler struct{ on atomic.Bool }

func (h *replyMangler) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *replyMangler) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c, ok := cmd.(*redis.Cmd); ok && err == nil && h.on.Load() {
			c.SetVal("not a batch reply")
		}
		return err
	}
}

func (h *replyMangler) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A reply the store cannot read is a bug of the store, not an outage, and
// follows the failure mode all the same; it is logged at error level,
// rate-limited.
func TestMalformedReplyFollowsFailureMode(t *testing.T) {
	url := redistest.URL(t)
	ctx := context.Background()
	h := &replyMangler{}
	buf := &proctest.Buffer{}
	log := slog.New(slog.NewTextHandler(buf, nil))
	open := newTestStore(t, Options{URL: url, FailureMode: FailOpen, Hooks: []redis.Hook{h}, Logger: log, Metrics: prometheus.NewRegistry()})
	closed := newTestStore(t, Options{URL: url, FailureMode: FailClosed, Hooks: []redis.Hook{h}, Logger: log, Metrics: prometheus.NewRegistry()})
	ds := []counter.Debit{{Key: "{m}w", Limit: window(100, time.Hour), Amount: 1}}
	h.on.Store(true)
	var res counter.Result
	start := time.Now()
	for range 5 {
		if err := open.Reserve(ctx, ds, &res); err != nil || !res.Local || !res.Allowed {
			t.Fatalf("open: Reserve: %v local %v allowed %v, want served locally", err, res.Local, res.Allowed)
		}
		if err := closed.Reserve(ctx, ds, &res); !errors.Is(err, counter.ErrUnavailable) {
			t.Fatalf("closed: Reserve: %v, want ErrUnavailable", err)
		}
		time.Sleep(probeInterval + 10*time.Millisecond)
	}
	for _, s := range []*Store{open, closed} {
		if n := testutil.ToFloat64(s.m.errors.WithLabelValues(opReserve, kindReply)); n < 2 {
			t.Errorf("errors{reserve,reply} = %v, want one per back-off period", n)
		}
	}
	lines := strings.Count(buf.String(), "level=ERROR")
	periods := int(time.Since(start)/probeInterval) + 1
	if lines < 2 || lines > 2*periods {
		t.Errorf("%d error lines in %d back-off periods of two stores:\n%s", lines, periods, buf.String())
	}
	if !strings.Contains(buf.String(), "kind=reply") {
		t.Errorf("log %q does not name the kind", buf.String())
	}
	h.on.Store(false)
	eventually(t, 5*time.Second, "closed store back", func() bool { return closed.Reserve(ctx, ds, &res) == nil && !res.Local })
}

// fakeRedis answers every command with one error reply, as a server that
// is loading its dataset after a restart does (a real one is hard to hold
// in that state). It returns the server's address.
func fakeRedis(t *testing.T, reply string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					// A command is an array of bulk strings: *N, then N
					// times $len and the bytes.
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
					for range n {
						hdr, err := r.ReadString('\n')
						if err != nil {
							return
						}
						size, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(hdr, "$")))
						if _, err := io.ReadFull(r, make([]byte, size+2)); err != nil {
							return
						}
					}
					if _, err := io.WriteString(c, "-"+reply+"\r\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// A server answering LOADING (here a stand-in speaking the protocol) is an
// outage like any other: served locally in mode open, ErrUnavailable in mode
// closed, counted as kind server.
func TestLoadingFollowsFailureMode(t *testing.T) {
	addr := fakeRedis(t, "LOADING Redis is loading the dataset in memory")
	ctx := context.Background()
	ds := []counter.Debit{{Key: "{l}w", Limit: window(10, time.Hour), Amount: 1}}
	var res counter.Result
	open := newTestStore(t, Options{Addrs: []string{addr}, FailureMode: FailOpen, Metrics: prometheus.NewRegistry()})
	if err := open.Reserve(ctx, ds, &res); err != nil || !res.Local || !res.Allowed {
		t.Fatalf("open: Reserve: %v local %v allowed %v", err, res.Local, res.Allowed)
	}
	closed := newTestStore(t, Options{Addrs: []string{addr}, FailureMode: FailClosed, Metrics: prometheus.NewRegistry()})
	if err := closed.Reserve(ctx, ds, &res); !errors.Is(err, counter.ErrUnavailable) || !strings.Contains(err.Error(), "LOADING") {
		t.Fatalf("closed: Reserve: %v, want ErrUnavailable from LOADING", err)
	}
	for _, s := range []*Store{open, closed} {
		if n := testutil.ToFloat64(s.m.errors.WithLabelValues(opReserve, kindServer)); n != 1 {
			t.Errorf("errors{reserve,server} = %v, want 1", n)
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
	ds := []counter.Debit{{Key: "{o}w", Limit: window(1_000_000, 24*time.Hour), Amount: 1}}

	// A reservation made on Redis before the outage.
	var before counter.Result
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
			var res counter.Result
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
				if s == closed && err != nil && !errors.Is(err, counter.ErrUnavailable) {
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
	eventually(t, 10*time.Second, "closed mode failing", func() bool { return errors.Is(state(closed).err, counter.ErrUnavailable) })

	// Settling the pre-outage reservation is dropped and counted; open
	// mode swallows the error, closed mode reports it.
	if err := open.Adjust(ctx, ds, &before.Ticket, []int64{5}); err != nil {
		t.Errorf("open Adjust during outage: %v", err)
	}
	if err := closed.Adjust(ctx, ds, &before.Ticket, []int64{5}); !errors.Is(err, counter.ErrUnavailable) {
		t.Errorf("closed Adjust during outage: %v, want ErrUnavailable", err)
	}
	if n := testutil.ToFloat64(open.m.dropped); n < 2 {
		t.Errorf("dropped adjustments = %v, want >= 2", n)
	}
	if testutil.ToFloat64(open.m.fallback) != 1 {
		t.Error("fallback gauge not set during the outage")
	}
	// A local reservation settles locally.
	var loc counter.Result
	if err := open.Reserve(ctx, []counter.Debit{{Key: "{o}only-local", Limit: window(10, 24*time.Hour), Amount: 4}}, &loc); err != nil || loc.Ticket.Origin != OriginLocal {
		t.Fatalf("local Reserve: %v origin=%d", err, loc.Ticket.Origin)
	}
	onlyLocal := []counter.Debit{{Key: "{o}only-local", Limit: window(10, 24*time.Hour)}}
	if err := open.Adjust(ctx, onlyLocal, &loc.Ticket, []int64{-3}); err != nil {
		t.Fatal(err)
	}
	var pk counter.Result
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
	var res counter.Result
	for range 20 {
		start := time.Now()
		err := s.Reserve(context.Background(), []counter.Debit{{Key: "k", Limit: window(5, time.Minute), Amount: 1}}, &res)
		if !errors.Is(err, counter.ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("call took %v", d)
		}
	}
}
