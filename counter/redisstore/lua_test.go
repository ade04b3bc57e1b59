package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/counter"
	"sluice/internal/redistest"
)

// Random operation sequences on Redis (fixed script clock) and on the memory store
// must give identical results: the Lua scripts mirror package counter
// operation for operation (including a key listed twice in one call, a
// zero-amount charge that a settlement then adjusts, and limits whose Max
// is edited between operations, settlements included).
func TestLuaMatchesGoArithmetic(t *testing.T) {
	url := redistest.URL(t)
	ctx := context.Background()
	for seed, layout := range eachLayout(20) {
		t.Run(fmt.Sprint(layout, seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			now := time.Date(2025, time.January, 30, 23, 0, 0, 0, time.UTC)
			rs, ls := newMirror(t, url, &now)
			limits := mirrorLimits
			var rr, lr counter.Result
			for step := range 400 {
				n := 1 + rng.IntN(3)
				ds := make([]counter.Debit, n)
				for i := range ds {
					k := rng.IntN(len(limits))
					l := edited(rng, limits[k])
					ds[i] = layout.mirrorDebit(k, l, rng.Int64N(l.Max+2))
				}
				switch op := rng.IntN(4); op {
				case 0, 1:
					if err := rs.Reserve(ctx, ds, &rr); err != nil {
						t.Fatal(err)
					}
					if err := ls.Reserve(ctx, ds, &lr); err != nil {
						t.Fatal(err)
					}
					compare(t, step, "Reserve", &rr, &lr)
					if rr.Allowed && rng.IntN(2) == 0 {
						deltas := make([]int64, n)
						for i := range deltas {
							deltas[i] = rng.Int64N(21) - 10
							ds[i].Limit = edited(rng, ds[i].Limit)
						}
						lt := rr.Ticket
						lt.Origin = OriginLocal
						if err := rs.Adjust(ctx, ds, &rr.Ticket, deltas); err != nil {
							t.Fatal(err)
						}
						if err := ls.Adjust(ctx, ds, &lt, deltas); err != nil {
							t.Fatal(err)
						}
					}
				case 2:
					if err := rs.Peek(ctx, ds, &rr); err != nil {
						t.Fatal(err)
					}
					if err := ls.Peek(ctx, ds, &lr); err != nil {
						t.Fatal(err)
					}
					compare(t, step, "Peek", &rr, &lr)
				case 3:
					now = now.Add(time.Duration(rng.Int64N(int64(2 * time.Second))))
					if rng.IntN(20) == 0 {
						now = now.Add(time.Duration(rng.Int64N(int64(48 * time.Hour))))
					}
				}
			}
		})
	}
}

func compare(t *testing.T, step int, op string, r, l *counter.Result) {
	t.Helper()
	if r.Allowed != l.Allowed || r.Denied != l.Denied || r.RetryAfter != l.RetryAfter || r.Never != l.Never ||
		!reflect.DeepEqual(r.Remaining, l.Remaining) || !reflect.DeepEqual(r.ResetAfter, l.ResetAfter) ||
		!reflect.DeepEqual(r.Ticket.Window, l.Ticket.Window) {
		t.Fatalf("step %d %s:\nredis %+v\nlocal %+v", step, op, *r, *l)
	}
}

// The month arithmetic in Lua agrees with Go's calendar over four centuries
// of month edges, including leap years and the year 2100.
func TestLuaMonthBounds(t *testing.T) {
	url := redistest.URL(t)
	o, _ := redis.ParseURL(url)
	c := redis.NewClient(o)
	defer c.Close()
	script := redis.NewScript(luaCommon + `return {month_bounds(tonumber(ARGV[1]))}`)
	ctx := context.Background()
	check := func(at time.Time) {
		got, err := script.Run(ctx, c, nil, at.Unix()).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		ws, endUS := counter.WindowBounds(counter.CalendarMonth, 0, at.UnixMicro())
		if got[0] != ws || got[1]*1_000_000 != endUS {
			t.Fatalf("month_bounds(%v) = %v, want [%d %d]", at, got, ws, endUS/1_000_000)
		}
	}
	for y := 1970; y <= 2400; y += 7 {
		for m := time.January; m <= time.December; m++ {
			first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
			check(first)
			check(first.Add(-time.Second))
			check(first.Add(15*24*time.Hour + 7*time.Hour))
		}
	}
	check(time.Date(2100, time.February, 28, 23, 59, 59, 0, time.UTC))
	check(time.Date(2000, time.February, 29, 12, 0, 0, 0, time.UTC))
}

// The script is sent by EVALSHA; after the first call (or a SCRIPT FLUSH)
// the NOSCRIPT reply is followed by one EVAL that loads it again. Reserve
// and Adjust share the one script.
func TestScriptsLoadedOnceAndRecoverFromFlush(t *testing.T) {
	url := redistest.StartServer(t).URL()
	cnt := newCmdCounter()
	s := newTestStore(t, Options{URL: url, Hooks: []redis.Hook{cnt}})
	ctx := context.Background()
	ds := []counter.Debit{{Key: "{a}x", Limit: window(100, time.Hour), Amount: 1}, {Key: "{a}y", Limit: bucket(100, time.Hour), Amount: 1}}
	var res counter.Result
	reserve := func() {
		t.Helper()
		if err := s.Reserve(ctx, ds, &res); err != nil || !res.Allowed {
			t.Fatalf("Reserve: %v allowed=%v", err, res.Allowed)
		}
	}
	adjust := func() {
		t.Helper()
		if err := s.Adjust(ctx, ds, &res.Ticket, []int64{1, -1}); err != nil {
			t.Fatalf("Adjust: %v", err)
		}
	}
	want := func(what string, exp map[string]int) {
		t.Helper()
		got, _ := cnt.take()
		if !reflect.DeepEqual(got, exp) {
			t.Fatalf("%s: commands %v, want %v", what, got, exp)
		}
	}
	reserve()
	want("first reserve", map[string]int{"evalsha": 1, "eval": 1})
	adjust()
	want("first adjust", map[string]int{"evalsha": 1})
	for range 5 {
		reserve()
		adjust()
	}
	want("steady state", map[string]int{"evalsha": 10})

	flush := redis.NewClient(mustParse(t, url))
	defer flush.Close()
	if err := flush.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	reserve()
	want("reserve after SCRIPT FLUSH", map[string]int{"evalsha": 1, "eval": 1})
	reserve()
	want("reserve after reload", map[string]int{"evalsha": 1})
	// 8 reserves of 1 and 6 settlements of +1 on the window.
	if res.Remaining[0] != 100-14 {
		t.Fatalf("window remaining %d, want %d", res.Remaining[0], 100-14)
	}
}
