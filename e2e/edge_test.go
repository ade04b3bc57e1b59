package e2e

// The gateway's edge, through the real gateway on loopback: what reaches the
// upstream (a header allowlist, no client query string), what the client
// sees of upstream errors, GET /v1/models through the route's chain, gzip
// request bodies, per-route CORS, and deployments that cannot work refused
// before they are applied.

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/gwerror/gwerrortest"
	"sluice/llmapi"
	"sluice/mockllm"
)

// recorder is an upstream that records each request's header and query
// string, then answers as the mock (or, with X-Script-Status set, with that
// status and the X-Script-Body body), always with a CORS header of its own.
type recorder struct {
	mock http.Handler
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method, path, query string
	header              http.Header
	body                []byte
}

func newRecorder(t testing.TB) (*recorder, string) {
	rec := &recorder{mock: mockllm.New(mockllm.Options{})}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, recorded{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, header: r.Header.Clone(), body: body})
	rc.mu.Unlock()
	// As some providers do: the gateway must not pass it on.
	w.Header().Set("Access-Control-Allow-Origin", "*")
	if s := r.Header.Get("X-Script-Status"); s != "" {
		var status int
		fmt.Sscan(s, &status)
		for _, kv := range r.Header.Values("X-Script-Header") {
			k, v, _ := strings.Cut(kv, "=")
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, r.Header.Get("X-Script-Body"))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	rc.mock.ServeHTTP(w, r)
}

func (rc *recorder) last(t testing.TB) recorded {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.reqs) == 0 {
		t.Fatal("nothing reached the upstream")
	}
	return rc.reqs[len(rc.reqs)-1]
}

func (rc *recorder) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.reqs)
}

// edgeDoc is a deployment over the recorder at url: applications app-a and
// app-b, an openai provider "rec" (forwarding X-Tenant-Tag and the
// X-Script-* controls) and an anthropic provider "rec-anthropic", with the
// given routes.
func edgeDoc(url, routes string) string {
	return fmt.Sprintf(`apiVersion: sluice/v1
providers:
  - name: rec
    type: openai
    url: %[1]s
    auth: {header: Authorization, value: "Bearer sk-upstream-credential"}
    forwardHeaders: [X-Tenant-Tag, "x-script-*"]
    retries: 1
  - name: rec-anthropic
    type: anthropic
    url: %[1]s
    auth: {header: x-api-key, value: "sk-ant-upstream-credential"}
applications:
  - {id: app-a, apiKeys: ["${KEY_APP_A}"]}
  - {id: app-b, apiKeys: ["${KEY_APP_B}"]}
routes:
%[2]s`, url, routes)
}

// startAuthRoutes serves edgeDoc's recorder through two routes with
// api-key-auth alone: /oa (openai) and /an (anthropic).
func startAuthRoutes(t *testing.T) (*recorder, *limitsEnv) {
	rec, url := newRecorder(t)
	env := startLimitsEnv(t, edgeDoc(url, `  - name: oa
    context: /oa
    provider: rec
    policies: [{name: api-key-auth}]
  - name: an
    context: /an
    provider: rec-anthropic
    policies: [{name: api-key-auth}]
`), nil)
	return rec, env
}

