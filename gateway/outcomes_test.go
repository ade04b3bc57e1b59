package gateway

import (
	"bufio"
	"context"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"sluice/deployment"
	"sluice/mockllm"
	"sluice/policies"
	"sluice/tokencount"
)

const chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
const streamBody = `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// TestOutcomeExactlyOnce proves that every policy whose request phase ran gets
// exactly one final call with the right outcome, and that two instances of the
// same policy keep separate per-request state (StateOK).
func TestOutcomeExactlyOnce(t *testing.T) {
	fake := &fakeLLM{}
	fakeSrv := startUpstream(t, fake)
	mock := startUpstream(t, mockllm.New(mockllm.Options{Counter: tokencount.New()}))

	cases := []struct {
		name     string
		upstream string
		timeout  time.Duration
		chain    []deployment.PolicyEntry
		body     string
		header   map[string]string
		// wantStatus is the client's status; 0 when the client hangs up.
		wantStatus int
		wantCode   string // error envelope code, "" for none
		want       map[string]policies.OutcomeKind
		wantLog    string
	}{
		{name: "success", upstream: mock.URL, body: chatBody, wantStatus: 200,
			want: map[string]policies.OutcomeKind{"a": policies.Completed, "b": policies.Completed}},
		{name: "success stream", upstream: mock.URL, body: streamBody, wantStatus: 200,
			want: map[string]policies.OutcomeKind{"a": policies.Completed, "b": policies.Completed}},
		{name: "upstream 5xx", upstream: mock.URL, body: chatBody, header: map[string]string{"x-mock-status": "500"},
			wantStatus: 502, wantCode: "upstream_error", want: map[string]policies.OutcomeKind{"a": policies.UpstreamFailed, "b": policies.UpstreamFailed}},
		{name: "upstream timeout", upstream: fakeSrv.URL, timeout: 300 * time.Millisecond, body: chatBody,
			header: map[string]string{"x-fake-hang": "1"}, wantStatus: 504, wantCode: "upstream_timeout",
			want: map[string]policies.OutcomeKind{"a": policies.UpstreamFailed, "b": policies.UpstreamFailed}},
		{name: "upstream unreachable", upstream: "http://127.0.0.1:1", body: chatBody, wantStatus: 502, wantCode: "upstream_unavailable",
			want: map[string]policies.OutcomeKind{"a": policies.UpstreamFailed, "b": policies.UpstreamFailed}},
		{name: "stream cut by upstream", upstream: mock.URL, body: streamBody, header: map[string]string{"x-mock-drop-after": "3"},
			wantStatus: 200, want: map[string]policies.OutcomeKind{"a": policies.UpstreamFailed, "b": policies.UpstreamFailed}},
		{name: "panic in request phase", upstream: mock.URL, body: chatBody,
			chain:      []deployment.PolicyEntry{rec("a", nil), rec("b", map[string]any{"panic": "request"}), rec("c", nil)},
			wantStatus: 500, wantCode: "internal_error", wantLog: "policy panicked",
			want: map[string]policies.OutcomeKind{"a": policies.Failed, "b": policies.Failed}},
		{name: "panic in response phase", upstream: mock.URL, body: chatBody,
			chain:      []deployment.PolicyEntry{rec("a", nil), rec("b", map[string]any{"panic": "response"})},
			wantStatus: 500, wantCode: "internal_error", wantLog: "policy panicked",
			want: map[string]policies.OutcomeKind{"a": policies.Failed, "b": policies.Failed}},
		{name: "panic in stream phase", upstream: mock.URL, body: streamBody,
			chain:      []deployment.PolicyEntry{rec("a", map[string]any{"panic": "stream"}), rec("b", nil)},
			wantStatus: 200, wantLog: "policy panicked",
			want: map[string]policies.OutcomeKind{"a": policies.Failed, "b": policies.Failed}},
		{name: "rejected by a later policy", upstream: mock.URL, body: chatBody,
			chain:      []deployment.PolicyEntry{rec("a", nil), rec("b", map[string]any{"reject": true}), rec("c", nil)},
			wantStatus: 403, wantCode: "rec_rejected",
			want: map[string]policies.OutcomeKind{"a": policies.Rejected, "b": policies.Rejected}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			chain := tc.chain
			if chain == nil {
				chain = []deployment.PolicyEntry{rec("a", nil), rec("b", nil)}
			}
			d := recDeployment([]string{tc.upstream}, 0, chain...)
			if tc.timeout > 0 {
				d.Providers[0].Timeout = deployment.Duration(tc.timeout)
			}
			env := startGateway(t, d)
			id := "req-outcome-" + string(rune('a'+i))
			hdr := map[string]string{"X-Request-Id": id}
			for k, v := range tc.header {
				hdr[k] = v
			}
			resp, body := env.post(t, "/openai/v1/chat/completions", "application/json", tc.body, hdr)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			if tc.wantCode != "" {
				if code, _ := envelope(t, body); code != tc.wantCode {
					t.Fatalf("code %q, want %q", code, tc.wantCode)
				}
				if resp.Header.Get("X-Sluice-Error-Code") != tc.wantCode {
					t.Fatalf("X-Sluice-Error-Code = %q", resp.Header.Get("X-Sluice-Error-Code"))
				}
			}
			finals := env.log.waitFinals(t, id, len(tc.want))
			assertFinals(t, finals, tc.want)
			if tc.wantLog != "" && !strings.Contains(env.logs.String(), tc.wantLog) {
				t.Fatalf("log lacks %q", tc.wantLog)
			}
		})
	}
}

func assertFinals(t *testing.T, finals []finalRecord, want map[string]policies.OutcomeKind) {
	t.Helper()
	if len(finals) != len(want) {
		t.Fatalf("got %d final calls, want %d: %+v", len(finals), len(want), finals)
	}
	seen := map[string]bool{}
	for _, f := range finals {
		if seen[f.Tag] {
			t.Fatalf("policy %s got a second final call: %+v", f.Tag, finals)
		}
		seen[f.Tag] = true
		k, ok := want[f.Tag]
		if !ok {
			t.Fatalf("policy %s got a final call it should not have: %+v", f.Tag, finals)
		}
		if f.Kind != k {
			t.Fatalf("policy %s: outcome %v, want %v", f.Tag, f.Kind, k)
		}
		if !f.StateOK {
			t.Fatalf("policy %s: its per-request state was overwritten by another instance", f.Tag)
		}
	}
}

func TestClientDisconnectMidStream(t *testing.T) {
	srv := startUpstream(t, &fakeLLM{})
	env := startGateway(t, recDeployment([]string{srv.URL}, 0, rec("a", nil), rec("b", nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, env.base+"/openai/v1/chat/completions", strings.NewReader(streamBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "req-disconnect")
	req.Header.Set("x-mock-token-delay-ms", "200")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readEvents(t, bufio.NewReader(resp.Body), 1)
	cancel()
	resp.Body.Close()
	finals := env.log.waitFinals(t, "req-disconnect", 2)
	assertFinals(t, finals, map[string]policies.OutcomeKind{"a": policies.Cancelled, "b": policies.Cancelled})
}

func TestBadInput(t *testing.T) {
	srv := startUpstream(t, &fakeLLM{})
	d := recDeployment([]string{srv.URL}, 0, rec("a", nil))
	d.Server.MaxRequestBytes = 1024
	env := startGateway(t, d)
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`
	for _, tc := range []struct {
		name, path, ct, body string
		method               string
		status               int
		code                 string
	}{
		{"malformed JSON", "/openai/v1/chat/completions", "application/json", `{"model":`, "", 400, "invalid_json"},
		{"not an object", "/openai/v1/chat/completions", "application/json", `[1,2]`, "", 400, "invalid_json"},
		{"empty body", "/openai/v1/chat/completions", "application/json", ``, "", 400, "invalid_json"},
		{"missing model", "/openai/v1/chat/completions", "application/json", `{"messages":[]}`, "", 400, "missing_model"},
		{"body over limit", "/openai/v1/chat/completions", "application/json", big, "", 413, "request_too_large"},
		{"wrong content type", "/openai/v1/chat/completions", "text/plain", chatBody, "", 415, "unsupported_media_type"},
		{"no content type", "/openai/v1/chat/completions", "", chatBody, "", 415, "unsupported_media_type"},
		{"json with charset", "/openai/v1/chat/completions", "application/json; charset=utf-8", chatBody, "", 200, ""},
		{"unknown endpoint", "/openai/v1/models/x", "application/json", chatBody, "", 404, "route_not_found"},
		{"unknown route", "/other/v1/chat/completions", "application/json", chatBody, "", 404, "route_not_found"},
		{"context is a whole segment", "/openaiX/v1/chat/completions", "application/json", chatBody, "", 404, "route_not_found"},
		{"wrong method", "/openai/v1/chat/completions", "application/json", chatBody, http.MethodPut, 405, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			req, _ := http.NewRequest(method, env.base+tc.path, strings.NewReader(tc.body))
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.code == "" {
				return
			}
			if code, _ := envelope(t, body); code != tc.code {
				t.Fatalf("code %q, want %q", code, tc.code)
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Fatal("error response without X-Request-Id")
			}
		})
	}
}

