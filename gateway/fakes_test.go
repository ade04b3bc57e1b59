package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/deployment"
	"sluice/gwerror"
	"sluice/gwerror/gwerrortest"
	"sluice/internal/proctest"
	"sluice/llmapi"
	"sluice/policies"
	"sluice/sharedctx"
	"sluice/sse"
)

// fakeLLM is a small OpenAI-shaped upstream. Headers steer it:
// x-mock-status (answer with that status and an error body),
// x-mock-token-delay-ms (delay between streamed chunks),
// x-mock-drop-after (cut the connection after that many streamed events),
// x-fake-hang (never answer until the request is cancelled).
type fakeLLM struct {
	hits atomic.Int64
	// status, when non-zero, overrides every answer's status (for a target
	// that is down).
	status int
	mu     sync.Mutex
	// lastBody and lastHeader are the most recent upstream request.
	lastBody   []byte
	lastHeader http.Header
	// lastTokenAt is when the most recent stream started writing its last
	// content token.
	lastTokenAt time.Time
}

func (f *fakeLLM) lastSend() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastTokenAt
}

func (f *fakeLLM) last() ([]byte, http.Header) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastBody, f.lastHeader
}

func (f *fakeLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.hits.Add(1)
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.lastBody, f.lastHeader = body, r.Header.Clone()
	f.mu.Unlock()
	status := f.status
	if s := r.Header.Get("x-mock-status"); s != "" {
		status, _ = strconv.Atoi(s)
	}
	if r.Header.Get("x-fake-hang") != "" {
		<-r.Context().Done()
		return
	}
	if status != 0 && status != 200 {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Upstream-Marker", "yes")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":"mock failure %d","type":"mock_error","param":null,"code":"mock_%d"}}`, status, status)
		return
	}
	var req struct {
		Model         string `json:"model"`
		Stream        bool   `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(body, &req)
	switch r.URL.Path {
	case "/v1/embeddings":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2,0.3]}],"model":%q,"usage":{"prompt_tokens":4,"total_tokens":4}}`, req.Model)
	case "/v1/chat/completions":
		if req.Stream {
			f.stream(w, r, req.Model, req.StreamOptions.IncludeUsage)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`, req.Model)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

const fakeTokens = 5

func (f *fakeLLM) stream(w http.ResponseWriter, r *http.Request, model string, includeUsage bool) {
	delay, _ := strconv.Atoi(r.Header.Get("x-mock-token-delay-ms"))
	dropAfter := -1
	if s := r.Header.Get("x-mock-drop-after"); s != "" {
		dropAfter, _ = strconv.Atoi(s)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	sent := 0
	emit := func(data string) bool {
		if dropAfter >= 0 && sent >= dropAfter {
			// Cut the connection without the terminating chunk.
			panic(http.ErrAbortHandler)
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return false
		}
		fl.Flush()
		sent++
		return true
	}
	usageNull := ""
	if includeUsage {
		usageNull = `,"usage":null`
	}
	for i := 0; i < fakeTokens; i++ {
		if delay > 0 && i > 0 {
			select {
			case <-time.After(time.Duration(delay) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		if i == fakeTokens-1 {
			f.mu.Lock()
			f.lastTokenAt = time.Now()
			f.mu.Unlock()
		}
		if !emit(fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":{"content":"tok%d "},"finish_reason":null}]%s}`, model, i, usageNull)) {
			return
		}
	}
	emit(fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]%s}`, model, usageNull))
	if includeUsage {
		emit(fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":%d,"total_tokens":%d}}`, model, fakeTokens, 10+fakeTokens))
	}
	emit("[DONE]")
}

// finalRecord is one final call a recorder received.
type finalRecord struct {
	Tag     string
	Kind    policies.OutcomeKind
	Status  int
	Usage   *llmapi.Usage
	StateOK bool
	// Probe is what recLog.probe answered at the final call (false without one).
	Probe bool
}

