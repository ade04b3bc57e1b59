package redisstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"sluice/counter"
)

// Reserve implements counter.Store.
func (s *Store) Reserve(ctx context.Context, debits []counter.Debit, res *counter.Result) error {
	return s.evaluate(ctx, opReserve, debits, res)
}

// Peek implements counter.Store.
func (s *Store) Peek(ctx context.Context, debits []counter.Debit, res *counter.Result) error {
	return s.evaluate(ctx, opPeek, debits, res)
}

func (s *Store) evaluate(ctx context.Context, op string, debits []counter.Debit, res *counter.Result) error {
	res.Reset(len(debits))
	if len(debits) == 0 {
		res.Allowed = true
		return nil
	}
	for i := range debits {
		if err := counter.ValidateDebit(&debits[i]); err != nil {
			return fmt.Errorf("redisstore: %w", err)
		}
	}
	if op == opReserve && s.leases != nil {
		if handled, err := s.reserveLeased(ctx, debits, res); handled {
			return err
		}
	}
	sc := getCall()
	defer putCall(sc)
	kind := kindReserve
	if op == opPeek {
		kind = kindPeek
	}
	err := s.prepare(sc, kind, debits, nil, nil)
	if err != nil {
		return err
	}
	if s.skipping() {
		return s.fallback(ctx, op, debits, res, nil)
	}
	start := time.Now()
	s.m.ops[op].Inc()
	s.co.do(ctx, sc)
	err = sc.err
	s.m.observe(op, start)
	if err == nil {
		if reply, ok := sc.reply.(string); !ok || !fillResult(res, reply) {
			err = errMalformed(sc.reply, len(debits))
		}
	}
	if err != nil {
		return s.failed(ctx, op, err, func() error { return s.fallback(ctx, op, debits, res, err) })
	}
	s.up()
	res.Ticket.Origin = OriginRedis
	if op == opReserve {
		s.m.reservations[servedRedis].Inc()
	} else if s.leases != nil {
		s.leases.addUnused(debits, res)
	}
	return nil
}

func errMalformed(reply any, n int) error {
	return fmt.Errorf("%w %T for %d debits", errMalformedReply, reply, n)
}

// fillResult copies a reserve/peek reply (see luaBatch: 4 + 3n little-endian
// doubles, all integers) into res, sized for its n debits; false when the
// reply has another length.
func fillResult(res *counter.Result, reply string) bool {
	n := len(res.Remaining)
	if len(reply) != 8*(4+3*n) {
		return false
	}
	v := func(i int) int64 { return int64(f64At(reply, i)) }
	res.Allowed = v(0) == 1
	res.Denied = int(v(1))
	res.RetryAfter = counter.FromMicros(v(2))
	res.Never = v(3) == 1
	for i := range n {
		o := 4 + 3*i
		res.Remaining[i] = v(o)
		res.ResetAfter[i] = counter.FromMicros(v(o + 1))
		res.Ticket.Window[i] = v(o + 2)
	}
	return true
}

// f64At is the i-th little-endian double of a packed reply.
func f64At(reply string, i int) float64 {
	b := reply[8*i : 8*i+8]
	u := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	return math.Float64frombits(u)
}
