package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sources"
	"github.com/spdl-go/spdl-go/core/value"
)

// The JSON a host sends to spdl_pipeline_new:
//
//	{"source": {"kind": "<a kind registered with sources.Register>", <its options>},
//	 "stages": [{"kind": "pipe", "name": "decode", "concurrency": 4 | "auto",
//	             "max_concurrency": null, "timeout_s": null, "output_order": "input",
//	             "max_failures": null | 3 | {"fraction": [1, 10]},
//	             "op": {"kind": "native", "name": "identity", "options": {}} | {"kind": "python", "id": 2, "io_bound": false}},
//	            {"kind": "aggregate", "num_items": 32, "drop_last": false},
//	            {"kind": "disaggregate"}],
//	 "buffer_size": 3, "max_failures": -1 | {"fraction": [1, 10]}, "num_threads": null, "cpu_budget": null, "queue_size": null}
//
// A stage's max_failures, when given, replaces the pipeline's for that
// stage (pipeline.StageConfig.OwnLimit); a fraction is a failure rate
// (pipeline.Rate).
//
// The settings are the Python builder's arguments as the user gave them
// (null: the default), so that the errors below, which name those
// arguments, are the only check of them: readStage reads one stage and
// readSettings the pipeline's settings, for the build and for
// spdl_spec_check (check.go) alike.
//
// The source's options are its kind's (core/sources: "range", "sampler",
// "webdataset", "table"; "python" is registered in python.go); capi knows
// none of them. Numbers stay exact (json.Number), so a 64-bit seed
// survives.

// buildConfig turns a JSON spec into an engine configuration; errors name
// the argument (and stage index) that is wrong.
func buildConfig(raw []byte) (pipeline.Config, error) {
	var cfg pipeline.Config
	var spec map[string]any
	if err := decodeJSON(raw, &spec); err != nil {
		return cfg, fmt.Errorf("pipeline spec is not valid JSON: %w", err)
	}
	r := options.New(spec)
	v, ok := r.Get("source")
	if !ok {
		return cfg, fmt.Errorf("pipeline spec: no source (add_source was not called)")
	}
	src, ok := options.AsMap(v)
	if !ok {
		return cfg, fmt.Errorf("pipeline spec: the source must be a dict, not %s", value.Describe(v))
	}
	kind, ok := src["kind"].(string)
	if !ok {
		return cfg, fmt.Errorf("pipeline spec: the source has no kind (a str)")
	}
	var stages []any
	if v, ok := r.Get("stages"); ok {
		if stages, ok = options.AsSeq(v); !ok {
			return cfg, fmt.Errorf("pipeline spec: stages must be a list, not %s", value.Describe(v))
		}
	}
	if err := readSettings(r, &cfg); err != nil {
		return cfg, err
	}
	if err := r.Done(); err != nil {
		return cfg, fmt.Errorf("pipeline spec: %w", err)
	}
	opts := make(map[string]any, len(src))
	for k, v := range src {
		if k != "kind" {
			opts[k] = v
		}
	}
	s, err := sources.New(kind, opts)
	if err != nil {
		return cfg, err
	}
	cfg.Source = s
	for i, v := range stages {
		m, ok := options.AsMap(v)
		if !ok {
			return cfg, fmt.Errorf("stage %d: must be a dict, not %s", i, value.Describe(v))
		}
		at := fmt.Sprintf("stage %d", i)
		if name, _ := m["name"].(string); name != "" {
			at += " (" + name + ")"
		}
		st, op, err := readStage(m)
		if err != nil {
			return cfg, fmt.Errorf("%s: %w", at, err)
		}
		if st.Kind == pipeline.KindPipe {
			if st.Op, err = buildOp(op); err != nil {
				return cfg, fmt.Errorf("%s: %w", at, err)
			}
		}
		cfg.Stages = append(cfg.Stages, st)
	}
	return cfg, nil
}

