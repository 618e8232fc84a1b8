package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sampler"
	"github.com/spdl-go/spdl-go/core/sources"
	"github.com/spdl-go/spdl-go/core/storage"
	"github.com/spdl-go/spdl-go/core/value"
)

// pipelineSpec is the JSON a host sends to spdl_pipeline_new.
//
//	{"source": {"kind": "python", "id": 1} | {"kind": "range", "start": 0, "stop": 10, "step": 1} |
//	           {"kind": "sampler", "n": 10, "shuffle": true, "seed": 0, "world_size": 1, "rank": 0,
//	            "drop_last": false, "epoch": 0, "items_wire": "<base64 of the wire-encoded list>"
//	            | "listing": {"kind": "files" | "image_folder", "root": ..., "extensions": [...], "recursive": true}} |
//	           {"kind": "webdataset", "urls": ["shard-{000..009}.tar"], "required": ["jpg"], "decode": {"cls": "int"},
//	            "shuffle_buffer": 0, <sampler fields but n>} |
//	           {"kind": "table", "urls": ["*.parquet"], "columns": ["img", "label"], "scalars": false,
//	            "batch_rows": 4096, "shuffle_buffer": 0, <sampler fields but n>},
//	 "stages": [{"kind": "pipe", "name": "decode", "concurrency": 4, "output_order": "input",
//	             "auto": false, "max_concurrency": 0, "timeout_s": 0,
//	             "max_failures": -1,
//	             "op": {"kind": "native", "name": "identity", "options": {}} | {"kind": "python", "id": 2}},
//	            {"kind": "aggregate", "size": 32, "drop_last": false},
//	            {"kind": "disaggregate"}],
//	 "buffer_size": 3, "queue_size": 2, "max_failures": -1, "num_threads": 0, "cpu_budget": 0}
type pipelineSpec struct {
	Source      *sourceSpec `json:"source"`
	Stages      []stageSpec `json:"stages"`
	BufferSize  *int        `json:"buffer_size"`
	QueueSize   int         `json:"queue_size"`
	MaxFailures *int        `json:"max_failures"`
	NumThreads  int         `json:"num_threads"`
	CPUBudget   int         `json:"cpu_budget"`
}

type sourceSpec struct {
	Kind  string `json:"kind"`
	ID    uint64 `json:"id"`
	Start int64  `json:"start"`
	Stop  int64  `json:"stop"`
	Step  int64  `json:"step"`
	// kind "sampler"
	samplerConfig
	Epoch     int64             `json:"epoch"`
	Resume    *sampler.Progress `json:"resume"`     // where the first epoch picks up
	ItemsWire []byte            `json:"items_wire"` // base64 in JSON: the wire encoding of the items list
	Listing   *listingSpec      `json:"listing"`    // items listed in Go (files, image_folder)
	WithIndex bool              `json:"with_index"` // add each item's dataset index
	// kind "webdataset" (also uses the sampler fields except n)
	URLs           []string          `json:"urls"` // shard paths or brace patterns
	Required       []string          `json:"required"`
	Decode         map[string]string `json:"decode"`
	ShuffleBuffer  int               `json:"shuffle_buffer"`
	PrefetchShards *int              `json:"prefetch_shards"` // shards opened ahead (nil: the default)
	// kind "table" (also urls, shuffle_buffer and the sampler fields)
	Columns   []string `json:"columns"`
	Scalars   bool     `json:"scalars"`
	BatchRows int64    `json:"batch_rows"`
	// webdataset and table: how remote shards and files are read
	Storage storageSpec `json:"storage"`
	// webdataset and table: a resumed first epoch (with_index gives the ids)
	StreamResume *sources.StreamResume `json:"stream_resume"`
}

// storageSpec is how Python describes remote reads (see core/storage).
type storageSpec struct {
	TimeoutS float64 `json:"timeout_s"`
	Retries  *int    `json:"retries"`
	CAFile   string  `json:"ca_file"`
	S3       struct {
		Endpoint     string `json:"endpoint"`
		Region       string `json:"region"`
		AccessKey    string `json:"access_key"`
		SecretKey    string `json:"secret_key"`
		SessionToken string `json:"session_token"`
		VirtualHost  bool   `json:"virtual_host"`
	} `json:"s3"`
}

func (s storageSpec) client() (*storage.Client, error) {
	if s.TimeoutS < 0 {
		return nil, fmt.Errorf("storage: timeout_s must be > 0, got %v", s.TimeoutS)
	}
	o := storage.Options{Timeout: time.Duration(s.TimeoutS * float64(time.Second))}
	if s.Retries != nil {
		if *s.Retries < 0 {
			return nil, fmt.Errorf("storage: retries must be >= 0, got %d", *s.Retries)
		}
		o.Retries = *s.Retries
		if o.Retries == 0 {
			o.Retries = -1
		}
	}
	o.S3 = storage.S3Options{Endpoint: s.S3.Endpoint, Region: s.S3.Region, AccessKey: s.S3.AccessKey,
		SecretKey: s.S3.SecretKey, SessionToken: s.S3.SessionToken, VirtualHost: s.S3.VirtualHost}
	o.CAFile = s.CAFile
	return storage.New(o)
}

