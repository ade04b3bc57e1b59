package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketIndexContiguousAndBounded(t *testing.T) {
	// Every index's bounds map back to it, neighbours touch, and the
	// relative width stays within the stated precision.
	prevHi := int64(-1)
	for i := 0; i < bucketCount; i++ {
		lo, hi := bucketBounds(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if bucketIndex(lo) != i || bucketIndex(hi) != i {
			t.Fatalf("bucket %d: bounds [%d,%d] map to %d,%d", i, lo, hi, bucketIndex(lo), bucketIndex(hi))
		}
		if width := float64(hi - lo + 1); width > 1 && width/float64(lo) > 1.0/subCount {
			t.Fatalf("bucket %d [%d,%d] is wider than 1/%d of its low bound", i, lo, hi, subCount)
		}
		prevHi = hi
		if hi < 0 || hi == math.MaxInt64 {
			break
		}
	}
	if prevHi != math.MaxInt64 {
		t.Fatalf("buckets end at %d, want MaxInt64", prevHi)
	}
}

func TestQuantileAgainstSortedValues(t *testing.T) {
	tests := []struct {
		name string
		gen  func(r *rand.Rand) int64
	}{
		{"uniform sub-millisecond", func(r *rand.Rand) int64 { return r.Int64N(int64(time.Millisecond)) }},
		{"exponential around 200us", func(r *rand.Rand) int64 { return int64(r.ExpFloat64() * 200e3) }},
		{"bimodal with a slow tail", func(r *rand.Rand) int64 {
			if r.IntN(100) == 0 {
				return int64(50*time.Millisecond) + r.Int64N(int64(time.Second))
			}
			return 100e3 + r.Int64N(50e3)
		}},
		{"small exact values", func(r *rand.Rand) int64 { return r.Int64N(200) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			h := NewHistogram()
			vals := make([]int64, 20000)
			for i := range vals {
				vals[i] = tc.gen(r)
				h.Record(time.Duration(vals[i]))
			}
			slices.Sort(vals)
			if h.Count() != uint64(len(vals)) {
				t.Fatalf("count = %d", h.Count())
			}
			if int64(h.Max()) != vals[len(vals)-1] || int64(h.Min()) != vals[0] {
				t.Fatalf("min/max = %d/%d, want %d/%d", h.Min(), h.Max(), vals[0], vals[len(vals)-1])
			}
			for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
				rank := int(math.Ceil(q * float64(len(vals))))
				want := vals[max(rank, 1)-1]
				got := int64(h.Quantile(q))
				// Never below the true value, and above it by at most
				// one bucket width.
				if got < want || float64(got-want) > float64(want)/subCount+1 {
					t.Errorf("q%.3f = %d, want %d (within 1/%d above)", q, got, want, subCount)
				}
			}
		})
	}
}

func TestMergeEqualsRecordingTogether(t *testing.T) {
	a, b, all := NewHistogram(), NewHistogram(), NewHistogram()
	for i := range 5000 {
		d := time.Duration(i*i) * time.Nanosecond
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
		all.Record(d)
	}
	a.Merge(b)
	a.Merge(NewHistogram()) // merging an empty histogram changes nothing
	for _, q := range []float64{0.1, 0.5, 0.99, 1} {
		if a.Quantile(q) != all.Quantile(q) {
			t.Fatalf("q%v: merged %v, together %v", q, a.Quantile(q), all.Quantile(q))
		}
	}
	if a.Count() != all.Count() || a.Max() != all.Max() || a.Min() != all.Min() || a.Mean() != all.Mean() {
		t.Fatalf("merged summary differs: %d %v %v %v vs %d %v %v %v",
			a.Count(), a.Min(), a.Max(), a.Mean(), all.Count(), all.Min(), all.Max(), all.Mean())
	}
}

func TestEmptyAndNegative(t *testing.T) {
	h := NewHistogram()
	if h.Quantile(0.5) != 0 || h.Max() != 0 || h.Min() != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram must report zeros")
	}
	h.Record(-time.Second)
	if h.Max() != 0 || h.Quantile(1) != 0 {
		t.Fatalf("negative duration recorded as %v", h.Max())
	}
}
