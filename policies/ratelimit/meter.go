package ratelimit

import (
	"sluice/dialect"
	"sluice/policies"
)

// MaxMeters bounds the meters of one engine (Amounts is a fixed array so that
// the hot path does not allocate).
const MaxMeters = 16

// Amounts holds one amount per meter, indexed like the engine's meters.
type Amounts [MaxMeters]int64

// Meter is one dimension an engine charges: prompt, completion, total,
// requests, cost, or an advanced-ratelimit quota.
type Meter struct {
	// Name appears in counter keys, error messages and quota reports.
	Name string
	// Unit is what the meter counts.
	Unit policies.Unit
	// Kind is the rate-limit header family that reports the meter's counters
	// (0: by Unit: tokens, requests or cost).
	Kind dialect.Kind
}
