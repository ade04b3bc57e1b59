package redisstore

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"sluice/counter"
)

// Budget leases. A replica takes a slice of a counter's remaining capacity
// (a lease: units, window, expiry) in the same Redis operation as a
// reservation that its leases could not serve, and then serves
// reservations and settlements of that counter from it in memory; it
// releases the lease, reporting what it used, when the lease no longer
// serves a reservation (used up, expired, a limit edit, a window rollover)
// or when the reaper finds it idle or about to expire. The Redis side (the
// lease slot, the grant rule, expiry) is lua/lease.lua; docs/redis.md
// ("Leases") has the design, its bounds, and when to turn it off.
//
// Concurrency: a group's leases (one per counter at most) and rate meters
// live in one leaseGroup, guarded by its mutex; a call locks one group. A
// counter has at most one grant in flight (asking). The reaper is one
// goroutine per store.

// LeaseOptions configures leases (Options.Leases). The zero value is off.
type LeaseOptions struct {
	// Enabled turns leases on for the counters they can help: those of a
	// group (counter.Debit.Group), a token bucket, a calendar month or a
	// fixed window of at least MinWindow, with a Max of at least
	// MinCapacity. A call leases only when all its debits can be.
	Enabled bool
	// TTL is how long a replica serves from one lease (default
	// DefaultLeaseTTL). Redis keeps a lease that was not released LeaseGrace
	// longer, so the capacity of a replica that died returns within TTL +
	// LeaseGrace.
	TTL time.Duration
	// MinWindow is the shortest fixed window leased (default
	// DefaultLeaseMinWindow).
	MinWindow time.Duration
	// MinCapacity is the smallest Max leased (default
	// DefaultLeaseMinCapacity).
	MinCapacity int64
	// Exclude, when set, reports the groups whose counters are never leased
	// (every reservation goes to Redis). It is called once per group and
	// store while the group is in use.
	Exclude func(group string) bool
}

// Lease defaults and the rules of the lease size (see lua/lease.lua).
const (
	DefaultLeaseTTL         = 2 * time.Second
	DefaultLeaseMinWindow   = time.Minute
	DefaultLeaseMinCapacity = 1000
	// LeaseGrace is how much longer than its TTL Redis keeps a lease that
	// was not released.
	LeaseGrace = time.Second
	// LeaseShare: one grant takes at most 1/LeaseShare of what its counter
	// has free above the exact zone.
	LeaseShare = 16
	// LeaseZone is the fraction of a limit never leased: once a counter has
	// less than that left, every reservation is exact in Redis.
	LeaseZone = 0.1
	// leaseMinRequests: a lease smaller than this many reservations of the
	// size asking is not worth a grant.
	leaseMinRequests = 4
	// leaseForget is how long a counter's rate meter is kept without use.
	leaseForget = time.Minute
	// maxPendingReleases bounds the releases kept for a retry while Redis
	// is unavailable; beyond it they are dropped and counted.
	maxPendingReleases = 1 << 16
)

// leaseTable is a store's leases.
type leaseTable struct {
	o   LeaseOptions // defaults filled in
	now func() time.Time
	// tick is the reaper's period; idle is how long a lease may go unused
	// before the reaper releases it; horizon is how much of the local rate
	// a lease asks for (the time one lease should last).
	tick, idle, horizon time.Duration

	groups sync.Map // group -> *leaseGroup

	pendMu  sync.Mutex
	pending []leaseRelease // releases that failed, for a retry

	stop    chan struct{}
	done    chan struct{}
	stopped sync.Once
}

// leaseGroup holds one group's leases and rate meters.
type leaseGroup struct {
	mu       sync.Mutex
	excluded bool // Exclude said so: nothing is ever leased
	dead     bool // the reaper removed it from the table; look it up again
	seen     int64
	counters map[string]*leaseCounter // by counter key
}

// leaseCounter is one counter's state on this replica.
type leaseCounter struct {
	rate   rateMeter
	l      lease
	asking bool  // a grant for this counter is in flight
	seen   int64 // local ns of its last reservation
}

// lease is a grant this replica holds (id 0: none). granted units were
// counted in Redis (a window's as usage, a bucket's as held); used is what
// this replica charged to them since (reservations plus settlement
// deltas; at most granted, below 0 when refunds of earlier reservations
// came back to it).
type lease struct {
	id            uint64
	limit         counter.Limit
	window        int64 // the window start it was granted in (0: bucket)
	granted, used int64
	at, deadline  int64 // local ns: when it was asked for, when it stops serving
	windowEnd     int64 // local ns (windows)
	lastUse       int64 // local ns
	// What Redis reported with the grant, for the figures of reservations
	// served from the lease: what the counter had left without the grant
	// (windows); what the bucket consumed and what the other leases held.
	rem        int64
	cons, hold float64
}

