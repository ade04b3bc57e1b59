package main

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: every power-of-two range of values
// is split into 2^subBits equal buckets, so a recorded value is known to
// within 1/2^subBits (0.8%) of itself. Values below 2^(subBits+1) are exact.
const subBits = 7

const (
	subCount = 1 << subBits
	// bucketCount covers every non-negative int64: the highest value has 63
	// significant bits, i.e. shift 63-subBits-1 = 55.
	bucketCount = (64 - subBits) * subCount
)

// Histogram records durations in nanoseconds with bounded relative error in
// constant memory (log-linear buckets, as HDR histograms do). The zero value
// is not ready; use NewHistogram. It is not safe for concurrent use: give
// each goroutine its own and Merge them.
type Histogram struct {
	counts []uint64
	total  uint64
	min    int64
	max    int64
	sum    float64 // nanoseconds; float so long runs cannot overflow
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{counts: make([]uint64, bucketCount), min: math.MaxInt64}
}

// bucketIndex maps v >= 0 to its bucket. Buckets are contiguous and ordered:
// index(a) <= index(b) whenever a <= b.
func bucketIndex(v int64) int {
	if v < 2*subCount {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - (subBits + 1)
	top := v >> shift // in [subCount, 2*subCount)
	return (shift+1)*subCount + int(top-subCount)
}

// bucketBounds returns the smallest and largest value that map to index i.
func bucketBounds(i int) (lo, hi int64) {
	if i < 2*subCount {
		return int64(i), int64(i)
	}
	shift := i/subCount - 1
	top := int64(i%subCount + subCount)
	lo = top << shift
	hi = lo + (int64(1) << shift) - 1
	return lo, hi
}

// Record adds one duration; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketIndex(v)]++
	h.total++
	h.sum += float64(v)
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

// Merge adds every value recorded in o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.total }

// Max is the largest recorded value, exactly (0 when empty).
func (h *Histogram) Max() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.max)
}

// Min is the smallest recorded value, exactly (0 when empty).
func (h *Histogram) Min() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.min)
}

// Mean is the arithmetic mean of the recorded values (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.total))
}

// Quantile returns the value at or below which a fraction q (0..1) of the
// recorded values fall: the upper bound of the bucket holding the
// ceil(q*count)-th smallest value, capped by the exact maximum. It therefore
// never under-reports, and over-reports by less than 1/2^subBits.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(math.Ceil(q * float64(h.total)))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			_, hi := bucketBounds(i)
			return time.Duration(min(hi, h.max))
		}
	}
	return time.Duration(h.max)
}
