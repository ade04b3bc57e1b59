package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/counter"
	"sluice/internal/redistest"
)

// On Redis Cluster the keys of one call must share a slot; a call that
// breaks this fails at once with an error that is not ErrUnavailable.
func TestClusterCrossSlotFailsLoudly(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	s := newTestStore(t, Options{Addrs: addrs})
	var res counter.Result
	// "a" and "b" hash to different slots (15495, 3300).
	ds := []counter.Debit{{Key: "a", Limit: window(5, time.Minute), Amount: 1}, {Key: "b", Limit: window(5, time.Minute), Amount: 1}}
	err := s.Reserve(context.Background(), ds, &res)
	if err == nil || errors.Is(err, counter.ErrUnavailable) {
		t.Fatalf("Reserve across slots: err = %v, want a wiring error", err)
	}
	// So must a group's key and its counters' keys (read by the group's
	// first reservation).
	ds = []counter.Debit{{Key: "a", Group: "b", Limit: window(5, time.Minute), Amount: 1}}
	err = s.Reserve(context.Background(), ds, &res)
	if err == nil || errors.Is(err, counter.ErrUnavailable) {
		t.Fatalf("Reserve of a group across slots: err = %v, want a wiring error", err)
	}
	// Our slot function agrees with the cluster's.
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	for _, k := range []string{"a", "b", "sluice:{route:app}tokens", "{}x", "x{}y{z}", "{user1000}.following", "foo"} {
		want, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, cluster says %d", k, got, want)
		}
	}
}

func TestSlot(t *testing.T) {
	tests := []struct {
		key  string
		want int
	}{
		{"123456789", 0x31C3 % 16384}, // CRC-16/XMODEM check value
		{"foo", 12182},
		{"{foo}bar", 12182},
		{"{}foo", Slot("{}foo")},
	}
	for _, tc := range tests {
		if got := Slot(tc.key); got != tc.want {
			t.Errorf("Slot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
	if Slot("sluice:{r:a}tokens:1h") != Slot("sluice:{r:a}cost:month") {
		t.Error("keys with one hash tag hash to different slots")
	}
	// slotOf(prefix, key) is Slot(prefix + key), tag or no tag, braces in
	// the prefix or not.
	for _, prefix := range []string{"", "sluice:", "a{b", "{p}", "x}"} {
		for _, key := range []string{"", "foo", "{foo}bar", "{}foo", "}{a}", "{r:a}w", "b}c", "{open"} {
			if got, want := slotOf(prefix, key), Slot(prefix+key); got != want {
				t.Errorf("slotOf(%q, %q) = %d, Slot of the two = %d", prefix, key, got, want)
			}
		}
	}
}
