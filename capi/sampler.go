package main

import (
	"encoding/json"
	"fmt"

	"github.com/spdl-go/spdl-go/core/sampler"
)

// samplerRequest is the JSON spdl_sampler_call takes:
//
//	{"op": "state", "config": {...}, "progress": {...}, "consumed": [dataset indices]}
//	{"op": "merge", "n": 10, "states": [rank states]}
//	{"op": "list", "listing": {...}}: {"n": count, "classes": [...]} of a listing
type samplerRequest struct {
	Op       string              `json:"op"`
	Config   samplerConfig       `json:"config"`
	Progress sampler.Progress    `json:"progress"`
	Consumed []int64             `json:"consumed"`
	N        int64               `json:"n"`
	States   []sampler.RankState `json:"states"`
	Listing  listingSpec         `json:"listing"`
}

type samplerConfig struct {
	N        int64  `json:"n"`
	Shuffle  bool   `json:"shuffle"`
	Seed     uint64 `json:"seed"`
	World    int    `json:"world_size"`
	Rank     int    `json:"rank"`
	DropLast bool   `json:"drop_last"`
}

func (c samplerConfig) config() sampler.Config {
	return sampler.Config{N: c.N, Shuffle: c.Shuffle, Seed: c.Seed, World: c.World, Rank: c.Rank, DropLast: c.DropLast}
}

// samplerCall answers one request: "state" turns the dataset indices this
// rank consumed of a plan into its RankState; "merge" turns every rank's
// state into the epoch's Progress.
func samplerCall(raw []byte) (any, error) {
	var req samplerRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, fmt.Errorf("sampler request is not valid JSON: %w", err)
	}
	switch req.Op {
	case "state":
		pl, err := sampler.NewPlan(req.Config.config(), req.Progress)
		if err != nil {
			return nil, err
		}
		tr := pl.Tracker()
		for _, idx := range req.Consumed {
			i, ok := pl.Item(idx)
			if !ok {
				return nil, fmt.Errorf("sampler state: dataset index %d was not dealt to rank %d in epoch %d", idx, req.Config.Rank, req.Progress.Epoch)
			}
			tr.Consumed(i)
		}
		return tr.State(), nil
	case "merge":
		return sampler.Merge(req.N, req.States)
	case "list":
		l, err := peekListing(req.Listing)
		if err != nil {
			return nil, err
		}
		return map[string]any{"n": len(l.items), "classes": l.classes}, nil
	}
	return nil, fmt.Errorf("sampler request: unknown op %q (want \"state\", \"merge\" or \"list\")", req.Op)
}
