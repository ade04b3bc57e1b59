package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/counter"
	"sluice/internal/redistest"
)

// The release before consumed-based buckets stored a token bucket's level
// under tag 1, per key ('<Bddd' 1, level, ts_us, exp_ms) and in group slots
// ('<dBddd' id, 1, level, ts_us, z). These helpers build those bytes as its
// scripts did (put_bucket and gpack), so that the tests below read values
// that release wrote, not values this one would write.

func appendOldF64(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// oldBucketValue is the earlier release's per-key bucket value.
func oldBucketValue(level float64, tsUS int64, expMS int64) string {
	b := appendOldF64([]byte{1}, level)
	b = appendOldF64(b, float64(tsUS))
	return string(appendOldF64(b, float64(expMS)))
}

// oldSlot is one slot of the earlier release's group value.
type oldSlot struct {
	key  string
	tag  byte
	a, b float64
	zMS  int64
}

// oldGroupValue is the earlier release's group value: 5, the key's expiry,
// then the slots.
func oldGroupValue(expMS int64, slots ...oldSlot) string {
	b := appendOldF64([]byte{5}, float64(expMS))
	for _, sl := range slots {
		b = appendOldF64(b, counterID(sl.key))
		b = append(b, sl.tag)
		b = appendOldF64(b, sl.a)
		b = appendOldF64(b, sl.b)
		b = appendOldF64(b, float64(sl.zMS))
	}
	return string(b)
}

// slotOfKey returns the tag and a of key's slot in a group value (ok false
// when it has none).
func slotOfKey(t *testing.T, v, key string) (tag byte, a float64, ok bool) {
	t.Helper()
	if len(v) < groupHeader || v[0] != 5 || (len(v)-groupHeader)%groupSlotSize != 0 {
		t.Fatalf("not a group value: %q", v)
	}
	id := counterID(key)
	for p := groupHeader; p < len(v); p += groupSlotSize {
		if math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[p:p+8]))) == id {
			return v[p+8], math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[p+9 : p+17]))), true
		}
	}
	return 0, 0, false
}

// bucketConsumed decodes the consumed amount of a per-key bucket value of
// this release (tag 4).
func bucketConsumed(t *testing.T, v string) float64 {
	t.Helper()
	if len(v) != 25 || v[0] != 4 {
		t.Fatalf("bucket value %q, want the 25-byte consumed form (tag 4)", v)
	}
	return math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[1:9])))
}

