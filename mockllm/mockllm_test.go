package mockllm

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"sluice/llmapi"
	"sluice/sse"
	"sluice/tokencount"
)

func newServer(t *testing.T) (*httptest.Server, *tokencount.Counter) {
	t.Helper()
	counter := tokencount.New()
	srv := httptest.NewServer(New(Options{Counter: counter, Now: func() time.Time { return time.Unix(1700000000, 0) }}))
	t.Cleanup(srv.Close)
	return srv, counter
}

func post(t *testing.T, srv *httptest.Server, path, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readBody(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var endpointPaths = map[llmapi.Endpoint]string{
	llmapi.ChatCompletions: "/v1/chat/completions",
	llmapi.Completions:     "/v1/completions",
	llmapi.Embeddings:      "/v1/embeddings",
	llmapi.Responses:       "/v1/responses",
	llmapi.Messages:        "/v1/messages",
}

func TestBodies(t *testing.T) {
	tests := []struct {
		name       string
		ep         llmapi.Endpoint
		body       string
		completion int64
		finished   int
		check      func(t *testing.T, b []byte)
	}{
		{"chat default length", llmapi.ChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","content":"hello there"}]}`, 16, 1,
			func(t *testing.T, b []byte) {
				if got := gjson.GetBytes(b, "choices.0.message.content").Str; got != strings.Repeat(" tok", 16) {
					t.Errorf("content = %q", got)
				}
				if gjson.GetBytes(b, "choices.0.finish_reason").Str != "stop" {
					t.Errorf("finish_reason = %s", gjson.GetBytes(b, "choices.0.finish_reason").Raw)
				}
			}},
		{"chat n=3 max_tokens", llmapi.ChatCompletions, `{"model":"gpt-4o","n":3,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, 15, 3,
			func(t *testing.T, b []byte) {
				if gjson.GetBytes(b, "choices.2.finish_reason").Str != "length" || gjson.GetBytes(b, "choices.#").Int() != 3 {
					t.Errorf("choices = %s", gjson.GetBytes(b, "choices").Raw)
				}
			}},
		{"chat max_completion_tokens", llmapi.ChatCompletions, `{"model":"gpt-5","max_completion_tokens":7,"messages":[{"role":"user","content":"hi"}]}`, 7, 1, nil},
		{"completions batch", llmapi.Completions, `{"model":"gpt-3.5-turbo-instruct","prompt":["a b","c d e"],"max_tokens":4,"n":2}`, 16, 4, nil},
		{"completions token ids", llmapi.Completions, `{"model":"gpt-3.5-turbo-instruct","prompt":[1,2,3],"max_tokens":2}`, 2, 1, nil},
		{"embeddings", llmapi.Embeddings, `{"model":"text-embedding-3-small","input":["one","two"],"dimensions":4}`, 0, 1,
			func(t *testing.T, b []byte) {
				if gjson.GetBytes(b, "data.#").Int() != 2 || gjson.GetBytes(b, "data.1.embedding.#").Int() != 4 {
					t.Errorf("data = %s", gjson.GetBytes(b, "data").Raw)
				}
				if gjson.GetBytes(b, "data.0.embedding").Raw == gjson.GetBytes(b, "data.1.embedding").Raw {
					t.Error("different inputs got the same vector")
				}
			}},
		{"responses", llmapi.Responses, `{"model":"gpt-4.1","input":"write a haiku","instructions":"be brief","max_output_tokens":3}`, 3, 1,
			func(t *testing.T, b []byte) {
				if gjson.GetBytes(b, "output.0.content.0.text").Str != " tok tok tok" {
					t.Errorf("output = %s", gjson.GetBytes(b, "output").Raw)
				}
			}},
		{"anthropic", llmapi.Messages, `{"model":"claude-sonnet-4-5","max_tokens":9,"system":"you are terse","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, 9, 1,
			func(t *testing.T, b []byte) {
				if gjson.GetBytes(b, "stop_reason").Str != "max_tokens" || gjson.GetBytes(b, "type").Str != "message" {
					t.Errorf("body = %s", b)
				}
			}},
	}
	srv, counter := newServer(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, srv, endpointPaths[tt.ep], tt.body, nil)
			b := readBody(t, resp)
			if resp.StatusCode != 200 || !gjson.ValidBytes(b) {
				t.Fatalf("status %d body %s", resp.StatusCode, b)
			}
			req, gerr := llmapi.Parse(tt.ep, []byte(tt.body))
			if gerr != nil {
				t.Fatal(gerr)
			}
			u, err := llmapi.UsageFromBody(tt.ep, b, req.N)
			if err != nil || u == nil {
				t.Fatalf("usage = %v, %v; body %s", u, err, b)
			}
			if want := counter.EstimatePrompt(req); u.PromptTokens != want || want <= 0 {
				t.Errorf("prompt tokens = %d, want the counter's estimate %d (> 0)", u.PromptTokens, want)
			}
			if u.CompletionTokens != tt.completion || u.FinishedChoices != tt.finished || !u.Complete() {
				t.Errorf("usage = %+v, want completion %d, finished %d", u, tt.completion, tt.finished)
			}
			if tt.check != nil {
				tt.check(t, b)
			}
		})
	}
}