// leaseRelease is a lease to release in Redis: its counter and what its
// holder used.
type leaseRelease struct {
	key, group string
	limit      counter.Limit
	id         uint64
	window     int64
	used       int64
}

// leaseAsk is what a lease reserve carries per debit: a lease to release
// first (rid, with its window and usage) and a new lease to ask for (lid,
// want, min).
type leaseAsk struct {
	rid      uint64
	rw, ru   int64
	lid      uint64
	want, mn int64
}

func newLeaseTable(o LeaseOptions, now func() time.Time) *leaseTable {
	if o.TTL <= 0 {
		o.TTL = DefaultLeaseTTL
	}
	if o.MinWindow <= 0 {
		o.MinWindow = DefaultLeaseMinWindow
	}
	if o.MinCapacity <= 0 {
		o.MinCapacity = DefaultLeaseMinCapacity
	}
	if now == nil {
		now = time.Now
	}
	return &leaseTable{
		o: o, now: now,
		tick: o.TTL / 8, idle: o.TTL / 4, horizon: o.TTL / 2,
		stop: make(chan struct{}), done: make(chan struct{}),
	}
}

func (t *leaseTable) clock() int64 { return t.now().UnixNano() }

// leasable reports whether l is a limit leases apply to.
func (t *leaseTable) leasable(l counter.Limit) bool {
	if l.Max < t.o.MinCapacity {
		return false
	}
	switch l.Algorithm {
	case counter.TokenBucket, counter.CalendarMonth:
		return true
	case counter.FixedWindow:
		return l.Period >= t.o.MinWindow
	}
	return false
}

// lockGroup returns the locked group of debits when leases apply to the
// call (every debit in one group, leasable, no counter twice), else nil.
func (t *leaseTable) lockGroup(debits []counter.Debit, now int64) *leaseGroup {
	name := debits[0].Group
	if name == "" {
		return nil
	}
	for i := range debits {
		d := &debits[i]
		if d.Group != name || !t.leasable(d.Limit) {
			return nil
		}
		for j := range i {
			if debits[j].Key == d.Key {
				return nil
			}
		}
	}
	for {
		v, ok := t.groups.Load(name)
		if !ok {
			ng := &leaseGroup{counters: map[string]*leaseCounter{}}
			ng.excluded = t.o.Exclude != nil && t.o.Exclude(name)
			v, _ = t.groups.LoadOrStore(name, ng)
		}
		g := v.(*leaseGroup)
		g.mu.Lock()
		if g.dead {
			g.mu.Unlock()
			continue
		}
		g.seen = now
		if g.excluded {
			g.mu.Unlock()
			return nil
		}
		return g
	}
}

// loadGroup returns the locked group named name if it exists, else nil.
func (t *leaseTable) loadGroup(name string) *leaseGroup {
	if name == "" {
		return nil
	}
	v, ok := t.groups.Load(name)
	if !ok {
		return nil
	}
	g := v.(*leaseGroup)
	g.mu.Lock()
	if g.dead || g.excluded {
		g.mu.Unlock()
		return nil
	}
	return g
}

// counter returns key's state in g (g locked), creating it.
func (g *leaseGroup) counter(key string) *leaseCounter {
	c := g.counters[key]
	if c == nil {
		c = &leaseCounter{}
		g.counters[key] = c
	}
	return c
}

// valid reports whether l may serve d at now: held, granted under d's
// limit (an edit invalidates it), not expired.
func (l *lease) valid(d *counter.Debit, now int64) bool {
	return l.id != 0 && l.limit == d.Limit && now < l.deadline
}

// serves reports whether l can serve d's amount at now.
func (l *lease) serves(d *counter.Debit, now int64) bool {
	return l.valid(d, now) && l.granted-l.used >= d.Amount
}

// fill writes l's view of its counter into res's debit i: what Redis had
// left when the lease was granted, less what the lease served since (for a
// bucket, with the refill since of what it consumed then; units held by
// leases do not refill).
func (l *lease) fill(res *counter.Result, i int, now int64) {
	res.Ticket.Window[i] = l.window
	lim := l.limit
	if lim.Algorithm != counter.TokenBucket {
		res.Remaining[i] = l.rem - l.used
		res.ResetAfter[i] = time.Duration(max(0, l.windowEnd-now))
		return
	}
	refill := float64(now-l.at) / float64(lim.Period) * float64(lim.Max)
	taken := math.Max(0, l.cons-refill) + l.hold + float64(l.used)
	res.Remaining[i] = int64(math.Floor(float64(lim.Max) - taken))
	res.ResetAfter[i] = time.Duration(math.Ceil(math.Max(0, taken) / float64(lim.Max) * float64(lim.Period)))
}