func TestOperationsEndpoints(t *testing.T) {
	gw, err := New(Options{Registry: testRegistry(newRecLog()), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h := gw.Handler()
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		req, _ := http.NewRequest(http.MethodGet, "http://x"+path, nil)
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if s, _ := get("/healthz"); s != 200 {
		t.Fatalf("/healthz = %d", s)
	}
	if s, _ := get("/readyz"); s != 503 {
		t.Fatalf("/readyz before any config = %d, want 503", s)
	}
	srv := startUpstream(t, &fakeLLM{})
	if err := gw.Apply(recDeployment([]string{srv.URL}, 0)); err != nil {
		t.Fatal(err)
	}
	if s, _ := get("/readyz"); s != 200 {
		t.Fatalf("/readyz after Apply = %d", s)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://x/openai/v1/chat/completions", strings.NewReader(chatBody))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(httptest.NewRecorder(), req)
	s, body := get("/metrics")
	if s != 200 {
		t.Fatalf("/metrics = %d", s)
	}
	for _, want := range []string{
		`sluice_requests_total{endpoint="chat.completions",route="r1",status="200"} 1`,
		`sluice_upstream_attempts_total{provider="openai",target="` + srv.URL + `"} 1`,
		`sluice_config_reloads_total{result="success"} 1`,
		`sluice_inflight_requests 0`,
		`sluice_request_duration_seconds_count{route="r1",status="200"} 1`,
		`sluice_gateway_added_seconds_count{route="r1"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestAnthropicMessages: /v1/messages through an anthropic provider, body and
// stream, with usage reaching the final phase.
func TestAnthropicMessages(t *testing.T) {
	mock := startUpstream(t, mockllm.New(mockllm.Options{Counter: tokencount.New()}))
	d := recDeployment([]string{mock.URL}, 0, rec("a", nil))
	d.Providers[0].Type = "anthropic"
	d.Providers[0].Auth = &deployment.Auth{Header: "x-api-key", Value: "upstream-key"}
	env := startGateway(t, d)
	for _, stream := range []bool{false, true} {
		id := "req-anthropic-" + map[bool]string{false: "body", true: "stream"}[stream]
		body := `{"model":"claude-haiku-4-5","max_tokens":4,"messages":[{"role":"user","content":"hi"}]` +
			map[bool]string{false: "", true: `,"stream":true`}[stream] + `}`
		resp, out := env.post(t, "/openai/v1/messages", "application/json", body,
			map[string]string{"X-Request-Id": id, "anthropic-version": "2023-06-01"})
		if resp.StatusCode != 200 {
			t.Fatalf("stream=%v: %d %s", stream, resp.StatusCode, out)
		}
		if stream && !strings.Contains(string(out), "message_stop") {
			t.Fatalf("stream incomplete: %s", out)
		}
		f := env.log.waitFinals(t, id, 1)
		if f[0].Kind != policies.Completed || f[0].Usage == nil || !f[0].Usage.Complete() || f[0].Usage.CompletionTokens != 4 {
			t.Fatalf("stream=%v: finals %+v usage %+v", stream, f, f[0].Usage)
		}
	}
}

// TestAddedLatencyExcludesUpstream: the added-latency histogram counts what the
// gateway spent, not the upstream's time: with an upstream that takes 150 ms,
// the recorded added time is the request's duration minus at least 150 ms.
func TestAddedLatencyExcludesUpstream(t *testing.T) {
	slow := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(150 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	reg := prometheus.NewRegistry()
	env := startGatewayWith(t, recDeployment([]string{slow.URL}, 0), reg)
	c := env.client()
	if _, err := c.Chat.Completions.New(context.Background(), chatParams()); err != nil {
		t.Fatal(err)
	}
	total := histogramSum(t, reg, "sluice_request_duration_seconds")
	added := histogramSum(t, reg, "sluice_gateway_added_seconds")
	if total < 0.15 || added > total-0.15 {
		t.Fatalf("request took %.3fs, gateway added %.3fs: the upstream's 150ms must not count as added", total, added)
	}
}

func histogramSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			sum := 0.0
			for _, m := range mf.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
			}
			return sum
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}
