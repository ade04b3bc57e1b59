// Package memory is the in-process counter store: sharded maps of counters
// behind mutexes, using the arithmetic of package counter.
package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sluice/counter"
)

// Options configures a Store.
type Options struct {
	// Now is the clock (nil: time.Now). Counter arithmetic follows it exactly.
	Now func() time.Time
	// Shards is the number of lock shards, rounded up to a power of two
	// (0: 64).
	Shards int
	// SweepEvery is the period of the background sweep that evicts counters
	// equivalent to absent (0: one minute; negative: no background sweep,
	// call Sweep).
	SweepEvery time.Duration
}

const (
	defaultShards = 64
	defaultSweep  = time.Minute
	// inline is how many debits per call are handled without heap scratch.
	inline = 8
	// shrinkMin: a shard map that once held this many entries is rebuilt when
	// the sweep leaves it a quarter full (Go maps never give memory back).
	shrinkMin = 128
)

// Store implements counter.Store in memory. Safe for concurrent use.
type Store struct {
	now    func() time.Time
	seed   maphash.Seed
	mask   uint64
	shards []shard

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	sweeps    atomic.Uint64
}

// shard owns the counters whose key hashes to it. Padded to a cache line so
// neighbouring shard locks do not share one.
type shard struct {
	mu   sync.Mutex
	m    map[string]*entry
	peak int
	_    [40]byte
}

// entry is one stored counter state. exp is the µs from which the state is
// equivalent to absent under the limit it was last written with.
type entry struct {
	st  counter.State
	exp int64
	alg counter.Algorithm
}

var _ counter.Store = (*Store)(nil)

// New returns a Store and, unless disabled, starts its sweep goroutine
// (stopped by Close).
func New(o Options) *Store {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	n := o.Shards
	if n <= 0 {
		n = defaultShards
	}
	n = 1 << bits.Len(uint(n-1))
	s := &Store{now: now, seed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]shard, n)}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*entry)
	}
	every := o.SweepEvery
	if every == 0 {
		every = defaultSweep
	}
	if every > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.sweepLoop(every)
	}
	return s
}

// slot is the per-debit scratch of one Reserve or Peek.
type slot struct {
	sh    *shard
	c     *entry // stored counter of this key (nil: absent)
	base  counter.State
	cur   counter.State // before this debit's charge (after earlier same-key debits)
	after counter.State
	dup   int  // index of the previous debit with the same key, or -1
	last  bool // no later debit has the same key
}

// Reserve implements counter.Store.
func (s *Store) Reserve(_ context.Context, debits []counter.Debit, res *counter.Result) error {
	return s.eval(debits, res, true)
}

// Peek implements counter.Store.
func (s *Store) Peek(_ context.Context, debits []counter.Debit, res *counter.Result) error {
	return s.eval(debits, res, false)
}

func (s *Store) eval(debits []counter.Debit, res *counter.Result, charge bool) error {
	n := len(debits)
	res.Reset(n)
	for i := range debits {
		if err := counter.ValidateDebit(&debits[i]); err != nil {
			return err
		}
	}
	var buf [inline]slot
	var slots []slot
	if n <= inline {
		slots = buf[:n]
	} else {
		slots = make([]slot, n)
	}
	var lbuf [inline]uint32
	locks := lbuf[:0]
	for i := range debits {
		sl := &slots[i]
		idx := s.index(debits[i].Key)
		sl.sh = &s.shards[idx]
		sl.dup, sl.last = -1, true
		for j := i - 1; j >= 0; j-- {
			if debits[j].Key == debits[i].Key {
				sl.dup = j
				slots[j].last = false
				break
			}
		}
		locks = addShard(locks, idx)
	}
	s.lock(locks)
	defer s.unlock(locks)
	// Read the clock under the locks so that operations on one counter see
	// non-decreasing times in lock order.
	now := s.now().UnixMicro()

	res.Allowed = true
	for i := range debits {
		d, sl := &debits[i], &slots[i]
		l := &d.Limit
		if sl.dup >= 0 {
			p := &slots[sl.dup]
			sl.c = p.c
			if debits[sl.dup].Limit.Algorithm == l.Algorithm {
				sl.base, sl.cur = p.base, p.after
			} else {
				// The earlier debit leaves a state of another algorithm,
				// which counts as absent.
				sl.cur = counter.Absent(*l, now)
				sl.base = sl.cur
			}
		} else {
			if c := sl.sh.m[d.Key]; c != nil && c.alg == l.Algorithm {
				sl.c, sl.cur = c, c.st.Advance(*l, now)
			} else {
				sl.c, sl.cur = c, counter.Absent(*l, now)
			}
			sl.base = sl.cur
		}
		if res.Allowed && !sl.cur.Affords(*l, d.Amount) {
			res.Allowed, res.Denied = false, i
			res.RetryAfter, res.Never = sl.cur.Denial(*l, d.Amount, now)
		}
		sl.after = sl.cur.Charge(*l, d.Amount)
	}

	for i := range debits {
		d, sl := &debits[i], &slots[i]
		l := &d.Limit
		st := sl.base
		if res.Allowed && charge {
			st = sl.after
		}
		res.Remaining[i] = st.Remaining(*l)
		res.ResetAfter[i] = st.ResetAfter(*l, now)
		if l.Algorithm != counter.TokenBucket {
			res.Ticket.Window[i] = st.Stamp
		}
		if res.Allowed && charge && sl.last {
			sl.sh.put(d.Key, sl.c, st, *l)
		}
	}
	return nil
}