// readStage reads and checks one stage: everything but its op, which it
// returns as given (nil if absent) for buildOp. Errors are in the words
// of the Python builder's methods (pipe, aggregate, disaggregate).
func readStage(m map[string]any) (pipeline.StageConfig, any, error) {
	r := options.New(m)
	st := pipeline.StageConfig{MaxFailures: -1}
	kind, err := r.String("kind", "")
	if err != nil {
		return st, nil, err
	}
	switch kind {
	case "pipe", "aggregate", "disaggregate":
	default:
		return st, nil, fmt.Errorf("unknown kind %q (want \"pipe\", \"aggregate\" or \"disaggregate\")", kind)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: "+format, append([]any{kind}, args...)...)
	}
	if v, ok := r.Get("name"); ok {
		if st.Name, ok = v.(string); !ok {
			return st, nil, bad("name must be a str or None, got %s", pyRepr(v))
		}
	}
	var op any
	switch kind {
	case "pipe":
		st.Kind = pipeline.KindPipe
		st.Concurrency = 1
		if v, ok := r.Get("concurrency"); ok {
			n, isInt := intArg(v)
			switch {
			case v == "auto":
				st.AutoConcurrency = true
			case !isInt || n < 1:
				return st, nil, bad("concurrency must be an int >= 1 or 'auto', got %s", pyRepr(v))
			default:
				st.Concurrency = int(n)
			}
		}
		if v, ok := r.Get("max_concurrency"); ok {
			if !st.AutoConcurrency {
				return st, nil, bad("max_concurrency only applies with concurrency='auto'")
			}
			n, isInt := intArg(v)
			if !isInt || n < 1 {
				return st, nil, bad("max_concurrency must be an int >= 1 or None, got %s", pyRepr(v))
			}
			st.MaxConcurrency = int(n)
		}
		if v, ok := r.Get("timeout_s"); ok {
			s, isNum := numberArg(v)
			if !isNum || s <= 0 || s*float64(time.Second) > math.MaxInt64 {
				return st, nil, bad("timeout must be a number of seconds > 0 or None, got %s", pyRepr(v))
			}
			st.Timeout = time.Duration(s * float64(time.Second))
		}
		switch v, _ := r.Get("output_order"); v {
		case nil, "completion":
			st.Order = pipeline.OrderCompletion
		case "input":
			st.Order = pipeline.OrderInput
		default:
			return st, nil, bad("output_order must be 'completion' or 'input', got %s", pyRepr(v))
		}
		// Given (not None), the stage's limit replaces the pipeline's for
		// it, as SPDL's pipe(max_failures=) does.
		if st.MaxFailures, st.MaxFailureRate, st.OwnLimit, err = maxFailures(r); err != nil {
			return st, nil, bad("%w", err)
		}
		op, _ = r.Get("op")
		if m, ok := op.(map[string]any); ok && st.AutoConcurrency && m["kind"] == "native" {
			// A native op starts at its share of cpu_budget (the engine's
			// default); a Python callable at one thread, since on a GIL
			// build more threads rarely help it.
			st.Concurrency = 0
		}
	case "aggregate":
		st.Kind = pipeline.KindAggregate
		v, _ := r.Get("num_items")
		n, isInt := intArg(v)
		if !isInt || n < 1 {
			return st, nil, bad("num_items must be an int >= 1, got %s", pyRepr(v))
		}
		st.Size = int(n)
		if v, ok := r.Get("drop_last"); ok {
			if st.DropLast, ok = v.(bool); !ok {
				return st, nil, bad("drop_last must be True or False, got %s", pyRepr(v))
			}
		}
	case "disaggregate":
		st.Kind = pipeline.KindDisaggregate
	}
	if err := r.Done(); err != nil {
		return st, nil, bad("%w", err)
	}
	return st, op, nil
}

// readSettings reads and checks the pipeline's settings into cfg; the
// caller reports unknown options (r.Done). Errors are in the words of the
// Python builder's add_sink and build.
func readSettings(r *options.Reader, cfg *pipeline.Config) error {
	cfg.BufferSize = 3
	if v, ok := r.Get("buffer_size"); ok {
		n, isInt := intArg(v)
		if !isInt || n < 1 || n > math.MaxInt32 {
			return fmt.Errorf("add_sink: buffer_size must be an int >= 1, got %s", pyRepr(v))
		}
		cfg.BufferSize = int(n)
	}
	// Unset (None), each means the engine's default.
	for _, s := range []struct {
		name string
		dst  *int
	}{{"num_threads", &cfg.NumThreads}, {"cpu_budget", &cfg.CPUBudget}, {"queue_size", &cfg.QueueSize}} {
		v, ok := r.Get(s.name)
		if !ok {
			continue
		}
		n, isInt := intArg(v)
		if !isInt || n < 1 || n > math.MaxInt32 {
			return fmt.Errorf("build: %s must be an int >= 1 or None, got %s", s.name, pyRepr(v))
		}
		*s.dst = int(n)
	}
	var err error
	if cfg.MaxFailures, cfg.MaxFailureRate, _, err = maxFailures(r); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	// A host's calls may never return (a Python stage in time.sleep):
	// stop waits this long for them, then abandons them.
	cfg.StopGrace = defaultStopGrace
	return nil
}

