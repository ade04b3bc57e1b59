package redisstore

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"sluice/counter"
	"sluice/counter/countertest"
	"sluice/internal/redistest"
)

// leaseStart is where the lease tests' fake clock starts: 30 s into a
// minute, far from the edges of the windows they use.
var leaseStart = time.Date(2025, time.March, 14, 12, 30, 30, 0, time.UTC)

// leaseReplica is a store with leases on whose clock, and its scripts', is
// clk, counting its commands; a second store without leases, on the same
// prefix and clock, reads the shared counters (it never holds a lease).
type leaseReplica struct {
	*Store
	cmds *cmdCounter
	reg  *prometheus.Registry
}

func newLeaseReplica(t *testing.T, o Options, clk *countertest.Clock) *leaseReplica {
	t.Helper()
	cmds := newCmdCounter()
	reg := prometheus.NewRegistry()
	o.Now, o.Hooks, o.Metrics = clk.Now, append(o.Hooks, cmds), reg
	o.Leases.Enabled = true
	s := newTestStore(t, o)
	s.clockSpec = func() string { return fixedClock(clk.Now()) }
	return &leaseReplica{Store: s, cmds: cmds, reg: reg}
}

func newReader(t *testing.T, o Options, clk *countertest.Clock) *Store {
	t.Helper()
	o.Now, o.Leases = clk.Now, LeaseOptions{}
	s := newTestStore(t, o)
	s.clockSpec = func() string { return fixedClock(clk.Now()) }
	return s
}

// leaseEnv is a replica with leases on and a reader without (which never
// holds a lease), sharing one Redis, key prefix and fake clock.
type leaseEnv struct {
	url, prefix string
	clk         *countertest.Clock
	r           *leaseReplica
	reader      *Store
}

func newLeaseEnv(t *testing.T) *leaseEnv {
	t.Helper()
	e := &leaseEnv{url: redistest.URL(t), prefix: redistest.KeyPrefix(t), clk: countertest.NewClock(leaseStart)}
	e.r = e.replica(t)
	e.reader = newReader(t, Options{URL: e.url, KeyPrefix: e.prefix}, e.clk)
	return e
}

// replica starts another replica with leases on.
func (e *leaseEnv) replica(t *testing.T) *leaseReplica {
	return newLeaseReplica(t, Options{URL: e.url, KeyPrefix: e.prefix}, e.clk)
}

// free is what the reader sees left of d's counter; used what it sees
// used.
func (e *leaseEnv) free(t *testing.T, d counter.Debit) int64 {
	t.Helper()
	d.Amount = 0
	return peekRemaining(t, e.reader, []counter.Debit{d})[0]
}

func (e *leaseEnv) used(t *testing.T, d counter.Debit) int64 {
	t.Helper()
	return d.Limit.Max - e.free(t, d)
}

// kill stops s's reaper without releasing anything, as if its process had
// died: its leases stay charged in Redis until they expire there.
func kill(s *Store) {
	s.leases.stopped.Do(func() {
		close(s.leases.stop)
		<-s.leases.done
	})
}

// ops is the number of script operations s sent since the last call.
func (r *leaseReplica) ops() int {
	m, _ := r.cmds.take()
	return m["evalsha"] + m["eval"]
}

func (r *leaseReplica) metric(name string) float64 {
	mfs, err := r.reg.Gather()
	if err != nil {
		panic(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				v += m.Counter.GetValue()
			case m.Gauge != nil:
				v += m.Gauge.GetValue()
			}
		}
	}
	return v
}

func reserveOK(t *testing.T, s counter.Store, ds []counter.Debit) counter.Result {
	t.Helper()
	var res counter.Result
	if err := s.Reserve(context.Background(), ds, &res); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if !res.Allowed {
		t.Fatalf("Reserve denied: %+v", res)
	}
	return res
}

