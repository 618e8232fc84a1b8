// Package sampler decides which dataset indices each rank of a training
// job reads in an epoch, in what order, and where an interrupted epoch
// picks up, also with a different number of ranks.
//
// An epoch has a global order: position p (0 <= p < N) holds dataset index
// Order.At(p), a permutation of [0, N) that depends only on the seed and
// the epoch (or the identity without shuffling). It is computed per
// position (a Feistel network with cycle walking), so no memory grows with
// N and any position is reachable at once.
//
// Progress says which positions of the epoch are consumed: a prefix
// [0, Prefix) and a short sorted list of consumed positions after it. What
// remains, R, is every other position in order. A Plan gives rank r of W
// the items R[r], R[r+W], R[r+2W], ...; when len(R) is not a multiple of W,
// every rank gets the same count by padding (wrapping around to the start
// of R, so a few samples repeat) or, with DropLast, by dropping the last
// len(R) mod W positions.
//
// Each rank records what it consumed (a RankState: a count of its items
// consumed in order, plus the few consumed out of order), and Merge turns
// the states of all ranks into the epoch's Progress. A new Plan from that
// Progress, for any number of ranks, deals out exactly the positions that
// were not consumed.
package sampler

import (
	"fmt"
	"math/bits"
	"slices"
)

// Config describes one rank's view of a sampled dataset.
type Config struct {
	N        int64  // dataset size, >= 1
	Shuffle  bool   // a new seeded permutation per epoch; else 0, 1, ..., N-1
	Seed     uint64 // with Shuffle
	World    int    // ranks, >= 1
	Rank     int    // this rank, 0 <= Rank < World
	DropLast bool   // uneven split: drop the remainder instead of padding by repeating
}

func (c Config) validate() error {
	switch {
	case c.N < 1:
		return fmt.Errorf("sampler: dataset size must be >= 1, got %d", c.N)
	case c.World < 1:
		return fmt.Errorf("sampler: world size must be >= 1, got %d", c.World)
	case c.Rank < 0 || c.Rank >= c.World:
		return fmt.Errorf("sampler: rank must be in [0, %d) for world size %d, got %d", c.World, c.World, c.Rank)
	}
	return nil
}

// Order is an epoch's global order: a permutation of [0, N).
type Order struct {
	n       int64
	shuffle bool
	half    uint   // bits in each Feistel half
	mask    uint64 // (1 << half) - 1
	keys    [6]uint64
}

// NewOrder returns the order of epoch for a dataset of n items.
func NewOrder(n int64, shuffle bool, seed uint64, epoch int64) Order {
	o := Order{n: n, shuffle: shuffle}
	if !shuffle || n <= 1 {
		return o
	}
	b := uint(bits.Len64(uint64(n - 1)))
	b += b & 1 // even, so that the halves match
	b = max(b, 2)
	o.half = b / 2
	o.mask = 1<<o.half - 1
	s := seed ^ uint64(epoch)*0x9e3779b97f4a7c15
	for i := range o.keys {
		s = splitmix64(s)
		o.keys[i] = s
	}
	return o
}

// N is the dataset size.
func (o Order) N() int64 { return o.n }

// At returns the dataset index at position pos of the epoch.
func (o Order) At(pos int64) int64 {
	if !o.shuffle || o.n <= 1 {
		return pos
	}
	// Cycle walking: the network permutes [0, 4^half), which is less
	// than 4n, so this takes fewer than 4 rounds on average.
	x := uint64(pos)
	for {
		x = o.encrypt(x)
		if x < uint64(o.n) {
			return int64(x)
		}
	}
}

// Position returns the position of dataset index idx in the epoch (the
// inverse of At).
func (o Order) Position(idx int64) int64 {
	if !o.shuffle || o.n <= 1 {
		return idx
	}
	x := uint64(idx)
	for {
		x = o.decrypt(x)
		if x < uint64(o.n) {
			return int64(x)
		}
	}
}

func (o Order) decrypt(x uint64) uint64 {
	l, r := x>>o.half, x&o.mask
	for k := len(o.keys) - 1; k >= 0; k-- {
		l, r = r^(splitmix64(l^o.keys[k])&o.mask), l
	}
	return l<<o.half | r
}

