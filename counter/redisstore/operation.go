package redisstore

import (
	"encoding/binary"
	"fmt"
	"math"

	"sluice/counter"
)

// A store call travels as one operation of luaBatch (lua/batch.lua has the
// layout): its prefixed keys, and one packed string of its numbers, a header
// then per debit the little-endian doubles the script computes with.

// maxDebits bounds the debits of one call (a luaBatch header holds the count
// in 16 bits).
const maxDebits = 1<<16 - 1

// Operation kinds in a luaBatch header.
const (
	kindReserve byte = 1
	kindPeek    byte = 2
	kindAdjust  byte = 3
	// The same over one group value (store.Debit.Group).
	kindGroupReserve byte = 4
	kindGroupPeek    byte = 5
	kindGroupAdjust  byte = 6
	// A charge copied back from the local fallback (see copyBack): an
	// adjust that may start the current window.
	kindCharge      byte = 7
	kindGroupCharge byte = 8
	// A lease reserve and a lease release, over a group (see
	// lua/lease.lua).
	kindLease   byte = 9
	kindRelease byte = 10
)

// prepare fills sc for one operation of luaBatch: kind is kindReserve,
// kindPeek, kindAdjust or kindCharge (windows and deltas are only read by
// the latter two), made the group variant when the debits share a
// counter.Debit.Group.
func (s *Store) prepare(sc *scriptCall, kind byte, debits []counter.Debit, windows, deltas []int64) error {
	group, err := s.keys(sc, debits)
	if err != nil {
		return err
	}
	if group {
		switch kind {
		case kindReserve:
			kind = kindGroupReserve
		case kindPeek:
			kind = kindGroupPeek
		case kindAdjust:
			kind = kindGroupAdjust
		case kindCharge:
			kind = kindGroupCharge
		}
	}
	if kind == kindAdjust || kind == kindGroupAdjust || kind == kindCharge || kind == kindGroupCharge {
		sc.num = packAdjust(sc.num[:0], kind, debits, windows, deltas)
	} else {
		sc.num = packReserve(sc.num[:0], kind, debits, s.prefix)
	}
	sc.clock = s.clock()
	return nil
}

// keys fills sc.keys with the call's prefixed keys: the group's when the
// debits share a counter.Debit.Group (group is then true), else each debit's.
// On Redis Cluster all keys of one call must hash to one slot (callers
// share a {scope} hash tag), the per-key layout's keys of a group's
// counters too (a group's first reservation reads them); a call that
// breaks this is a wiring bug and fails loudly rather than with CROSSSLOT
// at random.
func (s *Store) keys(sc *scriptCall, debits []counter.Debit) (group bool, err error) {
	if len(debits) > maxDebits {
		return false, fmt.Errorf("redisstore: %d debits in one call, at most %d", len(debits), maxDebits)
	}
	g := debits[0].Group
	for i := range debits {
		if debits[i].Group != g {
			return false, fmt.Errorf("redisstore: debits %q and %q of one call are in different groups (%q, %q)", debits[0].Key, debits[i].Key, g, debits[i].Group)
		}
		if g != "" && len(s.prefix)+len(debits[i].Key) > maxKeyLen {
			return false, fmt.Errorf("redisstore: key %q longer than %d bytes", debits[i].Key, maxKeyLen)
		}
	}
	sc.slot = 0
	keys := sc.keyBuf[:0]
	if g != "" {
		keys = append(keys, s.prefix+g)
	} else {
		for i := range debits {
			keys = append(keys, s.prefix+debits[i].Key)
		}
	}
	sc.keyBuf, sc.keys = keys, keys
	if s.cluster {
		slot := Slot(keys[0])
		for i := range debits {
			if k := debits[i].Key; slotOf(s.prefix, k) != slot {
				s.log.Error("redisstore: keys of one call span cluster slots; share a {hash tag}", "first", keys[0], "other", s.prefix+k)
				return false, fmt.Errorf("redisstore: keys %q and %q hash to different cluster slots: give them one {hash tag}", keys[0], s.prefix+k)
			}
		}
		sc.slot = slot
	}
	return g != "", nil
}

// maxKeyLen bounds a grouped counter's key, which its reservation carries
// with a 16-bit length.
const maxKeyLen = 1<<16 - 1

// packReserve appends one reserve or peek operation of luaBatch: its
// header, then per debit the little-endian doubles alg, max, period_us,
// amount. Doubles are what the script computes with (Lua numbers); integers
// up to 2^53 are exact, and larger ones round as Lua's tonumber would round
// their decimal text. Over a group (kind kindGroupReserve or kindGroupPeek)
// each debit adds the counter's id (counterID) and its prefixed key in the
// per-key layout (16-bit length, bytes).
func packReserve(b []byte, kind byte, debits []counter.Debit, prefix string) []byte {
	b, h := appendHeader(b, kind, len(debits))
	group := kind == kindGroupReserve || kind == kindGroupPeek
	for i := range debits {
		if group {
			b = appendGroupDebit(b, &debits[i], prefix)
		} else {
			b = appendLimit(b, &debits[i])
			b = appendF64(b, float64(debits[i].Amount))
		}
	}
	return endOp(b, h)
}

