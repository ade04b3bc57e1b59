package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/counter"
	"sluice/internal/redistest"
)

// batchOp is one operation of a hand-built batch.
type batchOp struct {
	kind   byte
	debits []counter.Debit
	ticket counter.Ticket // adjust: the reservation's ticket
	deltas []int64
}

// newOpCall builds the scriptCall the store would build for op.
func newOpCall(t *testing.T, s *Store, op *batchOp) *scriptCall {
	t.Helper()
	sc := getCall()
	if err := s.prepare(sc, op.kind, op.debits, op.ticket.Window, op.deltas); err != nil {
		t.Fatal(err)
	}
	return sc
}

// Random batches of reserves, peeks and adjusts over overlapping keys, each
// batch merged into one script invocation, must give the results the memory store
// gives for the same operations applied one by one in batch order: merging
// changes nothing but the number of invocations.
func TestBatchMatchesGoArithmetic(t *testing.T) {
	url := redistest.URL(t)
	ctx := context.Background()
	for seed, layout := range eachLayout(20) {
		t.Run(fmt.Sprint(layout, seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			now := time.Date(2025, time.February, 27, 22, 0, 0, 0, time.UTC)
			rs, ls := newMirror(t, url, &now)
			limits := mirrorLimits
			type granted struct {
				debits []counter.Debit
				ticket counter.Ticket
			}
			var pool []granted
			var rr, lr counter.Result
			for step := range 80 {
				ops := make([]batchOp, 1+rng.IntN(8))
				for i := range ops {
					op := &ops[i]
					if k := rng.IntN(6); k == 5 && len(pool) > 0 {
						g := pool[rng.IntN(len(pool))]
						op.kind, op.ticket = kindAdjust, g.ticket
						op.debits = append([]counter.Debit(nil), g.debits...)
						op.deltas = make([]int64, len(g.debits))
						for j := range op.deltas {
							op.deltas[j] = rng.Int64N(21) - 10
							op.debits[j].Limit = edited(rng, op.debits[j].Limit)
						}
						continue
					} else if k == 4 {
						op.kind = kindPeek
					} else {
						op.kind = kindReserve
					}
					op.debits = make([]counter.Debit, 1+rng.IntN(3))
					for j := range op.debits {
						// Now and then a counter is charged under another
						// counter's limit, also next to its own in one call:
						// a state of another algorithm counts as absent.
						// Or under its own limit with an edited Max.
						k := rng.IntN(len(limits))
						l := k
						if rng.IntN(10) == 0 {
							l = rng.IntN(len(limits))
						}
						lim := edited(rng, limits[l])
						op.debits[j] = layout.mirrorDebit(k, lim, rng.Int64N(lim.Max+2))
					}
				}
				calls := make([]*scriptCall, len(ops))
				for i := range ops {
					calls[i] = newOpCall(t, rs, &ops[i])
				}
				rs.co.send(ctx, calls)
				if g := group(calls); len(g) != 1 {
					t.Fatalf("step %d: %d groups, want the batch merged into one", step, len(g))
				}
				for i := range ops {
					op, sc := &ops[i], calls[i]
					if sc.err != nil {
						t.Fatalf("step %d op %d: %v", step, i, sc.err)
					}
					what := fmt.Sprintf("op %d/%d kind %d", i, len(ops), op.kind)
					switch op.kind {
					case kindAdjust:
						lt := op.ticket
						lt.Origin = OriginLocal
						if err := ls.Adjust(ctx, op.debits, &lt, op.deltas); err != nil {
							t.Fatal(err)
						}
						continue
					case kindPeek:
						if err := ls.Peek(ctx, op.debits, &lr); err != nil {
							t.Fatal(err)
						}
					default:
						if err := ls.Reserve(ctx, op.debits, &lr); err != nil {
							t.Fatal(err)
						}
					}
					rr.Reset(len(op.debits))
					reply, ok := sc.reply.(string)
					if !ok || !fillResult(&rr, reply) {
						t.Fatalf("step %d %s: malformed reply %#v", step, what, sc.reply)
					}
					compare(t, step, what, &rr, &lr)
					if op.kind == kindReserve && rr.Allowed {
						tk := counter.Ticket{Window: append([]int64(nil), rr.Ticket.Window...)}
						pool = append(pool, granted{op.debits, tk})
					}
				}
				for _, sc := range calls {
					putCall(sc)
				}
				if rng.IntN(3) == 0 {
					now = now.Add(time.Duration(rng.Int64N(int64(2 * time.Second))))
					if rng.IntN(20) == 0 {
						now = now.Add(time.Duration(rng.Int64N(int64(48 * time.Hour))))
					}
					pool = pool[:0] // tickets of ended windows would be no-ops
				}
			}
		})
	}
}

// An operation that fails inside the script fails alone: the operations
// before and after it in the same invocation succeed and are applied.
func TestBatchOperationFailsAlone(t *testing.T) {
	url := redistest.URL(t)
	ctx := context.Background()
	s := newTestStore(t, Options{URL: url})
	good := []counter.Debit{{Key: "{f}a", Limit: window(100, time.Hour), Amount: 3}}
	// A bucket whose period is NaN (no Limit can say so: the packed
	// argument is overwritten below) gets a NaN expiry: SET ... PXAT fails.
	bad := []counter.Debit{{Key: "{f}b", Limit: bucket(10, time.Hour), Amount: 1}}
	ops := []batchOp{{kind: kindReserve, debits: good}, {kind: kindReserve, debits: bad}, {kind: kindReserve, debits: good}}
	calls := make([]*scriptCall, len(ops))
	for i := range ops {
		calls[i] = newOpCall(t, s, &ops[i])
	}
	// The header (7 bytes), alg and max (8 each), then the period.
	binary.LittleEndian.PutUint64(calls[1].num[23:], math.Float64bits(math.NaN()))
	s.co.send(ctx, calls)
	if calls[1].err == nil || !strings.Contains(calls[1].err.Error(), "not an integer") {
		t.Fatalf("bad op: err %v, reply %v; want the SET error", calls[1].err, calls[1].reply)
	}
	for _, i := range []int{0, 2} {
		if calls[i].err != nil {
			t.Fatalf("op %d: %v", i, calls[i].err)
		}
	}
	if rem := peekRemaining(t, s, good); rem[0] != 94 {
		t.Fatalf("after: remaining %v, want 94 (both good ops applied)", rem)
	}
}

