package gateway

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/deployment"
	"sluice/internal/proctest"
	"sluice/mockllm"
	"sluice/policies"
	"sluice/tokencount"
)

// closeWatch is a transport that records, per request id, whether the
// upstream response body has been closed.
type closeWatch struct {
	rt     http.RoundTripper
	mu     sync.Mutex
	closed map[string]bool
}

type watchedBody struct {
	io.ReadCloser
	w  *closeWatch
	id string
}

func (b *watchedBody) Close() error {
	b.w.mu.Lock()
	b.w.closed[b.id] = true
	b.w.mu.Unlock()
	return b.ReadCloser.Close()
}

func (w *closeWatch) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.rt.RoundTrip(r)
	if err == nil {
		resp.Body = &watchedBody{ReadCloser: resp.Body, w: w, id: r.Header.Get("X-Request-Id")}
	}
	return resp, err
}

func (w *closeWatch) isClosed(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed[id]
}

// TestFinalAfterUpstreamClosed: on every path that went upstream and got a
// response, the outcome reaches the policies only once the upstream body is
// closed (fair admission frees the provider's capacity on it): a stream
// policy that panics (the Failed path, which used to deliver the outcome
// first), a client that hangs up mid-stream, a completed stream and body, a
// passed-through and a wrapped upstream error.
func TestFinalAfterUpstreamClosed(t *testing.T) {
	mock := startUpstream(t, mockllm.New(mockllm.Options{Counter: tokencount.New()}))
	slow := `{"model":"gpt-4o-mini","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`
	cases := []struct {
		name   string
		chain  []deployment.PolicyEntry
		body   string
		header map[string]string
		hangUp bool
		want   policies.OutcomeKind
	}{
		{name: "stream policy panics", chain: []deployment.PolicyEntry{rec("a", map[string]any{"panic": "stream"})},
			body: slow, header: map[string]string{mockllm.HeaderTokenDelay: "20"}, want: policies.Failed},
		{name: "client hangs up mid-stream", body: slow, header: map[string]string{mockllm.HeaderTokenDelay: "50"},
			hangUp: true, want: policies.Cancelled},
		{name: "stream", body: streamBody, want: policies.Completed},
		{name: "body", body: chatBody, want: policies.Completed},
		{name: "upstream 429 passed through", body: chatBody, header: map[string]string{mockllm.HeaderStatus: "429"}, want: policies.UpstreamFailed},
		{name: "upstream 500 wrapped", body: chatBody, header: map[string]string{mockllm.HeaderStatus: "500"}, want: policies.UpstreamFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			watch := &closeWatch{rt: NewTransport(), closed: map[string]bool{}}
			rl := newRecLog()
			rl.probe = watch.isClosed
			chain := tc.chain
			if chain == nil {
				chain = []deployment.PolicyEntry{rec("a", nil)}
			}
			_, base := serveGateway(t, recDeployment([]string{mock.URL}, 0, chain...), Options{
				Registry: testRegistry(rl), Logger: slog.New(slog.NewTextHandler(&proctest.Buffer{}, nil)), Transport: watch})
			id := "req-close-" + strings.ReplaceAll(tc.name, " ", "-")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/openai/v1/chat/completions", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Request-Id", id)
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if tc.hangUp {
				readEvents(t, bufio.NewReader(resp.Body), 2)
				cancel()
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
			}
			resp.Body.Close()
			finals := rl.waitFinals(t, id, 1)
			if finals[0].Kind != tc.want {
				t.Fatalf("outcome %v; want %v", finals[0].Kind, tc.want)
			}
			if !finals[0].Probe {
				t.Fatalf("the outcome (%v) was delivered before the upstream body was closed", finals[0].Kind)
			}
		})
	}
}
