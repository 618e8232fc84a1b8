package sampler

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/value"
)

// Source is a pipeline.Source that yields this rank's share of each epoch:
// the dataset index (int64) of every item of the epoch's Plan, or, with
// Items, the item at that index. Each Open begins the next epoch, starting
// from Epoch.
type Source struct {
	Cfg   Config
	Items value.List // optional; len(Items) == Cfg.N; plain values only
	Epoch int64      // the first epoch's number
	// Resume, if set, is where the first epoch (Resume.Epoch, which
	// replaces Epoch) picks up; later epochs start from their beginning.
	Resume *Progress
	// WithIndex adds each item's dataset index, so that a consumer can
	// report what it consumed (Tracker) whatever the stages in between do:
	// a tuple item gets it appended, a dict item under "__index__", any
	// other item becomes (item, index). Media ops keep a tuple's tail and
	// a dict's other keys, and collate turns the indices into a column.
	WithIndex bool

	opened atomic.Int64
}

// NewSource checks cfg and items and returns a Source.
func NewSource(cfg Config, items value.List, epoch int64) (*Source, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if items != nil {
		if int64(len(items)) != cfg.N {
			return nil, fmt.Errorf("sampler: %d items for a dataset size of %d", len(items), cfg.N)
		}
		for i, it := range items {
			if !plainValue(it, 0) {
				return nil, fmt.Errorf("sampler: item %d (%s) holds a value that cannot be handed out every epoch (a tensor or a Python object); give paths, bytes, numbers, strings and containers of them", i, value.Describe(it))
			}
		}
	}
	if epoch < 0 {
		return nil, fmt.Errorf("sampler: epoch must be >= 0, got %d", epoch)
	}
	return &Source{Cfg: cfg, Items: items, Epoch: epoch}, nil
}

// Open begins the next epoch.
func (s *Source) Open(context.Context) (pipeline.Iterator, error) {
	k := s.opened.Add(1) - 1
	p := Progress{Epoch: s.Epoch + k}
	if s.Resume != nil {
		p.Epoch = s.Resume.Epoch + k
		if k == 0 {
			p = *s.Resume
		}
	}
	pl, err := NewPlan(s.Cfg, p)
	if err != nil {
		return nil, err
	}
	return &iterator{s: s, pl: pl}, nil
}

type iterator struct {
	s  *Source
	pl *Plan
	i  int64
}

func (it *iterator) Next(context.Context) (any, error) {
	if it.i >= it.pl.Len() {
		return nil, io.EOF
	}
	_, idx, _ := it.pl.At(it.i)
	it.i++
	if it.s.Items == nil {
		return idx, nil
	}
	// Ops own their input and may change it: each epoch gets a copy.
	v := clonePlain(it.s.Items[idx])
	if !it.s.WithIndex {
		return v, nil
	}
	switch x := v.(type) {
	case value.Tuple:
		return append(x, idx), nil
	case *value.Dict:
		x.Set("__index__", idx)
		return x, nil
	}
	return value.Tuple{v, idx}, nil
}

func (it *iterator) Close() error { return nil }

func plainValue(v any, depth int) bool {
	if depth > 32 {
		return false
	}
	switch x := v.(type) {
	case nil, bool, int64, float64, string:
		return true
	case []byte:
		return true
	case value.List:
		for _, e := range x {
			if !plainValue(e, depth+1) {
				return false
			}
		}
		return true
	case value.Tuple:
		for _, e := range x {
			if !plainValue(e, depth+1) {
				return false
			}
		}
		return true
	case *value.Dict:
		if x == nil {
			return false
		}
		for _, e := range x.Values {
			if !plainValue(e, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

// clonePlain copies the containers of a plain value; strings are immutable
// and bytes are copied too (an op may write into them).
func clonePlain(v any) any {
	switch x := v.(type) {
	case []byte:
		return append([]byte(nil), x...)
	case value.List:
		out := make(value.List, len(x))
		for i, e := range x {
			out[i] = clonePlain(e)
		}
		return out
	case value.Tuple:
		out := make(value.Tuple, len(x))
		for i, e := range x {
			out[i] = clonePlain(e)
		}
		return out
	case *value.Dict:
		out := &value.Dict{Keys: append([]string(nil), x.Keys...), Values: make([]any, len(x.Values))}
		for i, e := range x.Values {
			out.Values[i] = clonePlain(e)
		}
		return out
	}
	return v
}
