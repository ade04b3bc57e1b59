package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"sluice/counter"
	"sluice/internal/redistest"
)

// 200 goroutines reserve against one key through three Store instances (as
// three gateway replicas would): no more than Max is ever admitted. Timeouts
// are generous: this is about exactness, and a burst of dials on a small
// machine under -race can exceed the production defaults.
func TestExactUnderConcurrencyThreeReplicas(t *testing.T) {
	url := redistest.URL(t)
	prefix := redistest.KeyPrefix(t)
	var replicas []*Store
	for range 3 {
		replicas = append(replicas, newTestStore(t, Options{URL: url, KeyPrefix: prefix, PoolSize: 32}))
	}
	exactness(t, replicas, "{hot}", "")
}

// The same with the counters in one group and leases on: replicas serve
// from leases far from the limit, and the limit still holds exactly (a
// lease is charged in Redis when granted; near the limit none is granted,
// and the leases still held are used up or released by the reservations
// that they can no longer serve).
func TestExactUnderConcurrencyThreeReplicasLeases(t *testing.T) {
	url := redistest.URL(t)
	prefix := redistest.KeyPrefix(t)
	var replicas []*Store
	for range 3 {
		replicas = append(replicas, newTestStore(t, Options{URL: url, KeyPrefix: prefix, PoolSize: 32, Leases: LeaseOptions{Enabled: true}}))
	}
	exactness(t, replicas, "{hotl}", "{hotl}:p")
}

func TestExactUnderConcurrencyCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	prefix := redistest.KeyPrefix(t)
	var replicas []*Store
	for range 3 {
		replicas = append(replicas, newTestStore(t, Options{Addrs: addrs, KeyPrefix: prefix, PoolSize: 32}))
	}
	exactness(t, replicas, "{hot}", "")
}