// release detaches l from its counter (g locked) and returns what Redis
// must be told; the unused part is counted.
func (t *leaseTable) release(s *Store, c *leaseCounter, key, group string) leaseRelease {
	l := &c.l
	r := leaseRelease{key: key, group: group, limit: l.limit, id: l.id, window: l.window, used: l.used}
	if unused := l.granted - l.used; unused > 0 {
		s.m.leaseUnused.Add(float64(unused))
	}
	s.m.leases.Dec()
	*l = lease{}
	return r
}

// rateMeter estimates the units per second charged to one counter on this
// replica: the units of the current second plus those of the previous one
// weighted by the part of it the last second still covers.
type rateMeter struct {
	sec       int64 // the current second (Unix)
	cur, prev float64
}

func (r *rateMeter) add(now, units int64) {
	sec := now / int64(time.Second)
	if sec != r.sec {
		if sec == r.sec+1 {
			r.prev = r.cur
		} else {
			r.prev = 0
		}
		r.cur, r.sec = 0, sec
	}
	r.cur += float64(units)
}

func (r *rateMeter) perSecond(now int64) float64 {
	sec := now / int64(time.Second)
	cur, prev := r.cur, r.prev
	switch sec {
	case r.sec:
	case r.sec + 1:
		prev, cur = cur, 0
	default:
		return 0
	}
	frac := float64(now%int64(time.Second)) / float64(time.Second)
	return prev*(1-frac) + cur
}

// newLeaseID returns a lease id: 52 random bits, not 0 (an exact Lua
// number, like a counter's id).
func newLeaseID() uint64 {
	for {
		if id := rand.Uint64() & (1<<52 - 1); id != 0 {
			return id
		}
	}
}

// maxLeaseDebits bounds the debits of a call served by leases (the
// per-call buffers live on the stack); larger calls go to Redis.
const maxLeaseDebits = 16

// reserveLeased serves a Reserve from this replica's leases when they all
// can, and otherwise sends it as a lease reserve that releases the call's
// leases and asks for new ones where the local rate is worth one. handled is false when leases do not apply (the caller sends a
// plain reserve).
func (s *Store) reserveLeased(ctx context.Context, debits []counter.Debit, res *counter.Result) (handled bool, err error) {
	t := s.leases
	if len(debits) > maxLeaseDebits {
		return false, nil
	}
	now := t.clock()
	g := t.lockGroup(debits, now)
	if g == nil {
		return false, nil
	}
	var cbuf [maxLeaseDebits]*leaseCounter
	cs := cbuf[:len(debits)]
	hit := true
	for i := range debits {
		c := g.counter(debits[i].Key)
		c.rate.add(now, debits[i].Amount)
		c.seen = now
		cs[i] = c
		hit = hit && c.l.serves(&debits[i], now)
	}
	if hit {
		res.Reset(len(debits))
		res.Allowed = true
		for i, c := range cs {
			c.l.used += debits[i].Amount
			c.l.lastUse = now
			c.l.fill(res, i, now)
		}
		g.mu.Unlock()
		res.Ticket.Origin = OriginLease
		s.m.reservations[servedLease].Inc()
		return true, nil
	}
	var abuf [maxLeaseDebits]leaseAsk
	asks := abuf[:len(debits)]
	var rbuf [maxLeaseDebits]leaseRelease
	rels := rbuf[:0]
	send := false
	horizon := t.horizon.Seconds()
	for i, c := range cs {
		d := &debits[i]
		// Every lease of the call is released, also one that could serve
		// its debit: this reservation is charged in Redis, where a lease's
		// unused units count as taken, and must not be denied for units its
		// own gateway holds.
		if c.l.id != 0 {
			r := t.release(s, c, d.Key, d.Group)
			asks[i].rid, asks[i].rw, asks[i].ru = r.id, r.window, r.used
			rels = append(rels, r)
			send = true
		}
		if c.l.id == 0 && !c.asking {
			mn := leaseMinRequests * max(d.Amount, 1)
			want := math.Min(c.rate.perSecond(now)*horizon, float64(d.Limit.Max))
			if want >= float64(mn) {
				asks[i].lid, asks[i].want, asks[i].mn = newLeaseID(), int64(want), mn
				c.asking = true
				send = true
			}
		}
	}
	g.mu.Unlock()
	if !send {
		return false, nil
	}
	// unask ends the asks of this call, installing the grants (nil: none).
	unask := func(grants []leaseGrant, at int64) {
		g.mu.Lock()
		defer g.mu.Unlock()
		for i, c := range cs {
			if asks[i].lid == 0 {
				continue
			}
			c.asking = false
			if grants == nil || grants[i].units <= 0 {
				continue
			}
			d, gr := &debits[i], &grants[i]
			c.l = lease{
				id: asks[i].lid, limit: d.Limit, window: res.Ticket.Window[i],
				granted: gr.units, at: at, deadline: at + int64(t.o.TTL),
				windowEnd: at + int64(res.ResetAfter[i]), lastUse: at,
				rem: res.Remaining[i], cons: gr.cons, hold: gr.hold,
			}
			s.m.leases.Inc()
			s.m.leased.Add(float64(gr.units))
		}
	}
	res.Reset(len(debits))
	sc := getCall()
	defer putCall(sc)
	if err := s.prepareLease(sc, debits, asks); err != nil {
		unask(nil, 0)
		t.retry(s, rels)
		return true, err
	}
	if s.skipping() {
		unask(nil, 0)
		t.retry(s, rels)
		return true, s.fallback(ctx, opReserve, debits, res, nil)
	}
	at := t.clock()
	start := time.Now()
	s.m.ops[opLease].Inc()
	s.co.do(ctx, sc)
	err = sc.err
	s.m.observe(opReserve, start)
	var gbuf [maxLeaseDebits]leaseGrant
	grants := gbuf[:len(debits)]
	if err == nil {
		if reply, ok := sc.reply.(string); !ok || !fillLeaseResult(res, grants, reply) {
			err = errMalformed(sc.reply, len(debits))
		}
	}
	if err != nil {
		unask(nil, 0)
		t.retry(s, rels)
		return true, s.failed(ctx, opReserve, err, func() error { return s.fallback(ctx, opReserve, debits, res, err) })
	}
	s.up()
	res.Ticket.Origin = OriginRedis
	s.m.reservations[servedRedis].Inc()
	unask(grants, at)
	return true, nil
}

