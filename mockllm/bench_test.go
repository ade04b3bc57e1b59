package mockllm

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"sluice/tokencount"
)

// BenchmarkHandler measures the mock's own cost per request, without a network.
func BenchmarkHandler(b *testing.B) {
	counter := tokencount.New()
	counter.Count("gpt-4o-mini", "load the vocabulary outside the timing")
	h := New(Options{Counter: counter})
	for _, tc := range []struct{ name, body string }{
		{"chat", `{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"Write one sentence about rate limits."}]}`},
		{"chat-stream", `{"model":"gpt-4o-mini","max_tokens":16,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Write one sentence about rate limits."}]}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(tc.body))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatal(rec.Code)
				}
			}
		})
	}
}
