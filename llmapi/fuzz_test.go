package llmapi

import (
	"bytes"
	"encoding/json"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"sluice/sse"
)

var endpoints = []Endpoint{ChatCompletions, Completions, Embeddings, Responses, Messages}

// parseSeeds are request bodies for FuzzParse and the parser tests: valid
// requests, and the bodies that made the gateway judge one request and
// forward another before Parse was strict.
var parseSeeds = []string{
	`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
	`{"model":"gpt-4o","max_tokens":5,"n":2}`,
	`{"model":"gpt-4o","max_tokens":1,"max_tokens":1000}`,
	`{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":false}}`,
	`{"model":"gpt-4o-mini","Model":"gpt-4o"}`,
	`{"Model":"gpt-4o"}`,
	`{"model":"m","Stream":true}`, `{"model":"m","N":4}`, `{"model":"m","MAX_TOKENS":1000}`,
	`{"model":"m","max_to\u212aens":1000}`, `{"model":"m","\u017ftream":true}`, `{"model":"m","max_tokens":5,"max_toKens":9}`,
	`{"model":"m","stream_options":{"Include_Usage":true}}`,
	`{"model":"m","max\u005ftokens":1000}`, `{"mod\u0065l":"m","max_tokens":1}`,
	`{"model":"m","messages":[{"role":"user","content":"a","content":"b"}]}`,
	`{"model":"m","messages":[{"role":"user","Role":"system","content":"a"}]}`,
	`{"model":"m","max_tokens":5,"max_completion_tokens":9}`,
	`{"model":"m","max_tokens":5.0}`, `{"model":"m","max_tokens":1e3}`, `{"model":"m","max_tokens":"5"}`,
	`{"model":"m","max_tokens":9223372036854775807}`, `{"model":"m","max_tokens":4611686018427387904,"n":4}`,
	`{"model":"m","prompt":["a","b","c"],"max_tokens":50,"n":2}`, `{"model":"m","prompt":[1,2,3]}`,
	`{"model":"m","prompt":[[1,2],[3]]}`, `{"model":"m","prompt":[]}`, `{"model":"m","prompt":["a",[1]]}`,
	`{"model":"m","input":["a","b"]}`, `{"model":"m","max_output_tokens":7}`,
	`{"model":"","n":0}`, `{"model":null}`, `{"model":1}`, `[]`, ``, `{"model":"m","max_completion_tokens":-1}`,
	`{"model":"m","max_output_tokens":1e400}`, `{"model":"m","stream_options":null}`,
	`{"model":"m"} {"model":"n"}`, `{"model":"m","stream":null,"n":null,"max_tokens":null}`,
	"{\"model\":\"m\xff\"}", `{"model":"m","x":{"k":1,"\u212a":2}}`,
}

// upstreamView is what an upstream decoder reads of the fields the gateway
// judges; v1 is Go encoding/json (last duplicate wins, names matched
// case-insensitively), v2 a strict decoder (go-json-experiment/json).
type upstreamView struct {
	Model         *string `json:"model"`
	Stream        *bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int64 `json:"max_tokens"`
	MaxCompletionTokens *int64 `json:"max_completion_tokens"`
	MaxOutputTokens     *int64 `json:"max_output_tokens"`
	N                   *int   `json:"n"`
	Raw                 map[string][]byte
}

type v1Wire struct {
	Model         *string `json:"model"`
	Stream        *bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	MaxOutputTokens     *int64          `json:"max_output_tokens"`
	N                   *int            `json:"n"`
	Messages            json.RawMessage `json:"messages"`
	System              json.RawMessage `json:"system"`
	Prompt              json.RawMessage `json:"prompt"`
	Input               json.RawMessage `json:"input"`
	Instructions        json.RawMessage `json:"instructions"`
	Tools               json.RawMessage `json:"tools"`
}

type v2Wire struct {
	Model         *string `json:"model"`
	Stream        *bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int64         `json:"max_tokens"`
	MaxCompletionTokens *int64         `json:"max_completion_tokens"`
	MaxOutputTokens     *int64         `json:"max_output_tokens"`
	N                   *int           `json:"n"`
	Messages            jsontext.Value `json:"messages"`
	System              jsontext.Value `json:"system"`
	Prompt              jsontext.Value `json:"prompt"`
	Input               jsontext.Value `json:"input"`
	Instructions        jsontext.Value `json:"instructions"`
	Tools               jsontext.Value `json:"tools"`
}

func readV1(body []byte) (*upstreamView, error) {
	var w v1Wire
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, err
	}
	return &upstreamView{Model: w.Model, Stream: w.Stream, StreamOptions: w.StreamOptions, MaxTokens: w.MaxTokens,
		MaxCompletionTokens: w.MaxCompletionTokens, MaxOutputTokens: w.MaxOutputTokens, N: w.N,
		Raw: map[string][]byte{"messages": w.Messages, "system": w.System, "prompt": w.Prompt, "input": w.Input,
			"instructions": w.Instructions, "tools": w.Tools}}, nil
}

func readV2(body []byte) (*upstreamView, error) {
	var w v2Wire
	if err := jsonv2.Unmarshal(body, &w); err != nil {
		return nil, err
	}
	return &upstreamView{Model: w.Model, Stream: w.Stream, StreamOptions: w.StreamOptions, MaxTokens: w.MaxTokens,
		MaxCompletionTokens: w.MaxCompletionTokens, MaxOutputTokens: w.MaxOutputTokens, N: w.N,
		Raw: map[string][]byte{"messages": w.Messages, "system": w.System, "prompt": w.Prompt, "input": w.Input,
			"instructions": w.Instructions, "tools": w.Tools}}, nil
}