// defaultStopGrace is how long a stop waits for calls in flight.
const defaultStopGrace = 2 * time.Second

// maxFailures reads max_failures as SPDL takes it: None (not set), an int
// (a count; any negative one means no limit) or a fractions.Fraction in
// (0, 1] (a rate), which Python sends as {"fraction": [num, den]}. Unset,
// it is -1; set reports whether it was given.
func maxFailures(r *options.Reader) (count int, rate pipeline.Rate, set bool, err error) {
	v, ok := r.Get("max_failures")
	if !ok {
		return -1, rate, false, nil
	}
	if n, isInt := intArg(v); isInt {
		switch {
		case n < 0:
			return -1, rate, true, nil
		case n <= math.MaxInt32:
			return int(n), rate, true, nil
		}
	}
	shown := pyRepr(v)
	if m, isMap := options.AsMap(v); isMap {
		shown = "a dict"
		if f, isSeq := options.AsSeq(m["fraction"]); isSeq && len(f) == 2 {
			num, ok1 := intArg(f[0])
			den, ok2 := intArg(f[1])
			if ok1 && ok2 {
				shown = fmt.Sprintf("Fraction(%d, %d)", num, den)
				if rate = (pipeline.Rate{Num: num, Den: den}); num > 0 && den > 0 && num <= den {
					return -1, rate, true, nil
				}
			}
		}
	}
	return 0, pipeline.Rate{}, false, fmt.Errorf("max_failures must be an int or a fractions.Fraction in (0, 1], got %s", shown)
}

// intArg reads an integer as JSON writes a Python int (not 2.0, not True).
func intArg(v any) (int64, bool) {
	switch x := v.(type) {
	case json.Number:
		n, err := strconv.ParseInt(string(x), 10, 64)
		return n, err == nil
	case int64:
		return x, true
	case int:
		return int64(x), true
	}
	return 0, false
}

// numberArg reads a finite number (not True).
func numberArg(v any) (float64, bool) {
	if _, ok := v.(bool); ok {
		return 0, false
	}
	return options.AsFloat(v)
}

// pyRepr shows a value as Python's repr would: None, True, 'a str'.
func pyRepr(v any) string {
	if s, ok := v.(string); ok && len(s) <= 80 && !strings.Contains(s, "'") && strconv.Quote(s) == `"`+s+`"` {
		return "'" + s + "'"
	}
	return value.Describe(v)
}

func buildOp(v any) (pipeline.Op, error) {
	if v == nil {
		return nil, fmt.Errorf("pipe stage has no op")
	}
	m, ok := options.AsMap(v)
	if !ok {
		return nil, fmt.Errorf("op must be a dict, not %s", value.Describe(v))
	}
	r := options.New(m)
	kind, err := r.String("kind", "")
	if err != nil {
		return nil, fmt.Errorf("op: %w", err)
	}
	switch kind {
	case "native":
		name, err := r.String("name", "")
		if err != nil {
			return nil, fmt.Errorf("op: %w", err)
		}
		var opts map[string]any
		if v, ok := r.Get("options"); ok {
			if opts, ok = options.AsMap(v); !ok {
				return nil, fmt.Errorf("op %s: options must be a dict, not %s", name, value.Describe(v))
			}
		}
		if err := r.Done(); err != nil {
			return nil, fmt.Errorf("op %s: %w", name, err)
		}
		return ops.New(name, opts)
	case "python":
		id, err := r.Uint64("id", 0)
		if err != nil {
			return nil, fmt.Errorf("op: %w", err)
		}
		// io_bound: the op only waits (a coroutine on an event loop, a
		// call handed to an executor), so it takes no num_threads token.
		ioBound, err := r.Bool("io_bound", false)
		if err != nil {
			return nil, fmt.Errorf("python op: %w", err)
		}
		// flush: the op is an aggregator whose flush the host runs when the
		// stage's input ends (pipeline.Flusher).
		flush, err := r.Bool("flush", false)
		if err != nil {
			return nil, fmt.Errorf("python op: %w", err)
		}
		if err := r.Done(); err != nil {
			return nil, fmt.Errorf("python op: %w", err)
		}
		if op := (&pyOp{id: id, ioBound: ioBound}); flush {
			return &pyFlushOp{op}, nil
		} else {
			return op, nil
		}
	default:
		return nil, fmt.Errorf("unknown op kind %q (want \"native\" or \"python\")", kind)
	}
}

// decodeJSON decodes raw into v, keeping numbers in untyped fields as
// json.Number, so integers stay exact.
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
