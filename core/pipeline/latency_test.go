package pipeline

import (
	"testing"
	"time"
)

func TestLatBuckets(t *testing.T) {
	prevHi := int64(0)
	for i := range latBuckets - 1 {
		lo, hi := latBounds(i)
		if lo != prevHi || hi <= lo {
			t.Fatalf("bucket %d = [%d, %d), previous ended at %d", i, lo, hi, prevHi)
		}
		for _, d := range []int64{lo, (lo + hi) / 2, hi - 1} {
			if b := latBucket(d); b != i {
				t.Errorf("latBucket(%d) = %d, want %d", d, b, i)
			}
		}
		prevHi = hi
	}
	var counts [latBuckets]int64
	if q := quantiles(&counts, 0.5); q[0] != 0 {
		t.Errorf("empty p50 = %d", q[0])
	}
	counts[latBucket(1_000_000)] = 10
	lo, hi := latBounds(latBucket(1_000_000))
	if q := quantiles(&counts, 0.5); q[0] < lo || q[0] >= hi {
		t.Errorf("p50 = %d, want in [%d, %d)", q[0], lo, hi)
	}
}

// BenchmarkLatRecord is the per-item cost that latency percentiles add to
// a pipe stage: one bucket computation and one uncontended atomic add.
func BenchmarkLatRecord(b *testing.B) {
	h := new(latHist)
	for i := range b.N {
		h.record(time.Duration(i&0xfffff) * 37)
	}
}
