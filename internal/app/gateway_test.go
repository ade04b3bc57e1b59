package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/counter"
	"sluice/counter/memory"
	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/internal/proctest"
	"sluice/internal/redistest"
)

const doc = `apiVersion: sluice/v1
providers:
  - {name: p, type: openai, url: "http://127.0.0.1:9"}
applications:
  - {id: app-a, apiKeys: ["sha256:1c590839af894cf25f9a5fe06929af05b377f60efbe55508ef93d251887b9213"]}
routes:
  - name: r
    context: /p
    provider: p
    policies:
      - name: api-key-auth
      - name: token-based-ratelimit
        params: {totalTokenLimits: [{count: 1000, duration: 1h}]}
      - name: llm-cost-based-ratelimit
        params: {budgetLimits: [{amount: 1, duration: 1d}]}
      - name: llm-cost
`

func parse(t *testing.T, src string) *deployment.Deployment {
	t.Helper()
	d, err := yamlfile.Parse([]byte(src), "app_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// closeCounting is a counter store that counts its Close calls.
type closeCounting struct {
	counter.Store
	closed int
}

func (c *closeCounting) Close() error { c.closed++; return c.Store.Close() }

// TestNewGatewayServices: without services the wiring builds the production
// ones (the counter store from the counters section, which it owns and
// closes; the pricing catalog; the tokenizer; a metrics registry), so a
// chain of limit and cost policies builds; a store handed in stays the
// caller's.
func TestNewGatewayServices(t *testing.T) {
	logs := &proctest.Buffer{}
	gw, err := NewGateway(parse(t, doc), GatewayOptions{Services: Services{Logger: slog.New(slog.NewTextHandler(logs, nil))}})
	if err != nil {
		t.Fatal(err)
	}
	s := gw.Services
	if s.Counters == nil || s.Pricing == nil || s.Tokens == nil || s.Metrics == nil || s.Now == nil {
		t.Fatalf("services not filled: %+v", s)
	}
	if _, ok := s.Counters.(*memory.Store); !ok {
		t.Errorf("counters.backend memory gave %T", s.Counters)
	}
	if !strings.Contains(logs.String(), `msg="counter store" backend=memory`) {
		t.Errorf("the store built is not logged:\n%s", logs)
	}
	if !gw.Ready() {
		t.Error("the deployment is not applied")
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}

	given := &closeCounting{Store: memory.New(memory.Options{})}
	gw, err = NewGateway(parse(t, doc), GatewayOptions{Services: Services{Counters: given, Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	if gw.Services.Counters != given {
		t.Error("the given store was replaced")
	}
	if err := gw.Close(); err != nil || given.closed != 0 {
		t.Errorf("Close closed the caller's store (%d, %v)", given.closed, err)
	}
	_ = given.Store.Close()
}

// TestNewGatewayRefuses: a deployment the gateway cannot apply fails the
// assembly (and what the wiring built is closed); so does a pricing file
// that does not load.
func TestNewGatewayRefuses(t *testing.T) {
	bad := parse(t, doc)
	bad.Routes[0].Policies[1].Params = map[string]any{"totalTokenLimits": "lots"}
	if _, err := NewGateway(bad, GatewayOptions{Services: Services{Logger: slog.New(slog.DiscardHandler)}}); err == nil ||
		!strings.Contains(err.Error(), "routes[0].policies[1].params.totalTokenLimits") {
		t.Errorf("bad params: %v", err)
	}
	if _, err := NewGateway(parse(t, doc), GatewayOptions{Services: Services{Logger: slog.New(slog.DiscardHandler),
		PricingFile: "/nonexistent/prices.yaml"}}); err == nil {
		t.Error("a missing pricing file was accepted")
	}
}

// TestApplyWarnsOnCountersChange: the store is chosen once; a deployment
// that selects another one is applied with the running store, and the log
// says so, whether it comes through Apply or Reload.
func TestApplyWarnsOnCountersChange(t *testing.T) {
	logs := &proctest.Buffer{}
	gw, err := NewGateway(parse(t, doc), GatewayOptions{Services: Services{Logger: slog.New(slog.NewTextHandler(logs, nil))}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	const warning = "the counters section changed"
	if err := gw.Apply(parse(t, doc)); err != nil || strings.Contains(logs.String(), warning) {
		t.Fatalf("same counters: %v\n%s", err, logs)
	}
	redis := strings.Replace(doc, "providers:", "counters: {backend: redis, redis: {url: \"redis://127.0.0.1:1/0\"}}\nproviders:", 1)
	if err := gw.Apply(parse(t, redis)); err != nil || strings.Count(logs.String(), warning) != 1 {
		t.Fatalf("Apply: %v\n%s", err, logs)
	}
	if err := gw.Reload(func() (*deployment.Deployment, error) { return parse(t, redis), nil }); err != nil ||
		strings.Count(logs.String(), warning) != 2 {
		t.Fatalf("Reload: %v\n%s", err, logs)
	}
}

// TestRunDrains: Run serves until its context ends, then shuts down and
// returns nil.
func TestRunDrains(t *testing.T) {
	gw, err := NewGateway(parse(t, doc), GatewayOptions{Services: Services{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx, ln, nil) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/readyz"); err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("still serving after Run returned: %v", err)
	}
}

// TestGatewayAdmission: the wiring builds the one scheduler of the process
// and registers its metrics once; every applied deployment configures it
// before it serves (a reload changes the capacity and keeps the target's
// state), and a deployment whose admission fields are wrong is refused
// with the field named, leaving the running configuration in place.
func TestGatewayAdmission(t *testing.T) {
	withCapacity := func(n int) *deployment.Deployment {
		return parse(t, strings.Replace(doc, `url: "http://127.0.0.1:9"}`, fmt.Sprintf(`url: "http://127.0.0.1:9", capacity: {maxConcurrent: %d}}`, n), 1))
	}
	gw, err := NewGateway(withCapacity(4), GatewayOptions{Services: Services{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	sched := gw.Services.Admission
	if sched == nil {
		t.Fatal("no scheduler built")
	}
	capOf := func() int {
		t.Helper()
		snap := sched.Snapshot()
		if len(snap.Targets) != 1 || snap.Targets[0].Name != "p" || !snap.Targets[0].Limited {
			t.Fatalf("targets %+v; want provider p", snap.Targets)
		}
		return snap.Targets[0].Capacity.MaxConcurrent
	}
	if n := capOf(); n != 4 {
		t.Fatalf("capacity %d; want 4", n)
	}
	mfs, err := gw.Services.Metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "sluice_admission_capacity_requests"
	}
	if !found {
		t.Error("the scheduler's metrics are not registered")
	}
	if err := gw.Apply(withCapacity(9)); err != nil || capOf() != 9 {
		t.Fatalf("reload: %v, capacity %d; want 9", err, capOf())
	}
	bad := parse(t, doc)
	bad.Providers[0].Capacity = &deployment.Capacity{}
	if err := gw.Apply(bad); err == nil || !strings.Contains(err.Error(), "providers[0].capacity: give maxConcurrent") {
		t.Fatalf("bad capacity: %v", err)
	}
	if n := capOf(); n != 9 {
		t.Fatalf("a refused deployment changed the capacity to %d", n)
	}
	// A scheduler handed in is the one configured (and its metrics are
	// the caller's to register).
	other, err := NewGateway(withCapacity(1), GatewayOptions{Services: Services{Logger: slog.New(slog.DiscardHandler), Admission: sched}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if n := capOf(); n != 1 {
		t.Fatalf("the caller's scheduler was not configured: %d", n)
	}
}

// TestGatewayCapacityLeases: with Redis counters the scheduler leases each
// provider's capacity in that Redis (the lease shows in the snapshot, and
// Close releases it); with memory counters it has the whole capacity.
func TestGatewayCapacityLeases(t *testing.T) {
	src := strings.Replace(doc, `url: "http://127.0.0.1:9"}`, `url: "http://127.0.0.1:9", capacity: {maxConcurrent: 4}}`, 1)
	mem, err := NewGateway(parse(t, src), GatewayOptions{Services: Services{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if l := mem.Services.Admission.Snapshot().Targets[0].Lease; l != nil {
		t.Fatalf("memory counters: lease %+v; want none", l)
	}

	url, prefix := redistest.URL(t), redistest.KeyPrefix(t)
	red := parse(t, fmt.Sprintf("counters:\n  backend: redis\n  redis: {url: %q, keyPrefix: %q}\n", url, prefix)+src)
	gw, err := NewGateway(red, GatewayOptions{Services: Services{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) { // waiting for the first renewal, not measuring
		l := gw.Services.Admission.Snapshot().Targets[0].Lease
		if l == nil {
			t.Fatal("redis counters: no lease")
		}
		if l.Valid {
			if l.Limit.Requests != 4 || l.Replicas != 1 {
				t.Fatalf("lease %+v; want the whole capacity (4) for the one replica", l)
			}
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no lease granted: %+v", l)
		}
	}
	opts, _ := redis.ParseURL(url)
	client := redis.NewClient(opts)
	defer client.Close()
	key := prefix + "capacity:{p}"
	if n, err := client.HLen(context.Background(), key).Result(); err != nil || n != 1 {
		t.Fatalf("HLEN %s = %d, %v; want the one lease", key, n, err)
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := client.HLen(context.Background(), key).Result(); err != nil || n != 0 {
		t.Fatalf("HLEN %s = %d, %v after Close; want the lease released", key, n, err)
	}
}