// recLog collects recorder events per request id, and every recorder built
// (lifecycle_test.go checks their Close calls). Safe for concurrent use.
type recLog struct {
	mu       sync.Mutex
	finals   map[string][]finalRecord
	requests map[string][]string
	changed  chan struct{}
	built    []*recorder
	// misuse lists lifecycle violations: a phase on a closed instance, a
	// second Close.
	misuse []string
	// probe, when set before the gateway serves, is asked at every final
	// call about its request id; the answer is the record's Probe.
	probe func(requestID string) bool
}

func newRecLog() *recLog {
	return &recLog{finals: map[string][]finalRecord{}, requests: map[string][]string{}, changed: make(chan struct{}, 1)}
}

func (l *recLog) addRequest(id, tag string) {
	l.mu.Lock()
	l.requests[id] = append(l.requests[id], tag)
	l.mu.Unlock()
}

func (l *recLog) addFinal(id string, f finalRecord) {
	if l.probe != nil {
		f.Probe = l.probe(id)
	}
	l.mu.Lock()
	l.finals[id] = append(l.finals[id], f)
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// waitFinals waits until id has at least n final records, then a short
// settle period to catch duplicates, and returns them.
func (l *recLog) waitFinals(t *testing.T, id string, n int) []finalRecord {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		l.mu.Lock()
		got := len(l.finals[id])
		l.mu.Unlock()
		if got >= n {
			break
		}
		select {
		case <-l.changed:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("request %s: want %d final calls, got %d: %+v", id, n, len(l.finals[id]), l.finals[id])
		}
	}
	time.Sleep(50 * time.Millisecond)
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]finalRecord(nil), l.finals[id]...)
}

type recParams struct {
	Tag string `json:"tag"`
	// Reject rejects every request in the request phase with 403.
	Reject bool `json:"reject,omitempty"`
	// Panic panics in the named phase: request, response or stream.
	Panic string `json:"panic,omitempty"`
	// Header is added to the client's response.
	Header string `json:"header,omitempty"`
}

type recorder struct {
	p    recParams
	id   string
	log  *recLog
	slot string
	// closes counts Close calls (lifecycle_test.go).
	closes atomic.Int32
}

func (r *recorder) OnRequest(c *policies.Call) *gwerror.Error {
	r.checkOpen("request")
	r.log.addRequest(c.Shared.RequestID, r.p.Tag)
	// Per-request state under this instance's own key.
	c.Shared.Metadata[r.slot] = r.p.Tag + "/" + c.Shared.RequestID
	if r.p.Header != "" {
		c.ClientHeader.Set("X-Rec-"+r.p.Tag, r.p.Header)
	}
	if r.p.Panic == "request" {
		panic("recorder " + r.p.Tag + " panics on purpose")
	}
	if r.p.Reject {
		return gwerror.New(http.StatusForbidden, gwerror.TypePermission, "rec_rejected", "rejected by "+r.p.Tag)
	}
	return nil
}

func (r *recorder) OnResponse(c *policies.Call, resp *policies.Response) *gwerror.Error {
	r.checkOpen("response")
	if r.p.Panic == "response" {
		panic("recorder panics in response")
	}
	return nil
}

func (r *recorder) OnStreamEvent(c *policies.Call, ev *sse.Event) {
	r.checkOpen("stream")
	if r.p.Panic == "stream" {
		panic("recorder panics in stream")
	}
}

func (r *recorder) OnFinal(c *policies.Call, o *policies.Outcome) {
	r.checkOpen("final")
	ok := c.Shared.Metadata[r.slot] == r.p.Tag+"/"+c.Shared.RequestID
	r.log.addFinal(c.Shared.RequestID, finalRecord{Tag: r.p.Tag, Kind: o.Kind, Status: o.Status, Usage: c.Shared.Usage(), StateOK: ok})
}

func testRegistry(log *recLog) *policies.Registry {
	def := policies.Define("recorder", "v1", "records every phase (tests only)",
		func(p *recParams, ri policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
			r := &recorder{p: *p, id: ri.InstanceID, log: log, slot: sharedctx.InstanceKey(ri.InstanceID, "rec")}
			log.addBuilt(r)
			return r, nil
		})
	return policies.NewRegistry(def)
}

