package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"sluice/counter"
)

// While Redis is unavailable, failure mode open charges the local fallback
// store, which the other replicas do not see. So that those charges are not
// lost to the cluster-wide counters, the store journals their net amount per
// counter and window (reservations made locally, and the settlements of
// local tickets, whenever they come) and copies it to Redis once Redis
// answers again (copyBack). A copied window charge lands only while its
// window is still the current one (an ended window's usage no longer counts
// anywhere); a bucket charge is at most what the local bucket has not
// refilled yet, so that a long outage does not turn into a long block. A
// charge of a reservation whose Redis script timed out after running is
// counted on Redis and locally, and is copied: an over-count of one
// estimate, never an under-count.

// maxJournal bounds the counters journaled during one outage; charges of
// further counters are not copied (counted in the metric's "overflow").
const maxJournal = 1 << 16

// copyTimeout bounds a copy at Close.
const copyTimeout = 2 * time.Second

type journalKey struct {
	key, group string
	limit      counter.Limit
	window     int64
}

// journal is the net charges of the local fallback not yet copied to Redis.
// Safe for concurrent use.
type journal struct {
	mu      sync.Mutex
	entries map[journalKey]int64
	pending atomic.Bool // entries is not empty
}

// add journals amount(i) for each debit i in window windows[i]; zero
// amounts are skipped. It returns how many counters did not fit.
func (j *journal) add(debits []counter.Debit, windows []int64, amount func(i int) int64) (overflow int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := range debits {
		a := amount(i)
		if a == 0 {
			continue
		}
		d := &debits[i]
		k := journalKey{key: d.Key, group: d.Group, limit: d.Limit, window: windows[i]}
		if _, ok := j.entries[k]; !ok {
			if len(j.entries) >= maxJournal {
				overflow++
				continue
			}
			if j.entries == nil {
				j.entries = make(map[journalKey]int64)
			}
		}
		j.entries[k] += a
	}
	j.pending.Store(len(j.entries) > 0)
	return overflow
}

// take removes and returns every entry.
func (j *journal) take() map[journalKey]int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	e := j.entries
	j.entries = nil
	j.pending.Store(false)
	return e
}

// restore puts back entries that could not be copied.
func (j *journal) restore(e map[journalKey]int64) {
	if len(e) == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.entries == nil {
		j.entries = make(map[journalKey]int64, len(e))
	}
	for k, v := range e {
		j.entries[k] += v
	}
	j.pending.Store(true)
}

// journalLocal records a local charge (Reserve allowed on the fallback, or
// the Adjust of a local ticket) for copyBack.
func (s *Store) journalLocal(debits []counter.Debit, windows []int64, amount func(i int) int64) {
	if n := s.journal.add(debits, windows, amount); n > 0 {
		s.m.copied.WithLabelValues("overflow").Add(float64(n))
	}
}

// startCopyBack starts copyBack in the background when there are local
// charges to copy and no copy is running. Called after a successful round
// trip.
func (s *Store) startCopyBack() {
	if !s.journal.pending.Load() || !s.copying.CompareAndSwap(false, true) {
		return
	}
	s.copies.Add(1)
	go func() {
		defer s.copies.Done()
		defer s.copying.Store(false)
		s.copyBack(context.Background())
	}()
}

// copyBack sends every journaled charge to Redis, one operation each (a
// charge: see adjust in luaBatch). Entries not sent when Redis fails again,
// with any error that is not a bug of the store, or when ctx ends, stay
// journaled for the next copy.
func (s *Store) copyBack(ctx context.Context) {
	entries := s.journal.take()
	var peek counter.Result
	for k, amount := range entries {
		if ctx.Err() != nil || s.skipping() {
			break
		}
		ds := []counter.Debit{{Key: k.key, Group: k.group, Limit: k.limit}}
		if amount > 0 && k.limit.Algorithm == counter.TokenBucket {
			// Only what the local bucket has not refilled yet. (A net refund,
			// the late settlement of a copied reservation, is sent as is.)
			if err := s.local.Peek(ctx, ds, &peek); err == nil {
				amount = min(amount, max(0, k.limit.Max-peek.Remaining[0]))
			}
		}
		if amount == 0 {
			delete(entries, k)
			continue
		}
		sc := getCall()
		err := s.prepare(sc, kindCharge, ds, []int64{k.window}, []int64{amount})
		if err == nil {
			s.m.ops[opCharge].Inc()
			s.co.do(ctx, sc)
			err = sc.err
		}
		putCall(sc)
		if err != nil {
			// Redis failing again (an outage, or any error that may clear):
			// the rest waits for the next copy. A bug would fail again: the
			// charge is dropped and counted.
			kind := classify(err)
			if !isBug(kind) || ctx.Err() != nil {
				break
			}
			s.m.copied.WithLabelValues("failed").Inc()
			s.log.Error("redisstore: copying a local charge to redis failed", "key", k.key, "err", err, "kind", kind)
		} else {
			s.m.copied.WithLabelValues("copied").Inc()
		}
		delete(entries, k)
	}
	s.journal.restore(entries)
}

// finalCopy copies what is journaled before the store closes, when Redis
// is believed up, within copyTimeout.
func (s *Store) finalCopy() {
	s.copies.Wait()
	if !s.journal.pending.Load() || s.skipping() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), copyTimeout)
	defer cancel()
	s.copyBack(ctx)
}
