package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"sluice/internal/proctest"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes every export
// (protobuf) and keeps the spans and the raw bodies.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	res   []*commonpb.KeyValue
	raw   [][]byte
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a protobuf POST to /v1/traces", http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	o.raw = append(o.raw, body)
	for _, rs := range req.ResourceSpans {
		o.res = rs.GetResource().GetAttributes()
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(b)
}

// waitSpans waits until a span with attribute sluice.request_id = id is
// there, and returns it with its children.
func (o *otlpReceiver) waitSpans(t *testing.T, id string) (*tracepb.Span, []*tracepb.Span) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		o.mu.Lock()
		var server *tracepb.Span
		for _, s := range o.spans {
			if attrs(s)["sluice.request_id"] == id {
				server = s
			}
		}
		var children []*tracepb.Span
		if server != nil {
			for _, s := range o.spans {
				if bytes.Equal(s.ParentSpanId, server.SpanId) {
					children = append(children, s)
				}
			}
		}
		o.mu.Unlock()
		if server != nil {
			return server, children
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span of request %s exported within 15s", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// attrs flattens a span's attributes to strings (ints in decimal, arrays
// joined with ",").
func attrs(s *tracepb.Span) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes {
		out[kv.Key] = anyString(kv.Value)
	}
	return out
}

func anyString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return jsonNumber(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.Values {
			parts = append(parts, anyString(e))
		}
		return strings.Join(parts, ",")
	}
	return ""
}

func jsonNumber(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Tracing through the real binary, turned on by OTEL_TRACES_EXPORTER=otlp
// and exported to OTEL_EXPORTER_OTLP_ENDPOINT: the server span continues
// the client's traceparent, carries the GenAI attributes with the usage the
// client got, and has one client span per upstream attempt; a refused
// request's span names the denying policy; no prompt or completion text is
// exported.
func TestTracesOTLP(t *testing.T) {
	bin := sluiceBin.Path(t)
	mock := proctest.StartMock(t, bin).URL
	recv := &otlpReceiver{}
	rs := httptest.NewServer(recv)
	t.Cleanup(rs.Close)
	cfg := filepath.Join(t.TempDir(), "deploy.yaml")
	if err := os.WriteFile(cfg, deploymentYAML(mock), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := proctest.Start(t, bin, proctest.Spec{Name: "gateway", ReadyPath: "/readyz",
		Env: withEnv("OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT="+rs.URL, "OTEL_BSP_SCHEDULE_DELAY=50",
			"OTEL_SERVICE_NAME=sluice-e2e"),
		Args: []string{"gateway", "--listen", "127.0.0.1:0", "--config", cfg}})

	const prompt = "the secret prompt 7f3c never leaves"
	post := func(key, body, traceparent string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/openai/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		if traceparent != "" {
			req.Header.Set("Traceparent", traceparent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}

	// A settled request, continuing the client's trace.
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	body := `{"model":"gpt-4o-mini","max_tokens":12,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	resp, b := post(npmAPIKey, body, "00-"+traceID+"-00f067aa0ba902b7-01")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var answer struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &answer); err != nil || len(answer.Choices) == 0 {
		t.Fatalf("answer %s: %v", b, err)
	}
	server, children := recv.waitSpans(t, resp.Header.Get("X-Request-Id"))
	if got := strings.ToLower(hexID(server.TraceId)); got != traceID {
		t.Errorf("server span's trace %s, want the client's %s", got, traceID)
	}
	if server.Kind != tracepb.Span_SPAN_KIND_SERVER || server.Name != "chat gpt-4o-mini" {
		t.Errorf("server span %q kind %v, want \"chat gpt-4o-mini\" server", server.Name, server.Kind)
	}
	want := map[string]string{
		"gen_ai.operation.name":      "chat",
		"gen_ai.provider.name":       "openai",
		"gen_ai.system":              "openai",
		"gen_ai.request.model":       "gpt-4o-mini",
		"gen_ai.response.model":      answer.Model,
		"gen_ai.request.max_tokens":  "12",
		"gen_ai.usage.input_tokens":  jsonNumber(answer.Usage.Prompt),
		"gen_ai.usage.output_tokens": jsonNumber(answer.Usage.Completion),
		"http.response.status_code":  "200",
		"sluice.route":               "e2e",
		"sluice.application":         "e2e-node",
		"sluice.resolution":          "settled",
		"sluice.attempts":            "1",
	}
	got := attrs(server)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("server span %s = %q, want %q", k, got[k], v)
		}
	}
	if len(children) != 1 {
		t.Fatalf("%d client spans under the server span, want 1 (one attempt)", len(children))
	}
	c := children[0]
	ca := attrs(c)
	if c.Kind != tracepb.Span_SPAN_KIND_CLIENT || ca["http.response.status_code"] != "200" || ca["gen_ai.request.model"] != "gpt-4o-mini" ||
		ca["gen_ai.provider.name"] != "openai" || ca["sluice.attempt"] != "1" || ca["server.address"] != "127.0.0.1" {
		t.Errorf("client span %q kind %v attributes %v", c.Name, c.Kind, ca)
	}

	// A refused key: the span names the denying policy, nothing went upstream.
	resp, b = post("sk-not-a-key", body, "")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bad key: %d %s", resp.StatusCode, b)
	}
	server, children = recv.waitSpans(t, resp.Header.Get("X-Request-Id"))
	got = attrs(server)
	if got["sluice.resolution"] != "auth_failed" || got["sluice.denied_by"] != "api-key-auth" || got["http.response.status_code"] != "401" ||
		got["error.type"] != "invalid_api_key" || len(children) != 0 {
		t.Errorf("refused request's span: %v, %d children", got, len(children))
	}

	recv.mu.Lock()
	defer recv.mu.Unlock()
	res := map[string]string{}
	for _, kv := range recv.res {
		res[kv.Key] = anyString(kv.Value)
	}
	if res["service.name"] != "sluice-e2e" {
		t.Errorf("resource service.name %q, want OTEL_SERVICE_NAME's", res["service.name"])
	}
	for _, raw := range recv.raw {
		for _, secret := range []string{prompt, answer.Choices[0].Message.Content, npmAPIKey} {
			if bytes.Contains(raw, []byte(secret)) {
				t.Errorf("an export holds %q", secret)
			}
		}
	}
}

func hexID(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}