func rec(tag string, extra map[string]any) deployment.PolicyEntry {
	params := map[string]any{"tag": tag}
	for k, v := range extra {
		params[k] = v
	}
	return deployment.PolicyEntry{Name: "recorder", Version: "v1", Params: params}
}

func recDeployment(targets []string, retries int, chain ...deployment.PolicyEntry) *deployment.Deployment {
	return prepared(&deployment.Deployment{
		APIVersion: "sluice/v1",
		Providers: []deployment.Provider{{Name: "openai", Type: "openai", Targets: targets,
			Auth:    &deployment.Auth{Header: "Authorization", Value: "Bearer upstream-secret"},
			Retries: &retries, Timeout: deployment.Duration(20 * time.Second),
			ForwardHeaders: []string{"x-mock-*", "x-fake-*"}}},
		Routes: []deployment.Route{{Name: "r1", Context: "/openai", Provider: "openai", Policies: chain}},
	})
}

// prepared is d as a gateway is handed a document: validated (a test
// document that does not validate is a bug of the test).
func prepared(d *deployment.Deployment) *deployment.Deployment {
	if err := deployment.Validate(d); err != nil {
		panic(err)
	}
	return d
}

type testEnv struct {
	gw   *Gateway
	base string // http://127.0.0.1:port
	log  *recLog
	logs *proctest.Buffer
}

func startGateway(t *testing.T, d *deployment.Deployment) *testEnv {
	t.Helper()
	return startGatewayWith(t, d, nil)
}

// startGatewayWith is startGateway with the metrics registry given (nil: a
// fresh one the test cannot see).
func startGatewayWith(t *testing.T, d *deployment.Deployment, reg *prometheus.Registry) *testEnv {
	t.Helper()
	rl := newRecLog()
	// Runs after serveGateway's cleanup (Shutdown): every instance closed.
	t.Cleanup(func() { rl.checkAllClosed(t) })
	logs := &proctest.Buffer{}
	gw, base := serveGateway(t, d, Options{
		Registry: testRegistry(rl),
		Logger:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:  reg,
		Backoff:  func(int) time.Duration { return time.Millisecond },
	})
	return &testEnv{gw: gw, base: base, log: rl, logs: logs}
}

// serveGateway builds a gateway from opts, applies d and serves it on a free
// loopback port until the test ends (shutdown waits for Serve to return). It
// returns the gateway and http://ADDR.
func serveGateway(t *testing.T, d *deployment.Deployment, opts Options) (*Gateway, string) {
	t.Helper()
	gw, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Apply(d); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gw.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
		<-done
	})
	return gw, "http://" + ln.Addr().String()
}

func startUpstream(t *testing.T, f http.Handler) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	return s
}

func (e *testEnv) client(opts ...option.RequestOption) openai.Client {
	all := append([]option.RequestOption{
		option.WithBaseURL(e.base + "/openai/v1/"),
		option.WithAPIKey("client-key"),
		option.WithMaxRetries(0),
	}, opts...)
	return openai.NewClient(all...)
}

// post sends a raw request to the gateway.
func (e *testEnv) post(t *testing.T, path, contentType, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	return send(t, http.MethodPost, e.base+path, contentType, body, hdr)
}

// send makes one request with body (none when empty), Content-Type
// contentType (unset when empty) and the headers hdr, and returns the response
// with its body read and closed. A transport error fails the test.
func send(t *testing.T, method, url, contentType, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// envelope decodes an OpenAI error envelope, failing when the body is not
// one or its error has no type.
func envelope(t *testing.T, body []byte) (code, message string) {
	t.Helper()
	e := gwerrortest.MustOpenAI(t, body)
	if e.Type == "" {
		t.Fatalf("envelope without type: %s", body)
	}
	return e.Code, e.Message
}
