package sharedctx

import "sluice/llmapi"

// A request's facts that several policies read have one writer each and one
// accessor each: the served model and the usage are set by the gateway, the
// cost by llm-cost. Readers never look at the request body or at Metadata for
// them, so two policies cannot see two different values.

// MicroUSD is an amount in millionths of a US dollar: the type of the cost
// under x-llm-cost.
type MicroUSD int64

// USD is m in dollars, for display (budgets count MicroUSD).
func (m MicroUSD) USD() float64 { return float64(m) / 1e6 }

// ServedModel is the model the request is served with: the model its body
// names as it goes upstream ("" when the request has no body or names none).
// The gateway sets it once, when it parses the body.
func (c *SharedContext) ServedModel() string { return c.model }

// SetServedModel records the served model (the gateway, when it parses the
// body; tests).
func (c *SharedContext) SetServedModel(model string) { c.model = model }

// Usage is the request's normalised usage (Metadata x-llm-usage), nil until
// the gateway has it: for a non-streamed body it is set before the response
// phase; for a stream, before the final phase, the provider's report when it
// arrived (even if the client went away after it), else the usage the
// gateway counted from the output it forwarded (Usage.Counted, a lower
// bound). Usage.Complete tells whether it is exact.
func (c *SharedContext) Usage() *llmapi.Usage {
	u, _ := c.Metadata[KeyLLMUsage].(*llmapi.Usage)
	return u
}

// SetUsage publishes u as the request's usage (nil: none). Only the gateway
// calls it.
func (c *SharedContext) SetUsage(u *llmapi.Usage) {
	if u == nil {
		delete(c.Metadata, KeyLLMUsage)
		return
	}
	c.Metadata[KeyLLMUsage] = u
}

// CostMicroUSD is the request's cost as llm-cost priced it, in micro-USD
// rounded up (Metadata x-llm-cost), and whether one was set. Its status
// (CostStatus) says how far it can be trusted.
func (c *SharedContext) CostMicroUSD() (int64, bool) {
	m, ok := c.Metadata[KeyLLMCost].(MicroUSD)
	return int64(m), ok
}

// CostStatus is the status llm-cost priced the request with (Metadata
// x-llm-cost-status: CostStatusCalculated, CostStatusEstimated, "unpriced"
// or "no_usage"); "" when it has not priced it.
func (c *SharedContext) CostStatus() string { return c.String(KeyLLMCostStatus) }

// SetCost publishes the request's cost in micro-USD and its status. Only
// llm-cost calls it; a later call replaces both.
func (c *SharedContext) SetCost(micros int64, status string) {
	c.Metadata[KeyLLMCost] = MicroUSD(micros)
	c.Metadata[KeyLLMCostStatus] = StatusValue(status)
}

// StatusValue is status as a Metadata or Analytics value: any(status),
// without an allocation for the cost statuses.
func StatusValue(status string) any {
	switch status {
	case CostStatusCalculated:
		return CostStatusCalculated
	case CostStatusEstimated:
		return CostStatusEstimated
	case CostStatusUnpriced:
		return CostStatusUnpriced
	case CostStatusNoUsage:
		return CostStatusNoUsage
	}
	return status
}
