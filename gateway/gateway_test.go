package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/policies"
)

func chatParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("say hello")},
	}
}

func TestChatNonStreaming(t *testing.T) {
	up := &fakeLLM{}
	srv := startUpstream(t, up)
	env := startGateway(t, recDeployment([]string{srv.URL}, 0, rec("a", map[string]any{"header": "seen"})))

	var raw *http.Response
	c := env.client(option.WithHeader("X-Request-Id", "req-chat-1"), option.WithResponseInto(&raw))
	out, err := c.Chat.Completions.New(context.Background(), chatParams())
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Choices[0].Message.Content; got != "hello there" {
		t.Fatalf("content = %q", got)
	}
	if out.Usage.TotalTokens != 15 {
		t.Fatalf("usage total = %d", out.Usage.TotalTokens)
	}
	if got := raw.Header.Get("X-Request-Id"); got != "req-chat-1" {
		t.Fatalf("X-Request-Id = %q", got)
	}
	if got := raw.Header.Get("X-Rec-A"); got != "seen" {
		t.Fatalf("policy client header missing: %q", got)
	}
	_, h := up.last()
	if got := h.Get("Authorization"); got != "Bearer upstream-secret" {
		t.Fatalf("upstream Authorization = %q, want the provider credential", got)
	}
	finals := env.log.waitFinals(t, "req-chat-1", 1)
	if len(finals) != 1 || finals[0].Kind != policies.Completed || finals[0].Status != 200 {
		t.Fatalf("finals = %+v", finals)
	}
	if u := finals[0].Usage; u == nil || !u.Complete() || u.PromptTokens != 10 || u.CompletionTokens != 5 {
		t.Fatalf("final usage = %+v", u)
	}

	// A generated request id is echoed when the client sends none (or an invalid one).
	resp, _ := env.post(t, "/openai/v1/chat/completions", "application/json",
		`{"model":"m","messages":[]}`, map[string]string{"X-Request-Id": "bad id with spaces"})
	if id := resp.Header.Get("X-Request-Id"); id == "" || strings.Contains(id, " ") {
		t.Fatalf("generated X-Request-Id = %q", id)
	}
}

func TestStreamingUsageChunk(t *testing.T) {
	up := &fakeLLM{}
	srv := startUpstream(t, up)
	env := startGateway(t, recDeployment([]string{srv.URL}, 0, rec("a", nil)))

	for _, tc := range []struct {
		name      string
		askUsage  bool
		wantUsage bool
	}{
		{"client did not ask: chunk hidden", false, false},
		{"client asked: chunk delivered", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "req-stream-" + map[bool]string{false: "hidden", true: "shown"}[tc.askUsage]
			p := chatParams()
			if tc.askUsage {
				p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			}
			c := env.client(option.WithHeader("X-Request-Id", id))
			st := c.Chat.Completions.NewStreaming(context.Background(), p)
			var text strings.Builder
			usageChunks := 0
			for st.Next() {
				ch := st.Current()
				if len(ch.Choices) == 0 && ch.Usage.TotalTokens > 0 {
					usageChunks++
					continue
				}
				if len(ch.Choices) > 0 {
					text.WriteString(ch.Choices[0].Delta.Content)
				}
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			if got := text.String(); got != "tok0 tok1 tok2 tok3 tok4 " {
				t.Fatalf("text = %q", got)
			}
			if want := map[bool]int{false: 0, true: 1}[tc.wantUsage]; usageChunks != want {
				t.Fatalf("usage chunks = %d, want %d", usageChunks, want)
			}
			body, _ := up.last()
			if !strings.Contains(string(body), `"include_usage":true`) {
				t.Fatalf("upstream was not asked for usage: %s", body)
			}
			finals := env.log.waitFinals(t, id, 1)
			if len(finals) != 1 || finals[0].Kind != policies.Completed {
				t.Fatalf("finals = %+v", finals)
			}
			if u := finals[0].Usage; u == nil || !u.Complete() || u.TotalTokens != 15 {
				t.Fatalf("final usage = %+v", u)
			}
		})
	}
}