// countPrompts counts the prompts of a completions prompt or embeddings input
// the way an upstream does, independently of the parser.
func countPrompts(raw []byte) int {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return 1
	}
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return 1
	}
	if _, num := list[0].(float64); num {
		return 1
	}
	return len(list)
}

// sameAsJudged fails t unless view reads exactly what r says: model, stream,
// include_usage (true when the gateway set it), the one output bound in its
// field, n, the prompt count and the raw prompt material.
func sameAsJudged(t *testing.T, who string, r *Request, includeUsage bool, v *upstreamView, body []byte) {
	t.Helper()
	fail := func(what string, got, want any) {
		t.Helper()
		t.Fatalf("%s reads %s %v, the gateway judged %v\nforwarded %q", who, what, got, want, body)
	}
	if v.Model == nil || *v.Model != r.Model {
		fail("model", deref(v.Model), r.Model)
	}
	if got := v.Stream != nil && *v.Stream; got != r.Stream {
		fail("stream", got, r.Stream)
	}
	gotUsage := v.StreamOptions != nil && v.StreamOptions.IncludeUsage != nil && *v.StreamOptions.IncludeUsage
	if gotUsage != includeUsage {
		fail("stream_options.include_usage", gotUsage, includeUsage)
	}
	bounds := map[string]*int64{"max_tokens": v.MaxTokens, "max_completion_tokens": v.MaxCompletionTokens, "max_output_tokens": v.MaxOutputTokens}
	for field, got := range bounds {
		switch {
		case field == r.MaxTokensField && (got == nil || *got != r.MaxTokens):
			fail(field, deref(got), r.MaxTokens)
		case field != r.MaxTokensField && got != nil:
			fail(field, *got, "absent (the bound is "+r.MaxTokensField+")")
		}
	}
	n := 1
	if v.N != nil {
		n = *v.N
	}
	if n != r.N {
		fail("n", n, r.N)
	}
	batch := map[Endpoint]string{Completions: "prompt", Embeddings: "input"}[r.Endpoint]
	if got := countPrompts(v.Raw[batch]); batch != "" && got != r.Prompts {
		fail("prompts", got, r.Prompts)
	}
	for field, judged := range map[string][]byte{"messages": r.Messages, "system": r.System, "prompt": r.Prompt,
		"input": r.Input, "instructions": r.Instructions, "tools": r.Tools} {
		if !bytes.Equal(v.Raw[field], judged) {
			fail(field, string(v.Raw[field]), string(judged))
		}
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return "absent"
	}
	return *p
}

// FuzzParse: for every body Parse accepts, after the gateway's rewrites
// (SetMaxTokens, SetIncludeUsage), a strict and a lenient upstream decoder
// both read exactly what the gateway judged from the forwarded bytes.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		for i := range endpoints {
			f.Add(uint8(i), []byte(s), uint32(50), true)
		}
	}
	f.Fuzz(func(t *testing.T, epi uint8, body []byte, bound uint32, includeUsage bool) {
		ep := endpoints[int(epi)%len(endpoints)]
		orig := bytes.Clone(body)
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
		if r.Model == "" || r.N < 1 || r.N > MaxN || r.Prompts < 1 || r.Prompts > MaxPrompts || r.MaxTokens < 0 ||
			r.MaxTokens > MaxOutputTokensBound || r.Endpoint != ep || (r.MaxTokensField == "") != (r.MaxTokens == 0) {
			t.Fatalf("bad request %+v", r)
		}
		for who, read := range map[string]func([]byte) (*upstreamView, error){"encoding/json": readV1, "go-json-experiment/json": readV2} {
			v, err := read(body)
			if err != nil {
				t.Fatalf("%s cannot decode the accepted body %q: %v", who, body, err)
			}
			sameAsJudged(t, who+" (as received)", r, r.ClientIncludeUsage, v, body)
		}

		if ep != Embeddings {
			if err := r.SetMaxTokens(1 + int64(bound%MaxOutputTokensBound)); err != nil {
				t.Fatalf("SetMaxTokens: %v", err)
			}
		}
		wantUsage := r.ClientIncludeUsage
		if includeUsage {
			if err := r.SetIncludeUsage(); err != nil {
				t.Fatalf("SetIncludeUsage: %v", err)
			}
			wantUsage = true
		}
		if !bytes.Equal(body, orig) {
			t.Fatalf("the rewrites changed the client's buffer")
		}
		for who, read := range map[string]func([]byte) (*upstreamView, error){"encoding/json": readV1, "go-json-experiment/json": readV2} {
			v, err := read(r.Raw)
			if err != nil {
				t.Fatalf("%s cannot decode the forwarded body %q: %v", who, r.Raw, err)
			}
			sameAsJudged(t, who, r, wantUsage, v, r.Raw)
		}
		// The forwarded body is one the gateway itself accepts, judged the same.
		r2, gerr := Parse(ep, r.Raw)
		if gerr != nil {
			t.Fatalf("the forwarded body %q is refused: %v", r.Raw, gerr)
		}
		if r2.Model != r.Model || r2.Stream != r.Stream || r2.MaxTokens != r.MaxTokens || r2.MaxTokensField != r.MaxTokensField ||
			r2.N != r.N || r2.Prompts != r.Prompts || r2.ClientIncludeUsage != wantUsage {
			t.Fatalf("the forwarded body %q parses as %+v, judged %+v", r.Raw, r2, r)
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
