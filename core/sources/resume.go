package sources

import (
	"sync/atomic"

	"github.com/spdl-go/spdl-go/core/sampler"
)

// StreamResume is where a resumed epoch of a streaming source (tar shards,
// table parts) picks up: the samples already consumed in it, by unit (the
// shard's or part's index in the source's list) and number within the
// unit (its order when the unit is read). The epoch's units are dealt to
// the ranks again, as in any epoch, and read again; the consumed samples
// are skipped, so every other sample comes exactly once.
type StreamResume struct {
	Epoch    int64             `json:"epoch"`
	Consumed map[int64][]int64 `json:"consumed"`
}

// SampleID packs a unit and a sample number into the "__index__" that a
// streaming source made WithIndex gives each sample.
func SampleID(unit, k int64) int64 { return unit<<32 | k }

// skipSet is a resumed epoch's consumed samples.
type skipSet map[int64]map[int64]bool

func newSkipSet(r *StreamResume) skipSet {
	if r == nil {
		return nil
	}
	s := skipSet{}
	for u, ks := range r.Consumed {
		m := make(map[int64]bool, len(ks))
		for _, k := range ks {
			m[k] = true
		}
		s[u] = m
	}
	return s
}

func (s skipSet) has(unit, k int64) bool { return s != nil && s[unit][k] }

// unitEpochs deals a streaming source's units (shards, table parts) to its
// rank, one epoch per next: the epoch's seeded order of units, the samples
// a resumed first epoch skips, and the epoch's shuffle buffer.
type unitEpochs struct {
	cfg    sampler.Config
	first  int64         // the first epoch's number
	resume *StreamResume // applies to the first epoch
	buffer int           // shuffle buffer size (0: none)
	opened atomic.Int64
}

func (u *unitEpochs) next() (*sampler.Plan, skipSet, *shuffler, error) {
	k := u.opened.Add(1) - 1
	epoch := u.first + k
	var skip skipSet
	if r := u.resume; r != nil {
		epoch = r.Epoch + k
		if k == 0 {
			skip = newSkipSet(r)
		}
	}
	pl, err := sampler.NewPlan(u.cfg, sampler.Progress{Epoch: epoch})
	if err != nil {
		return nil, nil, nil, err
	}
	shuf := newShuffler(u.buffer, u.cfg.Seed, uint64(epoch)*uint64(u.cfg.World)+uint64(u.cfg.Rank))
	return pl, skip, shuf, nil
}
