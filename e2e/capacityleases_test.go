package e2e

// Fair admission across replicas end to end (issue 14 item 6): two `sluice
// gateway` processes with one deployment (Redis counters, so the provider's
// capacity is shared through capacity leases in Redis) in front of one
// `sluice mock-llm --capacity` whose sequences equal the capacity. The
// mock's engine stats show what the two gateways together let through.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"sluice/internal/proctest"
	"sluice/internal/redistest"
	"sluice/mockllm"
)

// leaseTTL is the deployment's capacity lease TTL.
const leaseTTL = 2 * time.Second

// heldStream is a stream opened in the background that, once admitted,
// stalls at the mock and holds its sequence until released.
type heldStream struct {
	started chan struct{} // closed when its response headers arrived
	release context.CancelFunc
}

func (e *fairEnv) holdOn(gw *proctest.Proc, app string) *heldStream {
	ctx, cancel := context.WithCancel(context.Background())
	h := &heldStream{started: make(chan struct{}), release: cancel}
	e.t.Cleanup(cancel)
	go func() {
		resp, err := e.openOn(ctx, gw, app, chat(true, 50, "hold the slot"), map[string]string{mockllm.HeaderStallAfter: "3"})
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			close(h.started)
		}
		<-ctx.Done()
	}()
	return h
}

func (h *heldStream) isStarted() bool {
	select {
	case <-h.started:
		return true
	default:
		return false
	}
}

func leaseGauge(t *testing.T, gw *proctest.Proc, name string) float64 {
	return metricValue(t, gw, name+`{target="engine"}`)
}

func inFlight(t *testing.T, gw *proctest.Proc) float64 {
	return metricValue(t, gw, `sluice_admission_in_flight_requests{class="standard",target="engine"}`)
}

// waitFor polls cond until it holds (within 20 s), checking at every poll
// that the mock never runs more than n sequences nor queues anything.
func waitFor(t *testing.T, e *fairEnv, n int, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		u := e.usage()
		if u.Engine.RunningSequences > n || u.Engine.MaxWaiting > 0 {
			t.Fatalf("the mock ran %d sequences (capacity %d), at most %d waited: %+v", u.Engine.RunningSequences, n, u.Engine.MaxWaiting, u.Engine)
		}
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never reached: %s (engine %+v)", what, u.Engine)
		}
		time.Sleep(5 * time.Millisecond) // polling, not measuring
	}
}

// startLeasedPair starts the mock (n sequences) and two gateways sharing
// its capacity n through Redis at url, with failureMode mode, and waits
// until each sees the other.
func startLeasedPair(t *testing.T, n int, url, mode string) (e *fairEnv, gw1, gw2 *proctest.Proc) {
	t.Helper()
	bin := sluiceBin.Path(t)
	mock := proctest.Start(t, bin, proctest.Spec{Name: "mock-llm", ReadyPath: "/healthz",
		Args: []string{"mock-llm", "--listen", "127.0.0.1:0", "--capacity", fmt.Sprintf("sequences=%d,kv=0,prefill=0,decode=0", n)}})
	e = &fairEnv{t: t, mock: mock, config: filepath.Join(t.TempDir(), "deployment.yaml"),
		http: &http.Client{Timeout: 60 * time.Second}}
	t.Cleanup(e.http.CloseIdleConnections)
	counters := fmt.Sprintf(`  backend: redis
  redis:
    url: %s
    keyPrefix: %q
    failureMode: %s
    capacityLeases: {ttl: %s, renew: 500ms, queuedRenew: 50ms}`, url, redistest.KeyPrefix(t), mode, leaseTTL)
	if err := os.WriteFile(e.config, []byte(fairDocCounters(mock.URL, fmt.Sprintf("{maxConcurrent: %d}", n), "", counters)), 0o600); err != nil {
		t.Fatal(err)
	}
	gw1 = proctest.StartGateway(t, bin, "gateway-1", "--config", e.config, "--log-level", "warn")
	gw2 = proctest.StartGateway(t, bin, "gateway-2", "--config", e.config, "--log-level", "warn")
	e.gw = gw1
	waitFor(t, e, n, "both replicas see each other", func() bool {
		return leaseGauge(t, gw1, "sluice_admission_lease_replicas") == 2 && leaseGauge(t, gw2, "sluice_admission_lease_replicas") == 2
	})
	return e, gw1, gw2
}

