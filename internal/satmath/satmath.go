// Package satmath is saturating int64 arithmetic for amounts (tokens,
// micro-USD, pico-USD). A result that does not fit is clamped to the int64
// range instead of wrapping, so an oversized request can only ever look more
// expensive than it is, never cheap or negative.
package satmath

import "math"

// Add returns a + b clamped to [math.MinInt64, math.MaxInt64].
func Add(a, b int64) int64 {
	c := a + b
	switch {
	case a > 0 && b > 0 && c < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && c >= 0:
		return math.MinInt64
	}
	return c
}

// Mul returns a * b clamped to [math.MinInt64, math.MaxInt64].
func Mul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	c := a * b
	if c/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		if (a < 0) != (b < 0) {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return c
}

// Ceil rounds f up to an integer and converts it, clamped to the int64 range
// (Go's float-to-int conversion is undefined out of range: on amd64 it yields
// math.MinInt64 for +Inf). NaN gives math.MaxInt64: an amount that cannot be
// computed is treated as unaffordable. Callers that settle real usage check
// for NaN and Inf themselves and keep the estimate instead.
func Ceil(f float64) int64 {
	if math.IsNaN(f) {
		return math.MaxInt64
	}
	c := math.Ceil(f)
	switch {
	case c >= math.MaxInt64: // float64(math.MaxInt64) is 2^63
		return math.MaxInt64
	case c <= math.MinInt64:
		return math.MinInt64
	}
	return int64(c)
}
