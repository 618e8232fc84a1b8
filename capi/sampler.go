package main

import (
	"context"
	"fmt"

	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/sampler"
	"github.com/spdl-go/spdl-go/core/sources"
)

// samplerRequest is the JSON spdl_sampler_call takes:
//
//	{"op": "state", "config": {"n": 10, <sampling>}, "progress": {...}, "consumed": [dataset indices]}
//	{"op": "merge", "n": 10, "states": [rank states]}
//	{"op": "list", "listing": {...}}: {"n": count, "classes": [...]} of a listing (sources.ReadListing)
//
// <sampling> is the group sampler.ReadOptions reads (shuffle, seed,
// world_size, rank, drop_last, epoch); spdl_spec_check checks one alone.
type samplerRequest struct {
	Op       string              `json:"op"`
	Config   map[string]any      `json:"config"`
	Progress sampler.Progress    `json:"progress"`
	Consumed []int64             `json:"consumed"`
	N        int64               `json:"n"`
	States   []sampler.RankState `json:"states"`
	Listing  map[string]any      `json:"listing"`
}

// samplerConfig reads a rank's sampler config: n and the sampling group.
func samplerConfig(m map[string]any) (sampler.Config, error) {
	r := options.New(m)
	n, err := r.Int("n", 0)
	if err != nil {
		return sampler.Config{}, err
	}
	so, err := sampler.ReadOptions(r)
	if err != nil {
		return sampler.Config{}, err
	}
	return so.Config(n), r.Done()
}

// samplerCall answers one request: "state" turns the dataset indices this
// rank consumed of a plan into its RankState; "merge" turns every rank's
// state into the epoch's Progress; "list" lists a dataset ahead of the
// build that takes it.
func samplerCall(raw []byte) (any, error) {
	var req samplerRequest
	if err := decodeJSON(raw, &req); err != nil {
		return nil, fmt.Errorf("sampler request is not valid JSON: %w", err)
	}
	switch req.Op {
	case "state":
		cfg, err := samplerConfig(req.Config)
		if err != nil {
			return nil, fmt.Errorf("sampler state: config: %w", err)
		}
		pl, err := sampler.NewPlan(cfg, req.Progress)
		if err != nil {
			return nil, err
		}
		tr := pl.Tracker()
		for _, idx := range req.Consumed {
			i, ok := pl.Item(idx)
			if !ok {
				return nil, fmt.Errorf("sampler state: dataset index %d was not dealt to rank %d in epoch %d", idx, cfg.Rank, req.Progress.Epoch)
			}
			tr.Consumed(i)
		}
		return tr.State(), nil
	case "merge":
		return sampler.Merge(req.N, req.States)
	case "list":
		l, err := sources.ReadListing(options.New(req.Listing))
		if err != nil {
			return nil, err
		}
		got, err := sources.PeekListing(context.Background(), l)
		if err != nil {
			return nil, err
		}
		return map[string]any{"n": len(got.Items), "classes": got.Classes}, nil
	}
	return nil, fmt.Errorf("sampler request: unknown op %q (want \"state\", \"merge\" or \"list\")", req.Op)
}
