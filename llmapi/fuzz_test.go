package llmapi

import (
	"bytes"
	"testing"

	"sluice/sse"
)

var endpoints = []Endpoint{ChatCompletions, Completions, Embeddings, Responses, Messages}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"gpt-4o","max_tokens":5,"n":2}`,
		`{"model":"","n":0}`, `{"model":null}`, `{"model":1}`, `[]`, ``, `{"model":"m","max_completion_tokens":-1}`,
		`{"model":"m","max_output_tokens":1e400}`, `{"model":"m","stream_options":null}`,
	} {
		for i := range endpoints {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, epi uint8, body []byte) {
		ep := endpoints[int(epi)%len(endpoints)]
		r, gerr := Parse(ep, body)
		if (r == nil) == (gerr == nil) {
			t.Fatalf("Parse returned request %v and error %v", r, gerr)
		}
		if gerr != nil {
			if gerr.Status != 400 || len(gerr.Envelope()) == 0 {
				t.Fatalf("error %+v", gerr)
			}
			return
		}
		if r.Model == "" || r.N < 1 || r.MaxTokens < 0 || r.Endpoint != ep {
			t.Fatalf("bad request %+v", r)
		}
		// Mutators keep the body valid and the fields in step.
		if err := r.SetMaxTokens(7); err == nil {
			r2, gerr := Parse(ep, r.Raw)
			if gerr != nil || r2.MaxTokens != 7 {
				t.Fatalf("after SetMaxTokens: %v %+v (body %q)", gerr, r2, r.Raw)
			}
		}
	})
}

func FuzzUsageFromBody(f *testing.F) {
	for _, s := range []string{
		`{"choices":[{"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
		`{"status":"completed","usage":{"input_tokens":1,"output_tokens":2}}`,
		`{"stop_reason":"end_turn","usage":{"input_tokens":1,"cache_read_input_tokens":4,"output_tokens":2}}`,
		`{"usage":null}`, `{"usage":{"prompt_tokens":-5}}`, `[]`, `"x"`, `{`, ``,
	} {
		for i := range endpoints {
			f.Add(uint8(i), []byte(s), 1)
		}
	}
	f.Fuzz(func(t *testing.T, epi uint8, body []byte, n int) {
		ep := endpoints[int(epi)%len(endpoints)]
		u, err := UsageFromBody(ep, body, n)
		if err != nil {
			if u != nil {
				t.Fatal("usage with an error")
			}
			return
		}
		if u == nil {
			return
		}
		if !u.Authoritative || u.ExpectedChoices != max(n, 1) || u.PromptTokens < 0 || u.CompletionTokens < 0 ||
			u.CachedPromptTokens < 0 || u.CacheWriteTokens < 0 || u.ReasoningTokens < 0 || u.FinishedChoices < 0 ||
			u.TotalTokens < u.PromptTokens+u.CompletionTokens && u.PromptTokens+u.CompletionTokens >= 0 {
			t.Fatalf("usage %+v from %q", u, body)
		}
	})
}

func FuzzStreamTracker(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[{\"index\":0,\"finish_reason\":\"stop\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1,\"total_tokens\":2}}\n\ndata: [DONE]\n\n",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
		"data: {\"choices\":[{\"index\":99999999999,\"finish_reason\":\"x\"}]}\r\n\r\n",
		": comment\n\ndata: a\ndata: b\n", "data", "\n\n\n",
	} {
		for i := range endpoints {
			f.Add(uint8(i), []byte(s), 1)
		}
	}
	f.Fuzz(func(t *testing.T, epi uint8, wire []byte, n int) {
		ep := endpoints[int(epi)%len(endpoints)]
		tr := NewStreamTracker(ep, n)
		r := sse.NewReaderSize(bytes.NewReader(wire), 4096)
		for i := 0; i < 10000; i++ {
			ev, err := r.Next()
			if err != nil {
				break
			}
			tr.Observe(ev)
		}
		if u := tr.Usage(); u != nil {
			if u.ExpectedChoices != max(n, 1) || u.FinishedChoices < 0 || u.FinishedChoices > maxTrackedIndex ||
				u.PromptTokens < 0 || u.CompletionTokens < 0 {
				t.Fatalf("usage %+v", u)
			}
		}
	})
}
