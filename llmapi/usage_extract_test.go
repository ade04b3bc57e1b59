package llmapi

import (
	"strings"
	"testing"

	"sluice/sse"
)

func TestUsageFromBody(t *testing.T) {
	tests := []struct {
		name    string
		ep      Endpoint
		body    string
		n       int
		want    *Usage
		wantErr bool
	}{
		{"chat", ChatCompletions, `{"choices":[{"index":0,"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}`, 1,
			&Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15, CachedPromptTokens: 4, ReasoningTokens: 2, Authoritative: true, ExpectedChoices: 1, FinishedChoices: 1}, false},
		{"chat n=3 one unfinished", ChatCompletions, `{"choices":[{"index":0,"finish_reason":"stop"},{"index":1,"finish_reason":"length"},{"index":2,"finish_reason":null}],"usage":{"prompt_tokens":10,"completion_tokens":30,"total_tokens":40}}`, 3,
			&Usage{PromptTokens: 10, CompletionTokens: 30, TotalTokens: 40, Authoritative: true, ExpectedChoices: 3, FinishedChoices: 2}, false},
		{"chat total missing is summed", ChatCompletions, `{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}`, 1,
			&Usage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10, Authoritative: true, ExpectedChoices: 1}, false},
		{"negative counts clamp", ChatCompletions, `{"usage":{"prompt_tokens":-7,"completion_tokens":"3"}}`, 1,
			&Usage{Authoritative: true, ExpectedChoices: 1}, false},
		{"completions", Completions, `{"choices":[{"text":"x","index":0,"finish_reason":"length"}],"usage":{"prompt_tokens":2,"completion_tokens":16,"total_tokens":18}}`, 1,
			&Usage{PromptTokens: 2, CompletionTokens: 16, TotalTokens: 18, Authoritative: true, ExpectedChoices: 1, FinishedChoices: 1}, false},
		{"embeddings", Embeddings, `{"data":[{"embedding":[0.1]}],"usage":{"prompt_tokens":8,"total_tokens":8}}`, 1,
			&Usage{PromptTokens: 8, TotalTokens: 8, Authoritative: true, ExpectedChoices: 1, FinishedChoices: 1}, false},
		{"responses", Responses, `{"status":"completed","usage":{"input_tokens":20,"output_tokens":9,"total_tokens":29,"input_tokens_details":{"cached_tokens":5},"output_tokens_details":{"reasoning_tokens":4}}}`, 1,
			&Usage{PromptTokens: 20, CompletionTokens: 9, TotalTokens: 29, CachedPromptTokens: 5, ReasoningTokens: 4, Authoritative: true, ExpectedChoices: 1, FinishedChoices: 1}, false},
		{"responses in progress", Responses, `{"status":"in_progress","usage":{"input_tokens":20,"output_tokens":0}}`, 1,
			&Usage{PromptTokens: 20, TotalTokens: 20, Authoritative: true, ExpectedChoices: 1}, false},
		{"anthropic with cache", Messages, `{"type":"message","stop_reason":"end_turn","usage":{"input_tokens":3,"cache_read_input_tokens":100,"cache_creation_input_tokens":50,"output_tokens":12}}`, 1,
			&Usage{PromptTokens: 153, CachedPromptTokens: 100, CacheWriteTokens: 50, CompletionTokens: 12, TotalTokens: 165, Authoritative: true, ExpectedChoices: 1, FinishedChoices: 1}, false},
		{"anthropic no stop reason", Messages, `{"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}}`, 1,
			&Usage{PromptTokens: 3, CompletionTokens: 1, TotalTokens: 4, Authoritative: true, ExpectedChoices: 1}, false},
		{"usage absent", ChatCompletions, `{"choices":[{"finish_reason":"stop"}]}`, 1, nil, false},
		{"usage null", ChatCompletions, `{"usage":null}`, 1, nil, false},
		{"usage empty object", ChatCompletions, `{"usage":{}}`, 1, nil, false},
		{"wrong shape for endpoint", Messages, `{"usage":{"prompt_tokens":3}}`, 1, nil, false},
		{"array body", ChatCompletions, `[1,2]`, 1, nil, false},
		{"not json", ChatCompletions, `{"usage":`, 1, nil, true},
		{"empty", ChatCompletions, ``, 1, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := UsageFromBody(tt.ep, []byte(tt.body), tt.n)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// stream turns "event\tdata" lines (or bare data lines) into SSE wire text.
func stream(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		if ev, data, ok := strings.Cut(l, "\t"); ok {
			b.WriteString("event: " + ev + "\n")
			l = data
		}
		b.WriteString("data: " + l + "\n\n")
	}
	return b.String()
}

