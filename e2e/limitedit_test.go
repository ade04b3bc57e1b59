package e2e

// Editing a limit keeps the usage already counted (docs/configuration.md): a
// reload that raises or lowers a token bucket's count applies the new count
// to what the bucket consumed, on the memory backend and on Redis, through
// the real sluice binary and the openai-go client.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/deployment"
	"sluice/internal/proctest"
	"sluice/internal/redistest"
	"sluice/llmapi"
)

// limitEditKey is the one application's API key.
const limitEditKey = "sk-sluice-e2e-limit-edit"

// limitEditRoutes are the counts of one deployment: a token bucket that
// will be raised, one that will be lowered, and a fixed window that will be
// lowered below its usage.
type limitEditRoutes struct {
	raise, lower, window int64
}

// writeLimitEditDeployment writes (or rewrites) the deployment at path:
// api-key-auth and one consumer token-based-ratelimit per route. The
// buckets refill over 30 days (3,000 tokens in 30 days is one token per 14
// minutes), so that what the test reads does not depend on how long it
// takes; reserveOutput none, so that a request's completion is charged at
// settlement and can put the bucket into debt.
func writeLimitEditDeployment(t *testing.T, path, upstream, counters string, r limitEditRoutes) {
	t.Helper()
	route := func(name, algorithm string, count int64, duration string) string {
		return fmt.Sprintf(`  - name: %[1]s
    context: /%[1]s
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: token-based-ratelimit
        version: v1
        params: {consumerBased: true, algorithm: %[2]s, totalTokenLimits: [{count: %[3]d, duration: %[4]s}]}
`, name, algorithm, count, duration)
	}
	doc := fmt.Sprintf(`apiVersion: sluice/v1
counters:
%s
providers:
  - {name: mock, type: openai, url: %q}
applications:
  - {id: app-edit, name: Limit edit, apiKeys: [%q]}
routes:
`, counters, upstream, deployment.HashKey(limitEditKey)) +
		route("raise", "token-bucket", r.raise, "30d") +
		route("lower", "token-bucket", r.lower, "30d") +
		route("window", "fixed-window", r.window, "1d")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
}

// procChat sends req to the route at ctxPath of gw with the openai-go client.
func procChat(t *testing.T, gw *proctest.Proc, ctxPath string, req chatReq) answer {
	t.Helper()
	cl := openai.NewClient(option.WithBaseURL(gw.URL+ctxPath+"/v1/"), option.WithAPIKey(limitEditKey), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var raw *http.Response
	out, err := cl.Chat.Completions.New(ctx, req.params(), option.WithResponseInto(&raw))
	if err != nil {
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("chat %s: %v", ctxPath, err)
		}
		return answer{status: apiErr.StatusCode, header: apiErr.Response.Header, code: apiErr.Code, typ: apiErr.Type}
	}
	return answer{status: raw.StatusCode, header: raw.Header, prompt: out.Usage.PromptTokens, completion: out.Usage.CompletionTokens}
}

// procQuota reads GET {ctxPath}/v1/quota of gw as the application and
// returns the remaining units of its one total-token counter.
func procQuota(t *testing.T, gw *proctest.Proc, ctxPath string) int64 {
	t.Helper()
	status, body := procGet(t, gw, ctxPath+"/v1/quota", limitEditKey)
	if status != http.StatusOK {
		t.Fatalf("GET %s/v1/quota: %d %s", ctxPath, status, body)
	}
	var rep struct {
		Limits []struct {
			Dimension string
			Remaining json.Number
		} `json:"limits"`
	}
	if err := json.Unmarshal(body, &rep); err != nil || len(rep.Limits) != 1 || rep.Limits[0].Dimension != "total" {
		t.Fatalf("GET %s/v1/quota: %v: %s, want one total line", ctxPath, err, body)
	}
	n, err := rep.Limits[0].Remaining.Int64()
	if err != nil {
		t.Fatalf("quota remaining %q: %v", rep.Limits[0].Remaining, err)
	}
	return n
}

