package e2e

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/counter/memory"
	"sluice/deployment/yamlfile"
	"sluice/internal/app"
	"sluice/tokencount"
)

// metricsGateway serves doc with /metrics on a listener of its own when
// separate is set; it returns the proxy and metrics base URLs ("" when not
// separate).
func metricsGateway(t *testing.T, doc string, separate bool) (base, metricsBase string) {
	t.Helper()
	env := startLimitsEnv(t, deploymentDoc(nil, ""), nil) // the mock upstream
	d, err := yamlfile.ParseEnv([]byte(doc), t.Name()+" deployment", func(name string) (string, bool) {
		if name == "MOCK_URL" {
			return env.MockURL, true
		}
		if name == "METRICS_TOKEN" {
			return "scrape-token-1", true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { _ = st.Close() })
	gw, err := app.NewGateway(d, app.GatewayOptions{
		Services: app.Services{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: prometheus.NewRegistry(),
			Counters: st, Tokens: tokencount.New()},
		SeparateMetrics: separate,
	})
	if err != nil {
		t.Fatal(err)
	}
	listen := func(serve func(net.Listener) error) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- serve(ln) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = gw.Shutdown(ctx)
			if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("serve: %v", err)
			}
		})
		return "http://" + ln.Addr().String()
	}
	base = listen(gw.Serve)
	if separate {
		metricsBase = listen(gw.ServeMetrics)
	}
	return base, metricsBase
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const metricsDoc = `apiVersion: sluice/v1
%SERVER%providers:
  - {name: mock, type: openai, url: "${MOCK_URL}"}
routes:
  - {name: r1, context: /openai, provider: mock}
`

// TestMetricsOnItsOwnListener: with a metrics listener, /metrics is served
// there (and nothing else is), and the proxy listener no longer answers it.
func TestMetricsOnItsOwnListener(t *testing.T) {
	base, mbase := metricsGateway(t, strings.Replace(metricsDoc, "%SERVER%", "", 1), true)
	status, body := get(t, base+"/openai/v1/chat/completions", "")
	if status != http.StatusMethodNotAllowed {
		t.Fatalf("proxy listener: %d %s", status, body)
	}
	if status, body := get(t, base+"/metrics", ""); status != http.StatusNotFound || strings.Contains(body, "sluice_requests_total") {
		t.Fatalf("the proxy listener serves /metrics: %d %.200s", status, body)
	}
	status, body = get(t, mbase+"/metrics", "")
	if status != 200 || !strings.Contains(body, `sluice_requests_total{endpoint="chat.completions",route="r1",status="405"} 1`) {
		t.Fatalf("metrics listener: %d %.500s", status, body)
	}
	if status, _ := get(t, mbase+"/openai/v1/models", ""); status != http.StatusNotFound {
		t.Fatalf("the metrics listener proxies: %d", status)
	}
}

// TestMetricsToken: server.metricsToken protects /metrics with a bearer
// token, on the proxy listener as on a metrics listener.
func TestMetricsToken(t *testing.T) {
	doc := strings.Replace(metricsDoc, "%SERVER%", "server: {metricsToken: \"${METRICS_TOKEN}\"}\n", 1)
	for _, separate := range []bool{false, true} {
		base, mbase := metricsGateway(t, doc, separate)
		url := base + "/metrics"
		if separate {
			url = mbase + "/metrics"
		}
		if status, body := get(t, url, ""); status != http.StatusUnauthorized || strings.Contains(body, "sluice_") {
			t.Fatalf("separate %v, no token: %d %.200s", separate, status, body)
		}
		if status, _ := get(t, url, "scrape-token-2"); status != http.StatusUnauthorized {
			t.Fatalf("separate %v, wrong token: %d", separate, status)
		}
		if status, body := get(t, url, "scrape-token-1"); status != 200 || !strings.Contains(body, "sluice_config_reloads_total") {
			t.Fatalf("separate %v, token: %d %.200s", separate, status, body)
		}
	}
}