// slowBucket does not measurably refill during a test.
var slowBucket = bucket(1_000_000, 100_000*time.Hour)

func leaseDebits(limits ...counter.Limit) []counter.Debit {
	ds := make([]counter.Debit, len(limits))
	for i, l := range limits {
		ds[i] = counter.Debit{Key: "{lt}:p:" + string(rune('a'+i)), Group: "{lt}:p", Limit: l, Amount: 10}
	}
	return ds
}

// Far from the limit, a busy counter is served from leases: after the
// local rate is known, reservations and settlements cost no round trip.
// The shared counter counts the leased units as used until they are
// released, and exactly what was used after.
func TestLeaseServesFromMemory(t *testing.T) {
	e := newLeaseEnv(t)
	r, reader, clk := e.r, e.reader, e.clk
	ds := leaseDebits(slowBucket, window(1_000_000, time.Hour), month(1_000_000))
	const n = 1000
	for i := range n {
		res := reserveOK(t, r, ds)
		deltas := []int64{3, -2, 1}
		if i%2 == 0 {
			deltas = []int64{0, 0, 0}
		}
		if err := r.Adjust(context.Background(), ds, &res.Ticket, deltas); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Millisecond)
	}
	ops := r.ops()
	t.Logf("%d reservations and settlements: %d script operations", n, ops)
	if per := float64(ops) / n; per >= 0.05 {
		t.Errorf("%.3f Redis operations per reservation, want < 0.05", per)
	}
	if got := r.metric("sluice_redis_store_reservations_total"); got != n {
		t.Errorf("reservations_total %v, want %d", got, n)
	}
	if r.metric("sluice_redis_store_leases") != 3 {
		t.Errorf("leases held %v, want 3", r.metric("sluice_redis_store_leases"))
	}
	// What each counter was charged: 10 per reservation plus its deltas
	// (half of the reservations settled 3, -2 and 1 from the estimate).
	want := []int64{n*10 + n/2*3, n*10 - n/2*2, n*10 + n/2*1}
	p := leaseDebits(slowBucket, window(1_000_000, time.Hour), month(1_000_000))
	for i := range p {
		p[i].Amount = 0
	}
	rem := peekRemaining(t, reader, p)
	for i := range rem {
		if got := 1_000_000 - rem[i]; got < want[i] {
			t.Errorf("counter %d: Redis counts %d used, want at least the %d charged", i, got, want[i])
		}
	}
	// This replica's own peek adds back what its leases have left.
	own := peekRemaining(t, r, p)
	for i := range own {
		if got := 1_000_000 - own[i]; got != want[i] {
			t.Errorf("counter %d: the holder's peek shows %d used, want %d", i, got, want[i])
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	rem = peekRemaining(t, reader, p)
	for i := range rem {
		if got := 1_000_000 - rem[i]; got != want[i] {
			t.Errorf("counter %d after the leases were released: %d used, want exactly %d", i, got, want[i])
		}
	}
}

// leaseSlots counts the lease slots (tags 6 and 7) in the group value at key.
func leaseSlots(t *testing.T, url, key string) int {
	t.Helper()
	c := redis.NewClient(mustParse(t, url))
	defer c.Close()
	v, err := c.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for p := groupHeader; p+groupSlotSize <= len(v); p += groupSlotSize {
		if v[p+8] == 6 || v[p+8] == 7 {
			n++
		}
	}
	return n
}

// heldLease returns the lease s holds for debit d's counter (id 0: none).
func heldLease(s *Store, d counter.Debit) lease {
	g := s.leases.loadGroup(d.Group)
	if g == nil {
		return lease{}
	}
	defer g.mu.Unlock()
	if c := g.counters[d.Key]; c != nil {
		return c.l
	}
	return lease{}
}

// warmLease reserves ds on r (all at one instant, so the local rate grows
// fast) until it holds a lease of every debit with at least left units to
// spare, and returns what it charged in Redis without a lease (units per
// debit).
func warmLease(t *testing.T, r *leaseReplica, ds []counter.Debit, left int64) {
	t.Helper()
	for range 1000 {
		ok := true
		for _, d := range ds {
			l := heldLease(r.Store, d)
			ok = ok && l.id != 0 && l.granted-l.used >= left
		}
		if ok {
			return
		}
		reserveOK(t, r, ds)
	}
	t.Fatalf("no lease of %d units after 1000 reservations", left)
}

// The capacity leased to a replica that dies comes back when the lease
// expires in Redis (TTL + LeaseGrace after it was asked for); what the dead
// replica served from it is not counted.
func TestLeaseExpiryReturnsCapacity(t *testing.T) {
	for _, lim := range []counter.Limit{slowBucket, window(1_000_000, time.Hour), month(1_000_000)} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			e := newLeaseEnv(t)
			r, reader, clk := e.r, e.reader, e.clk
			ds := leaseDebits(lim)
			ds[0].Key += lim.Algorithm.String()
			warmLease(t, r, ds, 100)
			for range 5 {
				reserveOK(t, r, ds)
			}
			l := heldLease(r.Store, ds[0])
			kill(r.Store)
			before := e.used(t, ds[0])
			clk.Advance(DefaultLeaseTTL + LeaseGrace - time.Millisecond)
			if got := e.used(t, ds[0]); got != before {
				t.Fatalf("used %d before the lease expired, want still %d", got, before)
			}
			clk.Advance(time.Millisecond)
			after := e.used(t, ds[0])
			if after != before-l.granted {
				t.Fatalf("used %d once the lease expired, want %d - the grant %d = %d", after, before, l.granted, before-l.granted)
			}
			// A write persists the expiry: the next reservation sees the
			// same, and the lease's slot is gone.
			if n := leaseSlots(t, e.url, e.prefix+ds[0].Group); n != 1 {
				t.Fatalf("%d lease slots before a write, want 1", n)
			}
			res := reserveOK(t, reader, ds)
			if got := 1_000_000 - res.Remaining[0]; got != after+10 {
				t.Fatalf("used %d after a reservation, want %d", got, after+10)
			}
			if n := leaseSlots(t, e.url, e.prefix+ds[0].Group); n != 0 {
				t.Fatalf("%d lease slots after a write, want 0", n)
			}
			t.Logf("lease of %d units (%d used) expired: the counter went from %d to %d used", l.granted, l.used, before, after)
		})
	}
}