// leaseGrant is what a lease reserve's reply says per debit: the units
// granted and, for a bucket, what it consumed and what other leases held.
type leaseGrant struct {
	units      int64
	cons, hold float64
}

// fillLeaseResult reads a lease reserve's reply (a reserve reply, then per
// debit the units granted, what a bucket consumed and what its other
// leases hold) into res and grants.
func fillLeaseResult(res *counter.Result, grants []leaseGrant, reply string) bool {
	n := len(grants)
	head := 8 * (4 + 3*n)
	if len(reply) != head+8*3*n || !fillResult(res, reply[:head]) {
		return false
	}
	for i := range grants {
		o := head/8 + 3*i
		grants[i] = leaseGrant{units: int64(f64At(reply, o)), cons: f64At(reply, o+1), hold: f64At(reply, o+2)}
	}
	return true
}

// absorb applies what it can of a settlement to this replica's leases: a
// delta of a counter whose lease is valid and of the ticket's window, when
// it is a refund or fits in what the lease has left (a larger charge goes
// to Redis at once, so that debt is seen there as without leases); and a
// delta of a window that a lease shows has ended (a no-op by contract). It
// returns the deltas left for Redis (deltas itself when nothing was
// absorbed; never modifies deltas).
func (t *leaseTable) absorb(debits []counter.Debit, tk *counter.Ticket, deltas []int64) []int64 {
	g := t.loadGroup(debits[0].Group)
	if g == nil {
		return deltas
	}
	defer g.mu.Unlock()
	now := t.clock()
	left, copied := deltas, false
	for i := range debits {
		d, dl := &debits[i], deltas[i]
		c := g.counters[d.Key]
		if c == nil || dl == 0 || d.Group != debits[0].Group {
			continue
		}
		l := &c.l
		switch {
		case l.valid(d, now) && tk.Window[i] == l.window && dl <= l.granted-l.used:
			l.used += dl
		case l.id != 0 && l.limit == d.Limit && d.Limit.Algorithm != counter.TokenBucket && tk.Window[i] < l.window:
		default:
			continue
		}
		if !copied {
			left, copied = slices.Clone(deltas), true
		}
		left[i] = 0
	}
	return left
}