func (o Order) encrypt(x uint64) uint64 {
	l, r := x>>o.half, x&o.mask
	for _, k := range o.keys {
		l, r = r, l^(splitmix64(r^k)&o.mask)
	}
	return l<<o.half | r
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Progress is which positions of an epoch are consumed. It is small (the
// out-of-order tail only) and JSON-serialisable.
type Progress struct {
	Epoch  int64   `json:"epoch"`
	Prefix int64   `json:"prefix"`         // positions [0, Prefix) are consumed
	Done   []int64 `json:"done,omitempty"` // consumed positions > Prefix, sorted, unique
}

func (p Progress) validate(n int64) error {
	if p.Prefix < 0 || p.Prefix > n {
		return fmt.Errorf("sampler: progress prefix %d is outside [0, %d]", p.Prefix, n)
	}
	for i, d := range p.Done {
		if d <= p.Prefix || d >= n || (i > 0 && d <= p.Done[i-1]) {
			return fmt.Errorf("sampler: progress done list must be sorted, unique positions in (%d, %d); got %d at %d", p.Prefix, n, d, i)
		}
	}
	return nil
}

// Plan is one rank's share of what remains of an epoch.
type Plan struct {
	cfg   Config
	ord   Order
	base  Progress
	m     int64 // positions remaining (len(R))
	count int64 // items of this rank
}

// NewPlan deals what progress leaves of its epoch to cfg's rank.
func NewPlan(cfg Config, progress Progress) (*Plan, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := progress.validate(cfg.N); err != nil {
		return nil, err
	}
	pl := &Plan{cfg: cfg, ord: NewOrder(cfg.N, cfg.Shuffle, cfg.Seed, progress.Epoch), base: progress}
	pl.m = cfg.N - progress.Prefix - int64(len(progress.Done))
	w := int64(cfg.World)
	switch {
	case pl.m == 0:
		pl.count = 0
	case cfg.DropLast:
		pl.count = pl.m / w
	default:
		pl.count = (pl.m + w - 1) / w
	}
	return pl, nil
}

// Len is how many items this rank reads; the same on every rank.
func (pl *Plan) Len() int64 { return pl.count }

// Epoch is the plan's epoch.
func (pl *Plan) Epoch() int64 { return pl.base.Epoch }

// At returns this rank's item i (0 <= i < Len()): its position in the
// epoch's order and its dataset index. pad says the item repeats one dealt
// to a rank before (padding to an equal count): it counts for nothing in
// the epoch's progress.
func (pl *Plan) At(i int64) (pos, index int64, pad bool) {
	j := int64(pl.cfg.Rank) + i*int64(pl.cfg.World)
	if j >= pl.m {
		j, pad = j%pl.m, true
	}
	pos = pl.remaining(j)
	return pos, pl.ord.At(pos), pad
}

// Item returns the number of this rank's item that holds dataset index
// idx (the first, if padding repeats it); ok is false when the index is not
// dealt to this rank in this plan (another rank's, already consumed, or
// dropped).
func (pl *Plan) Item(idx int64) (i int64, ok bool) {
	if idx < 0 || idx >= pl.cfg.N {
		return 0, false
	}
	pos := pl.ord.Position(idx)
	if pos < pl.base.Prefix {
		return 0, false
	}
	k, found := slices.BinarySearch(pl.base.Done, pos)
	if found {
		return 0, false
	}
	j := pos - pl.base.Prefix - int64(k) // its index in R
	w, r := int64(pl.cfg.World), int64(pl.cfg.Rank)
	if j%w == r && j/w < pl.count {
		return j / w, true
	}
	// Padding: rank r's items past the end of R wrap to its start.
	for i := (pl.m - r + w - 1) / w; i < pl.count; i++ {
		if (r+i*w)%pl.m == j {
			return i, true
		}
	}
	return 0, false
}

// remaining maps an index into R to its position: past the prefix, skipping
// the done positions (a short sorted list).
func (pl *Plan) remaining(j int64) int64 {
	pos := pl.base.Prefix + j
	// Each done position at or before the candidate shifts it by one.
	k := 0
	for k < len(pl.base.Done) && pl.base.Done[k] <= pos {
		pos++
		k++
	}
	return pos
}

// RankState is what one rank consumed of its Plan: its items [0, Count),
// and the items in Extra (item numbers, each >= Count), which finished out
// of order. Base, World and DropLast identify the plan it refers to.
type RankState struct {
	Base     Progress `json:"base"`
	World    int      `json:"world"`
	Rank     int      `json:"rank"`
	Count    int64    `json:"count"`
	Extra    []int64  `json:"extra,omitempty"`
	DropLast bool     `json:"drop_last,omitempty"`
}

// Merge combines the states of every rank of one plan (same Base and
// World, one state per rank) into the epoch's Progress.
func Merge(n int64, states []RankState) (Progress, error) {
	if len(states) == 0 {
		return Progress{}, fmt.Errorf("sampler: merge: no rank states")
	}
	w := states[0].World
	base := states[0].Base
	if len(states) != w {
		return Progress{}, fmt.Errorf("sampler: merge: %d rank states for world size %d; give one per rank", len(states), w)
	}
	if err := base.validate(n); err != nil {
		return Progress{}, err
	}
	seen := make([]bool, w)
	m := n - base.Prefix - int64(len(base.Done))
	// consumed R indices: r + i*w for i < Count, and the extras; minC*w
	// of them form a prefix of R.
	minC := int64(-1)
	for _, s := range states {
		if s.World != w || s.Base.Epoch != base.Epoch || s.Base.Prefix != base.Prefix || !slices.Equal(s.Base.Done, base.Done) {
			return Progress{}, fmt.Errorf("sampler: merge: rank %d's state is for another plan (world %d, epoch %d, prefix %d)", s.Rank, s.World, s.Base.Epoch, s.Base.Prefix)
		}
		if s.Rank < 0 || s.Rank >= w || seen[s.Rank] {
			return Progress{}, fmt.Errorf("sampler: merge: rank %d is out of range or repeated", s.Rank)
		}
		seen[s.Rank] = true
		if s.Count < 0 {
			return Progress{}, fmt.Errorf("sampler: merge: rank %d: negative count %d", s.Rank, s.Count)
		}
		if minC < 0 || s.Count < minC {
			minC = s.Count
		}
	}
	full := min(minC*int64(w), m) // R[0, full) are all consumed
	tail := map[int64]bool{}
	for _, s := range states {
		mark := func(i int64) {
			if j := int64(s.Rank) + i*int64(w); j >= full && j < m { // j >= m: padding
				tail[j] = true
			}
		}
		for i := minC; i < s.Count; i++ {
			mark(i)
		}
		for _, i := range s.Extra {
			if i < s.Count {
				return Progress{}, fmt.Errorf("sampler: merge: rank %d: extra item %d is below its count %d", s.Rank, i, s.Count)
			}
			mark(i)
		}
	}
	for tail[full] {
		delete(tail, full)
		full++
	}
	pl := &Plan{base: base}
	out := Progress{Epoch: base.Epoch, Prefix: base.Prefix}
	// Consumed positions: base.Done, R[0, full), and the tail.
	var done []int64
	done = append(done, base.Done...)
	if full > 0 {
		last := pl.remaining(full - 1)
		// Every position up to last is consumed (base.Done ones included).
		out.Prefix = last + 1
		done = slices.DeleteFunc(done, func(d int64) bool { return d <= last })
	}
	for j := range tail {
		done = append(done, pl.remaining(j))
	}
	slices.Sort(done)
	// Positions right after the prefix that are done extend it.
	k := 0
	for k < len(done) && done[k] == out.Prefix {
		out.Prefix++
		k++
	}
	out.Done = done[k:]
	if len(out.Done) == 0 {
		out.Done = nil
	}
	return out, nil
}

// Tracker records which items of a Plan this rank consumed. It is not safe
// for concurrent use.
type Tracker struct {
	plan  *Plan
	count int64
	extra map[int64]bool
}

// Tracker starts recording consumption of pl's items.
func (pl *Plan) Tracker() *Tracker { return &Tracker{plan: pl, extra: map[int64]bool{}} }

// Consumed records that item i of the plan was consumed (delivered to the
// training loop). Repeats are harmless.
func (t *Tracker) Consumed(i int64) {
	if i < t.count {
		return
	}
	t.extra[i] = true
	for t.extra[t.count] {
		delete(t.extra, t.count)
		t.count++
	}
}

// State is this rank's RankState, for Merge.
func (t *Tracker) State() RankState {
	s := RankState{Base: t.plan.base, World: t.plan.cfg.World, Rank: t.plan.cfg.Rank, Count: t.count, DropLast: t.plan.cfg.DropLast}
	for i := range t.extra {
		s.Extra = append(s.Extra, i)
	}
	slices.Sort(s.Extra)
	return s
}
