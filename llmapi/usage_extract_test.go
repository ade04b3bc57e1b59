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

// TestStreamTrackerForwardedText: the tracker keeps the output text of the
// events that were forwarded, in every endpoint's shape, and nothing else
// (not roles, ids, finish chunks, usage, nor events the gateway did not
// forward).
func TestStreamTrackerForwardedText(t *testing.T) {
	tests := []struct {
		name string
		ep   Endpoint
		wire string
		skip map[int]bool // events observed but not forwarded
		want string
	}{
		{"chat content, refusal, reasoning, tools", ChatCompletions, stream(
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{"content":"lo \"x\""},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{"reasoning_content":"think","refusal":"no"}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get","arguments":"{\"a\":"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{"function_call":{"name":"old","arguments":"{}"}}}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`,
			`[DONE]`), nil, `Hello "x"thinknoget{"a":1}old{}`},
		{"chat n=2 interleaved", ChatCompletions, stream(
			`{"choices":[{"index":0,"delta":{"content":"a"}}]}`,
			`{"choices":[{"index":1,"delta":{"content":"b"}}]}`), nil, "ab"},
		{"chat events not forwarded do not count", ChatCompletions, stream(
			`{"choices":[{"index":0,"delta":{"content":"kept "}}]}`,
			`{"choices":[{"index":0,"delta":{"content":"dropped "}}]}`,
			`{"choices":[{"index":0,"delta":{"content":"kept"}}]}`,
			`{"choices":[{"index":0,"delta":{"content":"unsent"}}]}`), map[int]bool{1: true, 3: true}, "kept kept"},
		{"completions", Completions, stream(
			`{"choices":[{"text":"one ","index":0}]}`, `{"choices":[{"text":"two","index":0,"finish_reason":"length"}]}`), nil, "one two"},
		{"anthropic text, tool input, thinking", Messages, stream(
			"message_start\t"+`{"type":"message_start","message":{"content":[],"usage":{"input_tokens":4,"output_tokens":1}}}`,
			"content_block_start\t"+`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`,
			"content_block_delta\t"+`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}`,
			"content_block_delta\t"+`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}`,
			"content_block_start\t"+`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
			"content_block_delta\t"+`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"hi"}}`,
			"content_block_start\t"+`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t","name":"get","input":{}}}`,
			"content_block_delta\t"+`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"q\":1}"}}`,
			"message_delta\t"+`{"type":"message_delta","delta":{"stop_reason":"tool_use"}}`), nil, `hmmhiget{"q":1}`},
		{"responses", Responses, stream(
			"response.created\t"+`{"type":"response.created","response":{"status":"in_progress","usage":null}}`,
			"response.reasoning_summary_text.delta\t"+`{"type":"response.reasoning_summary_text.delta","delta":"plan "}`,
			"response.output_text.delta\t"+`{"type":"response.output_text.delta","delta":"hi"}`,
			"response.function_call_arguments.delta\t"+`{"type":"response.function_call_arguments.delta","delta":"{}"}`,
			"response.output_audio.delta\t"+`{"type":"response.output_audio.delta","delta":"AAAA"}`,
			"response.output_text.done\t"+`{"type":"response.output_text.done","text":"hi"}`), nil, "plan hi{}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewStreamTracker(tt.ep, 1)
			r := sse.NewReader(strings.NewReader(tt.wire))
			var byEvent strings.Builder
			perChoice := map[int]string{}
			for i := 0; ; i++ {
				ev, err := r.Next()
				if err != nil {
					break
				}
				tr.Observe(ev)
				if !tt.skip[i] {
					tr.EventOutput(func(choice int, text string, _ bool) {
						byEvent.WriteString(text)
						perChoice[choice] += text
					})
					tr.Forwarded()
				}
			}
			// EventOutput gives the same text, event by event and by choice.
			if byEvent.String() != tt.want {
				t.Fatalf("EventOutput text %q, want %q", byEvent.String(), tt.want)
			}
			if tt.name == "chat n=2 interleaved" && (perChoice[0] != "a" || perChoice[1] != "b" || len(perChoice) != 2) {
				t.Fatalf("EventOutput by choice %v", perChoice)
			}
			var got string
			u := tr.CountedUsage(func(s string) int64 { got = s; return int64(len(s)) }, 3)
			if got != tt.want {
				t.Fatalf("forwarded text %q, want %q", got, tt.want)
			}
			if u == nil || !u.Counted || u.Authoritative || u.Complete() {
				t.Fatalf("CountedUsage = %+v: want counted, not authoritative", u)
			}
		})
	}
}