// Level-based buckets written by the earlier release, per key and in group
// slots, are read as consumed = Max - level under the capacity of the call
// reading them, which is what that release would have reported (also
// after its refill, and with the limit edited in the same upgrade), and the
// first write stores them in the consumed form (tag 4). Window and month
// slots of that release are unchanged and read as they are.
func TestReadsLevelBasedBuckets(t *testing.T) {
	url := redistest.URL(t)
	ctx := context.Background()
	now := time.Date(2026, time.December, 10, 12, 0, 30, 0, time.UTC)
	s := newTestStore(t, Options{URL: url})
	s.clockSpec = func() string { return fixedClock(now) }
	c := redis.NewClient(mustParse(t, url))
	defer c.Close()
	// Expiries in the far future of the Redis clock: the values are live.
	exp := time.Now().Add(time.Hour).UnixMilli()
	lastTS := now.Add(-30 * time.Second).UnixMicro()
	day := now.Truncate(24 * time.Hour).Unix()
	monthStart := time.Date(2026, time.December, 1, 0, 0, 0, 0, time.UTC).Unix()

	tests := []struct {
		name  string
		level float64
		max   int64 // the capacity the new release reads with
		// remaining after a reservation of 1, as the earlier release would
		// have reported it: floor(min(max, level + 30 s * max/min) - 1).
		remaining int64
	}{
		{"same capacity", 2.5, 60, 31},
		{"capacity raised in the upgrade", 2.5, 120, 61},
		{"written in debt", -20.5, 60, 8},
		{"level above a lowered capacity is full", 50, 30, 29},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := bucket(tt.max, time.Minute)
			wantConsumed := float64(tt.max) - tt.level - 30*float64(tt.max)/60
			wantConsumed = math.Max(0, wantConsumed) + 1

			// Per key.
			key := "{up" + t.Name() + "}b"
			if err := c.Set(ctx, s.prefix+key, oldBucketValue(tt.level, lastTS, exp), time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			var res counter.Result
			if err := s.Reserve(ctx, []counter.Debit{{Key: key, Limit: lim, Amount: 1}}, &res); err != nil || !res.Allowed {
				t.Fatalf("per key: Reserve: %v allowed=%v", err, res.Allowed)
			}
			if res.Remaining[0] != tt.remaining {
				t.Errorf("per key: remaining %d, want %d (what the earlier release reports)", res.Remaining[0], tt.remaining)
			}
			raw, err := c.Get(ctx, s.prefix+key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := bucketConsumed(t, raw); got != wantConsumed {
				t.Errorf("per key: stored consumed %v, want %v", got, wantConsumed)
			}

			// In a group, next to a window and a month slot of that release.
			tag := "{upg" + t.Name() + "}"
			group := tag + ":p"
			bk, wk, mk := group+":b", group+":w", group+":m"
			gv := oldGroupValue(exp,
				oldSlot{wk, 2, float64(day), 40, exp},
				oldSlot{bk, 1, tt.level, float64(lastTS), exp},
				oldSlot{mk, 3, float64(monthStart), 7, exp})
			if err := c.Set(ctx, s.prefix+group, gv, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			ds := []counter.Debit{
				{Key: bk, Group: group, Limit: lim, Amount: 1},
				{Key: wk, Group: group, Limit: window(100, 24*time.Hour), Amount: 1},
				{Key: mk, Group: group, Limit: month(100), Amount: 1},
			}
			if err := s.Reserve(ctx, ds, &res); err != nil || !res.Allowed {
				t.Fatalf("group: Reserve: %v allowed=%v", err, res.Allowed)
			}
			if want := []int64{tt.remaining, 59, 92}; res.Remaining[0] != want[0] || res.Remaining[1] != want[1] || res.Remaining[2] != want[2] {
				t.Errorf("group: remaining %v, want %v", res.Remaining, want)
			}
			raw, err = c.Get(ctx, s.prefix+group).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []struct {
				key string
				tag byte
				a   float64
			}{{bk, 4, wantConsumed}, {wk, 2, float64(day)}, {mk, 3, float64(monthStart)}} {
				tg, a, ok := slotOfKey(t, raw, k.key)
				if !ok || tg != k.tag || a != k.a {
					t.Errorf("group: slot of %s: tag %d a %v (found %v), want tag %d a %v", k.key, tg, a, ok, k.tag, k.a)
				}
			}
			// Read again: the consumed form gives the same figures.
			if rem := peekRemaining(t, s, ds); rem[0] != tt.remaining {
				t.Errorf("group: after the write, remaining %v, want %d", rem, tt.remaining)
			}
		})
	}
}

// A settlement (Adjust) of a level-based bucket converts it too, per key
// and in a group.
func TestAdjustConvertsLevelBasedBuckets(t *testing.T) {
	url := redistest.URL(t)
	ctx := context.Background()
	now := time.Date(2026, time.December, 10, 12, 0, 30, 0, time.UTC)
	s := newTestStore(t, Options{URL: url})
	s.clockSpec = func() string { return fixedClock(now) }
	c := redis.NewClient(mustParse(t, url))
	defer c.Close()
	exp := time.Now().Add(time.Hour).UnixMilli()
	lim := bucket(1000, 1000*time.Hour)
	ts := now.UnixMicro()
	if err := c.Set(ctx, s.prefix+"{ua}b", oldBucketValue(700, ts, exp), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, s.prefix+"{ua}:p", oldGroupValue(exp, oldSlot{"{ua}:p:b", 1, 700, float64(ts), exp}), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	for _, ds := range [][]counter.Debit{
		{{Key: "{ua}b", Limit: lim}},
		{{Key: "{ua}:p:b", Group: "{ua}:p", Limit: lim}},
	} {
		if err := s.Adjust(ctx, ds, &counter.Ticket{Window: []int64{0}}, []int64{50}); err != nil {
			t.Fatal(err)
		}
		if rem := peekRemaining(t, s, ds); rem[0] != 650 {
			t.Errorf("%s: remaining %v after +50 on level 700, want 650", ds[0].Key, rem)
		}
	}
	raw, _ := c.Get(ctx, s.prefix+"{ua}b").Result()
	if got := bucketConsumed(t, raw); got != 350 {
		t.Errorf("per key: stored consumed %v, want 350", got)
	}
	raw, _ = c.Get(ctx, s.prefix+"{ua}:p").Result()
	if tg, a, ok := slotOfKey(t, raw, "{ua}:p:b"); !ok || tg != 4 || a != 350 {
		t.Errorf("group slot: tag %d a %v (found %v), want tag 4 consumed 350", tg, a, ok)
	}
}

// Counters written in the earliest formats (text "<alg>|a|b", and the 17-byte
// bucket without its expiry; both hold a bucket's level) are read as before,
// so an upgrade keeps the usage counted; the next write replaces them with
// the current form, and gives the bucket a TTL that covers its refill. A
// state of another algorithm counts as absent. (upgrade_test.go covers the
// level-based formats of the release before consumed-based buckets.)
func TestReadsEarlierFormatStates(t *testing.T) {
	url := redistest.URL(t)
	ctx := context.Background()
	now := time.Date(2025, time.March, 10, 12, 0, 30, 0, time.UTC)
	s := newTestStore(t, Options{URL: url})
	s.clockSpec = func() string { return fixedClock(now) }
	c := redis.NewClient(mustParse(t, url))
	defer c.Close()
	day := now.Truncate(24 * time.Hour).Unix()
	monthStart := time.Date(2025, time.March, 1, 0, 0, 0, 0, time.UTC).Unix()
	lastTS := now.Add(-30 * time.Second).UnixMicro()
	seed := map[string]string{
		"{x}w":     fmt.Sprintf("2|%d|40", day),
		"{x}m":     fmt.Sprintf("3|%d|7", monthStart),
		"{x}b":     fmt.Sprintf("1|%.17g|%d", 2.5, lastTS),
		"{x}other": fmt.Sprintf("2|%d|40", day), // read as a bucket: absent
		"{x}b17":   string(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64([]byte{1}, math.Float64bits(2.5)), math.Float64bits(float64(lastTS)))),
	}
	for k, v := range seed {
		if err := c.Set(ctx, s.prefix+k, v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ds := []counter.Debit{
		{Key: "{x}w", Limit: window(100, 24*time.Hour), Amount: 1},
		{Key: "{x}m", Limit: month(100), Amount: 1},
		{Key: "{x}b", Limit: bucket(60, time.Minute), Amount: 1},
		{Key: "{x}other", Limit: bucket(10, time.Minute), Amount: 1},
		{Key: "{x}b17", Limit: bucket(60, time.Minute), Amount: 1},
	}
	want := []int64{100 - 41, 100 - 8, 31, 9, 31} // bucket: floor(2.5 + 30 s * 1/s - 1)
	for round := range 2 {
		var res counter.Result
		if err := s.Reserve(ctx, ds, &res); err != nil || !res.Allowed {
			t.Fatalf("round %d: Reserve: %v allowed=%v", round, err, res.Allowed)
		}
		if !reflect.DeepEqual(res.Remaining, want) {
			t.Fatalf("round %d: remaining %v, want %v", round, res.Remaining, want)
		}
		raw, err := c.Get(ctx, s.prefix+"{x}w").Result()
		if err != nil || len(raw) != 17 || raw[0] != 2 {
			t.Fatalf("round %d: window state %q (%v), want the 17-byte binary form", round, raw, err)
		}
		for _, k := range []string{"{x}b", "{x}b17"} {
			raw, err = c.Get(ctx, s.prefix+k).Result()
			if err != nil || len(raw) != 25 || raw[0] != 4 {
				t.Fatalf("round %d: bucket state %s %q (%v), want the 25-byte consumed form", round, k, raw, err)
			}
			// 29.5 units missing at 1/s, plus 1 s, plus at most one period.
			if ttl := c.PTTL(ctx, s.prefix+k).Val(); ttl < 25*time.Second || ttl > 92*time.Second {
				t.Fatalf("round %d: bucket %s TTL %v, want 30.5 s to 91.5 s", round, k, ttl)
			}
		}
		for i := range want {
			want[i]--
		}
	}
}