// A window key written again in its window keeps the TTL of its first write
// (until 1 s past the window's end). A bucket key lives at least until the
// bucket is full again plus 1 s, and at most one period longer (the slack
// that lets most writes keep the TTL), however its level moves; a bucket
// that fills up is deleted.
func TestTTLs(t *testing.T) {
	url := redistest.URL(t)
	ctx := context.Background()
	s := newTestStore(t, Options{URL: url})
	c := redis.NewClient(mustParse(t, url))
	defer c.Close()
	ds := []counter.Debit{
		{Key: "{ttl}w", Limit: window(100, time.Hour), Amount: 1},
		{Key: "{ttl}b", Limit: bucket(100, 100*time.Second), Amount: 50},
	}
	// missing is the bucket's units below full; at 1 unit/s it is full
	// again in missing seconds.
	check := func(what string, missing int) time.Duration {
		t.Helper()
		tw, err := c.PTTL(ctx, s.prefix+"{ttl}w").Result()
		if err != nil {
			t.Fatal(err)
		}
		end := time.Now().Truncate(time.Hour).Add(time.Hour + time.Second)
		// Generous bounds: redis TIME and this clock differ by scheduling.
		if want := time.Until(end); tw < want-5*time.Second || tw > want+5*time.Second {
			t.Fatalf("%s: window TTL %v, want about %v", what, tw, want)
		}
		tb, err := c.PTTL(ctx, s.prefix+"{ttl}b").Result()
		if err != nil {
			t.Fatal(err)
		}
		need := time.Duration(missing)*time.Second + time.Second
		if tb < need-5*time.Second || tb > need+100*time.Second+time.Second {
			t.Fatalf("%s: bucket TTL %v, want between %v and %v", what, tb, need, need+100*time.Second)
		}
		return tb
	}
	var res counter.Result
	var first time.Duration
	for i := range 3 {
		if err := s.Reserve(ctx, ds, &res); err != nil || !res.Allowed {
			t.Fatalf("Reserve: %v %v", err, res.Allowed)
		}
		if i == 0 {
			ds[1].Amount = 0 // keep the bucket at 50 missing
			first = check("first write", 50)
			continue
		}
		// Nothing needs a longer life: the TTL of the first write is kept.
		if tb := check(fmt.Sprintf("write %d", i+1), 50); tb > first {
			t.Fatalf("write %d: bucket TTL grew from %v to %v", i+1, first, tb)
		}
	}
	if err := s.Adjust(ctx, ds, &res.Ticket, []int64{5, 5}); err != nil {
		t.Fatal(err)
	}
	check("after adjust", 55)
	// Debt of 250: full again in 350 s, beyond the expiry set so far.
	if err := s.Adjust(ctx, ds, &res.Ticket, []int64{0, 295}); err != nil {
		t.Fatal(err)
	}
	check("after debt", 350)
	// A refund that fills the bucket deletes it: absent is full.
	if err := s.Adjust(ctx, ds[1:], &counter.Ticket{Window: []int64{0}}, []int64{-400}); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, s.prefix+"{ttl}b").Val(); n != 0 {
		t.Fatal("a bucket that filled up is still stored")
	}
}

// A reservation over more debits than one struct.pack call takes (the reply
// of 4 + 3n doubles is packed in parts beyond 200; a group value of more
// than 39 slots too) still gets every value, and so do a settlement and a
// peek of them.
func TestReserveManyDebits(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, Options{URL: redistest.URL(t)})
	for _, l := range []layout{"keys", "groups"} {
		t.Run(string(l), func(t *testing.T) {
			ds := make([]counter.Debit, 100)
			for i := range ds {
				ds[i] = counter.Debit{Key: fmt.Sprintf("{many%s}k%d", l, i), Group: l.group("{many" + string(l) + "}g"), Limit: window(1000, time.Hour), Amount: int64(i)}
			}
			var res counter.Result
			if err := s.Reserve(ctx, ds, &res); err != nil || !res.Allowed {
				t.Fatalf("Reserve: %v allowed=%v", err, res.Allowed)
			}
			for i, rem := range res.Remaining {
				if rem != 1000-int64(i) || res.Ticket.Window[i] == 0 {
					t.Fatalf("debit %d: remaining %d window %d, want %d and the window's start", i, rem, res.Ticket.Window[i], 1000-i)
				}
			}
			deltas := make([]int64, len(ds))
			for i := range deltas {
				deltas[i] = int64(i)
			}
			if err := s.Adjust(ctx, ds, &res.Ticket, deltas); err != nil {
				t.Fatal(err)
			}
			for i, rem := range peekRemaining(t, s, ds) {
				if rem != 1000-2*int64(i) {
					t.Fatalf("after Adjust, debit %d: remaining %d, want %d", i, rem, 1000-2*i)
				}
			}
		})
	}
}
