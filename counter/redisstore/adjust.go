package redisstore

import (
	"context"
	"fmt"
	"time"

	"sluice/counter"
)

// Adjust implements counter.Store. A ticket from the fallback store settles
// there; a Redis ticket whose settlement cannot reach Redis is dropped and
// counted (its keys expire by their TTL).
func (s *Store) Adjust(ctx context.Context, debits []counter.Debit, t *counter.Ticket, deltas []int64) error {
	if t == nil || len(deltas) != len(debits) || len(t.Window) != len(debits) {
		return fmt.Errorf("redisstore: Adjust with %d debits, %d deltas and a ticket of %d windows", len(debits), len(deltas), ticketLen(t))
	}
	for i := range debits {
		if err := debits[i].Limit.Validate(); err != nil {
			return fmt.Errorf("redisstore: key %q: %w", debits[i].Key, err)
		}
	}
	if t.Origin == OriginLocal {
		if err := s.local.Adjust(ctx, debits, t, deltas); err != nil {
			return err
		}
		s.journalLocal(debits, t.Window, func(i int) int64 { return deltas[i] })
		return nil
	}
	if s.leases != nil {
		deltas = s.leases.absorb(debits, t, deltas)
	}
	if allZero(deltas) {
		return nil
	}
	sc := getCall()
	err := s.prepare(sc, kindAdjust, debits, t.Window, deltas)
	if err != nil {
		putCall(sc)
		return err
	}
	if s.skipping() {
		putCall(sc)
		s.m.dropped.Inc()
		return s.dropErr(nil)
	}
	sc.start = time.Now()
	s.m.ops[opAdjust].Inc()
	// In failure mode open a settlement returns nil whether it lands or is
	// dropped, so when it would queue anyway the caller need not wait for
	// it (see Background settlement in docs/redis.md). Mode closed waits,
	// to return ErrUnavailable.
	if !s.closed && s.co.post(sc, s.settledFn) {
		return nil
	}
	s.co.do(ctx, sc)
	err = s.settle(ctx, sc)
	putCall(sc)
	return err
}

// settle reads the outcome of an Adjust's round trip.
func (s *Store) settle(ctx context.Context, sc *scriptCall) error {
	err := sc.err
	s.m.observe(opAdjust, sc.start)
	if err != nil {
		return s.failed(ctx, opAdjust, err, func() error {
			s.m.dropped.Inc()
			return s.dropErr(err)
		})
	}
	s.up()
	return nil
}

// settled completes a background Adjust (see coalescer.post), which only
// mode open sends: every Redis error is logged and counted by failed and
// returns nil, so what is logged here is any other error.
func (s *Store) settled(sc *scriptCall) {
	if err := s.settle(context.Background(), sc); err != nil {
		s.log.Error("redisstore: settlement failed", "err", err)
	}
	putCall(sc)
}

func allZero(ds []int64) bool {
	for _, d := range ds {
		if d != 0 {
			return false
		}
	}
	return true
}

func ticketLen(t *counter.Ticket) int {
	if t == nil {
		return -1
	}
	return len(t.Window)
}