// TestUpstreamHeaderAllowlist: the upstream gets the allowlisted headers, the
// provider's own credential and the gateway's request id, and nothing else
// of what a client with a valid key sent: no cookie, no OpenAI-Organization
// or -Project, no other header, no query string (?api_key= is the classic
// leak).
func TestUpstreamHeaderAllowlist(t *testing.T) {
	rec, env := startAuthRoutes(t)

	c := env.client("/oa", "app-a",
		option.WithHeader("Cookie", "session=browser-session-secret"),
		option.WithHeader("OpenAI-Organization", "org-client-choice"),
		option.WithHeader("OpenAI-Project", "proj-client-choice"),
		option.WithHeader("OpenAI-Beta", "assistants=v2"),
		option.WithHeader("X-Internal-Token", "internal-secret"),
		option.WithHeader("X-Tenant-Tag", "blue"),
		option.WithHeader("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
		option.WithHeader("Idempotency-Key", "idem-1"),
		option.WithHeader("X-Request-Id", "client-req-1"),
		option.WithQuery("api_key", "sk-in-the-query"),
		option.WithQuery("foo", "bar"),
	)
	if _, err := c.Chat.Completions.New(context.Background(), chatReq{Model: "gpt-4o-mini", Text: "hi", MaxTokens: 2}.params()); err != nil {
		t.Fatal(err)
	}
	got := rec.last(t)
	if got.query != "" {
		t.Errorf("the client's query string reached the upstream: %q", got.query)
	}
	for _, h := range []string{"Cookie", "Openai-Organization", "Openai-Project", "X-Internal-Token", "X-Api-Key"} {
		if v := got.header.Values(h); len(v) > 0 {
			t.Errorf("%s reached the upstream: %q", h, v)
		}
	}
	want := map[string]string{
		"Authorization":   "Bearer sk-upstream-credential",
		"Openai-Beta":     "assistants=v2",
		"X-Tenant-Tag":    "blue",
		"Traceparent":     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"Idempotency-Key": "idem-1",
		"X-Request-Id":    "client-req-1",
		"Content-Type":    "application/json",
	}
	for h, v := range want {
		if g := got.header.Get(h); g != v {
			t.Errorf("upstream %s = %q, want %q", h, g, v)
		}
	}
	if !slices.ContainsFunc(slices.Collect(func(yield func(string) bool) {
		for k := range got.header {
			if !yield(k) {
				return
			}
		}
	}), func(k string) bool { return strings.HasPrefix(k, "X-Stainless-") }) {
		t.Errorf("the SDK's X-Stainless-* headers did not reach the upstream: %v", got.header)
	}
	for k := range got.header {
		switch {
		case want[k] != "", strings.HasPrefix(k, "X-Stainless-"), k == "Accept", k == "User-Agent", k == "Accept-Encoding", k == "Content-Length":
		default:
			t.Errorf("unexpected header upstream: %s: %q", k, got.header.Values(k))
		}
	}

	// Anthropic: anthropic-version and -beta go through, OpenAI-Beta and the
	// client's x-api-key do not.
	resp, body := env.mustSend("/an/v1/messages", "", []byte(`{"model":"claude-sonnet-4-5","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`),
		map[string]string{"x-api-key": appKey("app-b"), "anthropic-version": "2023-06-01", "anthropic-beta": "tools-2024-04-04",
			"OpenAI-Beta": "assistants=v2", "Cookie": "c=1"})
	if resp.StatusCode != 200 {
		t.Fatalf("messages: %d %s", resp.StatusCode, body)
	}
	got = rec.last(t)
	if got.header.Get("X-Api-Key") != "sk-ant-upstream-credential" || got.header.Get("Anthropic-Version") != "2023-06-01" ||
		got.header.Get("Anthropic-Beta") != "tools-2024-04-04" || got.header.Get("Openai-Beta") != "" || got.header.Get("Cookie") != "" ||
		got.header.Get("Authorization") != "" {
		t.Errorf("anthropic upstream header: %v", got.header)
	}
}

// TestUpstreamErrorsWrapped: an upstream status the client can act on (400,
// 429) is passed through unchanged; the provider refusing the gateway's
// credential (401, 403) is the gateway's problem: 502 upstream_auth_failed,
// never the upstream body (it can echo part of the key); a 5xx after
// retries is 502 upstream_error naming the status. The reservation is closed
// at its estimate either way.
func TestUpstreamErrorsWrapped(t *testing.T) {
	rec, url := newRecorder(t)
	env := startLimitsEnv(t, edgeDoc(url, `  - name: oa
    context: /oa
    provider: rec
    policies:
      - {name: api-key-auth}
      - {name: token-based-ratelimit, params: {totalTokenLimits: [{count: 100000, duration: 1h}]}}
`), nil)
	const keyEcho = `{"error":{"message":"Incorrect API key provided: sk-upstr*******************tial. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
	const badParam = `{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model.","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}`
	cases := []struct {
		name     string
		status   int
		body     string
		headers  []string
		want     int
		code     string
		attempts int
		check    func(t *testing.T, h http.Header, body string)
	}{
		{name: "401 wrapped", status: 401, body: keyEcho, want: 502, code: "upstream_auth_failed", attempts: 1,
			check: func(t *testing.T, _ http.Header, body string) {
				if strings.Contains(body, "sk-upstr") || strings.Contains(body, "Incorrect API key") {
					t.Fatalf("the upstream's body reached the client: %s", body)
				}
				if !strings.Contains(body, "refused the gateway's credential (HTTP 401)") {
					t.Fatalf("message: %s", body)
				}
			}},
		{name: "403 wrapped", status: 403, body: `{"error":{"message":"Project proj_x does not have access"}}`, want: 502, code: "upstream_auth_failed", attempts: 1},
		{name: "503 after retries wrapped", status: 503, body: `{"error":{"message":"internal detail of the provider"}}`, want: 502, code: "upstream_error", attempts: 2,
			check: func(t *testing.T, _ http.Header, body string) {
				if !strings.Contains(body, "answered HTTP 503 (after 2 attempts)") || strings.Contains(body, "internal detail") {
					t.Fatalf("message: %s", body)
				}
			}},
		{name: "402 wrapped", status: 402, body: `{"error":{"message":"billing"}}`, want: 502, code: "upstream_error", attempts: 1},
		{name: "400 passed through", status: 400, body: badParam, want: 400, attempts: 1,
			check: func(t *testing.T, _ http.Header, body string) {
				if body != badParam {
					t.Fatalf("body %s, want the provider's unchanged", body)
				}
			}},
		{name: "429 passed through with its headers", status: 429, body: `{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}`,
			headers: []string{"Retry-After=7", "X-Ratelimit-Remaining-Requests=0"}, want: 429, attempts: 1,
			check: func(t *testing.T, h http.Header, body string) {
				if h.Get("Retry-After") != "7" || h.Get("X-Ratelimit-Remaining-Requests") != "0" || !strings.Contains(body, "Rate limit reached") {
					t.Fatalf("429: Retry-After %q remaining %q body %s", h.Get("Retry-After"), h.Get("X-Ratelimit-Remaining-Requests"), body)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := rec.count()
			closedBefore := env.resolutions("oa")["closed"]
			hdr := map[string]string{"X-Script-Status": fmt.Sprint(tc.status), "X-Script-Body": tc.body}
			req, _ := http.NewRequest(http.MethodPost, env.Base+"/oa/v1/chat/completions",
				bytes.NewReader(chatReq{Model: "gpt-4o-mini", Text: "hi", MaxTokens: 2}.body()))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+appKey("app-a"))
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			for _, kv := range tc.headers {
				req.Header.Add("X-Script-Header", kv)
			}
			resp, err := env.HTTP.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.want, b)
			}
			if tc.code != "" {
				if e := gwerrortest.MustOpenAI(t, b); e.Code != tc.code || e.Type != "upstream_error" || resp.Header.Get("X-Sluice-Error-Code") != tc.code {
					t.Fatalf("envelope %+v, X-Sluice-Error-Code %q; want code %s", e, resp.Header.Get("X-Sluice-Error-Code"), tc.code)
				}
			}
			if tc.check != nil {
				tc.check(t, resp.Header, string(b))
			}
			if n := rec.count() - before; n != tc.attempts {
				t.Fatalf("%d upstream attempts, want %d", n, tc.attempts)
			}
			env.waitSettled()
			if got := env.resolutions("oa")["closed"] - closedBefore; got != 1 {
				t.Fatalf("%v reservations closed, want 1 (an upstream failure keeps the estimate)", got)
			}
		})
	}
}

// TestModelsThroughChain: GET {context}/v1/models identifies the caller
// with the route's chain (no key: 401) and lists only the models
// model-access allows that caller; nothing is charged.
func TestModelsThroughChain(t *testing.T) {
	rec, url := newRecorder(t)
	env := startLimitsEnv(t, edgeDoc(url, `  - name: oa
    context: /oa
    provider: rec
    policies:
      - {name: api-key-auth}
      - name: model-access
        params:
          allow: ["gpt-4o-mini"]
          perApplication: {app-a: ["gpt-4o*", "o3"]}
      - {name: token-based-ratelimit, params: {consumerBased: true, totalTokenLimits: [{count: 1000, duration: 1h}]}}
`), nil)
	ids := func(app string) []string {
		t.Helper()
		c := env.client("/oa", app)
		page, err := c.Models.List(context.Background())
		if err != nil {
			t.Fatalf("models as %s: %v", app, err)
		}
		var out []string
		for _, m := range page.Data {
			out = append(out, m.ID)
		}
		slices.Sort(out)
		return out
	}
	quotaBefore := env.quota("/oa", "app-a")
	if got, want := ids("app-a"), []string{"gpt-4o", "gpt-4o-mini", "o3"}; !slices.Equal(got, want) {
		t.Errorf("app-a sees %v, want %v", got, want)
	}
	if got, want := ids("app-b"), []string{"gpt-4o-mini"}; !slices.Equal(got, want) {
		t.Errorf("app-b sees %v, want %v", got, want)
	}
	last := rec.last(t)
	if last.method != http.MethodGet || last.path != "/v1/models" || last.header.Get("Authorization") != "Bearer sk-upstream-credential" {
		t.Errorf("upstream got %s %s with Authorization %q", last.method, last.path, last.header.Get("Authorization"))
	}
	if q := env.quota("/oa", "app-a"); fmt.Sprint(q) != fmt.Sprint(quotaBefore) {
		t.Errorf("listing models charged the caller: quota %v, was %v", q, quotaBefore)
	}

	c := env.client("/oa", "")
	_, err := c.Models.List(context.Background())
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized || apiErr.Code != "invalid_api_key" {
		t.Fatalf("models without a key: %v, want 401 invalid_api_key", err)
	}
	resp, body := env.mustSend("/oa/v1/models", "app-a", []byte(`{}`), nil)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodGet {
		t.Fatalf("POST /v1/models: %d Allow %q %s", resp.StatusCode, resp.Header.Get("Allow"), body)
	}
}

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestGzipRequestBody: a gzip body is decompressed at the edge, counted like
// the plain body and sent upstream plain; past server.maxRequestBytes after
// decompression it is a 413 without the gateway holding more than the bound
// (a zip bomb); another Content-Encoding is a 415 naming it.
func TestGzipRequestBody(t *testing.T) {
	rec, url := newRecorder(t)
	const limit = 256 << 10
	doc := strings.Replace(edgeDoc(url, `  - name: oa
    context: /oa
    provider: rec
    policies:
      - {name: api-key-auth}
      - {name: token-based-ratelimit, params: {consumerBased: true, algorithm: fixed-window, totalTokenLimits: [{count: 100000, duration: 1h}]}}
`), "providers:", fmt.Sprintf("server: {maxRequestBytes: %d}\nproviders:", limit), 1)
	env := startLimitsEnv(t, doc, nil)
	cl := newCalc(t)

	req := chatReq{Model: "gpt-4o-mini", Text: strings.Repeat("compress me please ", 200), MaxTokens: 5}
	plain := req.body()
	key := counterKey("oa:app-a", policyTokens, "total", window(100000, time.Hour))
	resp, body := env.mustSend("/oa/v1/chat/completions", "app-a", gzipped(t, plain), map[string]string{"Content-Encoding": "gzip"})
	if resp.StatusCode != 200 {
		t.Fatalf("gzip body: %d %s", resp.StatusCode, body)
	}
	prompt, completion := chatUsage(t, body)
	if want := cl.estimate(llmapi.ChatCompletions, plain); prompt != want || completion != 5 {
		t.Fatalf("usage %d+%d, want %d+5", prompt, completion, want)
	}
	env.waitSettled()
	if used := env.used(key, window(100000, time.Hour)); used != prompt+completion {
		t.Fatalf("counter used %d, want %d (the decompressed request's usage)", used, prompt+completion)
	}
	up := rec.last(t)
	if !bytes.Equal(up.body, plain) || up.header.Get("Content-Encoding") != "" {
		t.Fatalf("upstream got Content-Encoding %q and %d bytes, want the plain %d-byte body", up.header.Get("Content-Encoding"), len(up.body), len(plain))
	}

	// A zip bomb: 32 MiB of zeros in about 32 KiB, under the limit
	// compressed, 128 times over it decompressed.
	var bb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bb, gzip.BestSpeed)
	zero := make([]byte, 1<<20)
	for range 32 {
		_, _ = zw.Write(zero)
	}
	_ = zw.Close()
	bomb := bb.Bytes()
	if len(bomb) >= limit {
		t.Fatalf("fixture: the bomb is %d bytes compressed", len(bomb))
	}
	before := rec.count()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	allocBefore := ms.TotalAlloc
	resp, body = env.mustSend("/oa/v1/chat/completions", "app-a", bomb, map[string]string{"Content-Encoding": "gzip"})
	runtime.ReadMemStats(&ms)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || gwerrortest.MustOpenAI(t, body).Code != "request_too_large" {
		t.Fatalf("zip bomb: %d %s, want 413 request_too_large", resp.StatusCode, body)
	}
	// The whole process allocated less than 8 MiB serving it (the bound is
	// 256 KiB); decompressing it would take 32.
	alloc := ms.TotalAlloc - allocBefore
	t.Logf("serving the zip bomb allocated %d KiB", alloc>>10)
	if alloc > 8<<20 {
		t.Fatalf("serving the zip bomb allocated %d MiB", alloc>>20)
	}
	if rec.count() != before {
		t.Fatal("the zip bomb reached the upstream")
	}

	for _, enc := range []string{"br", "deflate", "gzip, br"} {
		resp, body = env.mustSend("/oa/v1/chat/completions", "app-a", plain, map[string]string{"Content-Encoding": enc})
		e := gwerrortest.MustOpenAI(t, body)
		if resp.StatusCode != http.StatusUnsupportedMediaType || e.Code != "unsupported_media_type" || !strings.Contains(e.Message, `"`+enc+`"`) {
			t.Fatalf("Content-Encoding %s: %d %+v, want 415 naming it", enc, resp.StatusCode, e)
		}
	}
	resp, body = env.mustSend("/oa/v1/chat/completions", "app-a", []byte("not gzip at all"), map[string]string{"Content-Encoding": "gzip"})
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a body that is not gzip: %d %s, want 400", resp.StatusCode, body)
	}
	if rec.count() != before {
		t.Fatal("a refused body reached the upstream")
	}
	env.waitSettled()
}

// TestCORS: a route with cors answers preflights itself (204, the chain does
// not run, nothing reaches the upstream) and marks actual responses, success
// and error, for allowed origins, exposing the limit headers; a route without
// cors sends no CORS headers, the provider's own included.
func TestCORS(t *testing.T) {
	rec, url := newRecorder(t)
	env := startLimitsEnv(t, edgeDoc(url, `  - name: web
    context: /web
    provider: rec
    cors: {allowOrigins: ["https://app.example.com"], allowHeaders: [x-trace-*], exposeHeaders: [openai-processing-ms], maxAge: 10m}
    policies:
      - {name: api-key-auth}
      - {name: token-based-ratelimit, params: {consumerBased: true, totalTokenLimits: [{count: 100000, duration: 1h}]}}
  - name: plain
    context: /plain
    provider: rec
    policies: [{name: api-key-auth}]
`), nil)
	preflight := func(path, origin, headers string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodOptions, env.Base+path, nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", headers)
		resp, err := env.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	admissions := env.metric("sluice_ratelimit_admissions_total", nil)

	resp := preflight("/web/v1/chat/completions", "https://app.example.com", "authorization, content-type, x-stainless-os, x-trace-id, x-not-allowed")
	h := resp.Header
	if resp.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		h.Get("Access-Control-Allow-Headers") != "authorization, content-type, x-stainless-os, x-trace-id" ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") || h.Get("Access-Control-Max-Age") != "600" ||
		!slices.Contains(h.Values("Vary"), "Origin") {
		t.Fatalf("preflight: %d %v", resp.StatusCode, h)
	}
	resp = preflight("/web/v1/chat/completions", "https://evil.example.com", "authorization")
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.Header.Get("Access-Control-Allow-Headers") != "" {
		t.Fatalf("preflight from another origin: %d %v", resp.StatusCode, resp.Header)
	}
	if rec.count() != 0 || env.metric("sluice_ratelimit_admissions_total", nil) != admissions {
		t.Fatal("a preflight ran the chain or reached the upstream")
	}

	body := chatReq{Model: "gpt-4o-mini", Text: "hi", MaxTokens: 2}.body()
	origin := map[string]string{"Origin": "https://app.example.com"}
	resp, b := env.mustSend("/web/v1/chat/completions", "app-a", body, origin)
	expose := resp.Header.Get("Access-Control-Expose-Headers")
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Fatalf("actual request: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	for _, want := range []string{"X-Ratelimit-Remaining-Tokens", "X-Request-Id"} {
		if !strings.Contains(expose, want) {
			t.Errorf("Access-Control-Expose-Headers %q lacks %s", expose, want)
		}
	}
	resp, b = env.mustSend("/web/v1/chat/completions", "", body, origin)
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "X-Sluice-Error-Code") {
		t.Fatalf("an error for an allowed origin: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	resp, _ = env.mustSend("/web/v1/chat/completions", "app-a", body, map[string]string{"Origin": "https://evil.example.com"})
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("another origin: %d ACAO %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}

	resp, _ = env.mustSend("/plain/v1/chat/completions", "app-a", body, origin)
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("route without cors: %d ACAO %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	if resp := preflight("/plain/v1/chat/completions", "https://app.example.com", "authorization"); resp.StatusCode != http.StatusMethodNotAllowed ||
		resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight on a route without cors: %d %v", resp.StatusCode, resp.Header)
	}
	env.waitSettled()
}

// TestUndefinedApplicationRefused: a reload whose model-access names an
// application no applications[].id defines is refused at its file:line and
// the last good deployment keeps serving; applied, the restriction meant for
// app-b would silently not exist and app-b would get every model.
func TestUndefinedApplicationRefused(t *testing.T) {
	routes := func(perApp string) string {
		return `  - name: oa
    context: /oa
    provider: mock
    policies:
      - {name: api-key-auth}
      - name: model-access
        params:
` + perApp
	}
	env := startLimitsEnv(t, deploymentDoc([]string{"app-a", "app-b"}, routes("          allow: [gpt-4o-mini]\n")), nil)
	lookup := func(name string) (string, bool) {
		if id, ok := strings.CutPrefix(name, "KEY_"); ok {
			return deployment.HashKey(appKey(strings.ToLower(strings.ReplaceAll(id, "_", "-")))), true
		}
		return env.MockURL, name == "MOCK_URL" || name == "FLAKY_URL"
	}
	bad := deploymentDoc([]string{"app-a", "app-b"}, routes("          perApplication:\n            app-a: [gpt-4o-mini]\n            app-bb: [gpt-4o-mini]\n"))
	err := env.GW.Reload(func() (*deployment.Deployment, error) { return yamlfile.ParseEnv([]byte(bad), "deploy.yaml", lookup) })
	line := strings.Count(bad[:strings.Index(bad, "app-bb")], "\n") + 1
	want := fmt.Sprintf("deploy.yaml:%d:13: routes[0].policies[1].params.perApplication.app-bb: application \"app-bb\" is not defined in applications", line)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("reload error %v, want %s", err, want)
	}
	resp, body := env.mustSend("/oa/v1/chat/completions", "app-b", chatReq{Model: "gpt-4o", Text: "hi", MaxTokens: 2}.body(), nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("app-b asked for gpt-4o: %d, want 403 (the last good deployment allows gpt-4o-mini only): %s", resp.StatusCode, body)
	}
}

// TestRepeatedCredentialRefused: a client with a valid key that sends its
// credential header twice, under names differing only in letter case (one
// header to the gateway, two values), or the Anthropic one twice, is
// refused 401 in the envelope of its API, whichever value comes first:
// which one counts would depend on who reads it. Nothing reaches the
// upstream.
func TestRepeatedCredentialRefused(t *testing.T) {
	rec, env := startAuthRoutes(t)
	chat := []byte(`{"model":"gpt-4o-mini","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
	messages := []byte(`{"model":"claude-sonnet-4-5","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
	cases := []struct {
		name, path string
		body       []byte
		header     http.Header // written with the names as given
		api        string
	}{
		{"authorization re-cased, valid first", "/oa/v1/chat/completions", chat,
			http.Header{"authorization": {"Bearer " + appKey("app-a")}, "AUTHORIZATION": {"Bearer " + appKey("app-b")}}, "openai"},
		{"authorization twice, the same valid key", "/oa/v1/chat/completions", chat,
			http.Header{"Authorization": {"Bearer " + appKey("app-a"), "Bearer " + appKey("app-a")}}, "openai"},
		{"x-api-key re-cased, valid first", "/an/v1/messages", messages,
			http.Header{"x-api-key": {appKey("app-b")}, "X-API-KEY": {"sk-e2e-other"}, "anthropic-version": {"2023-06-01"}}, "anthropic"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, env.Base+tc.path, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header = tc.header.Clone()
			req.Header["Content-Type"] = []string{"application/json"}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "ambiguous credentials") {
				t.Fatalf("got %d %s; want 401 naming the ambiguous credential", resp.StatusCode, body)
			}
			if tc.api == "anthropic" {
				if !strings.Contains(string(body), `"type":"error"`) || !strings.Contains(string(body), `"authentication_error"`) {
					t.Fatalf("not the Anthropic error envelope: %s", body)
				}
			} else if !strings.Contains(string(body), `"code":"invalid_api_key"`) {
				t.Fatalf("not the OpenAI error envelope with invalid_api_key: %s", body)
			}
		})
	}
	if n := rec.count(); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
}