type stageSpec struct {
	Kind        string  `json:"kind"`
	Name        string  `json:"name"`
	Op          *opSpec `json:"op"`
	Concurrency int     `json:"concurrency"`
	Auto        bool    `json:"auto"`
	MaxConc     int     `json:"max_concurrency"`
	TimeoutS    float64 `json:"timeout_s"`
	OutputOrder string  `json:"output_order"`
	MaxFailures *int    `json:"max_failures"`
	Size        int     `json:"size"`
	DropLast    bool    `json:"drop_last"`
}

type opSpec struct {
	Kind    string         `json:"kind"`
	Name    string         `json:"name"`
	ID      uint64         `json:"id"`
	Options map[string]any `json:"options"`
}

// buildConfig turns a JSON spec into an engine configuration; errors name
// the field (and stage index) that is wrong.
func buildConfig(raw []byte) (pipeline.Config, error) {
	var spec pipelineSpec
	var cfg pipeline.Config
	if err := json.Unmarshal(raw, &spec); err != nil {
		return cfg, fmt.Errorf("pipeline spec is not valid JSON: %w", err)
	}
	if spec.Source == nil {
		return cfg, fmt.Errorf("pipeline spec: no source (add_source was not called)")
	}
	switch spec.Source.Kind {
	case "python":
		cfg.Source = &pySource{id: spec.Source.ID}
	case "range":
		step := spec.Source.Step
		if step == 0 {
			step = 1
		}
		cfg.Source = pipeline.Range(spec.Source.Start, spec.Source.Stop, step)
	case "sampler":
		src, err := samplerSource(spec.Source)
		if err != nil {
			return cfg, err
		}
		cfg.Source = src
	case "table":
		paths, err := expandPaths(spec.Source.URLs, spec.Source.Storage)
		if err != nil {
			return cfg, fmt.Errorf("table: %w", err)
		}
		s := spec.Source
		client, err := s.Storage.client()
		if err != nil {
			return cfg, err
		}
		src, err := sources.NewTableSource(sources.TableOptions{
			Paths: paths, Columns: s.Columns, Scalars: s.Scalars, Shuffle: s.Shuffle, Seed: s.Seed, World: s.World,
			Rank: s.Rank, DropLast: s.DropLast, ShuffleBuffer: s.ShuffleBuffer, BatchRows: s.BatchRows, Epoch: s.Epoch,
			Open:      func(ctx context.Context, name string) (sources.File, error) { return client.OpenFile(ctx, name) },
			WithIndex: s.WithIndex, Resume: s.StreamResume,
		})
		if err != nil {
			return cfg, err
		}
		cfg.Source = src
	case "webdataset":
		src, err := webdatasetSource(spec.Source)
		if err != nil {
			return cfg, err
		}
		cfg.Source = src
	default:
		return cfg, fmt.Errorf("pipeline spec: unknown source kind %q (want \"python\", \"range\", \"sampler\", \"table\" or \"webdataset\")", spec.Source.Kind)
	}
	for i, s := range spec.Stages {
		st := pipeline.StageConfig{Name: s.Name, MaxFailures: -1}
		if s.MaxFailures != nil {
			st.MaxFailures = *s.MaxFailures
		}
		switch s.Kind {
		case "pipe":
			st.Kind = pipeline.KindPipe
			st.Concurrency = s.Concurrency
			st.AutoConcurrency = s.Auto
			st.MaxConcurrency = s.MaxConc
			if s.TimeoutS < 0 || math.IsNaN(s.TimeoutS) || math.IsInf(s.TimeoutS, 0) {
				return cfg, fmt.Errorf("stage %d (%s): timeout %v: want a finite number of seconds >= 0", i, s.Name, s.TimeoutS)
			}
			st.Timeout = time.Duration(s.TimeoutS * float64(time.Second))
			switch s.OutputOrder {
			case "", "completion":
				st.Order = pipeline.OrderCompletion
			case "input":
				st.Order = pipeline.OrderInput
			default:
				return cfg, fmt.Errorf("stage %d (%s): output_order %q: want \"completion\" or \"input\"", i, s.Name, s.OutputOrder)
			}
			op, err := buildOp(s.Op)
			if err != nil {
				return cfg, fmt.Errorf("stage %d (%s): %w", i, s.Name, err)
			}
			st.Op = op
		case "aggregate":
			st.Kind = pipeline.KindAggregate
			st.Size = s.Size
			st.DropLast = s.DropLast
		case "disaggregate":
			st.Kind = pipeline.KindDisaggregate
		default:
			return cfg, fmt.Errorf("stage %d: unknown kind %q (want \"pipe\", \"aggregate\" or \"disaggregate\")", i, s.Kind)
		}
		cfg.Stages = append(cfg.Stages, st)
	}
	cfg.BufferSize = 3
	if spec.BufferSize != nil {
		cfg.BufferSize = *spec.BufferSize
	}
	cfg.QueueSize = spec.QueueSize
	cfg.MaxFailures = -1
	if spec.MaxFailures != nil {
		cfg.MaxFailures = *spec.MaxFailures
	}
	cfg.NumThreads = spec.NumThreads
	cfg.CPUBudget = spec.CPUBudget
	return cfg, nil
}

