package sources

import (
	"context"
	"encoding/base64"
	"fmt"

	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sampler"
	"github.com/spdl-go/spdl-go/core/value"
	"github.com/spdl-go/spdl-go/core/wire"
)

func init() { Register("sampler", newSampled) }

// plainDecoder decodes items lists: plain values only, no pointers.
var plainDecoder = &wire.Decoder{}

// newSampled builds a sampler.Source:
//
//	{"n": 10, "sampling": {...}, "with_index": false, "resume": {progress},
//	 "items_wire": "<base64 of the wire encoding of a list of plain values>"
//	 | "listing": {...} (ReadListing)}
//
// Without items it yields dataset indices. With a listing, n (if given)
// must still be its size: a resumed state counts positions of the old
// listing.
func newSampled(m map[string]any) (pipeline.Source, error) {
	r := options.New(m)
	n, err := r.Int("n", 0)
	if err != nil {
		return nil, err
	}
	so, err := readSampling(r)
	if err != nil {
		return nil, err
	}
	withIndex, err := r.Bool("with_index", false)
	if err != nil {
		return nil, err
	}
	var resume sampler.Progress
	resumed, err := r.JSON("resume", &resume)
	if err != nil {
		return nil, err
	}
	itemsWire, err := r.String("items_wire", "")
	if err != nil {
		return nil, err
	}
	var listing *Listing
	if r.Has("listing") {
		lr, err := r.Sub("listing")
		if err != nil {
			return nil, err
		}
		l, err := ReadListing(lr)
		if err != nil {
			return nil, err
		}
		listing = &l
	} else {
		r.Get("listing")
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	var items value.List
	switch {
	case listing != nil && itemsWire != "":
		return nil, fmt.Errorf("give items or a listing, not both")
	case listing != nil:
		l, err := takeListing(context.Background(), *listing)
		if err != nil {
			return nil, err
		}
		items = l.Items
		if n != 0 && n != int64(len(items)) {
			return nil, fmt.Errorf("%s lists %d files now, but the source was made for %d; files were added or removed", listing.Root, len(items), n)
		}
		n = int64(len(items))
	case itemsWire != "":
		raw, err := base64.StdEncoding.DecodeString(itemsWire)
		if err != nil {
			return nil, fmt.Errorf("items_wire: %w", err)
		}
		v, err := plainDecoder.Decode(raw)
		if err != nil {
			return nil, fmt.Errorf("items: %w", err)
		}
		list, ok := v.(value.List)
		if !ok {
			value.Release(v)
			return nil, fmt.Errorf("items must be a list, got %s", value.Describe(v))
		}
		items = list
	}
	src, err := sampler.NewSource(so.Config(n), items, so.Epoch)
	if err != nil {
		value.Release(items)
		return nil, err
	}
	if resumed {
		// Checked now, so that a bad state fails the build, not epoch 1.
		if _, err := sampler.NewPlan(src.Cfg, resume); err != nil {
			value.Release(items)
			return nil, fmt.Errorf("resume: %w", err)
		}
		src.Resume = &resume
	}
	src.WithIndex = withIndex
	return src, nil
}
