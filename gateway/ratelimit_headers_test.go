package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/llmapi"
	"sluice/tokencount"
)

// gatedStream is an OpenAI-shaped streaming upstream that sends its response
// headers at once and then holds every event back until release is closed, so
// a test can look at what the client has before the first SSE byte exists.
type gatedStream struct {
	headersSent chan struct{}
	release     chan struct{}
}

func (g *gatedStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	close(g.headersSent)
	select {
	case <-g.release:
	case <-r.Context().Done():
		return
	}
	for _, data := range []string{
		`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}],"usage":null}`,
		`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`,
		`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`,
		`[DONE]`,
	} {
		fmt.Fprintf(w, "data: %s\n\n", data)
		w.(http.Flusher).Flush()
	}
}

// TestStreamingRateLimitHeaders: the x-ratelimit-* headers that limit
// policies set in the request phase reach a streaming client with the
// response headers, while the upstream has not produced a single event yet.
func TestStreamingRateLimitHeaders(t *testing.T) {
	up := &gatedStream{headersSent: make(chan struct{}), release: make(chan struct{})}
	srv := startUpstream(t, up)
	base, _ := startBuiltinGateway(t, mockDeployment(srv.URL,
		pe("api-key-auth", nil),
		pe("basic-ratelimit", map[string]any{"consumerBased": true, "limits": []any{map[string]any{"requests": 50, "duration": "1m"}}}),
		pe("token-based-ratelimit", map[string]any{"consumerBased": true,
			"totalTokenLimits": []any{map[string]any{"count": 10000, "duration": "1h"}}}),
	))

	body := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"stream me something short"}]}`
	llm, gerr := llmapi.Parse(llmapi.ChatCompletions, []byte(body))
	if gerr != nil {
		t.Fatal(gerr)
	}
	prompt := tokencount.New().EstimatePrompt(llm)

	req, _ := http.NewRequest(http.MethodPost, base+"/openai/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+keyA)
	type result struct {
		resp *http.Response
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		got <- result{resp, err}
	}()
	var resp *http.Response
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		resp = r.resp
	case <-time.After(10 * time.Second):
		close(up.release)
		t.Fatal("no response headers while the upstream holds its events back: the gateway waits for the first event")
	}
	defer resp.Body.Close()
	// The upstream closes headersSent just after its flush returns, which may
	// be after the client already has the headers: wait for it, briefly.
	select {
	case <-up.headersSent:
	case <-time.After(5 * time.Second):
		t.Fatal("client got headers although the upstream never answered")
	}

	// Nothing of the body exists yet; the headers must already be complete.
	want := map[string]string{
		"x-ratelimit-limit-tokens":       "10000",
		"x-ratelimit-remaining-tokens":   strconv.FormatInt(10000-prompt, 10),
		"x-ratelimit-limit-requests":     "50",
		"x-ratelimit-remaining-requests": "49",
	}
	for k, v := range want {
		if g := resp.Header.Get(k); g != v {
			t.Errorf("%s = %q, want %q", k, g, v)
		}
	}
	for _, k := range []string{"x-ratelimit-reset-tokens", "x-ratelimit-reset-requests"} {
		if resp.Header.Get(k) == "" {
			t.Errorf("%s missing", k)
		}
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("Content-Type = %q", ct)
	}

	close(up.release)
	rest, err := io.ReadAll(bufio.NewReader(resp.Body))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rest), `"content":"hi"`) || !strings.HasSuffix(strings.TrimSpace(string(rest)), "data: [DONE]") {
		t.Fatalf("stream = %s", rest)
	}
	if strings.Contains(string(rest), `"usage":{`) {
		t.Fatalf("the usage chunk the client did not ask for reached it: %s", rest)
	}
}
