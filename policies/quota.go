package policies

import "time"

// QuotaReporter is implemented by policies that keep counters for callers
// (every limit policy). The gateway answers GET {context}/v1/quota with the
// lines of every chain member that implements it, after identifying the
// caller (Identifier); no request phase runs then. Quota must decide as the
// request phase would which counters apply to c, and only peek them: it
// charges nothing and keeps no per-request state.
type QuotaReporter interface {
	Quota(c *Call) []QuotaLine
}

// QuotaLine is the state of one counter for the caller.
type QuotaLine struct {
	Policy string
	// Scope is the counter scope: "route" (backend) or "route:app" (consumer).
	Scope string
	// Dimension is the meter ("prompt", "total", "requests", "cost", a quota
	// name), with ":model:<match>" for a model rule's counter.
	Dimension string
	// Period describes the window: "bucket-1m", "window-1d", "month".
	Period string
	// Limit and Remaining (negative in debt) are in Unit.
	Limit     int64
	Remaining int64
	Unit      Unit
	// ResetAfter is the time until the counter is full again (bucket) or its
	// window ends.
	ResetAfter time.Duration
}

// Unit is what a counter counts: whole tokens, requests, or micro-USD.
type Unit string

const (
	UnitTokens    Unit = "tokens"
	UnitRequests  Unit = "requests"
	UnitUSDMicros Unit = "usd_micros"
)
