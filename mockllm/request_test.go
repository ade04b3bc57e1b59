package mockllm

import (
	"testing"

	"sluice/llmapi"
)

// TestDecodeRequestIsLenient: the mock reads bodies like Go encoding/json,
// the way a lenient provider would, not like the gateway's strict parser.
func TestDecodeRequestIsLenient(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		ep         llmapi.Endpoint
		model      string
		maxTokens  int64
		n, prompts int
		usage      bool
	}{
		{"last duplicate wins", `{"model":"m","max_tokens":1,"max_tokens":1000}`, llmapi.ChatCompletions, "m", 1000, 1, 1, false},
		{"names fold", `{"model":"a","Model":"b","MAX_TOKENS":7,"N":3}`, llmapi.ChatCompletions, "b", 7, 3, 1, false},
		{"last stream_options wins", `{"model":"m","stream_options":{"include_usage":true},"stream_options":{"include_usage":false}}`, llmapi.ChatCompletions, "m", 0, 1, 1, false},
		{"any bound field", `{"model":"m","max_output_tokens":9}`, llmapi.ChatCompletions, "m", 9, 1, 1, false},
		{"batch", `{"model":"m","prompt":["a","b","c"],"n":2}`, llmapi.Completions, "m", 0, 2, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, gerr := decodeRequest(tc.ep, []byte(tc.body))
			if gerr != nil {
				t.Fatal(gerr)
			}
			if r.Model != tc.model || r.MaxTokens != tc.maxTokens || r.N != tc.n || r.Prompts != tc.prompts || r.ClientIncludeUsage != tc.usage {
				t.Fatalf("read %+v", r)
			}
		})
	}
	for _, bad := range []string{`{"model":`, `{"model":""}`, `{"max_tokens":-1,"model":"m"}`, `{"model":"m","n":129}`} {
		if _, gerr := decodeRequest(llmapi.ChatCompletions, []byte(bad)); gerr == nil || gerr.Status != 400 {
			t.Errorf("%s: %v, want a 400", bad, gerr)
		}
	}
}
