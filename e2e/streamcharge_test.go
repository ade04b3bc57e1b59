package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"

	"sluice/llmapi"
	"sluice/mockllm"
)

// A client that hangs up pays for what it received (issue 9 items 3 and 10):
// a stream that ends without the provider's usage report is charged the
// output the gateway forwarded, tokenized (never less than the estimate); a
// usage report that arrived before the client left is charged as is.

const streamChargeModel = "gpt-4o-mini"

// streamChargeDoc is deploymentDoc plus a provider "mock-anthropic" of type
// anthropic served by the same mock, and the server block server (YAML
// mapping lines, "" for none).
func streamChargeDoc(apps []string, routes, server string) string {
	doc := deploymentDoc(apps, routes)
	doc = strings.Replace(doc, "providers:\n", "providers:\n  - {name: mock-anthropic, type: anthropic, url: \"${MOCK_URL}\", forwardHeaders: [\"x-mock-*\", \"X-E2e-Id\"]}\n", 1)
	if server != "" {
		doc += "server:\n" + server
	}
	return doc
}

// tokenRoute is a route on provider with api-key-auth and a per-application
// total token limit of count per hour (fixed window, prompt-only estimates).
func authTokenRoute(name, provider string, count int64) string {
	return fmt.Sprintf(`  - name: %[1]s
    context: /%[1]s
    provider: %[2]s
    policies:
      - {name: api-key-auth, version: v1}
      - name: token-based-ratelimit
        version: v1
        params: {consumerBased: true, algorithm: fixed-window, totalTokenLimits: [{count: %[3]d, duration: 1h}]}
`, name, provider, count)
}

// output is the mock's streamed text for n tokens.
func mockText(n int) string { return strings.Repeat(" tok", n) }

// streamUntil streams req with the openai-go client and hangs up (closes the
// stream, cancelling its context) as soon as stop says so after a chunk. It
// returns the content deltas it read and whether it saw a usage chunk.
func (e *limitsEnv) streamUntil(ctxPath, app string, req chatReq, hdr map[string]string, stop func(deltas int, usage bool) bool) (deltas int, sawUsage bool) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var opts []option.RequestOption
	for k, v := range hdr {
		opts = append(opts, option.WithHeader(k, v))
	}
	cl := e.client(ctxPath, app)
	st := cl.Chat.Completions.NewStreaming(ctx, req.params(), opts...)
	for st.Next() {
		ch := st.Current()
		for _, c := range ch.Choices {
			if c.Delta.Content != "" {
				deltas++
			}
		}
		if ch.JSON.Usage.Valid() && ch.Usage.CompletionTokens > 0 {
			sawUsage = true
		}
		if stop(deltas, sawUsage) {
			cancel()
			_ = st.Close()
			return deltas, sawUsage
		}
	}
	if err := st.Err(); err != nil {
		e.t.Fatalf("stream ended before the client hung up: %v", err)
	}
	e.t.Fatalf("stream completed (%d deltas) before the client hung up", deltas)
	return deltas, sawUsage
}