// put stores st for key (c: the counter already stored, or nil). A state
// equivalent to absent is deleted rather than stored.
func (sh *shard) put(key string, c *entry, st counter.State, l counter.Limit) {
	if st.IsAbsent(l) {
		if c != nil {
			delete(sh.m, key)
		}
		return
	}
	if c != nil {
		*c = entry{st: st, exp: st.ExpiresAt(l), alg: l.Algorithm}
		return
	}
	// Clone: the key may share memory with a larger caller string.
	sh.m[strings.Clone(key)] = &entry{st: st, exp: st.ExpiresAt(l), alg: l.Algorithm}
	if len(sh.m) > sh.peak {
		sh.peak = len(sh.m)
	}
}

// Adjust implements counter.Store. Debits are applied in order; a bucket with
// no state is adjusted from full.
func (s *Store) Adjust(_ context.Context, debits []counter.Debit, t *counter.Ticket, deltas []int64) error {
	n := len(debits)
	if t == nil || len(t.Window) != n || len(deltas) != n {
		return fmt.Errorf("%w: adjust of %d debits with %d deltas", counter.ErrInvalidLimit, n, len(deltas))
	}
	var lbuf, ibuf [inline]uint32
	locks, idxs := lbuf[:0], ibuf[:0]
	for i := range debits {
		if err := debits[i].Limit.Validate(); err != nil {
			return fmt.Errorf("key %q: %w", debits[i].Key, err)
		}
		idx := s.index(debits[i].Key)
		idxs = append(idxs, idx)
		locks = addShard(locks, idx)
	}
	s.lock(locks)
	defer s.unlock(locks)
	now := s.now().UnixMicro()
	for i := range debits {
		if deltas[i] == 0 {
			// Nothing to apply; in particular a bucket's zero delta must not
			// replace a state of another algorithm (the redis store skips it
			// too).
			continue
		}
		d := &debits[i]
		l := d.Limit
		sh := &s.shards[idxs[i]]
		c := sh.m[d.Key]
		if l.Algorithm == counter.TokenBucket {
			st := counter.Absent(l, now)
			if c != nil && c.alg == l.Algorithm {
				st = c.st.Advance(l, now)
			}
			sh.put(d.Key, c, st.AdjustBucket(deltas[i]), l)
			continue
		}
		if c == nil || c.alg != l.Algorithm {
			continue // window ended and evicted, or never charged
		}
		if st, ok := c.st.AdjustWindow(t.Window[i], deltas[i]); ok {
			c.st = st
		}
	}
	return nil
}

// Close stops the sweep goroutine and waits for it to exit. The store stays
// usable. Idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
	})
	return nil
}

func (s *Store) sweepLoop(every time.Duration) {
	defer close(s.done)
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tk.C:
			s.Sweep()
		}
	}
}

// Sweep evicts every counter equivalent to absent at the current time and
// returns how many it evicted. It locks one shard at a time.
func (s *Store) Sweep() int {
	evicted := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		now := s.now().UnixMicro()
		for k, c := range sh.m {
			if c.exp <= now {
				delete(sh.m, k)
				evicted++
			}
		}
		if sh.peak >= shrinkMin && len(sh.m) <= sh.peak/4 {
			m := make(map[string]*entry, len(sh.m))
			for k, c := range sh.m {
				m[k] = c
			}
			sh.m, sh.peak = m, len(m)
		}
		sh.mu.Unlock()
	}
	s.sweeps.Add(1)
	return evicted
}

// Len returns the number of stored counters.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

func (s *Store) index(key string) uint32 {
	return uint32(maphash.String(s.seed, key) & s.mask)
}

// addShard inserts shard index i into the ascending, duplicate-free set.
// Locking a call's shards in ascending order makes concurrent multi-shard
// calls deadlock-free.
func addShard(set []uint32, i uint32) []uint32 {
	pos := len(set)
	for pos > 0 && set[pos-1] > i {
		pos--
	}
	if pos > 0 && set[pos-1] == i {
		return set
	}
	set = append(set, 0)
	copy(set[pos+1:], set[pos:])
	set[pos] = i
	return set
}

func (s *Store) lock(set []uint32) {
	for _, i := range set {
		s.shards[i].mu.Lock()
	}
}

func (s *Store) unlock(set []uint32) {
	for j := len(set) - 1; j >= 0; j-- {
		s.shards[set[j]].mu.Unlock()
	}
}