// A window rollover ends a lease: a lease never outlives its window (none
// is granted less than a TTL before the window ends), the next window is
// charged exactly, and a settlement of a reservation made under the old
// window's lease lands on that window, which has ended: a no-op, whether
// or not a lease of the new window is held.
func TestLeaseWindowRollover(t *testing.T) {
	e := newLeaseEnv(t) // 12:30:30
	r, clk := e.r, e.clk
	ds := leaseDebits(window(1_000_000, time.Minute))
	warmLease(t, r, ds, 100)
	old := reserveOK(t, r, ds)
	if old.Ticket.Origin != OriginLease {
		t.Fatalf("origin %d, want a lease", old.Ticket.Origin)
	}
	if l := heldLease(r.Store, ds[0]); l.deadline > time.Date(2025, time.March, 14, 12, 31, 0, 0, time.UTC).UnixNano() {
		t.Fatalf("lease deadline %v after its window's end", time.Unix(0, l.deadline).UTC())
	}

	clk.Set(time.Date(2025, time.March, 14, 12, 31, 10, 0, time.UTC))
	r.ops()
	res := reserveOK(t, r, ds)
	if res.Ticket.Origin != OriginRedis || r.ops() != 1 {
		t.Fatalf("first reservation of the next window: origin %d, want one operation on Redis", res.Ticket.Origin)
	}
	if used := e.used(t, ds[0]); used != 10 {
		t.Fatalf("the next window has %d used, want 10", used)
	}
	if err := r.Adjust(context.Background(), ds, &old.Ticket, []int64{500}); err != nil {
		t.Fatal(err)
	}
	if used := e.used(t, ds[0]); used != 10 {
		t.Fatalf("after settling an old window's reservation the next window has %d used, want 10", used)
	}
	// With a lease of the new window held, the old window's settlement is
	// known to be a no-op: no round trip.
	warmLease(t, r, ds, 100)
	r.ops()
	if err := r.Adjust(context.Background(), ds, &old.Ticket, []int64{500}); err != nil {
		t.Fatal(err)
	}
	if n := r.ops(); n != 0 {
		t.Fatalf("settling an ended window's reservation sent %d operations", n)
	}

	// Less than a TTL before the window ends, no lease is granted.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = e.replica(t)
	clk.Set(time.Date(2025, time.March, 14, 12, 31, 58, 500_000_000, time.UTC))
	for range 100 {
		reserveOK(t, r, ds)
	}
	if l := heldLease(r.Store, ds[0]); l.id != 0 {
		t.Fatalf("a lease of %d units granted 1.5 s before its window ends", l.granted)
	}
	if n := r.ops(); n != 100 {
		t.Fatalf("%d operations for 100 reservations near the window's end, want 100", n)
	}
}

