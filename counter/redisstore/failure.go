package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"sluice/counter"
)

// A call to Redis that fails follows the store's failure mode (see the
// package doc): failed counts and logs the error, arms the back-off during
// which calls skip Redis (skipping), and answers from the local fallback
// (open) or with ErrUnavailable (closed); up ends the back-off at the next
// round trip that succeeds.

// probeInterval is how long calls skip Redis after it failed; then one call
// tries it again. It bounds both the calls that wait on a dead server and
// the delay before recovery is noticed.
const probeInterval = 250 * time.Millisecond

// logEvery rate-limits the outage and recovery logs.
const logEvery = 10 * time.Second

// failed handles an error of a call to Redis of op. The caller's own
// context being done is returned as is (its request is gone). Any other
// error arms the back-off, is counted by kind and logged (see logFailure),
// and onFail runs: the failure mode's answer (the local fallback in mode
// open, ErrUnavailable in mode closed).
func (s *Store) failed(ctx context.Context, op string, err error, onFail func() error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		s.m.error(op, kindCanceled)
		return fmt.Errorf("redisstore: %s: %w", op, ctxErr)
	}
	kind := classify(err)
	s.m.error(op, kind)
	s.skipUntil.Store(time.Now().Add(probeInterval).UnixNano())
	s.m.fallback.Set(1)
	s.logFailure(op, kind, err)
	return onFail()
}

// logFailure logs a failed call: an outage at warn level, a bug or an
// unknown error at error level (on their own limiter, so that a bug is not
// hidden among outage reports), each at most once per logEvery. Each line
// carries the number of reports suppressed since the last one; the metric
// counts every one.
func (s *Store) logFailure(op, kind string, err error) {
	mode := "serving from the local fallback (failureMode open)"
	if s.closed {
		mode = "failing calls with ErrUnavailable (failureMode closed)"
	}
	if isOutage(kind) {
		if s.outageLog.allow(logEvery) {
			s.log.Warn("redisstore: redis unavailable; "+mode, "op", op, "kind", kind, "err", err,
				"suppressed", s.outageLog.suppressed.Swap(0))
		}
		return
	}
	if s.bugLog.allow(logEvery) {
		what := "redisstore: redis call failed with an error that is not an outage (a bug in the store: please report it); "
		if kind == kindOther {
			what = "redisstore: redis call failed with an unexpected error; "
		}
		s.log.Error(what+mode, "op", op, "kind", kind, "err", err, "suppressed", s.bugLog.suppressed.Swap(0))
	}
}

// fallback serves an evaluation while Redis is unavailable: from the local
// store in failure mode open (res.Local set), ErrUnavailable in mode closed.
func (s *Store) fallback(ctx context.Context, op string, debits []counter.Debit, res *counter.Result, cause error) error {
	if s.closed {
		return unavailable(cause)
	}
	s.m.local.WithLabelValues(op).Inc()
	var err error
	if op == opPeek {
		err = s.local.Peek(ctx, debits, res)
	} else {
		s.m.reservations[servedLocal].Inc()
		err = s.local.Reserve(ctx, debits, res)
		if err == nil && res.Allowed {
			s.journalLocal(debits, res.Ticket.Window, func(i int) int64 { return debits[i].Amount })
		}
	}
	res.Ticket.Origin = OriginLocal
	res.Local = true
	return err
}

// dropErr is what a dropped settlement returns: nothing in failure mode open
// (the failure is logged and counted), ErrUnavailable in mode closed.
func (s *Store) dropErr(cause error) error {
	if !s.closed {
		return nil
	}
	return unavailable(cause)
}

func unavailable(cause error) error {
	if cause == nil {
		return fmt.Errorf("redisstore: %w (redis unavailable, retrying shortly)", counter.ErrUnavailable)
	}
	return fmt.Errorf("redisstore: %w: %w", counter.ErrUnavailable, cause)
}

// skipping reports whether calls should skip Redis because it failed less
// than probeInterval ago.
func (s *Store) skipping() bool {
	until := s.skipUntil.Load()
	return until != 0 && time.Now().UnixNano() < until
}

// up records a successful round trip, and starts copying the local
// fallback's charges to Redis if there are any. The recovery is logged at
// most once per logEvery: under an error that only some operations meet
// (OOM and READONLY refuse writes, not reads) the store goes back and forth.
func (s *Store) up() {
	if s.skipUntil.Load() != 0 {
		s.skipUntil.Store(0)
		s.m.fallback.Set(0)
		if s.upLog.allow(logEvery) {
			s.log.Info("redisstore: redis answering again", "suppressed", s.upLog.suppressed.Swap(0))
		}
	}
	s.startCopyBack()
}

// logLimiter lets one log line through per interval and counts the others.
type logLimiter struct {
	last       atomic.Int64 // UnixNano of the last line let through
	suppressed atomic.Int64
}

// allow reports whether a line may be logged now, at most one per every.
func (l *logLimiter) allow(every time.Duration) bool {
	now := time.Now().UnixNano()
	last := l.last.Load()
	if last != 0 && now-last < int64(every) || !l.last.CompareAndSwap(last, now) {
		l.suppressed.Add(1)
		return false
	}
	return true
}
