package llmapi

// Usage is the normalised token usage of one logical request, whatever the
// provider's shape. Counts are tokens.
type Usage struct {
	PromptTokens int64 `json:"prompt_tokens"`
	// CachedPromptTokens is the part of PromptTokens served from the provider's
	// prompt cache (OpenAI cached_tokens, Anthropic cache_read_input_tokens).
	CachedPromptTokens int64 `json:"cached_prompt_tokens,omitempty"`
	// CacheWriteTokens is Anthropic's cache_creation_input_tokens (also in PromptTokens).
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	CompletionTokens int64 `json:"completion_tokens"`
	ReasoningTokens  int64 `json:"reasoning_tokens,omitempty"`
	TotalTokens      int64 `json:"total_tokens"`
	// Authoritative is true when the numbers were reported by the provider (not
	// absent, not estimated). Settlement only trusts authoritative usage.
	Authoritative bool `json:"authoritative"`
	// Counted is true when the gateway counted the usage itself because the
	// provider reported none (a stream cancelled, cut, or ended without its
	// usage report): CompletionTokens is the output it forwarded to the client,
	// tokenized, and PromptTokens the provider's partial report when one
	// arrived (Anthropic message_start), else the gateway's prompt estimate.
	// Counted usage is a lower bound of what the provider bills; it is never
	// Authoritative.
	Counted bool `json:"counted,omitempty"`
	// ExpectedChoices is the n the request asked for; FinishedChoices counts the
	// choices that reported a finish reason (streams only; for bodies both equal n).
	ExpectedChoices int `json:"expected_choices,omitempty"`
	FinishedChoices int `json:"finished_choices,omitempty"`
}

// Complete reports whether the usage can be settled: authoritative, and every
// expected choice finished.
func (u *Usage) Complete() bool {
	return u != nil && u.Authoritative && u.FinishedChoices >= u.ExpectedChoices
}
