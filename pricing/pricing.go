// Package pricing holds the model price catalog: an embedded table of current
// models (models.yaml) plus user files that add or override entries, name
// matching that tolerates provider prefixes and dated suffixes, and the cost
// arithmetic that turns a request's usage into USD.
//
// Units: prices are USD per million tokens. Costs are computed in integer
// pico-USD (1e-12 USD), so that sums are exact and micro-USD budgets round
// predictably; Cost converts the result to float64 USD.
package pricing

import (
	"sort"

	"sluice/llmapi"
)

// Price is a model's price in USD per million tokens.
type Price struct {
	// Input prices prompt tokens that were not read from or written to a cache.
	Input float64 `json:"input"`
	// CachedInput prices prompt tokens read from the provider's prompt cache
	// (Anthropic: cache read). In a catalog entry it equals Input when the
	// table gives no cached price.
	CachedInput float64 `json:"cachedInput,omitempty"`
	// CacheWrite prices prompt tokens written to the cache (Anthropic
	// cache_creation_input_tokens). In a catalog entry it equals Input when the
	// table gives no write price.
	CacheWrite float64 `json:"cacheWrite,omitempty"`
	// Output prices completion tokens, reasoning tokens included.
	Output float64 `json:"output"`
	// Tiers are long-context prices, ascending by AbovePromptTokens. The tier
	// with the highest threshold below the prompt token count prices the whole
	// request.
	Tiers []Tier `json:"tiers,omitempty"`
}

// Tier is a price that applies when a request's prompt tokens exceed
// AbovePromptTokens.
type Tier struct {
	AbovePromptTokens int64   `json:"abovePromptTokens"`
	Input             float64 `json:"input"`
	CachedInput       float64 `json:"cachedInput,omitempty"`
	CacheWrite        float64 `json:"cacheWrite,omitempty"`
	Output            float64 `json:"output"`
}

// Model is one catalog entry.
type Model struct {
	// Name is the canonical (lower-case) name in the table.
	Name     string   `json:"name"`
	Provider string   `json:"provider,omitempty"`
	Aliases  []string `json:"aliases,omitempty"`
	Price    Price    `json:"price"`
	// Source is "embedded" or the user file the entry came from.
	Source string `json:"source"`
}

// Pricer resolves the model a request names to the price it is charged at.
// A Catalog is one; llm-cost's pricer adds its pricing file and defaultPrice.
// Implementations are immutable and safe for concurrent use.
type Pricer interface {
	// Resolve returns the entry model is priced with, and false when it has
	// no price.
	Resolve(model string) (Model, bool)
}

var _ Pricer = (*Catalog)(nil)

// Catalog resolves model names to prices. Immutable after construction; safe
// for concurrent use.
type Catalog struct {
	// date is the embedded table's date (YYYY-MM-DD).
	date    string
	models  map[string]*entry
	aliases map[string]*entry
}

type entry struct {
	Model
	// layer is 0 for the embedded table, n for the n-th user file; it decides
	// which of two conflicting aliases wins.
	layer int
}

// Date returns the date of the embedded price table.
func (c *Catalog) Date() string { return c.date }

// Models returns every entry sorted by name.
func (c *Catalog) Models() []Model {
	out := make([]Model, 0, len(c.models))
	for _, e := range c.models {
		out = append(out, e.Model)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Resolve returns the entry that model names (exact name, then normalised:
// provider prefixes and dated suffixes removed, aliases).
func (c *Catalog) Resolve(model string) (Model, bool) {
	if c == nil {
		return Model{}, false
	}
	e := c.find(model)
	if e == nil {
		return Model{}, false
	}
	return e.Model, true
}

// Lookup returns the price of model (exact name, then normalised: dated
// suffixes and provider prefixes removed).
func (c *Catalog) Lookup(model string) (Price, bool) {
	m, ok := c.Resolve(model)
	return m.Price, ok
}

// Cost prices usage u for model in USD; ok is false when the model is unknown.
// A nil u costs 0.
func (c *Catalog) Cost(model string, u *llmapi.Usage) (usd float64, ok bool) {
	p, ok := c.Lookup(model)
	if !ok {
		return 0, false
	}
	return p.Cost(u), true
}

// CostMicros is Cost in micro-USD, rounded up.
func (c *Catalog) CostMicros(model string, u *llmapi.Usage) (micros int64, ok bool) {
	p, ok := c.Lookup(model)
	if !ok {
		return 0, false
	}
	return p.CostMicros(u), true
}

// Estimate prices promptTokens of input and outputTokens of output for model.
func (c *Catalog) Estimate(model string, promptTokens, outputTokens int64) (usd float64, ok bool) {
	p, ok := c.Lookup(model)
	if !ok {
		return 0, false
	}
	return p.Estimate(promptTokens, outputTokens), true
}

// EstimateMicros is Estimate in micro-USD, rounded up.
func (c *Catalog) EstimateMicros(model string, promptTokens, outputTokens int64) (micros int64, ok bool) {
	p, ok := c.Lookup(model)
	if !ok {
		return 0, false
	}
	return p.EstimateMicros(promptTokens, outputTokens), true
}
