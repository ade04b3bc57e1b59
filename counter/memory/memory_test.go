package memory

import (
	"testing"
	"time"

	"sluice/counter"
	"sluice/counter/countertest"
)

func TestConformance(t *testing.T) {
	countertest.Run(t, func(t *testing.T, now func() time.Time) counter.Store {
		return New(Options{Now: now, Shards: 4, SweepEvery: -1})
	}, countertest.Caps{FrozenClock: true})
}

// TestConformanceDriftingClock runs the bounds-only variant of the suite the
// way a Redis-backed store sees it: the fake clock plus real elapsed time.
func TestConformanceDriftingClock(t *testing.T) {
	countertest.Run(t, func(t *testing.T, now func() time.Time) counter.Store {
		born := time.Now()
		return New(Options{Now: func() time.Time { return now().Add(time.Since(born)) }, SweepEvery: -1})
	})
}
