package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"sluice/deployment"
	"sluice/internal/proctest"
	"sluice/mockllm"
	"sluice/policies"
	"sluice/sse"
	"sluice/tokencount"
)

// TestOutputBound: an upstream that ignores max_tokens (the mock with
// x-mock-output-tokens) is cut at the bound in every dialect, streamed or
// not: each choice delivers exactly the bound, ends as the dialect ends a
// choice at its bound, the stream ends cleanly, the usage the client sees
// and the outcome the policies settle with are what was delivered. A model
// whose tokenizer the gateway approximates is cut a quarter past the bound.
func TestOutputBound(t *testing.T) {
	mock := startUpstream(t, mockllm.New(mockllm.Options{Counter: tokencount.New()}))
	retries := 0
	d := prepared(&deployment.Deployment{
		APIVersion: "sluice/v1",
		Providers: []deployment.Provider{
			{Name: "openai", Type: "openai", URL: mock.URL, Retries: &retries, ForwardHeaders: []string{"x-mock-*"}},
			{Name: "anth", Type: "anthropic", URL: mock.URL, Retries: &retries, ForwardHeaders: []string{"x-mock-*"}},
		},
		Routes: []deployment.Route{
			{Name: "o", Context: "/openai", Provider: "openai", Policies: []deployment.PolicyEntry{rec("a", nil)}},
			{Name: "an", Context: "/anthropic", Provider: "anth", Policies: []deployment.PolicyEntry{rec("a", nil)}},
		},
	})
	rl := newRecLog()
	reg := prometheus.NewRegistry()
	_, base := serveGateway(t, d, Options{Registry: testRegistry(rl), Metrics: reg,
		Logger: slog.New(slog.NewTextHandler(&proctest.Buffer{}, nil)), Services: policies.Services{Tokens: tokencount.New()}})

	type tc struct {
		name    string
		path    string
		body    string
		outputs int // what the upstream generates per choice
		n       int
		cut     int // tokens delivered per choice; == outputs when not cut
	}
	cases := []tc{
		{"chat body", "/openai/v1/chat/completions", `{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, 12, 1, 5},
		{"chat body n=2", "/openai/v1/chat/completions", `{"model":"gpt-4o-mini","max_tokens":5,"n":2,"messages":[{"role":"user","content":"hi"}]}`, 12, 2, 5},
		{"chat body within", "/openai/v1/chat/completions", `{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, 5, 1, 5},
		{"chat stream", "/openai/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, 12, 1, 5},
		{"chat stream n=3 no usage asked", "/openai/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"max_tokens":4,"n":3,"messages":[{"role":"user","content":"hi"}]}`, 9, 3, 4},
		{"chat stream within", "/openai/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, 4, 1, 4},
		{"chat stream approximated model", "/openai/v1/chat/completions", `{"model":"llama-3.1-8b","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, 30, 1, 10},
		{"chat stream approximated model within its slack", "/openai/v1/chat/completions", `{"model":"llama-3.1-8b","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, 9, 1, 9},
		{"completions body", "/openai/v1/completions", `{"model":"gpt-4o-mini","max_tokens":6,"prompt":"hi"}`, 20, 1, 6},
		{"completions stream", "/openai/v1/completions", `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"max_tokens":6,"prompt":"hi"}`, 20, 1, 6},
		{"responses body", "/openai/v1/responses", `{"model":"gpt-4o-mini","max_output_tokens":7,"input":"hi"}`, 20, 1, 7},
		{"responses stream", "/openai/v1/responses", `{"model":"gpt-4o-mini","stream":true,"max_output_tokens":7,"input":"hi"}`, 20, 1, 7},
		{"messages body", "/anthropic/v1/messages", `{"model":"claude-haiku-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, 30, 1, 10},
		{"messages stream", "/anthropic/v1/messages", `{"model":"claude-haiku-4-5","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, 30, 1, 10},
	}
	cuts := 0.0
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := fmt.Sprintf("req-bound-%d", i)
			req, _ := http.NewRequest(http.MethodPost, base+c.path, strings.NewReader(c.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Request-Id", id)
			req.Header.Set(mockllm.HeaderOutputTokens, fmt.Sprint(c.outputs))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%d %v: %s (the stream must end cleanly)", resp.StatusCode, err, body)
			}
			cut := c.cut < c.outputs
			var texts map[int]string
			var usage int64
			if strings.Contains(c.body, `"stream":true`) {
				texts, usage = checkStreamEnding(t, c.path, body, cut, c.n, strings.Contains(c.body, "include_usage"))
			} else {
				texts, usage = checkBodyEnding(t, c.path, body, cut)
			}
			if len(texts) != c.n {
				t.Fatalf("%d choices delivered; want %d:\n%s", len(texts), c.n, body)
			}
			for ch, text := range texts {
				if got := strings.Count(text, " tok"); got != c.cut {
					t.Errorf("choice %d delivered %d tokens; want %d", ch, got, c.cut)
				}
			}
			if want := int64(c.cut * c.n); usage >= 0 && usage != want {
				t.Errorf("the client's usage says %d output tokens; want %d", usage, want)
			}
			f := rl.waitFinals(t, id, 1)[0]
			if f.Kind != policies.Completed || f.Usage == nil || f.Usage.CompletionTokens != int64(c.cut*c.n) {
				t.Errorf("outcome %v with usage %+v; want completed with %d output tokens", f.Kind, f.Usage, c.cut*c.n)
			}
			if cut {
				cuts++
			}
			if got := metricValueIn(t, reg, "sluice_output_bound_cuts_total"); got != cuts {
				t.Errorf("cuts counted %v; want %v", got, cuts)
			}
		})
	}
}

// checkStreamEnding reads a stream's events: each choice's delivered text,
// and the output count of the usage the stream reports (-1: none). A cut
// stream must end as the dialect ends a choice at its bound.
func checkStreamEnding(t *testing.T, path string, body []byte, cut bool, n int, usageAsked bool) (map[int]string, int64) {
	t.Helper()
	texts := map[int]string{}
	usage := int64(-1)
	var events []*sse.Event
	rd := sse.NewReader(strings.NewReader(string(body)))
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		events = append(events, ev)
	}
	if len(events) == 0 {
		t.Fatalf("no events:\n%s", body)
	}
	last := events[len(events)-1]
	finishes := map[int]string{}
	for _, ev := range events {
		if ev.Done() {
			continue
		}
		root := gjson.ParseBytes(ev.Data)
		switch {
		case strings.HasSuffix(path, "/messages"):
			switch root.Get("type").Str {
			case "content_block_delta":
				texts[0] += root.Get("delta.text").Str
			case "message_delta":
				finishes[0] = root.Get("delta.stop_reason").Str
				usage = root.Get("usage.output_tokens").Int()
			}
		case strings.HasSuffix(path, "/responses"):
			switch root.Get("type").Str {
			case "response.output_text.delta":
				texts[0] += root.Get("delta").Str
			case "response.incomplete", "response.completed":
				finishes[0] = root.Get("response.status").Str + "/" + root.Get("response.incomplete_details.reason").Str
				usage = root.Get("response.usage.output_tokens").Int()
			}
		default:
			for _, c := range root.Get("choices").Array() {
				i := int(c.Get("index").Int())
				texts[i] += c.Get("delta.content").Str + c.Get("text").Str
				if fr := c.Get("finish_reason").Str; fr != "" {
					if finishes[i] != "" {
						t.Fatalf("choice %d finished twice:\n%s", i, body)
					}
					finishes[i] = fr
				}
			}
			if u := root.Get("usage"); u.IsObject() {
				usage = u.Get("completion_tokens").Int()
			}
		}
	}
	for i := range n {
		want := map[bool]string{true: "length", false: "stop"}[cut]
		switch {
		case strings.HasSuffix(path, "/messages"):
			want = map[bool]string{true: "max_tokens", false: "end_turn"}[cut]
		case strings.HasSuffix(path, "/responses"):
			want = map[bool]string{true: "incomplete/max_output_tokens", false: "completed/"}[cut]
		}
		if finishes[i] != want {
			t.Errorf("choice %d ended %q; want %q:\n%s", i, finishes[i], want, body)
		}
	}
	switch {
	case strings.HasSuffix(path, "/messages"):
		if !strings.Contains(string(last.Data), "message_stop") {
			t.Errorf("the stream does not end with message_stop:\n%s", body)
		}
		if cut && !strings.Contains(string(body), "content_block_stop") {
			t.Errorf("the open content block was not stopped:\n%s", body)
		}
	case strings.HasSuffix(path, "/responses"):
		if want := map[bool]string{true: "response.incomplete", false: "response.completed"}[cut]; last.Event != want {
			t.Errorf("the stream ends with %q; want %s", last.Event, want)
		}
	default:
		if !last.Done() {
			t.Errorf("the stream does not end with [DONE]:\n%s", body)
		}
		if usageAsked != (usage >= 0) {
			t.Errorf("usage chunk present %v; asked %v", usage >= 0, usageAsked)
		}
	}
	return texts, usage
}

// checkBodyEnding reads a body's choices' text and its usage's output.
func checkBodyEnding(t *testing.T, path string, body []byte, cut bool) (map[int]string, int64) {
	t.Helper()
	root := gjson.ParseBytes(body)
	texts := map[int]string{}
	switch {
	case strings.HasSuffix(path, "/messages"):
		texts[0] = root.Get("content.0.text").Str
		if want := map[bool]string{true: "max_tokens", false: "end_turn"}[cut]; root.Get("stop_reason").Str != want {
			t.Errorf("stop_reason %q; want %q", root.Get("stop_reason").Str, want)
		}
		return texts, root.Get("usage.output_tokens").Int()
	case strings.HasSuffix(path, "/responses"):
		texts[0] = root.Get("output.0.content.0.text").Str
		if cut && (root.Get("status").Str != "incomplete" || root.Get("incomplete_details.reason").Str != "max_output_tokens") {
			t.Errorf("status %s %s; want incomplete max_output_tokens", root.Get("status").Str, root.Get("incomplete_details").Raw)
		}
		if got, want := root.Get("usage.total_tokens").Int(), root.Get("usage.input_tokens").Int()+root.Get("usage.output_tokens").Int(); got != want {
			t.Errorf("usage total %d; want %d", got, want)
		}
		return texts, root.Get("usage.output_tokens").Int()
	}
	for _, c := range root.Get("choices").Array() {
		i := int(c.Get("index").Int())
		texts[i] = c.Get("message.content").Str + c.Get("text").Str
		if want := map[bool]string{true: "length", false: "stop"}[cut]; c.Get("finish_reason").Str != want {
			t.Errorf("choice %d finish_reason %q; want %q", i, c.Get("finish_reason").Str, want)
		}
	}
	if got, want := root.Get("usage.total_tokens").Int(), root.Get("usage.prompt_tokens").Int()+root.Get("usage.completion_tokens").Int(); got != want {
		t.Errorf("usage total %d; want %d", got, want)
	}
	return texts, root.Get("usage.completion_tokens").Int()
}

// metricValueIn sums a counter's series in reg.
func metricValueIn(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					sum += m.GetCounter().GetValue()
				}
			}
		}
		if sum > 0 || time.Now().After(deadline) {
			return sum
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOutputBoundTrustsReportedOutput: a body is counted against the bound
// unless the provider reports an output count within it: with no usage, or
// an output count of zero (what servers that count nothing send), a text
// past the bound is cut and the usage rewritten to what was delivered; with
// a count within the bound, that count is the charge and the text passes.
func TestOutputBoundTrustsReportedOutput(t *testing.T) {
	long := strings.TrimSpace(strings.Repeat("word ", 40))
	for _, c := range []struct {
		name    string
		usage   string // the upstream's usage member, or ""
		wantCut bool
		want    int64 // completion_tokens the client sees (-1: no usage)
	}{
		{"no usage", "", true, -1},
		{"zero output", `,"usage":{"prompt_tokens":3,"completion_tokens":0,"total_tokens":3}`, true, 5},
		{"output within the bound", `,"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}`, false, 4},
		{"output over the bound", `,"usage":{"prompt_tokens":3,"completion_tokens":40,"total_tokens":43}`, true, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}]%s}`, long, c.usage)
			}))
			_, base := serveGateway(t, recDeployment([]string{up.URL}, 0), Options{Registry: testRegistry(newRecLog()),
				Logger: slog.New(slog.DiscardHandler), Services: policies.Services{Tokens: tokencount.New()}})
			resp, err := http.Post(base+"/openai/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got struct {
				Choices []struct {
					Message      struct{ Content string } `json:"message"`
					FinishReason string                   `json:"finish_reason"`
				} `json:"choices"`
				Usage *struct {
					CompletionTokens int64 `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 || len(got.Choices) != 1 {
				t.Fatalf("%d %v %+v", resp.StatusCode, err, got)
			}
			if cut := got.Choices[0].Message.Content != long; cut != c.wantCut || cut != (got.Choices[0].FinishReason == "length") {
				t.Errorf("cut %v (finish_reason %q); want cut %v", cut, got.Choices[0].FinishReason, c.wantCut)
			}
			switch {
			case c.want < 0 && got.Usage != nil:
				t.Errorf("usage %+v; want none", *got.Usage)
			case c.want >= 0 && (got.Usage == nil || got.Usage.CompletionTokens != c.want):
				t.Errorf("usage %+v; want %d output tokens", got.Usage, c.want)
			}
		})
	}
}