func readStream(t *testing.T, resp *http.Response) ([]*sse.Event, error) {
	t.Helper()
	r := sse.NewReader(resp.Body)
	var evs []*sse.Event
	for {
		ev, err := r.Next()
		if err != nil {
			if err == io.EOF {
				return evs, nil
			}
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func TestStreams(t *testing.T) {
	tests := []struct {
		name       string
		ep         llmapi.Endpoint
		body       string
		hdr        map[string]string
		wantEvents int
		wantUsage  bool
		completion int64
		usageOnly  int
	}{
		// 3 tokens x 2 choices + 2 finish chunks + usage chunk + [DONE].
		{"chat n=2 include_usage", llmapi.ChatCompletions, `{"model":"gpt-4o","stream":true,"n":2,"max_tokens":3,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, nil, 10, true, 6, 1},
		{"chat without include_usage", llmapi.ChatCompletions, `{"model":"gpt-4o","stream":true,"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, nil, 4, false, 0, 0},
		{"chat no-usage fault", llmapi.ChatCompletions, `{"model":"gpt-4o","stream":true,"max_tokens":2,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, map[string]string{HeaderNoUsage: "true"}, 4, false, 0, 0},
		{"completions", llmapi.Completions, `{"model":"gpt-3.5-turbo-instruct","stream":true,"prompt":"once upon","max_tokens":4,"stream_options":{"include_usage":true}}`, nil, 7, true, 4, 1},
		// 7 fixed events + 5 deltas.
		{"responses", llmapi.Responses, `{"model":"gpt-4.1","stream":true,"input":[{"role":"user","content":"hi"}],"max_output_tokens":5}`, nil, 12, true, 5, 0},
		{"responses no-usage", llmapi.Responses, `{"model":"gpt-4.1","stream":true,"input":"hi","max_output_tokens":1}`, map[string]string{HeaderNoUsage: "true"}, 8, false, 0, 0},
		// 5 fixed events + 4 deltas.
		{"anthropic", llmapi.Messages, `{"model":"claude-haiku-4-5","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, nil, 9, true, 4, 0},
	}
	srv, counter := newServer(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, srv, endpointPaths[tt.ep], tt.body, tt.hdr)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			evs, err := readStream(t, resp)
			if err != nil {
				t.Fatalf("stream error %v", err)
			}
			if len(evs) != tt.wantEvents {
				t.Errorf("%d events, want %d", len(evs), tt.wantEvents)
			}
			req, _ := llmapi.Parse(tt.ep, []byte(tt.body))
			tr := llmapi.NewStreamTracker(tt.ep, req.N)
			usageOnly := 0
			for _, ev := range evs {
				if tr.Observe(ev) {
					usageOnly++
				}
			}
			if usageOnly != tt.usageOnly {
				t.Errorf("usage-only chunks = %d, want %d", usageOnly, tt.usageOnly)
			}
			u := tr.Usage()
			if !tt.wantUsage {
				if u.Complete() {
					t.Fatalf("usage %+v, want none", u)
				}
				if tr.FinishedChoices() != req.N {
					t.Errorf("finished %d of %d", tr.FinishedChoices(), req.N)
				}
				return
			}
			if !u.Complete() || u.PromptTokens != counter.EstimatePrompt(req) || u.CompletionTokens != tt.completion {
				t.Errorf("usage %+v; want prompt %d completion %d", u, counter.EstimatePrompt(req), tt.completion)
			}
			if tt.ep == llmapi.ChatCompletions || tt.ep == llmapi.Completions {
				if !evs[len(evs)-1].Done() {
					t.Error("stream does not end with [DONE]")
				}
			}
		})
	}
}

func TestAnthropicEventOrder(t *testing.T) {
	srv, _ := newServer(t)
	resp := post(t, srv, "/v1/messages", `{"model":"claude-haiku-4-5","stream":true,"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, nil)
	evs, err := readStream(t, resp)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ev := range evs {
		if gjson.GetBytes(ev.Data, "type").Str != ev.Event {
			t.Errorf("event %q carries type %q", ev.Event, gjson.GetBytes(ev.Data, "type").Str)
		}
		names = append(names, ev.Event)
	}
	want := "message_start content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(names, " ") != want {
		t.Fatalf("events %v", names)
	}
}

func TestStatusFault(t *testing.T) {
	srv, _ := newServer(t)
	for _, status := range []int{429, 500, 503} {
		for ep, path := range endpointPaths {
			resp := post(t, srv, path, `{"model":"m"}`, map[string]string{HeaderStatus: strconv.Itoa(status)})
			b := readBody(t, resp)
			if resp.StatusCode != status || gjson.GetBytes(b, "error.message").Str == "" || !gjson.GetBytes(b, "error.code").Exists() {
				t.Errorf("%s %d: status %d body %s", ep, status, resp.StatusCode, b)
			}
		}
	}
	resp := post(t, srv, "/v1/chat/completions", `{"model":"m"}`, map[string]string{HeaderStatus: "200"})
	if resp.StatusCode != 400 {
		t.Errorf("bad status header: %d", resp.StatusCode)
	}
}

func TestDropAfter(t *testing.T) {
	srv, _ := newServer(t)
	tests := []struct {
		path, body string
	}{
		{"/v1/chat/completions", `{"model":"gpt-4o","stream":true,"max_tokens":10,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/responses", `{"model":"gpt-4o","stream":true,"max_output_tokens":10,"input":"hi"}`},
		{"/v1/messages", `{"model":"claude-haiku-4-5","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`},
	}
	for _, tt := range tests {
		resp := post(t, srv, tt.path, tt.body, map[string]string{HeaderDropAfter: "3"})
		evs, err := readStream(t, resp)
		if err == nil || len(evs) != 3 {
			t.Errorf("%s: %d events, err %v; want 3 events and a broken stream", tt.path, len(evs), err)
		}
	}
	// Non-streaming: the connection is cut before any response.
	req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o","messages":[]}`))
	req.Header.Set(HeaderDropAfter, "0")
	if resp, err := srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("non-streaming drop: got status %d, want a transport error", resp.StatusCode)
	}
}

// TestStallAfter: a stalled stream sends exactly its first N events and then
// nothing, until the client goes away.
func TestStallAfter(t *testing.T) {
	srv, _ := newServer(t)
	body := `{"model":"gpt-4o","stream":true,"max_tokens":10,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set(HeaderStallAfter, "12") // 10 tokens, the finish chunk, the usage chunk; no [DONE]
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body)
	for i := 0; i < 12; i++ {
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i+1, err)
		}
		if i == 11 && !gjson.GetBytes(ev.Data, "usage.completion_tokens").Exists() {
			t.Fatalf("event 12 is not the usage chunk: %s", ev.Data)
		}
	}
	next := make(chan error, 1)
	go func() { _, err := r.Next(); next <- err }()
	select {
	case err := <-next:
		t.Fatalf("the stream went on after the stall: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-next; err == nil {
		t.Fatal("read an event after the client went away")
	}
	resp2 := post(t, srv, "/v1/chat/completions", body, map[string]string{HeaderStallAfter: "x"})
	if resp2.StatusCode != 400 {
		t.Fatalf("bad stall header: status %d", resp2.StatusCode)
	}
}

func TestDelays(t *testing.T) {
	srv, _ := newServer(t)
	body := `{"model":"gpt-4o","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
	start := time.Now()
	resp := post(t, srv, "/v1/chat/completions", body, map[string]string{HeaderFirstTokenDelay: "60", HeaderTokenDelay: "20"})
	if _, err := readStream(t, resp); err != nil {
		t.Fatal(err)
	}
	// Lower bound only: 60 ms before the first token and 20 ms before each of the other two.
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Errorf("stream took %v, want at least 100ms", el)
	}
	start = time.Now()
	resp = post(t, srv, "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":3,"messages":[]}`, map[string]string{HeaderFirstTokenDelay: "50", HeaderTokenDelay: "25"})
	readBody(t, resp)
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Errorf("body took %v, want at least 100ms", el)
	}
	resp = post(t, srv, "/v1/chat/completions", body, map[string]string{HeaderTokenDelay: "soon"})
	if resp.StatusCode != 400 {
		t.Errorf("bad delay header: status %d", resp.StatusCode)
	}
}

func TestNoUsageBodies(t *testing.T) {
	srv, _ := newServer(t)
	for ep, path := range endpointPaths {
		body := `{"model":"gpt-4o","max_tokens":2,"messages":[{"role":"user","content":"hi"}],"input":"x","prompt":"y"}`
		resp := post(t, srv, path, body, map[string]string{HeaderNoUsage: "true"})
		b := readBody(t, resp)
		u, err := llmapi.UsageFromBody(ep, b, 1)
		if resp.StatusCode != 200 || err != nil || u != nil {
			t.Errorf("%s: status %d usage %+v err %v body %s", ep, resp.StatusCode, u, err, b)
		}
	}
}

func TestBadRequestsAndOps(t *testing.T) {
	srv, _ := newServer(t)
	resp := post(t, srv, "/v1/chat/completions", `{"messages":[]}`, nil)
	if b := readBody(t, resp); resp.StatusCode != 400 || gjson.GetBytes(b, "error.code").Str != "missing_model" {
		t.Errorf("missing model: %d %s", resp.StatusCode, b)
	}
	resp = post(t, srv, "/v1/chat/completions", `{"model":`, nil)
	if resp.StatusCode != 400 {
		t.Errorf("bad json: %d", resp.StatusCode)
	}
	for _, path := range []string{"/healthz", "/v1/models"} {
		r, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Errorf("%s: %d", path, r.StatusCode)
		}
		if path == "/v1/models" && gjson.GetBytes(b, "data.#").Int() == 0 {
			t.Errorf("models: %s", b)
		}
	}
}

func TestClientCancelStopsStream(t *testing.T) {
	srv, _ := newServer(t)
	req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o","stream":true,"max_tokens":100000,"messages":[]}`))
	req.Header.Set(HeaderTokenDelay, "1000")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := sse.NewReader(resp.Body)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// srv.Close in cleanup blocks until the handler returns; a handler that ignored
	// the cancellation would hang the test here.
	done := make(chan struct{})
	go func() { srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("handler kept streaming after the client left")
	}
}
