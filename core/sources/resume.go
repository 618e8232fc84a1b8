package sources

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spdl-go/spdl-go/core/sampler"
)

// StreamResume is where a resumed epoch of a streaming source (tar shards,
// table parts) picks up: the samples already consumed in it, by unit (the
// shard's or part's index in the source's list) and number within the
// unit (its order when the unit is read). The epoch's units are dealt to
// the ranks again, as in any epoch; a unit whose every sample was consumed
// (Sizes says how many it holds) is not opened, and the others are read
// with their consumed samples skipped, so every other sample comes exactly
// once.
type StreamResume struct {
	Epoch int64 `json:"epoch"`
	// Consumed holds each unit's consumed sample numbers as [start, end)
	// runs: a unit read in order is one run.
	Consumed map[int64][][2]int64 `json:"consumed"`
	// Sizes are the units' sample counts that were known when the state
	// was saved (UnitSizes); without a unit's size, a wholly consumed
	// unit is read again and its samples skipped.
	Sizes map[int64]int64 `json:"sizes,omitempty"`
}

// SampleID packs a unit and a sample number into the "__index__" that a
// streaming source made WithIndex gives each sample.
func SampleID(unit, k int64) int64 { return unit<<32 | k }

// skipSet is a resumed epoch's consumed samples: per unit, sorted disjoint
// runs, and the units it need not open at all.
type skipSet struct {
	runs  map[int64][][2]int64
	whole map[int64]int64 // units wholly consumed: their sizes
}

// newSkipSet checks r against the source's n units and normalises its runs.
func newSkipSet(r *StreamResume, n int64) (*skipSet, error) {
	if r == nil {
		return nil, nil
	}
	s := &skipSet{runs: map[int64][][2]int64{}, whole: map[int64]int64{}}
	for u, runs := range r.Consumed {
		if u < 0 || u >= n {
			return nil, fmt.Errorf("resume: consumed samples of unit %d, but the source has %d units", u, n)
		}
		rs := slices.Clone(runs)
		for _, run := range rs {
			if run[0] < 0 || run[1] <= run[0] || run[1] > 1<<32 {
				return nil, fmt.Errorf("resume: unit %d: bad run [%d, %d)", u, run[0], run[1])
			}
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i][0] < rs[j][0] })
		merged := rs[:1]
		for _, run := range rs[1:] {
			if last := &merged[len(merged)-1]; run[0] <= last[1] {
				last[1] = max(last[1], run[1])
			} else {
				merged = append(merged, run)
			}
		}
		s.runs[u] = merged
		if size, ok := r.Sizes[u]; ok && len(merged) == 1 && merged[0][0] == 0 && merged[0][1] >= size {
			s.whole[u] = size
		}
	}
	return s, nil
}

// has reports whether sample k of unit was consumed.
func (s *skipSet) has(unit, k int64) bool {
	if s == nil {
		return false
	}
	rs := s.runs[unit]
	i := sort.Search(len(rs), func(i int) bool { return rs[i][1] > k })
	return i < len(rs) && rs[i][0] <= k
}

// done reports whether every sample of unit was consumed, so that the
// resumed epoch need not open it, and how many samples it holds.
func (s *skipSet) done(unit int64) (int64, bool) {
	if s == nil {
		return 0, false
	}
	n, ok := s.whole[unit]
	return n, ok
}

// unitSizes are the sample counts of the units known so far: from
// footers, or from reading a unit to its end. Shared by the epochs.
type unitSizes struct {
	mu sync.Mutex
	m  map[int64]int64
}

func (u *unitSizes) set(unit, n int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[int64]int64{}
	}
	u.m[unit] = n
}

func (u *unitSizes) snapshot() map[int64]int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.m)
}

// unitEpochs deals a streaming source's units (shards, table parts) to its
// rank, one epoch per next: the epoch's seeded order of units, the samples
// a resumed first epoch skips, and the epoch's shuffle buffer.
type unitEpochs struct {
	cfg    sampler.Config
	first  int64     // the first epoch's number
	resume *skipSet  // the resumed first epoch's skips, or nil
	epoch0 int64     // with resume: the resumed epoch's number
	buffer int       // shuffle buffer size (0: none)
	sizes  unitSizes // the units' sample counts known so far
	opened atomic.Int64
	// Counters of the resumed epoch, for OpStats.
	unitsSkipped, samplesSkipped atomic.Int64
	io                           ioStats
}

// ioStats count a streaming source's reads over all its epochs, for
// OpStats: where a source's time goes when it is the bottleneck.
type ioStats struct {
	units  atomic.Int64 // shards or row groups opened
	bytes  atomic.Int64 // bytes read from them
	waitNs atomic.Int64 // time Next spent waiting for those bytes
}

func (s *ioStats) waited(t0 time.Time) { s.waitNs.Add(int64(time.Since(t0))) }

func newUnitEpochs(cfg sampler.Config, first int64, r *StreamResume, buffer int) (*unitEpochs, error) {
	skip, err := newSkipSet(r, cfg.N)
	if err != nil {
		return nil, err
	}
	u := &unitEpochs{cfg: cfg, first: first, resume: skip, buffer: buffer}
	if r != nil {
		u.epoch0 = r.Epoch
	}
	// Check the split now, so that a bad rank fails the build.
	if _, err := sampler.NewPlan(cfg, sampler.Progress{Epoch: u.epochOf(0)}); err != nil {
		return nil, err
	}
	return u, nil
}

func (u *unitEpochs) epochOf(k int64) int64 {
	if u.resume != nil {
		return u.epoch0 + k
	}
	return u.first + k
}

func (u *unitEpochs) next() (*sampler.Plan, *skipSet, *shuffler, error) {
	k := u.opened.Add(1) - 1
	epoch := u.epochOf(k)
	var skip *skipSet
	if k == 0 {
		skip = u.resume
	}
	pl, err := sampler.NewPlan(u.cfg, sampler.Progress{Epoch: epoch})
	if err != nil {
		return nil, nil, nil, err
	}
	shuf := newShuffler(u.buffer, u.cfg.Seed, uint64(epoch)*uint64(u.cfg.World)+uint64(u.cfg.Rank))
	return pl, skip, shuf, nil
}

// opStats are the read counters that the sources report, under the name
// of their units, and with a resume, what it skipped.
func (u *unitEpochs) opStats(units string) map[string]int64 {
	m := map[string]int64{
		units + "_opened": u.io.units.Load(),
		"bytes_read":      u.io.bytes.Load(),
		"read_wait_ms":    u.io.waitNs.Load() / 1e6,
	}
	if u.resume != nil {
		m["resume_units_skipped"] = u.unitsSkipped.Load()
		m["resume_samples_skipped"] = u.samplesSkipped.Load()
	}
	return m
}

// streamState is a streaming source's SourceState.
type streamState struct {
	Sizes map[int64]int64 `json:"sizes"`
}