// A limit edit ends a lease: the next reservation under the new limit goes
// to Redis, releasing the lease granted under the old one, and the counter
// stays exact.
func TestLeaseLimitEdit(t *testing.T) {
	e := newLeaseEnv(t)
	r := e.r
	ds := leaseDebits(window(1_000_000, time.Hour))
	warmLease(t, r, ds, 100)
	first := heldLease(r.Store, ds[0])
	edited := leaseDebits(window(2_000_000, time.Hour))
	r.ops()
	res := reserveOK(t, r, edited)
	if res.Ticket.Origin != OriginRedis || r.ops() != 1 {
		t.Fatalf("reservation under an edited limit: origin %d, want one operation on Redis", res.Ticket.Origin)
	}
	if l := heldLease(r.Store, ds[0]); l.id == first.id {
		t.Fatal("the lease of the old limit is still held")
	}
	if got := r.metric("sluice_redis_store_lease_unused_units_total"); got < float64(first.granted-first.used) {
		t.Fatalf("unused units %v, want at least the old lease's %d", got, first.granted-first.used)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	used := e.used(t, edited[0])
	charged := 10 * int64(r.metric("sluice_redis_store_reservations_total"))
	if used != charged {
		t.Fatalf("counter used %d, want the %d charged", used, charged)
	}
}

// During a Redis outage the leases already held keep serving within their
// expiry, reservations and settlements, in both failure modes; after it the
// rest follows the failure mode. What the leases served is released once
// Redis answers again: here Redis restarts empty, so the counter holds
// exactly that (plus, in mode open, the local reservation copied back).
func TestLeaseOutage(t *testing.T) {
	for _, mode := range []string{FailOpen, FailClosed} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.StartServer(t)
			clk := countertest.NewClock(leaseStart)
			o := Options{URL: srv.URL(), FailureMode: mode, DialTimeout: DefaultDialTimeout, ReadTimeout: DefaultReadTimeout, WriteTimeout: DefaultWriteTimeout}
			r := newLeaseReplica(t, o, clk)
			ds := leaseDebits(window(1_000_000, time.Hour))
			warmLease(t, r, ds, 100)
			held := heldLease(r.Store, ds[0])
			srv.Stop()
			for i := range 5 {
				res := reserveOK(t, r, ds)
				if res.Ticket.Origin != OriginLease {
					t.Fatalf("reservation %d during the outage: origin %d, want a lease", i, res.Ticket.Origin)
				}
				if err := r.Adjust(context.Background(), ds, &res.Ticket, []int64{1}); err != nil {
					t.Fatalf("settlement under a lease during the outage: %v", err)
				}
			}
			clk.Advance(DefaultLeaseTTL)
			var res counter.Result
			err := r.Reserve(context.Background(), ds, &res)
			local := int64(0)
			switch mode {
			case FailOpen:
				if err != nil || !res.Allowed || res.Ticket.Origin != OriginLocal {
					t.Fatalf("open, lease expired: err %v allowed %v origin %d, want the local fallback", err, res.Allowed, res.Ticket.Origin)
				}
				local = 10
			case FailClosed:
				if !errors.Is(err, counter.ErrUnavailable) {
					t.Fatalf("closed, lease expired: err %v, want ErrUnavailable", err)
				}
			}
			srv.Start()
			reader := newReader(t, Options{URL: srv.URL(), KeyPrefix: r.prefix}, clk)
			p := []counter.Debit{ds[0]}
			p[0].Amount = 0
			want := held.used + 5*(10+1) + local
			eventually(t, 10*time.Second, "the lease's usage released to Redis", func() bool {
				return 1_000_000-peekRemaining(t, reader, p)[0] == want
			})
		})
	}
}

