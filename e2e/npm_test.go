// Package e2e holds end-to-end tests that run real clients against a gateway
// and the mock upstream, both started in-process on loopback ports.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/counter/countertest"
	"sluice/counter/memory"
	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/internal/app"
	"sluice/internal/proctest"
	"sluice/mockllm"
	"sluice/pricing"
	"sluice/tokencount"
)

// npmAPIKey is the application key the node client presents.
const npmAPIKey = "sk-sluice-e2e-npm"

// npmDeployment is the gateway configuration for the node client test: one
// application; route /openai with api-key-auth then model-access allowing
// every model; route /budget with a $0.001 daily budget per application
// (prompt-only estimates, so that one long answer spends it).
const npmDeployment = `apiVersion: sluice/v1
providers:
  - name: mock
    type: openai
    url: %s
    forwardHeaders: ["x-mock-*"]
applications:
  - id: e2e-node
    name: Node client
    apiKeys: [%q]
routes:
  - name: e2e
    context: /openai
    provider: mock
    policies:
      - name: api-key-auth
        version: v1
      - name: model-access
        version: v1
        params:
          allow: ["*"]
  - name: budget
    context: /budget
    provider: mock
    policies:
      - name: api-key-auth
        version: v1
      - name: llm-cost-based-ratelimit
        version: v1
        params: {consumerBased: true, reserveOutput: none, budgetLimits: [{amount: 0.001, duration: 1d}]}
      - name: llm-cost
        version: v1
`

// deploymentYAML is npmDeployment with the upstream URL and the key's hash.
func deploymentYAML(upstream string) []byte {
	return fmt.Appendf(nil, npmDeployment, upstream, deployment.HashKey(npmAPIKey))
}

// nodeTestTimeout bounds the whole node run; the client tests are a handful of
// loopback requests, so reaching it means something hangs.
const nodeTestTimeout = 2 * time.Minute

// TestNPMClient runs the official openai npm client (e2e/node/client.test.mjs)
// against a gateway in front of the mock upstream. In CI (CI set) a missing
// node binary or missing node_modules is a failure, never a skip: `make test`
// installs them with npm ci before the Go tests run.
func TestNPMClient(t *testing.T) {
	nodeDir, err := filepath.Abs("node")
	if err != nil {
		t.Fatal(err)
	}
	nodeBin := requireNode(t, nodeDir)

	tokens := tokencount.New()
	upstream := serve(t, mockllm.New(mockllm.Options{Counter: tokens}))

	dep, err := yamlfile.Parse(deploymentYAML("http://"+upstream), "npm_test deployment")
	if err != nil {
		t.Fatalf("deployment: %v", err)
	}
	// The gateway may log from its own goroutines after the test function
	// returned, so logs are printed from a cleanup, not through t.Log.
	logs := &proctest.Buffer{}
	// The budget's counters run on a frozen clock, far from midnight UTC, so
	// that the day cannot end between spending the budget and being denied.
	clock := countertest.NewClock(limitsEpoch)
	counters := memory.New(memory.Options{Now: clock.Now, SweepEvery: -1})
	t.Cleanup(func() { _ = counters.Close() })
	prices, err := pricing.New("")
	if err != nil {
		t.Fatal(err)
	}
	metrics := prometheus.NewRegistry()
	gw, err := app.NewGateway(dep, app.GatewayOptions{Services: app.Services{
		Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Metrics: metrics, Tokens: tokens, Counters: counters, Pricing: prices, Now: clock.Now,
	}})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- gw.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := gw.Shutdown(ctx); err != nil {
			t.Errorf("gateway shutdown: %v", err)
		}
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("gateway serve: %v", err)
		}
		if t.Failed() && logs.String() != "" {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), nodeTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "--test", "client.test.mjs")
	cmd.Dir = nodeDir
	cmd.Env = append(os.Environ(),
		"SLUICE_BASE_URL=http://"+ln.Addr().String()+"/openai/v1",
		"SLUICE_BUDGET_BASE_URL=http://"+ln.Addr().String()+"/budget/v1",
		"SLUICE_API_KEY="+npmAPIKey,
		"NO_COLOR=1",
	)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	// Kill the whole run if the context ends, and do not wait for stray pipes.
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("node --test did not finish within %s; output:\n%s", nodeTestTimeout, out.String())
	}
	if runErr != nil {
		t.Fatalf("node --test client.test.mjs failed (%v); output:\n%s", runErr, out.String())
	}
	t.Logf("node --test output:\n%s", out.String())

	// The budget case at the client's default retry settings: one request
	// spent the budget, the next was denied, and the client did not ask again.
	for status, want := range map[string]float64{"200": 1, "429": 1} {
		got := sumMetric(t, metrics, "sluice_requests_total", map[string]string{"route": "budget", "status": status})
		if got != want {
			t.Errorf("route budget: %v requests answered %s, want %v (a retried denial shows as more)", got, status, want)
		}
	}
}

// requireNode returns the node binary, or fails (CI) or skips (locally) when
// node or the installed openai package is missing.
func requireNode(t *testing.T, nodeDir string) string {
	t.Helper()
	missing := func(what string) {
		msg := what + "; run `make test-node-deps` (npm ci in e2e/node) to install the client"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " (CI is set, so this test must not be skipped)")
		}
		t.Skip(msg)
	}
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH")
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "openai", "package.json")); err != nil {
		missing("e2e/node/node_modules/openai is not installed")
	}
	return nodeBin
}

// serve runs h on a free loopback port until the test ends and returns its
// address.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}
