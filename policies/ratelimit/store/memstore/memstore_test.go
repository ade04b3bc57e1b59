package memstore

import (
	"testing"
	"time"

	"sluice/policies/ratelimit/store"
	"sluice/policies/ratelimit/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		return New(Options{Now: now, Shards: 4, SweepEvery: -1})
	}, storetest.Caps{FrozenClock: true})
}

// TestConformanceDriftingClock runs the bounds-only variant of the suite the
// way a Redis-backed store sees it: the fake clock plus real elapsed time.
func TestConformanceDriftingClock(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		born := time.Now()
		return New(Options{Now: func() time.Time { return now().Add(time.Since(born)) }, SweepEvery: -1})
	})
}