// appendGroupDebit appends a debit of a group reserve: alg, max,
// period_us, amount, the counter's id and its prefixed key in the per-key
// layout (16-bit length, bytes).
func appendGroupDebit(b []byte, d *counter.Debit, prefix string) []byte {
	b = appendLimit(b, d)
	b = appendF64(b, float64(d.Amount))
	b = appendF64(b, counterID(d.Key))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(prefix)+len(d.Key)))
	return append(append(b, prefix...), d.Key...)
}

// prepareLease fills sc for a lease reserve (kindLease) of debits, which
// share a group: the op-level ttl_ms, grace_ms, share and zone, then per
// debit the group reserve's debit and its ask (see lua/lease.lua).
func (s *Store) prepareLease(sc *scriptCall, debits []counter.Debit, asks []leaseAsk) error {
	if _, err := s.keys(sc, debits); err != nil {
		return err
	}
	b, h := appendHeader(sc.num[:0], kindLease, len(debits))
	b = appendF64s(b, float64(s.leases.o.TTL.Milliseconds()), float64(LeaseGrace.Milliseconds()), LeaseShare, LeaseZone)
	for i := range debits {
		b = appendGroupDebit(b, &debits[i], s.prefix)
		a := &asks[i]
		b = appendF64s(b, float64(a.rid), float64(a.rw), float64(a.ru), float64(a.lid), float64(a.want), float64(a.mn))
	}
	sc.num = endOp(b, h)
	sc.clock = s.clock()
	return nil
}

// prepareRelease fills sc for a lease release (kindRelease) of rels, which
// share a group: per lease its counter's alg, max, period_us and id, the
// lease's id, window and usage.
func (s *Store) prepareRelease(sc *scriptCall, rels []leaseRelease) error {
	key := s.prefix + rels[0].group
	sc.keyBuf = append(sc.keyBuf[:0], key)
	sc.keys = sc.keyBuf
	sc.slot = 0
	if s.cluster {
		sc.slot = Slot(key)
	}
	b, h := appendHeader(sc.num[:0], kindRelease, len(rels))
	for i := range rels {
		r := &rels[i]
		b = appendF64s(b, float64(r.limit.Algorithm), float64(r.limit.Max), float64(counter.Micros(r.limit.Period)),
			counterID(r.key), float64(r.id), float64(r.window), float64(r.used))
	}
	sc.num = endOp(b, h)
	sc.clock = s.clock()
	return nil
}

// packAdjust appends one adjust operation of luaBatch: its header, then per
// debit alg, max, period_us, window_s, delta, as in packReserve; over a
// group (kind kindGroupAdjust or kindGroupCharge) the counter's id too. A
// charge (kindCharge, kindGroupCharge) is packed as an adjust.
func packAdjust(b []byte, kind byte, debits []counter.Debit, windows, deltas []int64) []byte {
	b, h := appendHeader(b, kind, len(debits))
	for i := range debits {
		b = appendLimit(b, &debits[i])
		b = appendF64(b, float64(windows[i]))
		b = appendF64(b, float64(deltas[i]))
		if kind == kindGroupAdjust || kind == kindGroupCharge {
			b = appendF64(b, counterID(debits[i].Key))
		}
	}
	return endOp(b, h)
}

// counterID identifies a counter within its group value: the low 52 bits
// of the FNV-1a 64 hash of its key, so that it is an exact Lua number. Two
// counters of one group (a handful of keys) share an id with a
// probability of about 2^-52 per pair.
func counterID(key string) float64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return float64(h & (1<<52 - 1))
}

func appendLimit(b []byte, d *counter.Debit) []byte {
	b = appendF64(b, float64(d.Limit.Algorithm))
	b = appendF64(b, float64(d.Limit.Max))
	return appendF64(b, float64(counter.Micros(d.Limit.Period)))
}

// appendHeader appends an operation header of luaBatch, struct '<BHI4':
// kind, number of debits, and the size of the payload that follows, which
// endOp fills in (h is where the header starts).
func appendHeader(b []byte, kind byte, n int) (_ []byte, h int) {
	h = len(b)
	b = binary.LittleEndian.AppendUint16(append(b, kind), uint16(n))
	return binary.LittleEndian.AppendUint32(b, 0), h
}

// endOp completes the header at h with the size of the payload after it.
func endOp(b []byte, h int) []byte {
	binary.LittleEndian.PutUint32(b[h+3:], uint32(len(b)-h-7))
	return b
}

func appendF64(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

func appendF64s(b []byte, fs ...float64) []byte {
	for _, f := range fs {
		b = appendF64(b, f)
	}
	return b
}

func (s *Store) clock() string {
	if s.clockSpec != nil {
		return s.clockSpec()
	}
	return ""
}
