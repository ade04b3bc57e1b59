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

// step is one renewal of a scripted sequence: replica who (index) renews
// with held and demand requests after the clock moved by advance ms; the
// reply must match the wanted fields (-1: any).
type step struct {
	what                   string
	who                    int
	advance                int64
	held, demand           int64
	granted, ent, replicas int64
}

func runSteps(t *testing.T, ls []*Ledger, now *int64, capy admission.Capacity, steps []step) {
	t.Helper()
	for _, st := range steps {
		*now += st.advance
		got := renew(t, ls[st.who], capy, reqs(st.held), reqs(st.demand))
		for _, c := range []struct{ got, want int64 }{{got.Granted.Requests, st.granted},
			{got.Entitlement.Requests, st.ent}, {int64(got.Replicas), st.replicas}} {
			if c.want >= 0 && c.got != c.want {
				t.Fatalf("%s: %+v; want granted %d, entitlement %d, replicas %d (-1: any)", st.what, got, st.granted, st.ent, st.replicas)
			}
		}
	}
}

func TestFairSplit(t *testing.T) {
	now := int64(1_000_000)
	ls := testLedgers(t, 2, &now)
	runSteps(t, ls, &now, admission.Capacity{MaxConcurrent: 6}, []step{
		{what: "a alone is entitled to everything", who: 0, demand: 10, granted: 6, ent: 6, replicas: 1},
		{what: "b arriving: half, nothing granted while a's lease covers all", who: 1, demand: 10, granted: 0, ent: 3, replicas: 2},
		{what: "a holding 6: granted 3, its 6 recorded until they end", who: 0, held: 6, demand: 10, granted: 3, ent: 3, replicas: 2},
		{what: "b before a gave back", who: 1, demand: 10, granted: 0, ent: 3, replicas: 2},
		{what: "a's requests end down to 3", who: 0, held: 3, demand: 10, granted: 3, ent: 3, replicas: 2},
		{what: "b after a gave back", who: 1, demand: 10, granted: 3, ent: 3, replicas: 2},
		{what: "a wants 1", who: 0, held: 1, demand: 1, granted: 1, ent: 1, replicas: 2},
		{what: "b gets the rest", who: 1, held: 3, demand: 10, granted: 5, ent: 5, replicas: 2},
		{what: "a again: b holds 5 of it for now", who: 0, held: 1, demand: 1, granted: 1, ent: 1, replicas: 2},
		{what: "b wants 2: 2 + 1 of the 3 idle", who: 1, held: 2, demand: 2, granted: 3, ent: 3, replicas: 2},
		{what: "a: 1 + 2 of the 3 idle (the remainder by id)", who: 0, held: 1, demand: 1, granted: 3, ent: 3, replicas: 2},
	})
	// Tokens are leased on their own.
	tc := admission.Capacity{MaxConcurrent: 10, MaxTokensInFlight: 1000}
	renew(t, ls[0], tc, admission.Amount{}, admission.Amount{Requests: 1, Tokens: 900})
	if got := renew(t, ls[1], tc, admission.Amount{}, admission.Amount{Requests: 1, Tokens: 200}); got.Entitlement.Tokens != 200 {
		t.Fatalf("tokens: %+v; want an entitlement of b's demand, 200 of 1000 (a wants 900)", got)
	}
}

func TestExpiryReturnsSlots(t *testing.T) {
	now := int64(1_000_000)
	ls := testLedgers(t, 2, &now)
	capy := admission.Capacity{MaxConcurrent: 4}
	runSteps(t, ls, &now, capy, []step{
		{what: "a takes everything", who: 0, demand: 4, granted: 4, ent: -1, replicas: 1},
		{what: "a holds everything", who: 0, held: 4, demand: 4, granted: 4, ent: -1, replicas: 1},
		{what: "b while a holds everything", who: 1, demand: 4, granted: 0, ent: 2, replicas: 2},
		{what: "b before a's lease (TTL 1 s) expired", who: 1, advance: 999, demand: 4, granted: 0, ent: 2, replicas: 2},
		{what: "b after a died", who: 1, advance: 1, demand: 4, granted: 4, ent: 4, replicas: 1},
	})
	recs, err := ls[1].Leases(context.Background(), "vllm")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := recs["r0"]; ok || len(recs) != 1 {
		t.Fatalf("leases after expiry: %+v; want a's dropped", recs)
	}
	runSteps(t, ls, &now, capy, []step{
		// a was only cut off and still runs its 4: it is recorded with
		// them, and neither is granted more until they end.
		{what: "a back after its lease expired", who: 0, held: 4, demand: 4, granted: 0, ent: -1, replicas: 2},
		{what: "b beside a replica that outlived its lease", who: 1, held: 4, demand: 4, granted: 0, ent: -1, replicas: 2},
		{what: "a drained", who: 0, granted: 0, ent: 0, replicas: 2},
		{what: "b once a drained", who: 1, held: 4, demand: 4, granted: 4, ent: 4, replicas: 2},
	})
	// Release returns the lease at once.
	if err := ls[1].Release(context.Background(), "vllm"); err != nil {
		t.Fatal(err)
	}
	runSteps(t, ls, &now, capy, []step{{what: "a after b released", who: 0, demand: 4, granted: 4, ent: 4, replicas: 1}})
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

// TestCluster: on Redis Cluster, leases of targets in different slots work
// through the cluster client (each target's hash is one key, hash-tagged),
// with the script's own clock (redis TIME).
func TestCluster(t *testing.T) {
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.StartCluster(t, 3)})
	t.Cleanup(func() { _ = client.Close() })
	prefix := redistest.KeyPrefix(t)
	a := New(Options{Client: client, KeyPrefix: prefix, Replica: "a"})
	b := New(Options{Client: client, KeyPrefix: prefix, Replica: "b"})
	capy := admission.Capacity{MaxConcurrent: 4}
	ctx := context.Background()
	for _, target := range []string{"vllm", "tgi", "openai", "anthropic"} {
		r := admission.LeaseRequest{Target: target, Capacity: capy, Demand: reqs(4), TTL: time.Minute}
		if got, err := a.Renew(ctx, r); err != nil || got.Granted.Requests != 4 {
			t.Fatalf("%s: a: %+v %v", target, got, err)
		}
		if got, err := b.Renew(ctx, r); err != nil || got.Granted.Requests != 0 || got.Entitlement.Requests != 2 || got.Replicas != 2 {
			t.Fatalf("%s: b: %+v %v", target, got, err)
		}
		if err := a.Release(ctx, target); err != nil {
			t.Fatal(err)
		}
		if got, err := b.Renew(ctx, r); err != nil || got.Granted.Requests != 4 || got.Replicas != 1 {
			t.Fatalf("%s: b after a released: %+v %v", target, got, err)
		}
	}
}
