package satmath

import (
	"math"
	"math/big"
	"testing"
)

func TestAddMul(t *testing.T) {
	const max, min = math.MaxInt64, math.MinInt64
	for _, tc := range []struct{ a, b, sum, prod int64 }{
		{0, 0, 0, 0},
		{2, 3, 5, 6},
		{-2, 3, 1, -6},
		{max, 1, max, max},
		{max, max, max, max},
		{min, -1, min, max},
		{-1, min, min, max},
		{min, min, min, max},
		{min, 1, min + 1, min},
		{1 << 62, 4, 1<<62 + 4, max},
		{1 << 62, -4, 1<<62 - 4, min},
		{1<<62 + 2, 4, 1<<62 + 6, max}, // wraps to 8 without saturation
		{max, -1, max - 1, -max},
		{math.MaxInt32, math.MaxInt32, 2 * math.MaxInt32, math.MaxInt32 * math.MaxInt32},
	} {
		if got := Add(tc.a, tc.b); got != tc.sum {
			t.Errorf("Add(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.sum)
		}
		if got := Add(tc.b, tc.a); got != tc.sum {
			t.Errorf("Add(%d, %d) = %d, want %d", tc.b, tc.a, got, tc.sum)
		}
		if got := Mul(tc.a, tc.b); got != tc.prod {
			t.Errorf("Mul(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.prod)
		}
		if got := Mul(tc.b, tc.a); got != tc.prod {
			t.Errorf("Mul(%d, %d) = %d, want %d", tc.b, tc.a, got, tc.prod)
		}
	}
}

// clamp is the exact result clamped to int64, computed with big integers.
func clamp(x *big.Int) int64 {
	if x.IsInt64() {
		return x.Int64()
	}
	if x.Sign() > 0 {
		return math.MaxInt64
	}
	return math.MinInt64
}

func FuzzAddMul(f *testing.F) {
	f.Add(int64(1<<62), int64(4))
	f.Add(int64(math.MinInt64), int64(-1))
	f.Fuzz(func(t *testing.T, a, b int64) {
		A, B := big.NewInt(a), big.NewInt(b)
		if got, want := Add(a, b), clamp(new(big.Int).Add(A, B)); got != want {
			t.Fatalf("Add(%d, %d) = %d, want %d", a, b, got, want)
		}
		if got, want := Mul(a, b), clamp(new(big.Int).Mul(A, B)); got != want {
			t.Fatalf("Mul(%d, %d) = %d, want %d", a, b, got, want)
		}
	})
}

func TestCeil(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want int64
	}{
		{0, 0},
		{0.1, 1},
		{-0.9, 0},
		{41.0000001, 42},
		{1e18, 1e18},
		{9.3e18, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64}, // 2^63 as a float64
		{1e300, math.MaxInt64},
		{math.Inf(1), math.MaxInt64},
		{math.Inf(-1), math.MinInt64},
		{-1e300, math.MinInt64},
		{math.NaN(), math.MaxInt64},
	} {
		if got := Ceil(tc.f); got != tc.want {
			t.Errorf("Ceil(%v) = %d, want %d", tc.f, got, tc.want)
		}
	}
}
