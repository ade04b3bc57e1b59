package redisledger

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/admission"
	"sluice/internal/redistest"
)

// testLedgers returns n ledgers (replicas "r0".."r{n-1}") sharing one
// client and a fresh key prefix; the script's clock reads *now when now is
// not nil.
func testLedgers(t *testing.T, n int, now *int64) []*Ledger {
	t.Helper()
	opts, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	prefix := redistest.KeyPrefix(t)
	var ls []*Ledger
	var mu sync.Mutex
	for i := range n {
		l := New(Options{Client: client, KeyPrefix: prefix, Replica: fmt.Sprintf("r%d", i)})
		if now != nil {
			l.now = func() int64 { mu.Lock(); defer mu.Unlock(); return *now }
		}
		ls = append(ls, l)
	}
	return ls
}

func renew(t *testing.T, l *Ledger, capy admission.Capacity, held, demand admission.Amount) admission.Lease {
	t.Helper()
	got, err := l.Renew(context.Background(), admission.LeaseRequest{Target: "vllm", Capacity: capy, Held: held,
		Demand: demand, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func reqs(n int64) admission.Amount { return admission.Amount{Requests: n} }

func TestFairSplit(t *testing.T) {
	now := int64(1_000_000)
	ls := testLedgers(t, 2, &now)
	a, b := ls[0], ls[1]
	capy := admission.Capacity{MaxConcurrent: 6}

	// Alone, a is entitled to everything.
	if got := renew(t, a, capy, reqs(0), reqs(10)); got.Granted.Requests != 6 || got.Entitlement.Requests != 6 || got.Replicas != 1 {
		t.Fatalf("a alone: %+v", got)
	}
	// b arrives with demand: entitled to half, granted nothing yet (a's lease covers everything).
	if got := renew(t, b, capy, reqs(0), reqs(10)); got.Granted.Requests != 0 || got.Entitlement.Requests != 3 || got.Replicas != 2 {
		t.Fatalf("b arriving: %+v", got)
	}
	// a holds 6: entitled to 3, granted 3; its 6 stay recorded until they end.
	if got := renew(t, a, capy, reqs(6), reqs(10)); got.Granted.Requests != 3 || got.Entitlement.Requests != 3 {
		t.Fatalf("a over its entitlement: %+v", got)
	}
	if got := renew(t, b, capy, reqs(0), reqs(10)); got.Granted.Requests != 0 {
		t.Fatalf("b before a gave back: %+v", got)
	}
	// a's requests end down to 3: b gets its 3.
	renew(t, a, capy, reqs(3), reqs(10))
	if got := renew(t, b, capy, reqs(0), reqs(10)); got.Granted.Requests != 3 {
		t.Fatalf("b after a gave back: %+v", got)
	}
	// Unequal demand: a wants 1, b the rest.
	renew(t, a, capy, reqs(1), reqs(1))
	if got := renew(t, b, capy, reqs(3), reqs(10)); got.Granted.Requests != 5 || got.Entitlement.Requests != 5 {
		t.Fatalf("b with a wanting 1: %+v", got)
	}
	// Below capacity, what nobody demands is divided equally (remainder by id).
	if got := renew(t, a, capy, reqs(1), reqs(1)); got.Entitlement.Requests != 1 || got.Granted.Requests != 1 {
		t.Fatalf("a: %+v", got) // b holds 5 of it for now
	}
	renew(t, b, capy, reqs(2), reqs(2))
	if got := renew(t, a, capy, reqs(1), reqs(1)); got.Entitlement.Requests != 3 || got.Granted.Requests != 3 {
		t.Fatalf("a with idle capacity: %+v; want 1 + 2 of the 3 idle", got)
	}
	// Tokens are leased on their own.
	tc := admission.Capacity{MaxConcurrent: 10, MaxTokensInFlight: 1000}
	renew(t, a, tc, admission.Amount{}, admission.Amount{Requests: 1, Tokens: 900})
	if got := renew(t, b, tc, admission.Amount{}, admission.Amount{Requests: 1, Tokens: 200}); got.Entitlement.Tokens != 200 {
		t.Fatalf("tokens: %+v; want an entitlement of b's demand, 200 of 1000 (a wants 900)", got)
	}
}

func TestExpiryReturnsSlots(t *testing.T) {
	now := int64(1_000_000)
	ls := testLedgers(t, 2, &now)
	a, b := ls[0], ls[1]
	capy := admission.Capacity{MaxConcurrent: 4}
	renew(t, a, capy, reqs(0), reqs(4))
	renew(t, a, capy, reqs(4), reqs(4))
	if got := renew(t, b, capy, reqs(0), reqs(4)); got.Granted.Requests != 0 {
		t.Fatalf("b while a holds everything: %+v", got)
	}
	now += 999 // a's lease (TTL 1 s) still live
	if got := renew(t, b, capy, reqs(0), reqs(4)); got.Granted.Requests != 0 || got.Replicas != 2 {
		t.Fatalf("b before a's lease expired: %+v", got)
	}
	now += 1 // a died: its lease expired
	if got := renew(t, b, capy, reqs(0), reqs(4)); got.Granted.Requests != 4 || got.Replicas != 1 {
		t.Fatalf("b after a's lease expired: %+v", got)
	}
	recs, err := b.Leases(context.Background(), "vllm")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := recs["r0"]; ok || len(recs) != 1 {
		t.Fatalf("leases after expiry: %+v; want a's dropped", recs)
	}
	// a was only cut off and still runs its 4: it is recorded with them,
	// and neither is granted more until they end.
	if got := renew(t, a, capy, reqs(4), reqs(4)); got.Granted.Requests != 0 || got.Replicas != 2 {
		t.Fatalf("a back after its lease expired: %+v", got)
	}
	if got := renew(t, b, capy, reqs(4), reqs(4)); got.Granted.Requests != 0 {
		t.Fatalf("b beside a replica that outlived its lease: %+v; want nothing more granted", got)
	}
	renew(t, a, capy, reqs(0), reqs(0))
	if got := renew(t, b, capy, reqs(4), reqs(4)); got.Granted.Requests != 4 {
		t.Fatalf("b once a drained: %+v", got)
	}
	// Release returns the lease at once.
	if err := b.Release(context.Background(), "vllm"); err != nil {
		t.Fatal(err)
	}
	if got := renew(t, a, capy, reqs(0), reqs(4)); got.Granted.Requests != 4 || got.Replicas != 1 {
		t.Fatalf("a after b released: %+v", got)
	}
}

// TestSumWithinCapacity runs replicas concurrently, each starting requests
// up to its grant and ending them at random, and checks after every renewal
// that the live leases recorded, and what the replicas really hold, stay
// within the capacity.
func TestSumWithinCapacity(t *testing.T) {
	const replicas, rounds = 5, 200
	ls := testLedgers(t, replicas, nil)
	capy := admission.Capacity{MaxConcurrent: 17, MaxTokensInFlight: 10_000}
	var mu sync.Mutex
	held := make([]admission.Amount, replicas)
	total := func() (s admission.Amount) {
		for _, h := range held {
			s.Requests += h.Requests
			s.Tokens += h.Tokens
		}
		return s
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	errs := make(chan error, replicas)
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for range rounds {
				mu.Lock()
				h := held[i]
				mu.Unlock()
				demand := admission.Amount{Requests: h.Requests + rng.Int64N(10), Tokens: h.Tokens + rng.Int64N(4000)}
				got, err := l.Renew(context.Background(), admission.LeaseRequest{Target: "vllm", Capacity: capy,
					Held: h, Demand: demand, TTL: time.Minute})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				// Start requests up to the grant, or end some: above the
				// grant only while what it held before still runs.
				nr := rng.Int64N(max(h.Requests, got.Granted.Requests) + 1)
				nt := rng.Int64N(max(h.Tokens, got.Granted.Tokens) + 1)
				held[i] = admission.Amount{Requests: nr, Tokens: nt}
				if s := total(); s.Requests > int64(capy.MaxConcurrent) || s.Tokens > capy.MaxTokensInFlight {
					errs <- fmt.Errorf("replicas hold %+v together; capacity %+v", s, capy)
				}
				mu.Unlock()
				recs, err := l.Leases(context.Background(), "vllm")
				if err != nil {
					errs <- err
					return
				}
				var sum admission.Amount
				for _, r := range recs {
					sum.Requests += r.Held.Requests
					sum.Tokens += r.Held.Tokens
				}
				if sum.Requests > int64(capy.MaxConcurrent) || sum.Tokens > capy.MaxTokensInFlight {
					errs <- fmt.Errorf("recorded leases sum to %+v; capacity %+v: %+v", sum, capy, recs)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every replica demanding more than its share ends with a fair split
	// once each has given back its excess: 17 over 5 is 3 each, the
	// remainder to the replicas demanding most (all alike here: the last ids).
	for range 3 {
		for _, l := range ls {
			renew(t, l, capy, admission.Amount{}, admission.Amount{Requests: 100, Tokens: 100_000})
		}
	}
	for i, l := range ls {
		got := renew(t, l, capy, admission.Amount{}, admission.Amount{Requests: 100, Tokens: 100_000})
		want := int64(3)
		if i >= 3 {
			want = 4
		}
		if got.Granted.Requests != want || got.Entitlement.Requests != want || got.Granted.Tokens != 2000 {
			t.Fatalf("replica %d: %+v; want %d requests and 2000 tokens", i, got, want)
		}
	}
}
