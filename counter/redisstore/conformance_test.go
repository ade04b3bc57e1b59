package redisstore

import (
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"time"

	"sluice/counter"
	"sluice/counter/countertest"
	"sluice/internal/redistest"
)

// The conformance suite with the scripts' clock pinned to the suite's fake
// clock: the Lua arithmetic must match package counter exactly.
func TestConformanceFrozenClock(t *testing.T) {
	url := redistest.URL(t)
	countertest.Run(t, func(t *testing.T, now func() time.Time) counter.Store {
		s := newTestStore(t, Options{URL: url, Now: now})
		s.clockSpec = func() string { return fixedClock(now()) }
		return s
	}, countertest.Caps{FrozenClock: true})
}

// The conformance suite on redis TIME (the production path), shifted by the
// fake clock's offset from the wall clock: Redis time also moves on its own.
func TestConformanceRedisTime(t *testing.T) {
	url := redistest.URL(t)
	countertest.Run(t, func(t *testing.T, now func() time.Time) counter.Store {
		return redisTimeStore(t, Options{URL: url, Now: now}, now)
	})
}

// With Redis unreachable in failure mode open, every call is served by the
// local fallback, which must pass the suite too.
func TestConformanceFallback(t *testing.T) {
	dead := "redis://" + deadAddr(t) + "/0"
	countertest.Run(t, func(t *testing.T, now func() time.Time) counter.Store {
		return newTestStore(t, Options{URL: dead, Now: now})
	}, countertest.Caps{FrozenClock: true})
}

func TestConformanceCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	countertest.Run(t, func(t *testing.T, now func() time.Time) counter.Store {
		return redisTimeStore(t, Options{Addrs: addrs, Now: now}, now)
	})
}

// redisTimeStore builds a store whose scripts read redis TIME shifted so
// that it starts at the fake clock and then runs ahead of it by the real
// time elapsed: TIME - created + now(). The drift is never negative and
// never shrinks, as the suite's bounds assume.
func redisTimeStore(t *testing.T, o Options, now func() time.Time) *Store {
	s := newTestStore(t, o)
	created := time.Now()
	s.clockSpec = func() string { return offsetClock(now().Sub(created)) }
	return s
}

// The conformance suite with leases on: a store serving from leases must
// answer as one without (the suite runs one store alone, so what it
// reports from its leases is exact). The suite's concurrent cases are
// busy enough to be served from leases.
func TestConformanceLeases(t *testing.T) {
	url := redistest.URL(t)
	var leased atomic.Int64
	countertest.Run(t, func(t *testing.T, now func() time.Time) counter.Store {
		s := newTestStore(t, Options{URL: url, Now: now, Leases: LeaseOptions{Enabled: true}})
		s.clockSpec = func() string { return fixedClock(now()) }
		t.Cleanup(func() { leased.Add(int64(testutil.ToFloat64(s.m.reservations[servedLease]))) })
		return s
	}, countertest.Caps{FrozenClock: true})
	if leased.Load() == 0 {
		t.Error("no reservation of the suite was served from a lease")
	}
}
