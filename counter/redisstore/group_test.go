package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/counter"
	"sluice/internal/redistest"
)

// groupSlotSize and groupHeader are the group value's layout (see luaBatch).
const (
	groupHeader   = 9
	groupSlotSize = 33
)

// A group's counters live in one Redis value, read and written once per
// operation; its TTL follows its longest-lived slot like a key of its own
// would, slots that are empty (a full bucket, an ended window) are dropped,
// and a group left empty is deleted.
func TestGroupValueAndTTL(t *testing.T) {
	url := redistest.URL(t)
	ctx := context.Background()
	s := newTestStore(t, Options{URL: url})
	c := redis.NewClient(mustParse(t, url))
	defer c.Close()
	gkey := s.prefix + "{gt}:p"
	ds := []counter.Debit{
		{Key: "{gt}:p:w", Group: "{gt}:p", Limit: window(100, time.Hour), Amount: 1},
		{Key: "{gt}:p:b", Group: "{gt}:p", Limit: bucket(100, 100*time.Second), Amount: 50},
	}
	slots := func() int {
		t.Helper()
		v, err := c.Get(ctx, gkey).Result()
		if err == redis.Nil {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		if (len(v)-groupHeader)%groupSlotSize != 0 || v[0] != 5 {
			t.Fatalf("group value of %d bytes, first byte %d", len(v), v[0])
		}
		return (len(v) - groupHeader) / groupSlotSize
	}
	ttl := func() time.Duration {
		t.Helper()
		d, err := c.PTTL(ctx, gkey).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	var res counter.Result
	if err := s.Reserve(ctx, ds, &res); err != nil || !res.Allowed {
		t.Fatalf("Reserve: %v %v", err, res.Allowed)
	}
	for _, d := range ds {
		if n := c.Exists(ctx, s.prefix+d.Key).Val(); n != 0 {
			t.Fatalf("counter %s stored under its own key too", d.Key)
		}
	}
	if n := slots(); n != 2 {
		t.Fatalf("%d slots, want 2", n)
	}
	// The group lives as long as its longest-lived slot: the window's, until
	// 1 s past the hour, or, in the last 50 s of an hour, the bucket's, full
	// again 50 s from now; plus at most the slack (one bucket period).
	need := max(time.Until(time.Now().Truncate(time.Hour).Add(time.Hour+time.Second)), 50*time.Second)
	first := ttl()
	if first < need-5*time.Second || first > need+100*time.Second+5*time.Second {
		t.Fatalf("group TTL %v, want between %v and %v", first, need, need+100*time.Second)
	}
	// Writes that need no longer life keep the TTL.
	if err := s.Adjust(ctx, ds, &res.Ticket, []int64{1, 5}); err != nil {
		t.Fatal(err)
	}
	if d := ttl(); d > first {
		t.Fatalf("TTL grew from %v to %v", first, d)
	}
	// A refund that fills the bucket drops its slot: absent is full.
	if err := s.Adjust(ctx, ds, &res.Ticket, []int64{0, -1000}); err != nil {
		t.Fatal(err)
	}
	if n := slots(); n != 1 {
		t.Fatalf("%d slots after the bucket filled up, want 1", n)
	}
	if rem := peekRemaining(t, s, ds); rem[0] != 98 || rem[1] != 100 {
		t.Fatalf("remaining %v, want [98 100]", rem)
	}

	// A group of windows only expires 1 s past its last window's end, as a
	// window key does: no slack.
	w := []counter.Debit{{Key: "{gw}:p:w", Group: "{gw}:p", Limit: window(100, time.Hour), Amount: 1}}
	if err := s.Reserve(ctx, w, &res); err != nil || !res.Allowed {
		t.Fatalf("Reserve: %v %v", err, res.Allowed)
	}
	end := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour + time.Second))
	if d := c.PTTL(ctx, s.prefix+"{gw}:p").Val(); d < end-5*time.Second || d > end+5*time.Second {
		t.Fatalf("window group TTL %v, want about %v", d, end)
	}

	// A group of buckets only: its TTL follows the refill, as a bucket
	// key's does, and a group whose last slot empties is deleted.
	bk := s.prefix + "{gb}:p"
	b := []counter.Debit{{Key: "{gb}:p:b", Group: "{gb}:p", Limit: bucket(100, 100*time.Second), Amount: 30}}
	if err := s.Reserve(ctx, b, &res); err != nil || !res.Allowed {
		t.Fatalf("Reserve: %v %v", err, res.Allowed)
	}
	d, err := c.PTTL(ctx, bk).Result()
	if err != nil {
		t.Fatal(err)
	}
	if need := 31 * time.Second; d < need-5*time.Second || d > need+100*time.Second+time.Second {
		t.Fatalf("bucket group TTL %v, want between %v and %v", d, need, need+100*time.Second)
	}
	if err := s.Adjust(ctx, b, &res.Ticket, []int64{-30}); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, bk).Val(); n != 0 {
		t.Fatal("an empty group is still stored")
	}
}

