package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sources"
)

// pipelineSpec is the JSON a host sends to spdl_pipeline_new.
//
//	{"source": {"kind": "<a kind registered with sources.Register>", <its options>},
//	 "stages": [{"kind": "pipe", "name": "decode", "concurrency": 4, "output_order": "input",
//	             "auto": false, "max_concurrency": 0, "timeout_s": 0,
//	             "max_failures": -1,
//	             "op": {"kind": "native", "name": "identity", "options": {}} | {"kind": "python", "id": 2}},
//	            {"kind": "aggregate", "size": 32, "drop_last": false},
//	            {"kind": "disaggregate"}],
//	 "buffer_size": 3, "queue_size": 2, "max_failures": -1, "num_threads": 0, "cpu_budget": 0}
//
// The source's options are its kind's (core/sources: "range", "sampler",
// "webdataset", "table"; "python" is registered in python.go); capi knows
// none of them. Numbers in options stay exact (json.Number), so a 64-bit
// seed survives.
type pipelineSpec struct {
	Source      map[string]any `json:"source"`
	Stages      []stageSpec    `json:"stages"`
	BufferSize  *int           `json:"buffer_size"`
	QueueSize   int            `json:"queue_size"`
	MaxFailures *int           `json:"max_failures"`
	NumThreads  int            `json:"num_threads"`
	CPUBudget   int            `json:"cpu_budget"`
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
	if err := decodeJSON(raw, &spec); err != nil {
		return cfg, fmt.Errorf("pipeline spec is not valid JSON: %w", err)
	}
	if spec.Source == nil {
		return cfg, fmt.Errorf("pipeline spec: no source (add_source was not called)")
	}
	kind, ok := spec.Source["kind"].(string)
	if !ok {
		return cfg, fmt.Errorf("pipeline spec: the source has no kind (a str)")
	}
	opts := make(map[string]any, len(spec.Source))
	for k, v := range spec.Source {
		if k != "kind" {
			opts[k] = v
		}
	}
	src, err := sources.New(kind, opts)
	if err != nil {
		return cfg, err
	}
	cfg.Source = src
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

// decodeJSON decodes raw into v, keeping numbers in untyped fields (source
// and op options) as json.Number, so integers stay exact.
func decodeJSON(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}