// A bucket's lease holds its units without letting them refill: a lease
// held while the bucket refills, then used up, plus everything another
// replica can take at that moment, is at most the bucket's capacity.
// (Units charged when the lease was granted would have refilled while it
// was held: the other replica would find the bucket full again on top of
// what the lease still serves.)
func TestLeaseBucketHoldDoesNotRefill(t *testing.T) {
	e := newLeaseEnv(t)
	r, other, clk := e.r, e.reader, e.clk
	const max = 10_000
	ds := leaseDebits(bucket(max, 10*time.Second))
	warmLease(t, r, ds, 100)
	// Long enough for everything consumed so far to refill, not for the
	// lease to end.
	clk.Advance(DefaultLeaseTTL - 100*time.Millisecond)
	free := e.free(t, ds[0])
	p := []counter.Debit{ds[0]}
	p[0].Amount = free
	reserveOK(t, other, p)
	served := int64(0)
	for {
		var res counter.Result
		if err := r.Reserve(context.Background(), ds, &res); err != nil {
			t.Fatal(err)
		}
		if !res.Allowed || res.Ticket.Origin != OriginLease {
			break
		}
		served += ds[0].Amount
	}
	t.Logf("the other replica took %d, the lease then served %d", free, served)
	if served == 0 {
		t.Fatal("the lease served nothing")
	}
	if free+served > max {
		t.Fatalf("admitted %d + %d = %d at one instant, above the bucket's capacity %d", free, served, free+served, max)
	}
}

// A reservation that its leases cannot all serve goes to Redis, releasing
// every lease of the call first: one that could have served its own
// counter holds units that Redis counts as taken, and the reservation must
// not be denied for units its own gateway holds.
func TestLeaseMissReleasesEveryLeaseOfTheCall(t *testing.T) {
	e := newLeaseEnv(t)
	r := e.r
	ds := leaseDebits(window(1000, time.Hour), window(100_000, time.Hour))
	ds[0].Amount, ds[1].Amount = 1, 1
	warmLease(t, r, ds, 10)
	a := heldLease(r.Store, ds[0])
	// Another gateway takes everything counter a has left in Redis: only
	// the lease still holds some of it.
	p := []counter.Debit{ds[0]}
	p[0].Amount = e.free(t, ds[0])
	reserveOK(t, e.reader, p)
	// A reservation counter b's lease cannot serve, and a's lease can.
	call := slices.Clone(ds)
	call[0].Amount = a.granted - a.used
	call[1].Amount = heldLease(r.Store, ds[1]).granted + 1
	res := reserveOK(t, r, call)
	if res.Ticket.Origin != OriginRedis {
		t.Fatalf("origin %d, want Redis", res.Ticket.Origin)
	}
}
