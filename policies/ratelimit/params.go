package ratelimit

import (
	"fmt"
	"strconv"
	"time"

	"sluice/policies"
)

// CountLimit is a `{count, duration}` params entry (token and request limits).
type CountLimit struct {
	// Count is the number of units allowed per duration.
	Count int64 `json:"count" jsonschema:"required,minimum=1"`
	// Duration is the period: "1m", "1h", "1d"; with the calendar algorithm
	// "30d" (720h) is the UTC calendar month.
	Duration policies.Duration `json:"duration" jsonschema:"required"`
}

// ValidateDurations checks that no two entries of one list share a duration
// (they would share a counter key).
func ValidateDurations(field string, ds []time.Duration) *policies.ParamError {
	seen := make(map[time.Duration]bool, len(ds))
	for i, d := range ds {
		if seen[d] {
			return &policies.ParamError{Path: []string{field, strconv.Itoa(i), "duration"},
				Message: fmt.Sprintf("duration %v is listed twice", d)}
		}
		seen[d] = true
	}
	return nil
}

// ParamPath builds a ParamError path from mixed parts.
func ParamPath(parts ...any) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		switch v := p.(type) {
		case string:
			out[i] = v
		case int:
			out[i] = strconv.Itoa(v)
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	return out
}