func TestStreamTracker(t *testing.T) {
	tests := []struct {
		name          string
		ep            Endpoint
		n             int
		wire          string
		want          *Usage
		wantUsageOnly int
		wantComplete  bool
	}{
		{"chat with usage chunk", ChatCompletions, 1, stream(
			`{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}],"usage":null}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`,
			`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`,
			`[DONE]`),
			&Usage{PromptTokens: 5, CompletionTokens: 1, TotalTokens: 6, Authoritative: true, ExpectedChoices: 1, FinishedChoices: 1}, 1, true},
		{"chat n=2 both finish, index repeated", ChatCompletions, 2, stream(
			`{"choices":[{"index":1,"finish_reason":"stop"}]}`,
			`{"choices":[{"index":1,"finish_reason":"stop"}]}`,
			`{"choices":[{"index":0,"finish_reason":"length"}]}`,
			`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":8,"total_tokens":13}}`),
			&Usage{PromptTokens: 5, CompletionTokens: 8, TotalTokens: 13, Authoritative: true, ExpectedChoices: 2, FinishedChoices: 2}, 1, true},
		{"chat n=2 one finished", ChatCompletions, 2, stream(
			`{"choices":[{"index":0,"finish_reason":"stop"}]}`,
			`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":8,"total_tokens":13}}`),
			&Usage{PromptTokens: 5, CompletionTokens: 8, TotalTokens: 13, Authoritative: true, ExpectedChoices: 2, FinishedChoices: 1}, 1, false},
		{"chat without usage", ChatCompletions, 1, stream(
			`{"choices":[{"index":0,"finish_reason":"stop"}]}`, `[DONE]`), nil, 0, false},
		{"usage on a content chunk is not usage-only", ChatCompletions, 1, stream(
			`{"choices":[{"index":0,"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`),
			&Usage{PromptTokens: 1, CompletionTokens: 1, TotalTokens: 2, Authoritative: true, ExpectedChoices: 1, FinishedChoices: 1}, 0, true},
		{"completions", Completions, 1, stream(
			`{"choices":[{"text":"x","index":0,"finish_reason":null}]}`,
			`{"choices":[{"text":"","index":0,"finish_reason":"length"}]}`,
			`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`, `[DONE]`),
			&Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5, Authoritative: true, ExpectedChoices: 1, FinishedChoices: 1}, 1, true},
		{"responses", Responses, 1, stream(
			"response.created\t"+`{"type":"response.created","response":{"status":"in_progress","usage":null}}`,
			"response.output_text.delta\t"+`{"type":"response.output_text.delta","delta":"hi"}`,
			"response.completed\t"+`{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":9,"output_tokens":2,"total_tokens":11,"input_tokens_details":{"cached_tokens":1}}}}`),
			&Usage{PromptTokens: 9, CompletionTokens: 2, TotalTokens: 11, CachedPromptTokens: 1, Authoritative: true, ExpectedChoices: 1, FinishedChoices: 1}, 0, true},
		{"responses cut", Responses, 1, stream(
			"response.created\t" + `{"type":"response.created","response":{"usage":null}}`), nil, 0, false},
		{"anthropic", Messages, 1, stream(
			"message_start\t"+`{"type":"message_start","message":{"usage":{"input_tokens":4,"cache_read_input_tokens":10,"cache_creation_input_tokens":6,"output_tokens":1}}}`,
			"content_block_start\t"+`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			"content_block_delta\t"+`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`,
			"content_block_stop\t"+`{"type":"content_block_stop","index":0}`,
			"message_delta\t"+`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}`,
			"message_stop\t"+`{"type":"message_stop"}`),
			&Usage{PromptTokens: 20, CachedPromptTokens: 10, CacheWriteTokens: 6, CompletionTokens: 7, TotalTokens: 27, Authoritative: true, ExpectedChoices: 1, FinishedChoices: 1}, 0, true},
		{"anthropic cut after start", Messages, 1, stream(
			"message_start\t"+`{"type":"message_start","message":{"usage":{"input_tokens":4,"output_tokens":1}}}`,
			"content_block_delta\t"+`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`),
			&Usage{PromptTokens: 4, CompletionTokens: 1, TotalTokens: 5, ExpectedChoices: 1}, 0, false},
		{"garbage events ignored", ChatCompletions, 1, stream(`not json`, `[1,2]`, `{"choices":"x","usage":"y"}`, `{"choices":[1,{"index":"a","finish_reason":"stop"}]}`), nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewStreamTracker(tt.ep, tt.n)
			r := sse.NewReader(strings.NewReader(tt.wire))
			usageOnly := 0
			for {
				ev, err := r.Next()
				if err != nil {
					break
				}
				if tr.Observe(ev) {
					usageOnly++
				}
			}
			got := tr.Usage()
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Fatalf("Usage() = %+v, want %+v", got, tt.want)
			}
			if usageOnly != tt.wantUsageOnly {
				t.Errorf("usage-only events = %d, want %d", usageOnly, tt.wantUsageOnly)
			}
			if got.Complete() != tt.wantComplete {
				t.Errorf("Complete() = %v, want %v", got.Complete(), tt.wantComplete)
			}
		})
	}
}

func TestStreamTrackerHugeIndexBounded(t *testing.T) {
	tr := NewStreamTracker(ChatCompletions, 1)
	tr.Observe(&sse.Event{Data: []byte(`{"choices":[{"index":9223372036854775807,"finish_reason":"stop"},{"index":-3,"finish_reason":"stop"}]}`)})
	if tr.FinishedChoices() != 0 || len(tr.finished) != 0 {
		t.Fatalf("finished = %d, words = %d", tr.FinishedChoices(), len(tr.finished))
	}
}

func TestStreamTrackerAllocs(t *testing.T) {
	tr := NewStreamTracker(ChatCompletions, 1)
	ev := &sse.Event{Data: []byte(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}],"usage":null}`)}
	allocs := testing.AllocsPerRun(100, func() { tr.Observe(ev) })
	if allocs > 1 {
		t.Fatalf("Observe allocates %.1f times per chunk", allocs)
	}
}