// exactness runs 200 goroutines, 20 reserves each, spread over replicas,
// against a bucket that does not measurably refill and a day window charged
// in the same calls (in group when not empty), and checks the admitted
// totals against Max.
func exactness(t *testing.T, replicas []*Store, tag, group string) {
	const (
		workers = 200
		each    = 20
		max     = 1000
	)
	b := counter.Debit{Key: tag + ":bucket", Group: group, Limit: bucket(max, 100_000*time.Hour)}
	w := counter.Debit{Key: tag + ":window", Group: group, Limit: window(10*max, 24*time.Hour)}
	var admitted atomic.Int64
	perWindow := sync.Map{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := replicas[i%len(replicas)]
			rng := rand.New(rand.NewPCG(uint64(i), 3))
			ds := []counter.Debit{b, w}
			var res counter.Result
			for range each {
				amt := 1 + rng.Int64N(3)
				ds[0].Amount, ds[1].Amount = amt, amt
				if err := s.Reserve(context.Background(), ds, &res); err != nil {
					errs <- err
					return
				}
				if res.Ticket.Origin == OriginLocal {
					errs <- errors.New("served locally")
					return
				}
				if res.Allowed {
					admitted.Add(amt)
					v, _ := perWindow.LoadOrStore(res.Ticket.Window[1], new(atomic.Int64))
					v.(*atomic.Int64).Add(amt)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Reserve: %v", err)
	}
	got := admitted.Load()
	var leased float64
	for _, s := range replicas {
		leased += testutil.ToFloat64(s.m.reservations[servedLease])
	}
	t.Logf("admitted %d units in %d reservations asked, %v served from leases", got, workers*each, leased)
	if group != "" && leased == 0 {
		t.Errorf("no reservation served from a lease")
	}
	// 200*20 reserves of mean 2 ask for ~8000: the bucket fills; it may end
	// short of Max by less than the largest amount (3).
	if got > max || got < max-2 {
		t.Fatalf("admitted %d, want in [%d, %d]", got, max-2, max)
	}
	var res counter.Result
	p := []counter.Debit{b, w}
	p[0].Amount, p[1].Amount = 0, 0
	if err := replicas[0].Peek(context.Background(), p, &res); err != nil {
		t.Fatal(err)
	}
	if used := max - res.Remaining[0]; used != got {
		t.Fatalf("bucket used %d, admitted %d", used, got)
	}
	perWindow.Range(func(k, v any) bool {
		if n := v.(*atomic.Int64).Load(); n > 10*max {
			t.Errorf("window %v admitted %d > %d", k, n, 10*max)
		}
		return true
	})
}

// One hot replica and two cold ones share a limit with leases on. The hot
// one holds large leases (its rate is high), the cold ones small ones or
// none. Neither is starved beyond the stated bound: a cold replica is
// denied only once the limit is used up but for what the leases of the
// others hold (each at most 1/LeaseShare of what was free above the exact
// zone, and at most one second of its holder's traffic), and once the
// leases have expired the admitted total falls short of the limit by less
// than one request per replica; it never exceeds the limit.
func TestLeasesHotAndColdReplicas(t *testing.T) {
	url := redistest.URL(t)
	prefix := redistest.KeyPrefix(t)
	const (
		max        = 1_000_000
		hotAmount  = 50
		coldAmount = 10
		hotWorkers = 8
	)
	var replicas []*Store
	for range 3 {
		replicas = append(replicas, newTestStore(t, Options{URL: url, KeyPrefix: prefix, PoolSize: 32, Leases: LeaseOptions{Enabled: true}}))
	}
	lim := window(max, time.Hour)
	debit := func(amount int64) []counter.Debit {
		return []counter.Debit{{Key: "{hc}:p:total", Group: "{hc}:p", Limit: lim, Amount: amount}}
	}
	// The largest lease a replica can hold, and what the cold replicas'
	// leases hold at most (one second of their traffic), plus what hot
	// reservations in flight may have taken but not yet counted below.
	bound := int64(float64(max)*(1-LeaseZone)/LeaseShare) + 2*50*coldAmount + hotWorkers*hotAmount
	var admitted, hot, cold atomic.Int64
	var coldEarly atomic.Int64 // cold denials while more than bound was left
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, hotWorkers+2)
	for range hotWorkers {
		wg.Go(func() {
			var res counter.Result
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := replicas[0].Reserve(context.Background(), debit(hotAmount), &res); err != nil {
					errs <- err
					return
				}
				if res.Allowed {
					admitted.Add(hotAmount)
					hot.Add(hotAmount)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	for _, s := range replicas[1:] {
		wg.Go(func() {
			var res counter.Result
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				before := admitted.Load()
				if err := s.Reserve(context.Background(), debit(coldAmount), &res); err != nil {
					errs <- err
					return
				}
				if res.Allowed {
					admitted.Add(coldAmount)
					cold.Add(coldAmount)
				} else if before < max-bound {
					coldEarly.Add(1)
				}
			}
		})
	}
	eventually(t, 30*time.Second, "the limit used up", func() bool { return admitted.Load() >= max-bound })
	// Then the leases still held are used up, or released when they expire
	// and taken by the others.
	time.Sleep(DefaultLeaseTTL + time.Second)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Reserve: %v", err)
	}
	var leased float64
	for _, s := range replicas {
		leased += testutil.ToFloat64(s.m.leased)
	}
	t.Logf("admitted %d (hot %d, cold %d) of %d; %v units leased; bound %d", admitted.Load(), hot.Load(), cold.Load(), max, leased, bound)
	if n := coldEarly.Load(); n > 0 {
		t.Errorf("cold replicas denied %d times while more than the bound %d was left", n, bound)
	}
	if got := admitted.Load(); got > max {
		t.Errorf("admitted %d, above the limit %d", got, max)
	}
	if cold.Load() == 0 {
		t.Error("the cold replicas admitted nothing")
	}
	for _, s := range replicas {
		s.releaseLeases(context.Background(), true)
	}
	p := debit(0)
	used := max - peekRemaining(t, replicas[0], p)[0]
	if used != admitted.Load() {
		t.Errorf("the counter holds %d used once the leases are released, want the admitted %d", used, admitted.Load())
	}
	if short := max - used; short >= 3*hotAmount {
		t.Errorf("the admitted total is %d short of the limit, want less than one request per replica", short)
	}
}