// TestStreamingNotBuffered checks that events reach the client as the upstream
// produces them: with 50ms between upstream chunks, the first and last event
// must arrive at least 4 gaps apart. A buffering proxy delivers them together.
// TestStreamingNotBuffered proves that events are forwarded as they arrive,
// without depending on timing: the upstream sends the first event and then
// waits until the client has received it before sending the rest. A gateway
// that buffered would never deliver that first event, and the test would fail
// on its deadline instead of passing slowly.
func TestStreamingNotBuffered(t *testing.T) {
	received := make(chan struct{})
	var once sync.Once
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		chunk := func(content, finish string) {
			fin := "null"
			if finish != "" {
				fin = strconv.Quote(finish)
			}
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":%s}]}\n\n", content, fin)
			fl.Flush()
		}
		chunk("first ", "")
		select {
		case <-received:
		case <-r.Context().Done():
			return
		case <-time.After(20 * time.Second):
			return // the client never saw the first event: the gateway buffers
		}
		chunk("second", "stop")
		fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\n\ndata: [DONE]\n\n")
		fl.Flush()
	}))
	env := startGateway(t, recDeployment([]string{srv.URL}, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := env.client()
	st := c.Chat.Completions.NewStreaming(ctx, chatParams())
	var got []string
	for st.Next() {
		if ch := st.Current().Choices; len(ch) > 0 && ch[0].Delta.Content != "" {
			got = append(got, ch[0].Delta.Content)
			once.Do(func() { close(received) })
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != "first |second" {
		t.Fatalf("content events = %q; the first event must reach the client before the upstream sends the second", got)
	}
}

// TestStreamingDelayedTokens: with 50 ms between upstream tokens the client's
// first event arrives before the upstream has even sent the last one. The
// comparison is causal (send and receive times of the same run), so a slow
// machine cannot make a buffered gateway pass.
func TestStreamingDelayedTokens(t *testing.T) {
	up := &fakeLLM{}
	srv := startUpstream(t, up)
	env := startGateway(t, recDeployment([]string{srv.URL}, 0))
	c := env.client(option.WithHeader("x-mock-token-delay-ms", "50"))
	st := c.Chat.Completions.NewStreaming(context.Background(), chatParams())
	var first, last time.Time
	n := 0
	for st.Next() {
		if ch := st.Current().Choices; len(ch) > 0 && ch[0].Delta.Content != "" {
			if n == 0 {
				first = time.Now()
			}
			last = time.Now()
			n++
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if n != fakeTokens {
		t.Fatalf("got %d content events, want %d", n, fakeTokens)
	}
	sentLast := up.lastSend()
	if !first.Before(sentLast) {
		t.Fatalf("first event received at %v, after the upstream sent its last token at %v: the stream is buffered", first, sentLast)
	}
	if last.Sub(first) <= 0 {
		t.Fatalf("first and last events not spread out (%v)", last.Sub(first))
	}
}

func TestEmbeddings(t *testing.T) {
	srv := startUpstream(t, &fakeLLM{})
	env := startGateway(t, recDeployment([]string{srv.URL}, 0, rec("a", nil)))
	c := env.client(option.WithHeader("X-Request-Id", "req-emb"))
	out, err := c.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
		Model: "text-embedding-3-small",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Data) != 1 || len(out.Data[0].Embedding) != 3 {
		t.Fatalf("embeddings = %+v", out.Data)
	}
	finals := env.log.waitFinals(t, "req-emb", 1)
	if finals[0].Kind != policies.Completed || finals[0].Usage == nil || finals[0].Usage.PromptTokens != 4 {
		t.Fatalf("finals = %+v usage=%+v", finals, finals[0].Usage)
	}
}

func TestUpstreamErrorPassthrough(t *testing.T) {
	up := &fakeLLM{}
	srv := startUpstream(t, up)
	// Two retries configured: 4xx (429 included) must still be tried once.
	env := startGateway(t, recDeployment([]string{srv.URL}, 2, rec("a", nil)))
	for _, status := range []int{400, 429} {
		up.hits.Store(0)
		id := "req-pass-" + http.StatusText(status)
		id = strings.ReplaceAll(id, " ", "-")
		c := env.client(option.WithHeader("x-mock-status", strconv.Itoa(status)), option.WithHeader("X-Request-Id", id))
		_, err := c.Chat.Completions.New(context.Background(), chatParams())
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("status %d: err = %v", status, err)
		}
		if apiErr.StatusCode != status || apiErr.Code != "mock_"+strconv.Itoa(status) {
			t.Fatalf("status %d: got %d code %q", status, apiErr.StatusCode, apiErr.Code)
		}
		if apiErr.Response.Header.Get("X-Upstream-Marker") != "yes" {
			t.Fatalf("upstream headers not passed through")
		}
		if n := up.hits.Load(); n != 1 {
			t.Fatalf("status %d: upstream hit %d times; 4xx must not be retried", status, n)
		}
		finals := env.log.waitFinals(t, id, 1)
		if len(finals) != 1 || finals[0].Kind != policies.UpstreamFailed || finals[0].Status != status {
			t.Fatalf("finals = %+v", finals)
		}
	}
}

func TestRetriesFailover(t *testing.T) {
	down := &fakeLLM{status: 503}
	ok := &fakeLLM{}
	s1, s2 := startUpstream(t, down), startUpstream(t, ok)
	env := startGateway(t, recDeployment([]string{s1.URL, s2.URL}, 2, rec("a", nil)))
	c := env.client(option.WithHeader("X-Request-Id", "req-failover"))
	out, err := c.Chat.Completions.New(context.Background(), chatParams())
	if err != nil {
		t.Fatal(err)
	}
	if out.Choices[0].Message.Content != "hello there" {
		t.Fatalf("content = %q", out.Choices[0].Message.Content)
	}
	if down.hits.Load() != 1 || ok.hits.Load() != 1 {
		t.Fatalf("hits: down=%d ok=%d, want 1 and 1", down.hits.Load(), ok.hits.Load())
	}
	finals := env.log.waitFinals(t, "req-failover", 1)
	if len(finals) != 1 || finals[0].Kind != policies.Completed {
		t.Fatalf("the request phase must run once and finish once: %+v", finals)
	}

	// Every target down: the last 5xx is wrapped in a 502 upstream_error
	// naming it, after 1+retries attempts.
	down.hits.Store(0)
	env2 := startGateway(t, recDeployment([]string{s1.URL}, 2, rec("a", nil)))
	resp, body := env2.post(t, "/openai/v1/chat/completions", "application/json",
		`{"model":"m","messages":[]}`, map[string]string{"X-Request-Id": "req-all-down"})
	if resp.StatusCode != 502 || down.hits.Load() != 3 || resp.Header.Get("X-Sluice-Error-Code") != "upstream_error" ||
		!strings.Contains(string(body), "HTTP 503 (after 3 attempts)") {
		t.Fatalf("status %d %s after %d attempts; want 502 upstream_error after 3: %s", resp.StatusCode,
			resp.Header.Get("X-Sluice-Error-Code"), down.hits.Load(), body)
	}
	finals = env2.log.waitFinals(t, "req-all-down", 1)
	if finals[0].Kind != policies.UpstreamFailed {
		t.Fatalf("finals = %+v", finals)
	}

	// Connection refused on the first target fails over to the second.
	dead := startUpstream(t, ok)
	deadURL := dead.URL
	dead.Close()
	ok.hits.Store(0)
	env3 := startGateway(t, recDeployment([]string{deadURL, s2.URL}, 1))
	resp, _ = env3.post(t, "/openai/v1/chat/completions", "application/json", `{"model":"m","messages":[]}`, nil)
	if resp.StatusCode != 200 || ok.hits.Load() != 1 {
		t.Fatalf("connect-error failover: status %d, hits %d", resp.StatusCode, ok.hits.Load())
	}
}

// readEvents reads SSE data lines from r until n have been read.
func readEvents(t *testing.T, br *bufio.Reader, n int) {
	t.Helper()
	got := 0
	for got < n {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d events: %v", got, err)
		}
		if strings.HasPrefix(line, "data:") {
			got++
		}
	}
}
