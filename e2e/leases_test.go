package e2e

// Budget leases end to end: three gateway processes on one Redis, one
// hot tenant on one of them and a cold tenant on the others, sharing one
// backend limit (docs/redis.md, "Leases").

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/counter/redisstore"
	"sluice/deployment"
	"sluice/internal/proctest"
	"sluice/internal/redistest"
)

const (
	hotAPIKey  = "sk-sluice-e2e-hot"
	coldAPIKey = "sk-sluice-e2e-cold"
)

// TestLeasesHotAndColdTenants: a hot tenant hammers one gateway, a cold
// tenant sends a trickle to the two others, all charging one shared limit
// with leases on (the default). The hot gateway serves most of the
// reservations it admits from leases; nothing is admitted above the limit; the cold
// tenant is denied only once the limit is used up but for what the hot
// gateway's lease may hold (at most 1/16 of what was free above the last
// 10% of the limit when it was granted), plus the cold gateways' own small
// leases and the hot requests in flight; and once the leases are released
// the shared counter holds exactly what was admitted.
func TestLeasesHotAndColdTenants(t *testing.T) {
	bin := sluiceBin.Path(t)
	upstream := proctest.StartMock(t, bin).URL
	url := redistest.URL(t)
	prefix := redistest.KeyPrefix(t)
	const limit = 300_000
	// One backend limit, shared by both applications.
	apps := fmt.Sprintf("  - {id: app-hot, apiKeys: [%q]}\n  - {id: app-cold, apiKeys: [%q]}\n", deployment.HashKey(hotAPIKey), deployment.HashKey(coldAPIKey))
	dep := writeLimitDeployment(t, upstream, replicaRedisCounters("url: "+url, prefix, "closed"), apps, false, limit, "1h")
	gws := startGatewayProcs(t, bin, dep, 3)
	waitOutOfWindowEdge(t, time.Hour, 30*time.Second)
	reqs := replicaRequests(t)
	maxCost := maxChatCost(reqs)
	const hotClients, coldEvery = 32, 50 * time.Millisecond
	bound := int64(limit*0.9/16) + 2*int64(time.Second/coldEvery)*maxCost + hotClients*maxCost

	client := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: hotClients, IdleConnTimeout: 30 * time.Second},
		Timeout:   20 * time.Second,
	}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var admitted, hot, cold, coldEarly, hotDenied, hotN atomic.Int64
	var failures atomic.Int64
	post := func(gw *proctest.Proc, key string, r costedChat) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/openai/v1/chat/completions", strings.NewReader(string(r.body)))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range hotClients {
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				r := reqs[(c+k)%len(reqs)]
				status, err := post(gws[0], hotAPIKey, r)
				switch {
				case err != nil:
					if ctx.Err() == nil {
						t.Errorf("hot: %v", err)
						failures.Add(1)
					}
					return
				case status == http.StatusOK:
					admitted.Add(r.cost)
					hot.Add(r.cost)
					hotN.Add(1)
				case status == http.StatusTooManyRequests:
					hotDenied.Add(1)
					time.Sleep(time.Millisecond)
				default:
					t.Errorf("hot: status %d", status)
					return
				}
			}
		})
	}
	for g := 1; g < 3; g++ {
		wg.Go(func() {
			tick := time.NewTicker(coldEvery)
			defer tick.Stop()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				r := reqs[k%len(reqs)]
				before := admitted.Load()
				status, err := post(gws[g], coldAPIKey, r)
				switch {
				case err != nil:
					if ctx.Err() == nil {
						t.Errorf("cold: %v", err)
					}
					return
				case status == http.StatusOK:
					admitted.Add(r.cost)
					cold.Add(r.cost)
				case status == http.StatusTooManyRequests:
					if before < limit-bound {
						coldEarly.Add(1)
					}
				default:
					t.Errorf("cold: status %d", status)
					return
				}
			}
		})
	}
	deadline := time.Now().Add(40 * time.Second)
	for admitted.Load() < limit-bound && time.Now().Before(deadline) && failures.Load() == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	// Then the leases still held are used up, or released when they expire
	// and taken by the others.
	time.Sleep(deployment.DefaultLeaseTTL.D() + time.Second)
	close(stop)
	wg.Wait()
	leased := metricValue(t, gws[0], `sluice_redis_store_reservations_total{served="lease"}`)
	direct := metricValue(t, gws[0], `sluice_redis_store_reservations_total{served="redis"}`)
	t.Logf("admitted %d tokens (hot %d in %d requests, cold %d) of %d, bound %d; hot denied %d; the hot gateway served %v reservations from leases, %v on Redis",
		admitted.Load(), hot.Load(), hotN.Load(), cold.Load(), limit, bound, hotDenied.Load(), leased, direct)
	if admitted.Load() < limit-bound {
		t.Fatalf("the limit was not used up within the time bound")
	}
	if got := admitted.Load(); got > limit {
		t.Errorf("admitted %d tokens, above the limit %d", got, limit)
	}
	if n := coldEarly.Load(); n > 0 {
		t.Errorf("the cold tenant was denied %d times while more than the bound %d was left", n, bound)
	}
	if cold.Load() == 0 {
		t.Error("the cold tenant was never admitted")
	}
	// The last tenth of the limit is served exactly, on Redis, and so is
	// every denial; far from the limit the leases carry the hot tenant.
	if leased < float64(hotN.Load())/2 {
		t.Errorf("the hot gateway served %v of its %d admitted reservations from leases, want most", leased, hotN.Load())
	}
	// The gateways release idle leases within a quarter of the TTL.
	time.Sleep(deployment.DefaultLeaseTTL.D())
	used := counterUsed(t, redisstore.Options{URL: url, KeyPrefix: prefix}, "replicas", limit)
	if used != admitted.Load() {
		t.Errorf("the shared counter holds %d tokens used, want exactly the admitted %d", used, admitted.Load())
	}
	if short := limit - used; short >= 3*maxCost {
		t.Errorf("the admitted total is %d short of the limit, want less than one request per gateway", short)
	}
}