// TestFairAdmissionReplicas: the two gateways together never run more than
// the capacity at the engine; a loaded replica alone takes the whole
// capacity, a second one loaded gets its half as the first one's requests
// end (nothing preempted); a replica killed with SIGKILL leaves its slots
// to the other within the lease TTL.
func TestFairAdmissionReplicas(t *testing.T) {
	const n = 4
	e, gw1, gw2 := startLeasedPair(t, n, redistest.URL(t), "open")

	// Replica 1 alone is loaded: it takes the whole capacity.
	var s1 []*heldStream
	for range n + 2 {
		s1 = append(s1, e.holdOn(gw1, "a"))
	}
	waitFor(t, e, n, "replica 1 runs the whole capacity", func() bool {
		return inFlight(t, gw1) == n && e.usage().Engine.RunningSequences == n
	})

	// Replica 2 is loaded too: entitled to half, it gets it only as
	// replica 1's requests end (they are never preempted).
	var s2 []*heldStream
	for range n + 2 {
		s2 = append(s2, e.holdOn(gw2, "b"))
	}
	waitFor(t, e, n, "both replicas know their entitlement", func() bool {
		return leaseGauge(t, gw1, "sluice_admission_entitlement_requests") == n/2 &&
			leaseGauge(t, gw2, "sluice_admission_entitlement_requests") == n/2
	})
	if got := inFlight(t, gw1); got != n {
		t.Fatalf("replica 1 runs %v; want %d (nothing preempted)", got, n)
	}
	var ended int
	for _, h := range s1 {
		if h.isStarted() && ended < n/2 {
			h.release()
			ended++
		}
	}
	handover := time.Now()
	waitFor(t, e, n, "both replicas served", func() bool {
		return inFlight(t, gw1) == n/2 && inFlight(t, gw2) == n/2 && e.usage().Engine.RunningSequences == n
	})
	t.Logf("replica 2 ran its half %v after replica 1's requests ended (queuedRenew 50ms)", time.Since(handover).Round(time.Millisecond))

	// Replica 1 dies: its slots come back to replica 2 within the TTL.
	gw1.Signal(t, syscall.SIGKILL)
	killed := time.Now()
	waitFor(t, e, n, "replica 2 takes the dead replica's slots", func() bool {
		return inFlight(t, gw2) == n && e.usage().Engine.RunningSequences == n
	})
	took := time.Since(killed)
	t.Logf("replica 2 had the whole capacity %v after replica 1 was killed (lease TTL %v)", took.Round(time.Millisecond), leaseTTL)
	if margin := 2 * time.Second; took > leaseTTL+margin {
		t.Errorf("the dead replica's slots came back after %v; want within the TTL %v + %v", took, leaseTTL, margin)
	}
	if got := leaseGauge(t, gw2, "sluice_admission_lease_replicas"); got != 1 {
		t.Errorf("replica 2 sees %v replicas after the other died; want 1", got)
	}
	for _, h := range append(s1, s2...) {
		h.release()
	}
}

// TestFairAdmissionReplicasRedisDown: with failureMode open, replicas that
// lose Redis keep their leases until they expire, then divide the capacity
// statically by the replicas they last saw (2 of 4 each here, however idle
// the engine); when Redis answers again the leases apply at once.
func TestFairAdmissionReplicasRedisDown(t *testing.T) {
	const n = 4
	srv := redistest.StartServer(t)
	e, gw1, gw2 := startLeasedPair(t, n, srv.URL(), "open")
	srv.Stop()
	waitFor(t, e, n, "both leases expired into the static share", func() bool {
		for _, gw := range []*proctest.Proc{gw1, gw2} {
			if leaseGauge(t, gw, "sluice_admission_lease_valid") != 0 || leaseGauge(t, gw, "sluice_admission_lease_requests") != n/2 {
				return false
			}
		}
		return true
	})
	if errs := leaseGauge(t, gw1, "sluice_admission_lease_renew_errors_total"); errs == 0 {
		t.Error("no renewal error counted while Redis was down")
	}
	var held []*heldStream
	for range n/2 + 1 {
		held = append(held, e.holdOn(gw1, "a"))
	}
	waitFor(t, e, n, "replica 1 runs its static share and queues the rest", func() bool {
		return inFlight(t, gw1) == n/2 && e.queued() == 1 && e.usage().Engine.RunningSequences == n/2
	})
	srv.Start()
	waitFor(t, e, n, "the queued request starts once Redis answers", func() bool {
		return inFlight(t, gw1) == n/2+1 && leaseGauge(t, gw1, "sluice_admission_lease_valid") == 1
	})
	for _, h := range held {
		h.release()
	}
}
