package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	exactness(t, replicas, "{hot}")
}

func TestExactUnderConcurrencyCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	prefix := redistest.KeyPrefix(t)
	var replicas []*Store
	for range 3 {
		replicas = append(replicas, newTestStore(t, Options{Addrs: addrs, KeyPrefix: prefix, PoolSize: 32}))
	}
	exactness(t, replicas, "{hot}")
}

// exactness runs 200 goroutines, 20 reserves each, spread over replicas,
// against a bucket that does not measurably refill and a day window charged
// in the same calls, and checks the admitted totals against Max.
func exactness(t *testing.T, replicas []*Store, tag string) {
	const (
		workers = 200
		each    = 20
		max     = 1000
	)
	b := counter.Debit{Key: tag + ":bucket", Limit: bucket(max, 100_000*time.Hour)}
	w := counter.Debit{Key: tag + ":window", Limit: window(10*max, 24*time.Hour)}
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
				if res.Ticket.Origin != OriginRedis {
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
