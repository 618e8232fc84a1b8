package sampler

import (
	"fmt"

	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/value"
)

// Options is the sampling group that every sampled or sharded source takes
// (the sampler and the listings it deals, webdataset, table): how a
// dataset is shuffled and split over ranks, and the first epoch.
type Options struct {
	Shuffle  bool
	Seed     uint64
	World    int // >= 1
	Rank     int // in [0, World)
	DropLast bool
	Epoch    int64 // the first epoch's number, >= 0
}

// Config is the Config of a dataset of n items.
func (o Options) Config(n int64) Config {
	return Config{N: n, Shuffle: o.Shuffle, Seed: o.Seed, World: o.World, Rank: o.Rank, DropLast: o.DropLast}
}

// ReadOptions reads the sampling group: shuffle, seed (in [0, 2**64)),
// world_size (default 1), rank (default 0), drop_last and epoch (>= 0).
// The caller calls r.Done.
func ReadOptions(r *options.Reader) (Options, error) {
	var o Options
	var err error
	if o.Shuffle, err = r.Bool("shuffle", false); err != nil {
		return o, err
	}
	if v, ok := r.Get("seed"); ok {
		var fits bool
		if o.Seed, fits = options.AsUint64(v); !fits {
			return o, fmt.Errorf("sampling: seed must be in [0, 2**64), got %s", value.Describe(v))
		}
	}
	world, err := r.Int("world_size", 1)
	if err != nil {
		return o, err
	}
	rank, err := r.Int("rank", 0)
	if err != nil {
		return o, err
	}
	if world < 1 || world > 1<<31-1 || rank < 0 || rank >= world {
		return o, fmt.Errorf("sampling: rank must be in [0, world_size) with world_size >= 1, got rank=%d, world_size=%d", rank, world)
	}
	o.World, o.Rank = int(world), int(rank)
	if o.DropLast, err = r.Bool("drop_last", false); err != nil {
		return o, err
	}
	if o.Epoch, err = r.Int("epoch", 0); err != nil {
		return o, err
	}
	if o.Epoch < 0 {
		return o, fmt.Errorf("sampling: epoch must be >= 0, got %d", o.Epoch)
	}
	return o, nil
}