// TestCancelledStreamChargesDeliveredOutput: a client that hangs up after
// 990 of 1000 tokens is charged prompt + the 990-odd tokens it was sent (was:
// the 8-token prompt estimate); one that hangs up after the usage report is
// charged exactly the report; a cost budget is charged the price of the
// delivered output.
func TestCancelledStreamChargesDeliveredOutput(t *testing.T) {
	c := newCalc(t)
	lim := window(10_000_000, time.Hour)
	costLim := window(100_000_000, 24*time.Hour)
	routes := authTokenRoute("t", "mock", lim.Max) + fmt.Sprintf(`  - name: c
    context: /c
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: llm-cost-based-ratelimit
        version: v1
        params: {consumerBased: true, reserveOutput: none, budgetLimits: [{amount: %s, duration: 1d}]}
      - {name: llm-cost, version: v1}
`, yamlUSD(costLim.Max))
	apps := []string{"hang-up", "after-usage", "cost-hang-up"}
	env := startLimitsEnv(t, streamChargeDoc(apps, routes, ""), nil)
	req := chatReq{Model: streamChargeModel, Text: "Write a thousand tokens, please.", MaxTokens: 1000, Stream: true}
	P := c.estimate(llmapi.ChatCompletions, req.body())
	// The mock holds the stream after 995 token chunks, so the client's hang-up
	// at 990 always comes before the end, however busy the machine.
	stall := map[string]string{mockllm.HeaderStallAfter: "995"}
	at990 := func(d int, _ bool) bool { return d >= 990 }
	// What the gateway forwarded lies between what the client read (990) and
	// what the mock sent (995).
	lo, hi := int64(c.tokens.Count(req.Model, mockText(990))), int64(c.tokens.Count(req.Model, mockText(995)))

	t.Run("token limit: hang-up after 990 tokens", func(t *testing.T) {
		before := env.resolutions("t")
		env.streamUntil("/t", "hang-up", req, stall, at990)
		env.waitSettled()
		got := env.used(counterKey("t:hang-up", policyTokens, "total", lim), lim)
		if got < P+lo || got > P+hi {
			t.Fatalf("charged %d tokens, want prompt %d + the %d..%d tokens delivered", got, P, lo, hi)
		}
		if d := env.resolutions("t")["abandoned"] - before["abandoned"]; d != 1 {
			t.Fatalf("abandoned +%v, want +1", d)
		}
		t.Logf("hang-up after 990 of 1000 tokens: charged %d (prompt %d + %d counted)", got, P, got-P)
	})

	t.Run("token limit: hang-up after the usage report", func(t *testing.T) {
		r := chatReq{Model: streamChargeModel, Text: "Fifty tokens and the usage.", MaxTokens: 50, Stream: true, IncludeUsage: true}
		rp := c.estimate(llmapi.ChatCompletions, r.body())
		// 50 token chunks, the finish chunk, the usage chunk: held before [DONE].
		hdr := map[string]string{mockllm.HeaderStallAfter: "52"}
		before := env.resolutions("t")
		if _, saw := env.streamUntil("/t", "after-usage", r, hdr, func(_ int, usage bool) bool { return usage }); !saw {
			t.Fatal("no usage chunk")
		}
		env.waitSettled()
		if got := env.used(counterKey("t:after-usage", policyTokens, "total", lim), lim); got != rp+50 {
			t.Fatalf("charged %d tokens, want the reported %d + 50", got, rp)
		}
		if d := env.resolutions("t")["settled"] - before["settled"]; d != 1 {
			t.Fatalf("settled +%v, want +1: the report is exact", d)
		}
	})

	t.Run("cost budget: hang-up after 990 tokens", func(t *testing.T) {
		env.streamUntil("/c", "cost-hang-up", req, stall, at990)
		env.waitSettled()
		got := env.used(counterKey("c:cost-hang-up", policyCost, "cost", costLim), costLim)
		min, max := c.priceMicros(req.Model, P, lo), c.priceMicros(req.Model, P, hi)
		if got < min || got > max {
			t.Fatalf("charged %d µUSD, want the price of prompt + delivered output, %d..%d (the prompt alone is %d)",
				got, min, max, c.priceMicros(req.Model, P, 0))
		}
		t.Logf("cost budget, hang-up after 990 tokens: charged %d µUSD (prompt alone %d)", got, c.priceMicros(req.Model, P, 0))
	})
}

// TestAnthropicProviderChatStreamCharged: an anthropic-typed provider
// answering /v1/chat/completions (its OpenAI-compatible endpoint) with a
// stream is charged its output: the gateway asks for the usage report as it
// does for OpenAI (was: the 8-token prompt estimate for 20 streamed tokens),
// and when none comes it charges the output it forwarded.
func TestAnthropicProviderChatStreamCharged(t *testing.T) {
	c := newCalc(t)
	lim := window(1_000_000, time.Hour)
	env := startLimitsEnv(t, streamChargeDoc([]string{"with-usage", "no-usage"}, authTokenRoute("a", "mock-anthropic", lim.Max), ""), nil)
	req := chatReq{Model: "claude-haiku-4-5", Text: "Twenty tokens, please.", MaxTokens: 20, Stream: true}
	P := c.estimate(llmapi.ChatCompletions, req.body())
	cases := []struct {
		app        string
		hdr        map[string]string
		want       int64
		resolution string
	}{
		{"with-usage", nil, P + 20, "settled"},
		{"no-usage", map[string]string{mockllm.HeaderNoUsage: "true"}, P + int64(c.tokens.Count(req.Model, mockText(20))), "closed"},
	}
	for _, tc := range cases {
		t.Run(tc.app, func(t *testing.T) {
			before := env.resolutions("a")
			resp, body := env.mustSend("/a/v1/chat/completions", tc.app, req.body(), tc.hdr)
			if resp.StatusCode != 200 || !strings.Contains(string(body), "[DONE]") {
				t.Fatalf("status %d:\n%s", resp.StatusCode, body)
			}
			if n := strings.Count(string(body), `"content":" tok"`); n != 20 {
				t.Fatalf("%d tokens streamed, want 20", n)
			}
			if strings.Contains(string(body), `"prompt_tokens"`) {
				t.Fatalf("the client did not ask for usage but got it:\n%s", body)
			}
			env.waitSettled()
			if got := env.used(counterKey("a:"+tc.app, policyTokens, "total", lim), lim); got != tc.want {
				t.Fatalf("charged %d tokens for 20 streamed, want %d (prompt %d)", got, tc.want, P)
			}
			if d := env.resolutions("a")[tc.resolution] - before[tc.resolution]; d != 1 {
				t.Fatalf("%s +%v, want +1", tc.resolution, d)
			}
		})
	}
}

