package policies

import "sluice/tokencount"

// PromptEstimateKey caches the request's prompt token estimate in Metadata
// (int64) so that the limit policies of a chain, and the gateway when it
// counts a stream's usage, tokenize once. The value depends only on the
// request body, so sharing it between them is safe.
const PromptEstimateKey = "ratelimit.prompt-estimate"

// PromptTokens returns the request's estimated prompt tokens (0 without a body
// or a tokenizer).
func PromptTokens(c *Call, tok *tokencount.Counter) int64 {
	if v, ok := c.Shared.Metadata[PromptEstimateKey].(int64); ok {
		return v
	}
	if c.Request == nil || c.Request.LLM == nil || tok == nil {
		return 0
	}
	n := max(tok.EstimatePrompt(c.Request.LLM), 0)
	c.Shared.Metadata[PromptEstimateKey] = n
	return n
}
