package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"

	"sluice/counter"
	"sluice/counter/countertest"
	"sluice/counter/memory"
	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/gwerror"
	"sluice/internal/app"
	"sluice/internal/proctest"
	"sluice/llmapi"
	"sluice/mockllm"
	"sluice/policies/ratelimit"
	"sluice/pricing"
	"sluice/tokencount"
)

// The limits harness: a mock upstream, a flaky upstream in front of it, and a
// gateway assembled by the wiring (internal/app) on loopback ports, whose
// policies charge one in-memory counter store driven by a settable clock.
// Deployments are YAML documents parsed by yamlfile.ParseEnv, so the real
// loader (env expansion, strict decoding, validation, chain building) is
// exercised.
//
// ${VAR} references a deployment may use:
//
//	${MOCK_URL}   the mock upstream
//	${FLAKY_URL}  an upstream that answers 503 to the first attempt of every
//	              request (keyed by X-Request-Id) and proxies later attempts
//	              to the mock
//	${KEY_APP_A}  the configured hash of application app-a's API key
//	              (any KEY_<ID>: "_" in the name is "-" in the id, lowercased)

// limitsEpoch is the frozen default time: 20 minutes into a UTC hour, far from
// any window boundary a test could cross by accident.
var limitsEpoch = time.Date(2030, time.June, 15, 12, 20, 0, 0, time.UTC)

// appKey is the API key of application id.
func appKey(id string) string { return "sk-e2e-" + id }

// arrivals records, per X-E2e-Id header, that a request reached the upstream:
// a test that must act only after the gateway admitted a request (it reserves
// before going upstream) waits for its arrival.
type arrivals struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

const headerE2EID = "X-E2e-Id"

func (a *arrivals) chanFor(id string) chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ch == nil {
		a.ch = map[string]chan struct{}{}
	}
	c, ok := a.ch[id]
	if !ok {
		c = make(chan struct{})
		a.ch[id] = c
	}
	return c
}

func (a *arrivals) arrived(id string) {
	c := a.chanFor(id)
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-c:
	default:
		close(c)
	}
}

