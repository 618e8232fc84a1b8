package pipeline

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// latHist is a streaming histogram of Op.Process durations: atomic
// counters over log-spaced buckets, latSub per power of two, so that
// recording is one bits.Len64 and one uncontended atomic add (each worker
// owns its slot's histogram). Bucket 0 holds durations under 2^latMinExp ns
// (512 ns); the last bucket everything from 2^latMaxExp ns (~137 s). In
// between, a bucket spans 1/latSub of its power of two: quantiles read from
// it are within 12.5% of the true value.
type latHist struct {
	n [latBuckets]atomic.Int64
}

const (
	latSubBits = 3
	latSub     = 1 << latSubBits
	latMinExp  = 9  // 512 ns
	latMaxExp  = 37 // ~137 s
	latBuckets = (latMaxExp-latMinExp)*latSub + 2
)

// latBucket returns the bucket of a duration of d nanoseconds.
func latBucket(d int64) int {
	if d < 1<<latMinExp {
		return 0
	}
	if d >= 1<<latMaxExp {
		return latBuckets - 1
	}
	e := bits.Len64(uint64(d)) - 1 // 2^e <= d < 2^(e+1)
	sub := int(d>>(e-latSubBits)) & (latSub - 1)
	return 1 + (e-latMinExp)*latSub + sub
}

// latBounds returns bucket i's range [lo, hi) in nanoseconds.
func latBounds(i int) (lo, hi int64) {
	switch {
	case i == 0:
		return 0, 1 << latMinExp
	case i == latBuckets-1:
		return 1 << latMaxExp, 1 << latMaxExp
	}
	e := latMinExp + (i-1)/latSub
	sub := int64((i - 1) % latSub)
	return (latSub + sub) << (e - latSubBits), (latSub + sub + 1) << (e - latSubBits)
}

func (h *latHist) record(d time.Duration) {
	h.n[latBucket(int64(d))].Add(1)
}

// quantiles returns the qs quantiles (0 < q <= 1) of counts, interpolated
// linearly within the bucket that holds each; all zero if counts is empty.
func quantiles(counts *[latBuckets]int64, qs ...float64) []int64 {
	out := make([]int64, len(qs))
	var total int64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return out
	}
	for k, q := range qs {
		rank := q * float64(total)
		var cum int64
		for i, c := range counts {
			if c == 0 {
				continue
			}
			if float64(cum+c) >= rank {
				lo, hi := latBounds(i)
				f := (rank - float64(cum)) / float64(c)
				out[k] = lo + int64(f*float64(hi-lo))
				break
			}
			cum += c
		}
	}
	return out
}