// waitQuota polls procQuota until it reports want and returns the last
// figure: a request is settled just after its response was written, so a
// quota read right after it may still see its estimate.
func waitQuota(t *testing.T, gw *proctest.Proc, ctxPath string, want int64) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := procQuota(t, gw, ctxPath)
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// procGet sends GET path to gw with key as the bearer token.
func procGet(t *testing.T, gw *proctest.Proc, path, key string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, gw.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// reloadWithSIGHUP signals gw to reload its configuration file and waits
// until the reload was applied.
func reloadWithSIGHUP(t *testing.T, gw *proctest.Proc) {
	t.Helper()
	const series = `sluice_config_reloads_total{result="success"}`
	before := metricValue(t, gw, series)
	gw.Signal(t, syscall.SIGHUP)
	deadline := time.Now().Add(20 * time.Second)
	for metricValue(t, gw, series) <= before {
		if time.Now().After(deadline) || gw.Exited() {
			t.Fatalf("the configuration was not reloaded within 20s of SIGHUP:\n%s", procTail(gw.Stderr(), 2000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLimitEditKeepsUsage: a token bucket of 3,000 tokens is spent 105 into
// debt; raised to 10,000 it has 10,000 - 3,105 = 6,895 left and admits again
// (it used to stay at -105, blocked). A bucket of 2,000 with 400 consumed,
// lowered to 500, has 100 left (it used to be handed a full bucket of 500). A
// day window lowered below its usage is exhausted until the day ends. On the
// memory backend and on Redis.
func TestLimitEditKeepsUsage(t *testing.T) {
	bin := sluiceBin.Path(t)
	upstream := proctest.StartMock(t, bin).URL
	backends := []struct {
		name     string
		counters func(t *testing.T) string
	}{
		{"memory", func(*testing.T) string { return "  backend: memory" }},
		{"redis", func(t *testing.T) string {
			return replicaRedisCounters("url: "+redistest.URL(t), redistest.KeyPrefix(t), "closed")
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			waitOutOfWindowEdge(t, 24*time.Hour, 2*time.Minute)
			counters := b.counters(t)
			dep := filepath.Join(t.TempDir(), "deployment.yaml")
			writeLimitEditDeployment(t, dep, upstream, counters, limitEditRoutes{raise: 3000, lower: 2000, window: 2000})
			gw := proctest.StartGateway(t, bin, "gateway-"+b.name, "--config", dep, "--log-level", "warn")
			testLimitEdit(t, gw, func() {
				writeLimitEditDeployment(t, dep, upstream, counters, limitEditRoutes{raise: 10000, lower: 500, window: 500})
				reloadWithSIGHUP(t, gw)
			})
		})
	}
}

func testLimitEdit(t *testing.T, gw *proctest.Proc, reload func()) {
	c := newCalc(t)
	// Every request is its prompt P (reserved) plus max_tokens (charged at
	// settlement); five requests of 621 tokens are 3,105.
	probe := chatReq{Model: "gpt-4o-mini", Text: "How much of my budget survives a limit edit?"}
	P := c.estimate(llmapi.ChatCompletions, probe.body())
	spend, quarter := probe, probe
	spend.MaxTokens = 621 - P
	quarter.MaxTokens = 400 - P
	if spend.MaxTokens < 1 || quarter.MaxTokens < 1 {
		t.Fatalf("prompt estimate %d too large for the scenario", P)
	}

	// Raise: 3,000 spent 105 into debt.
	for i := range 5 {
		if a := procChat(t, gw, "/raise", spend); a.status != http.StatusOK || a.prompt+a.completion != 621 {
			t.Fatalf("raise: request %d: status %d usage %d+%d, want 200 with 621 tokens", i+1, a.status, a.prompt, a.completion)
		}
	}
	if got := waitQuota(t, gw, "/raise", -105); got != -105 {
		t.Fatalf("raise: before the edit remaining %d, want -105", got)
	}
	if a := procChat(t, gw, "/raise", probe); a.status != http.StatusTooManyRequests || a.code != "rate_limit_exceeded" {
		t.Fatalf("raise: in debt: status %d code %q, want 429 rate_limit_exceeded", a.status, a.code)
	}
	// Lower: 2,000 with 400 consumed.
	if a := procChat(t, gw, "/lower", quarter); a.status != http.StatusOK {
		t.Fatalf("lower: status %d", a.status)
	}
	if got := waitQuota(t, gw, "/lower", 1600); got != 1600 {
		t.Fatalf("lower: before the edit remaining %d, want 1600", got)
	}
	// Window: 2,000 per day with 1,242 used.
	for range 2 {
		if a := procChat(t, gw, "/window", spend); a.status != http.StatusOK {
			t.Fatalf("window: status %d", a.status)
		}
	}
	if got := waitQuota(t, gw, "/window", 2000-1242); got != 2000-1242 {
		t.Fatalf("window: before the edit remaining %d, want %d", got, 2000-1242)
	}

	reload()

	if got := procQuota(t, gw, "/raise"); got != 10000-3105 {
		t.Errorf("raise 3000 -> 10000: remaining %d, want %d (the 3,105 consumed kept)", got, 10000-3105)
	}
	a := procChat(t, gw, "/raise", probe)
	if h := readRateHeaders(a.header); a.status != http.StatusOK || h.LimitTokens != 10000 || h.RemainingTokens != 10000-3105-P {
		t.Errorf("raise: after the edit status %d code %q, headers limit %d remaining %d; want 200, 10000, %d",
			a.status, a.code, h.LimitTokens, h.RemainingTokens, 10000-3105-P)
	}

	if got := procQuota(t, gw, "/lower"); got != 100 {
		t.Errorf("lower 2000 -> 500: remaining %d, want 100 (the 400 consumed kept), not a full bucket", got)
	}
	a = procChat(t, gw, "/lower", probe)
	if h := readRateHeaders(a.header); a.status != http.StatusOK || h.LimitTokens != 500 || h.RemainingTokens != 100-P {
		t.Errorf("lower: after the edit status %d, headers limit %d remaining %d; want 200, 500, %d", a.status, h.LimitTokens, h.RemainingTokens, 100-P)
	}
	// That request settles at P + the mock's completion.
	if got, want := waitQuota(t, gw, "/lower", 100-a.prompt-a.completion), 100-a.prompt-a.completion; a.status == http.StatusOK && got != want {
		t.Errorf("lower: after a settled request remaining %d, want %d", got, want)
	}

	if got := procQuota(t, gw, "/window"); got != 500-1242 {
		t.Errorf("window 2000 -> 500: remaining %d, want %d", got, 500-1242)
	}
	a = procChat(t, gw, "/window", probe)
	if a.status != http.StatusTooManyRequests || a.code != "budget_exceeded" {
		t.Errorf("window: after the edit status %d code %q, want 429 budget_exceeded", a.status, a.code)
	}
	_, end := windowBoundsNow(24 * time.Hour)
	if ra, err := strconv.ParseInt(a.header.Get("Retry-After"), 10, 64); err != nil || ra < 1 || time.Duration(ra)*time.Second > time.Until(end)+2*time.Second {
		t.Errorf("window: Retry-After %q, want the seconds until the day ends (%v)", a.header.Get("Retry-After"), time.Until(end).Round(time.Second))
	}
}

// windowBoundsNow is the epoch-aligned window of length w holding now.
func windowBoundsNow(w time.Duration) (start, end time.Time) {
	start = time.Now().Truncate(w)
	return start, start.Add(w)
}