// samplerSource builds a sampler source; its items, if any, come as the
// wire encoding of a list of plain values.
func samplerSource(s *sourceSpec) (pipeline.Source, error) {
	var items value.List
	if s.Listing != nil {
		if s.ItemsWire != nil {
			return nil, fmt.Errorf("sampler source: give items or a listing, not both")
		}
		l, err := takeListing(*s.Listing)
		if err != nil {
			return nil, err
		}
		items = l.items
		if s.N != 0 && s.N != int64(len(items)) {
			// A resumed state counts positions of the old listing.
			return nil, fmt.Errorf("sampler source: %s lists %d files now, but the source was made for %d; files were added or removed", s.Listing.Root, len(items), s.N)
		}
		s.N = int64(len(items))
	}
	if s.ItemsWire != nil {
		v, err := pyDecoder.Decode(s.ItemsWire)
		if err != nil {
			return nil, fmt.Errorf("sampler source: items: %w", err)
		}
		list, ok := v.(value.List)
		if !ok {
			value.Release(v)
			return nil, fmt.Errorf("sampler source: items must be a list, got %s", value.Describe(v))
		}
		items = list
	}
	src, err := sampler.NewSource(s.config(), items, s.Epoch)
	if err != nil {
		value.Release(items)
		return nil, err
	}
	if s.Resume != nil {
		// Checked now, so that a bad state fails the build, not epoch 1.
		if _, err := sampler.NewPlan(src.Cfg, *s.Resume); err != nil {
			value.Release(items)
			return nil, fmt.Errorf("sampler source: resume: %w", err)
		}
		src.Resume = s.Resume
	}
	src.WithIndex = s.WithIndex
	return src, nil
}

// expandPaths expands brace patterns, then globs (sorted; s3:// globs by
// listing the bucket), keeping the order of the patterns.
func expandPaths(patterns []string, st storageSpec) ([]string, error) {
	var out []string
	for _, p := range patterns {
		names, err := sources.ExpandBraces(p)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if !strings.ContainsAny(n, "*?[") {
				out = append(out, n)
				continue
			}
			var matched []string
			switch {
			case strings.HasPrefix(n, "s3://"):
				client, err := st.client()
				if err != nil {
					return nil, err
				}
				matched, err = sources.ListRemote(context.Background(), client, sources.FileOptions{Root: n})
				if err != nil {
					return nil, err
				}
			case storage.IsRemote(n):
				return nil, fmt.Errorf("%s: http(s) URLs cannot be globbed; list them, or use brace patterns", n)
			default:
				matched, err = sources.ListFiles(sources.FileOptions{Root: n})
				if err != nil {
					return nil, err
				}
			}
			out = append(out, matched...)
		}
	}
	return out, nil
}

// webdatasetSource builds a tar shard source; each URL is a path or a
// brace pattern.
func webdatasetSource(s *sourceSpec) (pipeline.Source, error) {
	shards, err := expandPaths(s.URLs, s.Storage)
	if err != nil {
		return nil, fmt.Errorf("webdataset: %w", err)
	}
	client, err := s.Storage.client()
	if err != nil {
		return nil, err
	}
	prefetch := 0 // TarOptions' default
	if p := s.PrefetchShards; p != nil {
		if *p < 0 {
			return nil, fmt.Errorf("webdataset: prefetch_shards must be >= 0, got %d", *p)
		}
		prefetch = *p
		if *p == 0 {
			prefetch = -1 // none ahead
		}
	}
	return sources.NewTarSource(sources.TarOptions{
		Shards: shards, Shuffle: s.Shuffle, Seed: s.Seed, World: s.World, Rank: s.Rank, DropLast: s.DropLast,
		ShuffleBuffer: s.ShuffleBuffer, Required: s.Required, Decode: s.Decode, Epoch: s.Epoch, Open: client.Open,
		WithIndex: s.WithIndex, Resume: s.StreamResume, Prefetch: prefetch,
	})
}

func buildOp(s *opSpec) (pipeline.Op, error) {
	if s == nil {
		return nil, fmt.Errorf("pipe stage has no op")
	}
	switch s.Kind {
	case "native":
		return ops.New(s.Name, s.Options)
	case "python":
		return &pyOp{id: s.ID}, nil
	default:
		return nil, fmt.Errorf("unknown op kind %q (want \"native\" or \"python\")", s.Kind)
	}
}
