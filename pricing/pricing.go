// Package pricing holds the model price catalog: an embedded table of current
// models plus a user file that adds or overrides entries.
package pricing

import "sluice/llmapi"

// Price is a model's price in USD per million tokens.
type Price struct {
	Input       float64 `json:"input"`
	CachedInput float64 `json:"cachedInput,omitempty"`
	Output      float64 `json:"output"`
}

// Catalog resolves model names to prices. Immutable after construction; safe
// for concurrent use.
type Catalog struct{}

// Lookup returns the price of model (exact name, then normalised: dated
// suffixes and provider prefixes removed).
func (c *Catalog) Lookup(model string) (Price, bool) { return Price{}, false }

// Cost prices usage u for model in USD; ok is false when the model is unknown.
func (c *Catalog) Cost(model string, u *llmapi.Usage) (usd float64, ok bool) { return 0, false }

// Estimate prices promptTokens of input and outputTokens of output for model.
func (c *Catalog) Estimate(model string, promptTokens, outputTokens int64) (usd float64, ok bool) {
	return 0, false
}
