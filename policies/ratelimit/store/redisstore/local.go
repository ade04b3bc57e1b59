package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"sluice/policies/ratelimit/store"
)

// localStore is the in-process fallback that serves calls while Redis is
// unreachable in failureMode open. It applies the arithmetic of package store
// to a map guarded by one mutex: it only carries traffic during an outage, so
// simplicity beats throughput here. Entries are dropped once equivalent to
// absent (maybeSweep).
type localStore struct {
	now func() time.Time

	mu     sync.Mutex
	states map[string]localEntry
	// ops counts calls since the last sweep.
	ops int
}

// localEntry is a stored state and the µs from which it is equivalent to
// absent (store.State.ExpiresAt under the limit it was written with).
type localEntry struct {
	st      store.State
	expires int64
}

func newLocalStore(now func() time.Time) *localStore {
	if now == nil {
		now = time.Now
	}
	return &localStore{now: now, states: make(map[string]localEntry)}
}

// sweepEvery bounds the map: every so many calls, states that expired are
// removed (cost proportional to the map, amortised over the calls).
const sweepEvery = 4096

func (l *localStore) Reserve(_ context.Context, debits []store.Debit, res *store.Result) error {
	return l.evaluate(debits, res, true)
}

func (l *localStore) Peek(_ context.Context, debits []store.Debit, res *store.Result) error {
	return l.evaluate(debits, res, false)
}

func (l *localStore) evaluate(debits []store.Debit, res *store.Result, charge bool) error {
	res.Reset(len(debits))
	for i := range debits {
		if err := store.ValidateDebit(&debits[i]); err != nil {
			return err
		}
	}
	now := l.now().UnixMicro()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maybeSweep(now)
	states := make([]store.State, len(debits))
	for i := range debits {
		d := &debits[i]
		e, ok := l.states[d.Key]
		st := e.st
		if !ok {
			st = store.Absent(d.Limit, now)
		}
		st = st.Advance(d.Limit, now)
		states[i] = st
		if res.Denied < 0 && !st.Affords(d.Limit, d.Amount) {
			res.Denied = i
			res.RetryAfter, res.Never = st.Denial(d.Limit, d.Amount, now)
		}
	}
	res.Allowed = res.Denied < 0
	for i := range debits {
		d := &debits[i]
		if res.Allowed && charge && d.Amount > 0 {
			states[i] = states[i].Charge(d.Limit, d.Amount)
			l.put(d, states[i])
		}
		res.Remaining[i] = states[i].Remaining(d.Limit)
		res.ResetAfter[i] = states[i].ResetAfter(d.Limit, now)
		if d.Limit.Algorithm != store.TokenBucket {
			res.Ticket.Window[i] = states[i].Stamp
		}
	}
	return nil
}

func (l *localStore) Adjust(_ context.Context, debits []store.Debit, t *store.Ticket, deltas []int64) error {
	if len(deltas) != len(debits) || t == nil || len(t.Window) != len(debits) {
		return fmt.Errorf("redisstore: Adjust with %d debits, %d deltas", len(debits), len(deltas))
	}
	now := l.now().UnixMicro()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range debits {
		d := &debits[i]
		if deltas[i] == 0 {
			continue
		}
		e, ok := l.states[d.Key]
		st := e.st
		if d.Limit.Algorithm == store.TokenBucket {
			if !ok {
				st = store.Absent(d.Limit, now)
			}
			l.put(d, st.Advance(d.Limit, now).AdjustBucket(d.Limit, deltas[i]))
			continue
		}
		if !ok {
			continue
		}
		if st, applied := st.AdjustWindow(t.Window[i], deltas[i]); applied {
			l.states[d.Key] = localEntry{st: st, expires: e.expires}
		}
	}
	return nil
}

func (l *localStore) put(d *store.Debit, st store.State) {
	if st.IsAbsent(d.Limit) {
		delete(l.states, d.Key)
		return
	}
	l.states[d.Key] = localEntry{st: st, expires: st.ExpiresAt(d.Limit)}
}

// maybeSweep drops expired states every sweepEvery calls, so the map holds
// only counters still in use. Caller holds mu.
func (l *localStore) maybeSweep(now int64) {
	l.ops++
	if l.ops < sweepEvery {
		return
	}
	l.ops = 0
	for k, e := range l.states {
		if e.expires <= now {
			delete(l.states, k)
		}
	}
}

func (l *localStore) Close() error { return nil }