// wait blocks until id reached the upstream or ctx ends.
func (a *arrivals) wait(ctx context.Context, id string) error {
	select {
	case <-a.chanFor(id):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flakyUpstream answers 503 to the first attempt of each logical request
// (same X-Request-Id) and reverse-proxies the later ones to the mock.
type flakyUpstream struct {
	proxy *httputil.ReverseProxy
	mu    sync.Mutex
	seen  map[string]int
	hits  int
	fails int
}

func (f *flakyUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Request-Id")
	f.mu.Lock()
	if f.seen == nil {
		f.seen = map[string]int{}
	}
	f.seen[id]++
	first := f.seen[id] == 1
	f.hits++
	if first {
		f.fails++
	}
	f.mu.Unlock()
	if first {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"message":"flaky: first attempt fails","type":"server_error","param":null,"code":"flaky"}}`)
		return
	}
	f.proxy.ServeHTTP(w, r)
}

func (f *flakyUpstream) counts() (hits, fails int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits, f.fails
}

// limitsEnv is one running harness.
type limitsEnv struct {
	t        testing.TB
	Base     string // gateway base URL, http://127.0.0.1:port
	MockURL  string
	Clock    *countertest.Clock // shared by the counter store and the policies
	Store    *memory.Store
	Tokens   *tokencount.Counter
	Pricing  *pricing.Catalog
	Metrics  *prometheus.Registry
	GW       *app.Gateway
	Arrivals *arrivals
	Flaky    *flakyUpstream
	HTTP     *http.Client
	Log      *proctest.Buffer // gateway logs, written from any goroutine
}

// startLimitsEnv starts the upstreams and a gateway serving the deployment
// doc (see the ${VAR}s above). clock nil: a clock frozen at limitsEpoch.
func startLimitsEnv(t testing.TB, doc string, clock *countertest.Clock) *limitsEnv {
	t.Helper()
	if clock == nil {
		clock = countertest.NewClock(limitsEpoch)
	}
	env := &limitsEnv{t: t, Clock: clock, Tokens: tokencount.New(), Arrivals: &arrivals{}, Log: &proctest.Buffer{}}

	mock := mockllm.New(mockllm.Options{Counter: env.Tokens})
	mockSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get(headerE2EID); id != "" {
			env.Arrivals.arrived(id)
		}
		mock.ServeHTTP(w, r)
	}))
	t.Cleanup(mockSrv.Close)
	env.MockURL = mockSrv.URL
	mu, _ := url.Parse(mockSrv.URL)
	env.Flaky = &flakyUpstream{proxy: httputil.NewSingleHostReverseProxy(mu)}
	env.Flaky.proxy.FlushInterval = -1
	flakySrv := httptest.NewServer(env.Flaky)
	t.Cleanup(flakySrv.Close)

	cat, err := pricing.New("")
	if err != nil {
		t.Fatalf("pricing catalog: %v", err)
	}
	env.Pricing = cat
	env.Store = memory.New(memory.Options{Now: clock.Now, SweepEvery: -1})
	t.Cleanup(func() { _ = env.Store.Close() })
	env.Metrics = prometheus.NewRegistry()

	lookup := func(name string) (string, bool) {
		switch name {
		case "MOCK_URL":
			return mockSrv.URL, true
		case "FLAKY_URL":
			return flakySrv.URL, true
		}
		if id, ok := strings.CutPrefix(name, "KEY_"); ok && id != "" {
			return deployment.HashKey(appKey(strings.ToLower(strings.ReplaceAll(id, "_", "-")))), true
		}
		return "", false
	}
	dep, err := yamlfile.ParseEnv([]byte(doc), t.Name()+" deployment", lookup)
	if err != nil {
		t.Fatalf("deployment does not parse: %v\n%s", err, doc)
	}

	env.GW, err = app.NewGateway(dep, app.GatewayOptions{
		Services: app.Services{
			Logger:   slog.New(slog.NewTextHandler(env.Log, &slog.HandlerOptions{Level: slog.LevelWarn})),
			Metrics:  env.Metrics,
			Counters: env.Store,
			Pricing:  env.Pricing,
			Tokens:   env.Tokens,
			Now:      clock.Now,
		},
		// Retries are part of what is tested, their wall-clock wait is not.
		Backoff: func(int) time.Duration { return time.Millisecond },
	})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- env.GW.Serve(ln) }()
	env.Base = "http://" + ln.Addr().String()

	tr := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: 30 * time.Second}
	env.HTTP = &http.Client{Transport: tr}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := env.GW.Shutdown(ctx); err != nil {
			t.Errorf("gateway shutdown: %v", err)
		}
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("gateway serve: %v", err)
		}
		if t.Failed() {
			if s := env.Log.String(); s != "" {
				t.Logf("gateway log:\n%s", s)
			}
		}
	})
	return env
}

// client is an openai-go client for the route at context ctxPath, presenting
// app's key ("" presents none). The SDK's own retries are off: a retried 429
// would hide what the gateway answered.
func (e *limitsEnv) client(ctxPath, app string, opts ...option.RequestOption) openai.Client {
	all := []option.RequestOption{
		option.WithBaseURL(e.Base + ctxPath + "/v1/"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(e.HTTP),
	}
	if app != "" {
		all = append(all, option.WithAPIKey(appKey(app)))
	} else {
		all = append(all, option.WithAPIKey("unused"), option.WithHeaderDel("Authorization"))
	}
	return openai.NewClient(append(all, opts...)...)
}

// send posts body to path (a full gateway path) as app ("" for no key) with
// extra headers, and returns the response with its body read.
func (e *limitsEnv) send(ctx context.Context, path, app string, body []byte, hdr map[string]string) (*http.Response, []byte, error) {
	resp, err := e.open(ctx, path, app, body, hdr)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// open is send without reading the body (streams).
func (e *limitsEnv) open(ctx context.Context, path, app string, body []byte, hdr map[string]string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.Base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if app != "" {
		req.Header.Set("Authorization", "Bearer "+appKey(app))
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return e.HTTP.Do(req)
}

// mustSend is send that fails the test on a transport error.
func (e *limitsEnv) mustSend(path, app string, body []byte, hdr map[string]string) (*http.Response, []byte) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, b, err := e.send(ctx, path, app, body, hdr)
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	return resp, b
}

// calc computes expected charges independently of the gateway: its own
// tokenizer and its own copy of the embedded pricing catalog.
type calc struct {
	t       testing.TB
	tokens  *tokencount.Counter
	pricing *pricing.Catalog
}

func newCalc(t testing.TB) *calc {
	t.Helper()
	cat, err := pricing.New("")
	if err != nil {
		t.Fatalf("pricing catalog: %v", err)
	}
	return &calc{t: t, tokens: tokencount.New(), pricing: cat}
}

// estimate is the prompt estimate of body: the tokenizer run on the request
// as the edge parses it (the mock reports the same number as prompt tokens).
func (c *calc) estimate(ep llmapi.Endpoint, body []byte) int64 {
	c.t.Helper()
	req, gerr := llmapi.Parse(ep, body)
	if gerr != nil {
		c.t.Fatalf("parse %s: %v", body, gerr)
	}
	return c.tokens.EstimatePrompt(req)
}

// priceMicros is the catalog's exact price of usage in micro-USD, rounded up.
func (c *calc) priceMicros(model string, prompt, completion int64) int64 {
	c.t.Helper()
	m, ok := c.pricing.CostMicros(model, &llmapi.Usage{PromptTokens: prompt, CompletionTokens: completion})
	if !ok {
		c.t.Fatalf("model %s is not in the pricing catalog", model)
	}
	return m
}

// chatReq describes a chat completion request body.
type chatReq struct {
	Model        string
	Text         string
	MaxTokens    int64
	N            int
	Stream       bool
	IncludeUsage bool
}

func (c chatReq) body() []byte {
	m := map[string]any{
		"model":    c.Model,
		"messages": []map[string]any{{"role": "user", "content": c.Text}},
	}
	if c.MaxTokens > 0 {
		m["max_tokens"] = c.MaxTokens
	}
	if c.N > 1 {
		m["n"] = c.N
	}
	if c.Stream {
		m["stream"] = true
		if c.IncludeUsage {
			m["stream_options"] = map[string]any{"include_usage": true}
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func (c chatReq) params() openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model:    c.Model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(c.Text)},
	}
	if c.MaxTokens > 0 {
		p.MaxTokens = openai.Int(c.MaxTokens)
	}
	if c.N > 1 {
		p.N = openai.Int(int64(c.N))
	}
	if c.Stream && c.IncludeUsage {
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	return p
}

// completion is the completion tokens the mock produces for c.
func (c chatReq) completion() int64 {
	mt := c.MaxTokens
	if mt == 0 {
		mt = mockllm.DefaultMaxTokens
	}
	return mt * int64(max(c.N, 1))
}

// counterKey is the engine's key of a counter (docs/ratelimit.md, "Keys and
// scopes"): {scope}:policy:meter:period.
func counterKey(scope, policy, meter string, l counter.Limit) string {
	return ratelimit.GroupKey(scope, policy) + ":" + meter + ":" + ratelimit.PeriodLabel(l)
}

// window is a fixed-window limit of max units per d.
var window = countertest.Window

// used reads a fixed-window counter's usage with Peek (charges nothing).
func (e *limitsEnv) used(key string, l counter.Limit) int64 {
	e.t.Helper()
	var res counter.Result
	if err := e.Store.Peek(context.Background(), []counter.Debit{{Key: key, Limit: l}}, &res); err != nil {
		e.t.Fatalf("peek %s: %v", key, err)
	}
	return l.Max - res.Remaining[0]
}

// remaining reads a counter's remaining units with Peek (negative in debt).
func (e *limitsEnv) remaining(key string, l counter.Limit) int64 {
	e.t.Helper()
	var res counter.Result
	if err := e.Store.Peek(context.Background(), []counter.Debit{{Key: key, Limit: l}}, &res); err != nil {
		e.t.Fatalf("peek %s: %v", key, err)
	}
	return res.Remaining[0]
}

// metric sums the values of the series of family name whose labels include
// want (counters, gauges; histograms count observations).
func (e *limitsEnv) metric(name string, want map[string]string) float64 {
	e.t.Helper()
	fams, err := e.Metrics.Gather()
	if err != nil {
		e.t.Fatalf("gather: %v", err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// openReservations is the engines' sluice_ratelimit_open_reservations gauge
// summed over routes and policies.
func (e *limitsEnv) openReservations() float64 {
	return e.metric("sluice_ratelimit_open_reservations", nil)
}

// waitSettled waits until no reservation is open: requests whose client went
// away finish on the gateway's side a moment later. A gauge that stays above
// zero is a leak and fails the test.
func (e *limitsEnv) waitSettled() {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		open := e.openReservations()
		if open == 0 && e.metric("sluice_inflight_requests", nil) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("open reservations = %v (in flight %v) 20s after the traffic stopped: a reservation leaked",
				open, e.metric("sluice_inflight_requests", nil))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// resolutions reads sluice_ratelimit_resolutions_total for a route, by kind.
func (e *limitsEnv) resolutions(route string) map[string]float64 {
	out := map[string]float64{}
	for _, k := range []string{"settled", "closed", "abandoned", "released"} {
		out[k] = e.metric("sluice_ratelimit_resolutions_total", map[string]string{"route": route, "kind": k})
	}
	return out
}

// rateHeaders are the x-ratelimit-* headers of a response (-1 when absent).
type rateHeaders struct {
	LimitTokens, RemainingTokens int64
	ResetTokens                  string
	CostLimitMicros              int64
	CostRemainingMicros          int64
}

func readRateHeaders(h http.Header) rateHeaders {
	num := func(k string) int64 {
		v := h.Get(k)
		if v == "" {
			return -1
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return -2
		}
		return n
	}
	usd := func(k string) int64 {
		v := h.Get(k)
		if v == "" {
			return -1
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return -2
		}
		return int64(math.Round(f * 1e6))
	}
	return rateHeaders{
		LimitTokens:         num("X-Ratelimit-Limit-Tokens"),
		RemainingTokens:     num("X-Ratelimit-Remaining-Tokens"),
		ResetTokens:         h.Get("X-Ratelimit-Reset-Tokens"),
		CostLimitMicros:     usd("X-Ratelimit-Cost-Limit-Dollars"),
		CostRemainingMicros: usd("X-Ratelimit-Cost-Remaining-Dollars"),
	}
}

// chatUsage decodes the usage of a non-streamed chat completion body.
func chatUsage(t testing.TB, body []byte) (prompt, completion int64) {
	t.Helper()
	var b struct {
		Usage *struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.Usage == nil {
		t.Fatalf("no usage in body: %s", body)
	}
	return b.Usage.Prompt, b.Usage.Completion
}

// deployment assembles a document: one mock provider (plus a two-target
// provider "retrying" whose first target is the flaky upstream), the given
// applications and routes (YAML list items under "routes:"). Both providers
// forward the mock's x-mock-* fault headers and X-E2e-Id.
func deploymentDoc(apps []string, routes string) string {
	var b strings.Builder
	b.WriteString("apiVersion: sluice/v1\nproviders:\n")
	b.WriteString("  - {name: mock, type: openai, url: \"${MOCK_URL}\", forwardHeaders: [\"x-mock-*\", \"" + headerE2EID + "\"]}\n")
	b.WriteString("  - {name: retrying, type: openai, targets: [\"${FLAKY_URL}\", \"${MOCK_URL}\"], retries: 2, forwardHeaders: [\"x-mock-*\", \"" + headerE2EID + "\"]}\n")
	if len(apps) > 0 {
		b.WriteString("applications:\n")
		for _, a := range apps {
			v := "KEY_" + strings.ToUpper(strings.ReplaceAll(a, "-", "_"))
			fmt.Fprintf(&b, "  - {id: %s, name: %q, apiKeys: [\"${%s}\"]}\n", a, "Application "+a, v)
		}
	}
	b.WriteString("routes:\n")
	b.WriteString(routes)
	return b.String()
}

// quota reads GET {ctxPath}/v1/quota as app ("" for no key): the remaining
// units of each counter reported, by counter key (usd converted to micro-USD).
func (e *limitsEnv) quota(ctxPath, app string) map[string]int64 {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.Base+ctxPath+"/v1/quota", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if app != "" {
		req.Header.Set("Authorization", "Bearer "+appKey(app))
	}
	resp, err := e.HTTP.Do(req)
	if err != nil {
		e.t.Fatalf("GET quota: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s/v1/quota: %d %s", ctxPath, resp.StatusCode, body)
	}
	var rep struct {
		Limits []struct {
			Policy, Scope, Dimension, Period, Unit string
			Remaining                              json.Number
		} `json:"limits"`
	}
	if err := json.Unmarshal(body, &rep); err != nil {
		e.t.Fatalf("quota body: %v: %s", err, body)
	}
	out := map[string]int64{}
	for _, l := range rep.Limits {
		f, err := l.Remaining.Float64()
		if err != nil {
			e.t.Fatalf("quota remaining %q: %v", l.Remaining, err)
		}
		if l.Unit == "usd" {
			f *= 1e6
		}
		out["{"+l.Scope+"}:"+l.Policy+":"+l.Dimension+":"+l.Period] = int64(math.Round(f))
	}
	return out
}

// deniedBy is the policy name of an X-Sluice-Policy header, without the
// scope parameter ("token-based-ratelimit; scope=application" ->
// "token-based-ratelimit").
func deniedBy(h http.Header) string {
	name, _, _ := strings.Cut(h.Get(gwerror.HeaderPolicy), ";")
	return strings.TrimSpace(name)
}

// deniedScope is the scope parameter of an X-Sluice-Policy header ("" when
// absent).
func deniedScope(h http.Header) string {
	_, params, _ := strings.Cut(h.Get(gwerror.HeaderPolicy), ";")
	v, _ := strings.CutPrefix(strings.TrimSpace(params), "scope=")
	return v
}

// sumMetric sums the series of family name on reg whose labels include want
// (counters and gauges).
func sumMetric(t testing.TB, reg prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
