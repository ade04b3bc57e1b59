package policies

import (
	"strconv"
	"time"
)

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

// USDMicrosDecimal writes n micro-USD as an exact decimal number of dollars:
// 500000 -> "0.5", -1250000 -> "-1.25", 3000000 -> "3".
func USDMicrosDecimal(n int64) string {
	neg := n < 0
	u := uint64(n)
	if neg {
		u = -u
	}
	whole, frac := u/1e6, u%1e6
	s := strconv.FormatUint(whole, 10)
	if frac != 0 {
		f := strconv.FormatUint(frac+1e6, 10)[1:] // six digits, zero-padded
		for f[len(f)-1] == '0' {
			f = f[:len(f)-1]
		}
		s += "." + f
	}
	if neg {
		s = "-" + s
	}
	return s
}