// TestCountedUsage: the counted usage never lowers a partial report, takes the
// prompt the stream reported or else the estimate, bounds the text it keeps,
// and is nil when there is nothing to count.
func TestCountedUsage(t *testing.T) {
	byteCount := func(s string) int64 { return int64(len(s)) }
	chunk := func(text string) *sse.Event {
		return &sse.Event{Data: []byte(`{"choices":[{"index":0,"delta":{"content":"` + text + `"}}]}`)}
	}
	t.Run("nothing forwarded", func(t *testing.T) {
		tr := NewStreamTracker(ChatCompletions, 1)
		tr.Observe(chunk("never sent"))
		if u := tr.CountedUsage(byteCount, 8); u != nil {
			t.Fatalf("CountedUsage = %+v, want nil", u)
		}
	})
	t.Run("prompt estimate and counted output", func(t *testing.T) {
		tr := NewStreamTracker(ChatCompletions, 2)
		tr.Observe(chunk("abcd"))
		tr.Forwarded()
		tr.Observe(&sse.Event{Data: []byte(`{"choices":[{"index":1,"delta":{},"finish_reason":"stop"}]}`)})
		tr.Forwarded()
		want := Usage{PromptTokens: 8, CompletionTokens: 4, TotalTokens: 12, Counted: true, ExpectedChoices: 2, FinishedChoices: 1}
		if u := tr.CountedUsage(byteCount, 8); u == nil || *u != want {
			t.Fatalf("CountedUsage = %+v, want %+v", u, want)
		}
	})
	t.Run("anthropic prompt and partial output kept", func(t *testing.T) {
		tr := NewStreamTracker(Messages, 1)
		tr.Observe(&sse.Event{Event: "message_start", Data: []byte(`{"type":"message_start","message":{"usage":{"input_tokens":4,"cache_read_input_tokens":10,"output_tokens":3}}}`)})
		tr.Forwarded()
		tr.Observe(&sse.Event{Event: "content_block_delta", Data: []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`)})
		tr.Forwarded()
		want := Usage{PromptTokens: 14, CachedPromptTokens: 10, CompletionTokens: 3, TotalTokens: 17, Counted: true, ExpectedChoices: 1}
		if u := tr.CountedUsage(byteCount, 99); u == nil || *u != want {
			t.Fatalf("CountedUsage = %+v, want %+v (reported prompt, reported output above the count)", u, want)
		}
	})
	t.Run("text past the bound is counted by bytes", func(t *testing.T) {
		tr := NewStreamTracker(ChatCompletions, 1)
		big := strings.Repeat("x", 1<<20)
		for range 6 {
			tr.Observe(chunk(big))
			tr.Forwarded()
		}
		tr.Observe(chunk(big)) // not forwarded
		var kept int
		u := tr.CountedUsage(func(s string) int64 { kept = len(s); return 0 }, 0)
		if kept != MaxCountedText || cap(tr.text) > 2*MaxCountedText {
			t.Fatalf("kept %d bytes (cap %d), want %d", kept, cap(tr.text), MaxCountedText)
		}
		if want := int64(6<<20-MaxCountedText) / 4; u.CompletionTokens != want {
			t.Fatalf("completion %d, want %d (overflow bytes / 4)", u.CompletionTokens, want)
		}
	})
	t.Run("no tokenizer falls back to bytes", func(t *testing.T) {
		tr := NewStreamTracker(ChatCompletions, 1)
		tr.Observe(chunk("abcdefgh"))
		tr.Forwarded()
		if u := tr.CountedUsage(nil, 1); u.CompletionTokens != 2 {
			t.Fatalf("completion %d, want 2", u.CompletionTokens)
		}
	})
}

// benchUsageBody is the mock upstream's chat completion (the e2e benchmarks' answer).
const benchUsageBody = `{"id":"chatcmpl-mock-1","object":"chat.completion","created":1796157140,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":" tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":29,"completion_tokens":16,"total_tokens":45,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`

func BenchmarkUsageFromBody(b *testing.B) {
	body := []byte(benchUsageBody)
	b.ReportAllocs()
	for b.Loop() {
		if u, err := UsageFromBody(ChatCompletions, body, 1); err != nil || u.TotalTokens != 45 || u.FinishedChoices != 1 {
			b.Fatalf("usage %+v, %v", u, err)
		}
	}
}
