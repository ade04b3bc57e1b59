package ratelimit

import (
	"sluice/llmapi"
	"sluice/policies"
)

// OutputBound returns the request's output bound per choice after applying
// maxOutput (0: no cap), and the number of choices the upstream generates (n
// per prompt of a batch, llmapi.Request.Choices). Endpoints without output
// (embeddings) and requests without a body have bound 0 and 1 choice.
func OutputBound(c *policies.Call, maxOutput int64) (perChoice int64, choices int64, applicable bool) {
	if c.Request == nil || c.Request.LLM == nil || c.Request.LLM.Endpoint == llmapi.Embeddings {
		return 0, 1, false
	}
	llm := c.Request.LLM
	want := llm.MaxTokens
	if maxOutput > 0 && (want == 0 || want > maxOutput) {
		want = maxOutput
	}
	return want, int64(max(llm.Choices(), 1)), true
}

// ApplyOutputBound rewrites the request's max tokens to n when it differs.
func ApplyOutputBound(c *policies.Call, n int64) error {
	if c.Request == nil || c.Request.LLM == nil || n <= 0 || c.Request.LLM.MaxTokens == n {
		return nil
	}
	return c.Request.LLM.SetMaxTokens(n)
}