// addUnused adds to a Peek's figures what this replica's own leases of
// those counters have left: Redis counts a lease as used from its grant.
func (t *leaseTable) addUnused(debits []counter.Debit, res *counter.Result) {
	g := t.loadGroup(debits[0].Group)
	if g == nil {
		return
	}
	defer g.mu.Unlock()
	now := t.clock()
	for i := range debits {
		d := &debits[i]
		if c := g.counters[d.Key]; c != nil && d.Group == debits[0].Group && c.l.valid(d, now) && res.Ticket.Window[i] == c.l.window {
			res.Remaining[i] += c.l.granted - c.l.used
		}
	}
}

// retry keeps releases that could not be sent for the reaper to send once
// Redis answers again (both failure modes: they are usage).
func (t *leaseTable) retry(s *Store, rels []leaseRelease) {
	if len(rels) == 0 {
		return
	}
	t.pendMu.Lock()
	defer t.pendMu.Unlock()
	room := maxPendingReleases - len(t.pending)
	if room < len(rels) {
		s.m.dropped.Add(float64(len(rels) - max(room, 0)))
		rels = rels[:max(room, 0)]
	}
	t.pending = append(t.pending, rels...)
}

func (t *leaseTable) takePending() []leaseRelease {
	t.pendMu.Lock()
	defer t.pendMu.Unlock()
	p := t.pending
	t.pending = nil
	return p
}

// reap runs until close: every tick it releases the leases that are idle
// or about to expire, forgets counters and groups long unused, and retries
// the releases that failed.
func (s *Store) reap() {
	t := s.leases
	defer close(t.done)
	tick := time.NewTicker(t.tick)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			s.releaseLeases(context.Background(), false)
		}
	}
}

// releaseLeases releases the leases that are idle or expire within a tick
// (all when every is set: Close), with the releases pending a retry.
func (s *Store) releaseLeases(ctx context.Context, every bool) {
	t := s.leases
	now := t.clock()
	rels := t.takePending()
	t.groups.Range(func(k, v any) bool {
		g := v.(*leaseGroup)
		name := k.(string)
		g.mu.Lock()
		defer g.mu.Unlock()
		for key, c := range g.counters {
			l := &c.l
			if l.id != 0 && (every || l.deadline-now < int64(t.tick) || now-l.lastUse >= int64(t.idle)) {
				rels = append(rels, t.release(s, c, key, name))
			}
			if l.id == 0 && !c.asking && now-c.seen > int64(leaseForget) {
				delete(g.counters, key)
			}
		}
		if len(g.counters) == 0 && now-g.seen > int64(leaseForget) {
			g.dead = true
			t.groups.Delete(k)
		}
		return true
	})
	if len(rels) == 0 {
		return
	}
	if s.skipping() {
		t.retry(s, rels)
		return
	}
	s.sendReleases(ctx, rels)
}

// sendReleases sends rels, one lease release per group, concurrently so
// that the coalescer merges them into few invocations. Those that fail
// with an error that may clear are kept for a retry; a bug of the store
// drops them (logged).
func (s *Store) sendReleases(ctx context.Context, rels []leaseRelease) {
	slices.SortFunc(rels, func(a, b leaseRelease) int {
		switch {
		case a.group < b.group:
			return -1
		case a.group > b.group:
			return 1
		}
		return 0
	})
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxBatch)
	for len(rels) > 0 {
		n := 1
		for n < len(rels) && rels[n].group == rels[0].group && n < maxDebits {
			n++
		}
		part := rels[:n]
		rels = rels[n:]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s.sendRelease(ctx, part)
		})
	}
	wg.Wait()
}

// sendRelease sends one lease release of rels (one group).
func (s *Store) sendRelease(ctx context.Context, rels []leaseRelease) {
	sc := getCall()
	defer putCall(sc)
	err := s.prepareRelease(sc, rels)
	if err == nil {
		start := time.Now()
		s.m.ops[opRelease].Inc()
		s.co.do(ctx, sc)
		err = sc.err
		s.m.observe(opRelease, start)
	}
	if err == nil {
		s.up()
		return
	}
	// failed counts, logs and arms the back-off; a bug would fail again, so
	// its releases are dropped (and counted), the others kept for a retry.
	_ = s.failed(ctx, opRelease, err, func() error { return nil })
	if isBug(classify(err)) && ctx.Err() == nil {
		s.m.dropped.Add(float64(len(rels)))
		return
	}
	s.leases.retry(s, rels)
}

// closeLeases stops the reaper and releases every lease and pending
// release, when Redis is believed up, within copyTimeout.
func (s *Store) closeLeases() {
	t := s.leases
	t.stopped.Do(func() {
		close(t.stop)
		<-t.done
		if s.skipping() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), copyTimeout)
		defer cancel()
		s.releaseLeases(ctx, true)
	})
}