// Counters charged in the per-key layout (before groups, or by a replica of
// an earlier version) are carried into a group by its first reservation;
// after that, the group alone counts.
func TestGroupTakesOverPerKeyCounters(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, Options{URL: redistest.URL(t)})
	ds := []counter.Debit{
		{Key: "{mig}:p:w", Limit: window(100, time.Hour), Amount: 40},
		{Key: "{mig}:p:b", Limit: bucket(100, time.Hour), Amount: 30},
		{Key: "{mig}:p:m", Limit: month(100), Amount: 20},
	}
	var res counter.Result
	if err := s.Reserve(ctx, ds, &res); err != nil || !res.Allowed {
		t.Fatalf("per-key Reserve: %v %v", err, res.Allowed)
	}
	for i := range ds {
		ds[i].Group, ds[i].Amount = "{mig}:p", 1
	}
	if err := s.Reserve(ctx, ds, &res); err != nil || !res.Allowed {
		t.Fatalf("grouped Reserve: %v %v", err, res.Allowed)
	}
	want := []int64{59, 69, 79}
	for i, w := range want {
		// The bucket may have refilled a little (1 unit per 36 s).
		if got := res.Remaining[i]; got < w || got > w+1 {
			t.Fatalf("remaining %v, want about %v (the per-key usage carried over)", res.Remaining, want)
		}
	}
	// The group now exists: per-key values are no longer read.
	if err := s.Reserve(ctx, ds[:1], &res); err != nil || res.Remaining[0] != 58 {
		t.Fatalf("Reserve: %v remaining %v, want 58", err, res.Remaining)
	}
}

// A group's counters are found by key, not by position: a later call over
// other counters of the group (a model rule's, a limit added to the
// policy) leaves the others' usage alone, in any order.
func TestGroupCountersFoundByKey(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, Options{URL: redistest.URL(t)})
	d := func(name string, amount int64) counter.Debit {
		return counter.Debit{Key: "{ord}:p:" + name, Group: "{ord}:p", Limit: window(1000, time.Hour), Amount: amount}
	}
	var res counter.Result
	for _, call := range [][]counter.Debit{
		{d("a", 1), d("b", 2)},
		{d("c", 4), d("a", 8)},
		{d("b", 16), d("d", 32), d("c", 64)},
	} {
		if err := s.Reserve(ctx, call, &res); err != nil || !res.Allowed {
			t.Fatalf("Reserve: %v %v", err, res.Allowed)
		}
	}
	rem := peekRemaining(t, s, []counter.Debit{d("d", 0), d("c", 0), d("b", 0), d("a", 0)})
	if want := []int64{968, 932, 982, 991}; fmt.Sprint(rem) != fmt.Sprint(want) {
		t.Fatalf("remaining %v, want %v", rem, want)
	}
}

// The debits of one call share one group or have none; anything else is a
// wiring bug and fails before Redis is asked.
func TestMixedGroupsFail(t *testing.T) {
	s := newTestStore(t, Options{URL: redistest.URL(t)})
	var res counter.Result
	ds := []counter.Debit{
		{Key: "{mix}:p:a", Group: "{mix}:p", Limit: window(10, time.Hour), Amount: 1},
		{Key: "{mix}:p:b", Limit: window(10, time.Hour), Amount: 1},
	}
	err := s.Reserve(context.Background(), ds, &res)
	if err == nil || !strings.Contains(err.Error(), "different groups") {
		t.Fatalf("Reserve: %v, want a different-groups error", err)
	}
}