// TestStreamCutChargesForwardedOutput: a stream the upstream cuts, and one
// that ends without a usage report, are charged the output forwarded (the
// cut still reaches the client as a broken body).
func TestStreamCutChargesForwardedOutput(t *testing.T) {
	c := newCalc(t)
	lim := window(1_000_000, time.Hour)
	env := startLimitsEnv(t, streamChargeDoc([]string{"cut", "silent"}, authTokenRoute("s", "mock", lim.Max), ""), nil)
	req := chatReq{Model: streamChargeModel, Text: "Two hundred tokens.", MaxTokens: 200, Stream: true}
	P := c.estimate(llmapi.ChatCompletions, req.body())
	cases := []struct {
		app  string
		hdr  map[string]string
		sent int // token chunks the mock sends
		cut  bool
	}{
		{"cut", map[string]string{mockllm.HeaderDropAfter: "150"}, 150, true},
		{"silent", map[string]string{mockllm.HeaderNoUsage: "true"}, 200, false},
	}
	for _, tc := range cases {
		t.Run(tc.app, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, body, err := env.send(ctx, "/s/v1/chat/completions", tc.app, req.body(), tc.hdr)
			if tc.cut == (err == nil) {
				t.Fatalf("read error %v, want a broken body: %v", err, tc.cut)
			}
			if n := strings.Count(string(body), `"content":" tok"`); n != tc.sent {
				t.Fatalf("client got %d tokens, want %d", n, tc.sent)
			}
			env.waitSettled()
			want := P + int64(c.tokens.Count(req.Model, mockText(tc.sent)))
			if got := env.used(counterKey("s:"+tc.app, policyTokens, "total", lim), lim); got != want {
				t.Fatalf("charged %d, want %d (prompt %d + %s tokens forwarded)", got, want, P, strconv.Itoa(tc.sent))
			}
		})
	}
}

// TestOtherAPIStreamsChargeForwardedOutput: an Anthropic Messages stream cut
// by the upstream is charged the input tokens its message_start reported plus
// the output forwarded; a Responses stream whose response.completed carries
// no usage is charged the prompt estimate plus its output deltas (was: the
// prompt estimate alone, for both).
func TestOtherAPIStreamsChargeForwardedOutput(t *testing.T) {
	c := newCalc(t)
	lim := window(1_000_000, time.Hour)
	env := startLimitsEnv(t, streamChargeDoc([]string{"messages", "responses"},
		authTokenRoute("m", "mock-anthropic", lim.Max)+authTokenRoute("o", "mock", lim.Max), ""), nil)
	cases := []struct {
		app, path, model string
		ep               llmapi.Endpoint
		body             string
		hdr              map[string]string
		delta            string // how one forwarded token looks on the wire
		sent             int
		cut              bool
	}{
		{"messages", "/m/v1/messages", "claude-haiku-4-5", llmapi.Messages,
			`{"model":"claude-haiku-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"A hundred tokens."}]}`,
			// message_start, content_block_start, then 60 of the 100 text deltas.
			map[string]string{mockllm.HeaderDropAfter: "62"}, `"text":" tok"`, 60, true},
		{"responses", "/o/v1/responses", streamChargeModel, llmapi.Responses,
			`{"model":"` + streamChargeModel + `","max_output_tokens":30,"stream":true,"input":"Thirty tokens."}`,
			map[string]string{mockllm.HeaderNoUsage: "true"}, `"delta":" tok"`, 30, false},
	}
	for _, tc := range cases {
		t.Run(tc.app, func(t *testing.T) {
			P := c.estimate(tc.ep, []byte(tc.body))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, got, err := env.send(ctx, tc.path, tc.app, []byte(tc.body), tc.hdr)
			if tc.cut == (err == nil) || strings.Count(string(got), tc.delta) != tc.sent {
				t.Fatalf("read error %v (want one: %v), want %d deltas:\n%s", err, tc.cut, tc.sent, got)
			}
			env.waitSettled()
			want := P + int64(c.tokens.Count(tc.model, mockText(tc.sent)))
			if used := env.used(counterKey(strings.Split(tc.path, "/")[1]+":"+tc.app, policyTokens, "total", lim), lim); used != want {
				t.Fatalf("charged %d, want %d (prompt %d + %d tokens forwarded)", used, want, P, tc.sent)
			}
		})
	}
}
