package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/value"
	"github.com/spdl-go/spdl-go/core/wire"
)

// The specs below are shaped as python/spdl_go builds them (sources.py,
// ops.py, builder.py).

const sampling = `"sampling": {"shuffle": true, "seed": 18446744073709551615, "drop_last": false, "rank": 0, "world_size": 1, "epoch": 0}`

const storageGroup = `"storage": {"timeout_s": 5.0, "retries": 2, "s3": {"region": "us-east-1"}}`

// testData writes a folder of two classes, two tar shards and an Arrow
// file, and returns their root.
func testData(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range []string{"img/cat/a.jpg", "img/cat/b.jpg", "img/dog/c.jpg"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for s := range 2 {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for i := range 3 {
			for _, ext := range []string{"jpg", "cls"} {
				body := []byte(fmt.Sprint(i))
				if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("%02d%02d.%s", s, i, ext), Mode: 0o644, Size: int64(len(body))}); err != nil {
					t.Fatal(err)
				}
				tw.Write(body)
			}
		}
		tw.Close()
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("shard-%d.tar", s)), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	schema := arrow.NewSchema([]arrow.Field{{Name: "label", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2, 3, 4}, nil)
	rec := b.NewRecordBatch()
	defer rec.Release()
	f, err := os.Create(filepath.Join(root, "part.arrow"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := ipc.NewFileWriter(f, ipc.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return root
}

// run builds spec, runs one epoch and returns how many items came out.
func run(t *testing.T, spec string) int {
	t.Helper()
	cfg, err := buildConfig([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		v, err := p.Next(context.Background(), 10*time.Second)
		if errors.Is(err, pipeline.ErrEndOfData) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		value.Release(v)
		n++
	}
}

func itemsWire(t *testing.T, items value.List) string {
	t.Helper()
	b, err := wire.Encode(nil, items)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func TestEverySourceKindBuildsFromItsSpec(t *testing.T) {
	root := testData(t)
	listing := func(kind, sub string) string {
		return fmt.Sprintf(`{"kind": %q, "root": %q, "extensions": [".jpg"], "recursive": true, %s}`, kind, filepath.Join(root, sub), storageGroup)
	}
	tests := []struct {
		name, source string
		want         int
	}{
		{"range", `{"kind": "range", "start": 0, "stop": 10, "step": 3}`, 4},
		{"sampler size", `{"kind": "sampler", "n": 7, "with_index": false, ` + sampling + `}`, 7},
		{"sampler items", `{"kind": "sampler", "n": 3, "with_index": true, "items_wire": "` + itemsWire(t, value.List{"a", int64(1), value.Tuple{"b", 2.5}}) + `", ` + sampling + `}`, 3},
		{"sampler resumed", `{"kind": "sampler", "n": 7, ` + sampling + `, "resume": {"epoch": 0, "prefix": 3}}`, 4},
		{"files", `{"kind": "sampler", "with_index": false, ` + sampling + `, "listing": ` + listing("files", "img") + `}`, 3},
		{"image_folder", `{"kind": "sampler", "n": 3, ` + sampling + `, "listing": ` + listing("image_folder", "img") + `}`, 3},
		{"webdataset", `{"kind": "webdataset", "urls": ["` + root + `/shard-{0..1}.tar"], "required": ["jpg", "cls"], "decode": {"cls": "int"},
			"shuffle_buffer": 4, ` + storageGroup + `, "with_index": true, "prefetch_shards": 0, ` + sampling + `}`, 6},
		{"webdataset glob resumed", `{"kind": "webdataset", "urls": ["` + root + `/shard-*.tar"], ` + sampling + `,
			"stream_resume": {"epoch": 0, "consumed": {"0": [[0, 2]]}, "sizes": {}}}`, 4},
		{"table", `{"kind": "table", "urls": ["` + root + `/*.arrow"], "columns": ["label"], "scalars": true, "shuffle_buffer": 0,
			"batch_rows": 4096, ` + storageGroup + `, "with_index": false, ` + sampling + `}`, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := `{"source": ` + tc.source + `, "stages": [], "buffer_size": 3, "num_threads": 2}`
			if got := run(t, spec); got != tc.want {
				t.Errorf("got %d items, want %d", got, tc.want)
			}
		})
	}
	t.Run("python", func(t *testing.T) {
		cfg, err := buildConfig([]byte(`{"source": {"kind": "python", "id": 18446744073709551615}, "stages": []}`))
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := cfg.Source.(*pySource); !ok || s.id != 1<<64-1 {
			t.Errorf("source %#v, want the python source of id 2**64-1", cfg.Source)
		}
	})
}

// opOptions are each registered op's options as ops.py sends them.
var opOptions = map[string]string{
	"identity":            `{}`,
	"to_tensor":           `{"dtype": "float32"}`,
	"collate":             `{"pad": false, "pad_value": 0, "numbers": "arrow"}`,
	"to_device":           `{"device": 0, "pinned": true, "keep_on_cpu": ["id"], "runtime": []}`,
	"read_file":           `{"key": "path", "output_key": "data", "timeout_s": 3.5, "retries": 0, "s3": {"endpoint": "http://localhost:9000", "virtual_host": false, "profile": "train", "anonymous": false}, "cache_memory_bytes": 1024}`,
	"decode_image":        `{"key": "jpg", "output_key": null, "mode": "rgba", "dtype": "uint8", "size": [224, 224], "short_side": null, "interpolation": "bilinear"}`,
	"decode_audio":        `{"key": null, "output_key": null, "sample_rate": 16000, "num_channels": 1, "lowpass_filter_width": 6, "start": 0.5, "duration": 2, "num_samples": null}`,
	"decode_video":        `{"key": null, "output_key": null, "indices": null, "fps": null, "num_frames": 8, "start": 1, "duration": null, "mode": null, "size": [112, 112], "short_side": null, "interpolation": null, "apply_rotation": true, "apply_sar": false, "threads": 1, "max_frames": null}`,
	"resize":              `{"key": null, "output_key": null, "size": [32, 48], "short_side": null, "interpolation": "nearest"}`,
	"center_crop":         `{"key": null, "output_key": null, "size": 16}`,
	"random_resized_crop": `{"key": null, "output_key": null, "size": [32, 32], "scale": [0.08, 1.0], "ratio": [0.75, 1.3333], "interpolation": null, "seed": 18446744073709551615, "rng_key": null}`,
	"hflip":               `{"key": null, "output_key": null}`,
	"random_hflip":        `{"key": null, "output_key": null, "p": 0.5, "seed": 7, "rng_key": "__key__"}`,
	"normalize":           `{"key": null, "output_key": null, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "layout": null}`,
}

func TestEveryRegisteredOpBuildsFromItsSpec(t *testing.T) {
	for _, name := range ops.Names() {
		t.Run(name, func(t *testing.T) {
			opts, ok := opOptions[name]
			if !ok {
				t.Fatalf("op %q has no spec in this test; add what ops.py sends", name)
			}
			spec := `{"source": {"kind": "range", "start": 0, "stop": 1, "step": 1}, "stages": [{"kind": "pipe", "name": "s",
				"concurrency": 2, "output_order": "input", "max_concurrency": null, "timeout_s": null, "max_failures": -1,
				"op": {"kind": "native", "name": "` + name + `", "options": ` + opts + `}}]}`
			_, err := buildConfig([]byte(spec))
			if name == "to_device" && err != nil && strings.Contains(strings.ToLower(err.Error()), "cuda") {
				t.Skipf("no CUDA here: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestBadSpecsSayWhatIsWrong(t *testing.T) {
	rangeSrc := `{"kind": "range", "start": 0, "stop": 3, "step": 1}`
	pipe := func(fields string) string { return `{"source": ` + rangeSrc + `, "stages": [` + fields + `]}` }
	tests := []struct{ name, spec, want string }{
		{"not JSON", `{"source": `, "pipeline spec is not valid JSON: unexpected EOF"},
		{"no source", `{"stages": []}`, "pipeline spec: no source (add_source was not called)"},
		{"source without kind", `{"source": {"start": 1}}`, "pipeline spec: the source has no kind (a str)"},
		{"unknown source kind", `{"source": {"kind": "csv"}}`, `unknown source kind "csv"; known kinds: python, range, sampler, table, test_countdown, webdataset`},
		{"unknown source option", `{"source": {"kind": "range", "stop": 3, "stpe": 2}}`, `range source: unknown option "stpe"; known options: start, step, stop`},
		{"unknown sampling option", `{"source": {"kind": "sampler", "n": 3, "sampling": {"sede": 1}}}`,
			`sampler source: unknown option "sede" in sampling; known options: drop_last, epoch, rank, seed, shuffle, world_size`},
		{"rank out of range", `{"source": {"kind": "sampler", "n": 3, "sampling": {"rank": 2, "world_size": 2}}}`,
			"sampler source: sampling: rank must be in [0, world_size) with world_size >= 1, got rank=2, world_size=2"},
		{"negative seed", `{"source": {"kind": "sampler", "n": 3, "sampling": {"seed": -1}}}`, "sampler source: sampling: seed must be in [0, 2**64), got -1"},
		{"seed too large", `{"source": {"kind": "table", "urls": [], "sampling": {"seed": 18446744073709551616}}}`,
			"table source: sampling: seed must be in [0, 2**64), got 18446744073709551616"},
		{"negative epoch", `{"source": {"kind": "webdataset", "urls": [], "sampling": {"epoch": -1}}}`, "webdataset source: sampling: epoch must be >= 0, got -1"},
		{"shuffle not a bool", `{"source": {"kind": "sampler", "n": 3, "sampling": {"shuffle": 1}}}`, `sampler source: option "sampling.shuffle" must be True or False, not 1`},
		{"bad timeout", `{"source": {"kind": "webdataset", "urls": [], "storage": {"timeout_s": -1}}}`, "webdataset source: option timeout_s: want seconds > 0, got -1"},
		{"bad retries", `{"source": {"kind": "table", "urls": [], "storage": {"retries": -2}}}`, "table source: option retries: want >= 0, got -2"},
		{"unknown s3 setting", `{"source": {"kind": "webdataset", "urls": [], "storage": {"s3": {"bucket": "b"}}}}`,
			`webdataset source: unknown option "bucket" in storage.s3; known options: access_key, anonymous, endpoint, profile, region, secret_key, session_token, virtual_host`},
		{"unknown storage option", `{"source": {"kind": "table", "urls": [], "storage": {"timeout": 1}}}`,
			`table source: unknown option "timeout" in storage; known options: azure, ca_file, gcs, retries, s3, timeout_s`},
		{"prefetch_shards", `{"source": {"kind": "webdataset", "urls": [], "prefetch_shards": -1}}`, "webdataset source: prefetch_shards must be an int >= 0, got -1"},
		{"listing kind", `{"source": {"kind": "sampler", "listing": {"kind": "csv"}}}`, `sampler source: listing: unknown kind "csv" (want "files" or "image_folder")`},
		{"items and listing", `{"source": {"kind": "sampler", "items_wire": "bA==", "listing": {"kind": "files", "root": "."}}}`, "sampler source: give items or a listing, not both"},
		{"python id", `{"source": {"kind": "python", "id": "x"}}`, `python source: option "id" must be an int in [0, 2**64), not "x"`},
		{"stage kind", pipe(`{"kind": "handoff"}`), `stage 0: unknown kind "handoff" (want "pipe", "aggregate" or "disaggregate")`},
		{"stage order", pipe(`{"kind": "pipe", "name": "dec", "output_order": "random", "op": {"kind": "native", "name": "identity"}}`),
			`stage 0 (dec): pipe: output_order must be 'completion' or 'input', got 'random'`},
		{"stage timeout", pipe(`{"kind": "aggregate", "num_items": 2}, {"kind": "pipe", "name": "slow", "timeout_s": -1, "op": {"kind": "python", "id": 1}}`),
			"stage 1 (slow): pipe: timeout must be a number of seconds > 0 or None, got -1"},
		{"stage concurrency", pipe(`{"kind": "pipe", "name": "p", "concurrency": 0, "op": {"kind": "python", "id": 1}}`),
			"stage 0 (p): pipe: concurrency must be an int >= 1 or 'auto', got 0"},
		{"stage num_items", pipe(`{"kind": "aggregate", "num_items": 0}`), "stage 0: aggregate: num_items must be an int >= 1, got 0"},
		{"stage option", pipe(`{"kind": "disaggregate", "name": "d", "num_items": 2}`), `stage 0 (d): disaggregate: unknown option "num_items"; known options: kind, name`},
		{"stage not a dict", pipe(`3`), "stage 0: must be a dict, not 3"},
		{"stages not a list", `{"source": ` + rangeSrc + `, "stages": 3}`, "pipeline spec: stages must be a list, not 3"},
		{"buffer_size", `{"source": ` + rangeSrc + `, "buffer_size": 0}`, "add_sink: buffer_size must be an int >= 1, got 0"},
		{"num_threads", `{"source": ` + rangeSrc + `, "num_threads": "4"}`, "build: num_threads must be an int >= 1 or None, got '4'"},
		{"pipeline max_failures", `{"source": ` + rangeSrc + `, "max_failures": 0.5}`, "build: max_failures must be an int or a fractions.Fraction in (0, 1], got 0.5"},
		{"unknown setting", `{"source": ` + rangeSrc + `, "buffer": 3}`,
			`pipeline spec: unknown option "buffer"; known options: buffer_size, cpu_budget, max_failures, num_threads, queue_size, source, stages`},
		{"missing op", pipe(`{"kind": "pipe", "name": "p"}`), "stage 0 (p): pipe stage has no op"},
		{"op kind", pipe(`{"kind": "pipe", "name": "p", "op": {"kind": "lua"}}`), `stage 0 (p): unknown op kind "lua" (want "native" or "python")`},
		{"unknown op", pipe(`{"kind": "pipe", "name": "p", "op": {"kind": "native", "name": "blur"}}`), `stage 0 (p): ops: unknown op "blur"; known ops: ` + strings.Join(ops.Names(), ", ")},
		{"unknown op option", pipe(`{"kind": "pipe", "name": "p", "op": {"kind": "native", "name": "collate", "options": {"padd": true}}}`),
			`stage 0 (p): ops: collate: unknown option "padd"; known options: numbers, pad, pad_value`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := buildConfig([]byte(tc.spec))
			if err == nil {
				t.Fatalf("no error; want %q", tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("error\n got %q\nwant %q", err, tc.want)
			}
		})
	}
}

// The early check (spdl_spec_check) reads each part with the functions
// the build uses, so both refuse the same arguments with the same words.
func TestSpecCheckNamesTheArgument(t *testing.T) {
	tests := []struct{ name, part, spec, want string }{
		{"pipe", "stage", `{"kind": "pipe", "name": "p", "concurrency": 4, "max_concurrency": null, "timeout_s": 1.5,
			"output_order": "input", "max_failures": 3, "op": {"kind": "python", "id": null}}`, ""},
		{"auto", "stage", `{"kind": "pipe", "concurrency": "auto", "max_concurrency": 3}`, ""},
		{"aggregate", "stage", `{"kind": "aggregate", "num_items": 2, "drop_last": true}`, ""},
		{"disaggregate", "stage", `{"kind": "disaggregate"}`, ""},
		{"concurrency 0", "stage", `{"kind": "pipe", "concurrency": 0}`, "pipe: concurrency must be an int >= 1 or 'auto', got 0"},
		{"concurrency str", "stage", `{"kind": "pipe", "concurrency": "fast"}`, "pipe: concurrency must be an int >= 1 or 'auto', got 'fast'"},
		{"concurrency float", "stage", `{"kind": "pipe", "concurrency": 2.0}`, "pipe: concurrency must be an int >= 1 or 'auto', got 2.0"},
		{"concurrency bool", "stage", `{"kind": "pipe", "concurrency": true}`, "pipe: concurrency must be an int >= 1 or 'auto', got True"},
		{"max_concurrency without auto", "stage", `{"kind": "pipe", "concurrency": 2, "max_concurrency": 4}`,
			"pipe: max_concurrency only applies with concurrency='auto'"},
		{"max_concurrency 0", "stage", `{"kind": "pipe", "concurrency": "auto", "max_concurrency": 0}`,
			"pipe: max_concurrency must be an int >= 1 or None, got 0"},
		{"output_order", "stage", `{"kind": "pipe", "output_order": "random"}`, "pipe: output_order must be 'completion' or 'input', got 'random'"},
		{"max_failures negative", "stage", `{"kind": "pipe", "max_failures": -2}`, ""}, // any negative int: no limit, as in SPDL
		{"max_failures fraction", "stage", `{"kind": "pipe", "max_failures": {"fraction": [1, 10]}}`, ""},
		{"max_failures fraction one", "stage", `{"kind": "pipe", "max_failures": {"fraction": [1, 1]}}`, ""},
		{"max_failures fraction over", "stage", `{"kind": "pipe", "max_failures": {"fraction": [3, 2]}}`,
			"pipe: max_failures must be an int or a fractions.Fraction in (0, 1], got Fraction(3, 2)"},
		{"max_failures fraction zero", "stage", `{"kind": "pipe", "max_failures": {"fraction": [0, 1]}}`,
			"pipe: max_failures must be an int or a fractions.Fraction in (0, 1], got Fraction(0, 1)"},
		{"max_failures fraction shape", "stage", `{"kind": "pipe", "max_failures": {"fraction": [1]}}`,
			"pipe: max_failures must be an int or a fractions.Fraction in (0, 1], got a dict"},
		{"max_failures bool", "stage", `{"kind": "pipe", "max_failures": true}`,
			"pipe: max_failures must be an int or a fractions.Fraction in (0, 1], got True"},
		{"max_failures float", "stage", `{"kind": "pipe", "max_failures": 0.1}`,
			"pipe: max_failures must be an int or a fractions.Fraction in (0, 1], got 0.1"},
		{"timeout 0", "stage", `{"kind": "pipe", "timeout_s": 0}`, "pipe: timeout must be a number of seconds > 0 or None, got 0"},
		{"timeout str", "stage", `{"kind": "pipe", "timeout_s": "1s"}`, "pipe: timeout must be a number of seconds > 0 or None, got '1s'"},
		{"timeout huge", "stage", `{"kind": "pipe", "timeout_s": 1e300}`, "pipe: timeout must be a number of seconds > 0 or None, got 1e300"},
		{"name", "stage", `{"kind": "pipe", "name": 5}`, "pipe: name must be a str or None, got 5"},
		{"num_items 0", "stage", `{"kind": "aggregate", "num_items": 0}`, "aggregate: num_items must be an int >= 1, got 0"},
		{"num_items missing", "stage", `{"kind": "aggregate"}`, "aggregate: num_items must be an int >= 1, got None"},
		{"drop_last", "stage", `{"kind": "aggregate", "num_items": 2, "drop_last": 1}`, "aggregate: drop_last must be True or False, got 1"},
		{"stage kind", "stage", `{"kind": "handoff"}`, `unknown kind "handoff" (want "pipe", "aggregate" or "disaggregate")`},
		{"settings", "pipeline", `{"buffer_size": 2, "max_failures": -1, "num_threads": null, "cpu_budget": 4, "queue_size": 1}`, ""},
		{"buffer_size", "pipeline", `{"buffer_size": 0}`, "add_sink: buffer_size must be an int >= 1, got 0"},
		{"num_threads", "pipeline", `{"num_threads": 0}`, "build: num_threads must be an int >= 1 or None, got 0"},
		{"cpu_budget", "pipeline", `{"cpu_budget": 0}`, "build: cpu_budget must be an int >= 1 or None, got 0"},
		{"queue_size", "pipeline", `{"queue_size": -1}`, "build: queue_size must be an int >= 1 or None, got -1"},
		{"build max_failures", "pipeline", `{"max_failures": "all"}`, "build: max_failures must be an int or a fractions.Fraction in (0, 1], got 'all'"},
		{"build max_failures fraction", "pipeline", `{"max_failures": {"fraction": [1, 20]}}`, ""},
		{"build max_failures fraction over", "pipeline", `{"max_failures": {"fraction": [2, 1]}}`,
			"build: max_failures must be an int or a fractions.Fraction in (0, 1], got Fraction(2, 1)"},
		{"unknown setting", "pipeline", `{"threads": 2}`,
			`pipeline spec: unknown option "threads"; known options: buffer_size, cpu_budget, max_failures, num_threads, queue_size`},
		{"sampling", "sampling", `{"shuffle": true, "seed": 18446744073709551615, "drop_last": false, "rank": 1, "world_size": 2, "epoch": 3}`, ""},
		{"rank", "sampling", `{"rank": 2, "world_size": 2}`, "sampling: rank must be in [0, world_size) with world_size >= 1, got rank=2, world_size=2"},
		{"shuffle", "sampling", `{"shuffle": 1}`, `option "sampling.shuffle" must be True or False, not 1`},
		{"unknown sampling option", "sampling", `{"sede": 1}`,
			`unknown option "sede" in sampling; known options: drop_last, epoch, rank, seed, shuffle, world_size`},
		{"not an object", "stage", `[1]`, "stage spec is not a valid JSON object: json: cannot unmarshal array into Go value of type map[string]interface {}"},
		{"unknown part", "source", `{}`, `spec check: unknown part "source" (want "stage", "pipeline" or "sampling")`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkSpec(tc.part, []byte(tc.spec))
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Fatalf("error\n got %q\nwant %q", got, tc.want)
			}
			// The build refuses the same stage, after the stage's place.
			if tc.part == "stage" && tc.want != "" && strings.HasPrefix(tc.spec, `{"kind": "`) && !strings.HasPrefix(tc.want, "unknown kind") {
				spec := `{"source": {"kind": "range", "stop": 1}, "stages": [` + tc.spec + `]}`
				if _, err := buildConfig([]byte(spec)); err == nil || !strings.HasSuffix(err.Error(), ": "+tc.want) {
					t.Errorf("build: %v; want the same error as the check", err)
				}
			}
		})
	}
}

// An auto stage of a Python callable starts at one thread; one of a
// native op at its share of the budget (Concurrency 0: the engine's default).
func TestAutoStageSpec(t *testing.T) {
	native, err := buildConfig([]byte(`{"source": {"kind": "range", "stop": 1}, "stages": [{"kind": "pipe", "concurrency": "auto",
		"op": {"kind": "native", "name": "identity", "options": {}}}], "cpu_budget": 4}`))
	if err != nil {
		t.Fatal(err)
	}
	if st := native.Stages[0]; !st.AutoConcurrency || st.Concurrency != 0 {
		t.Errorf("native auto stage %+v", st)
	}
	cfg, err := buildConfig([]byte(`{"source": {"kind": "range", "stop": 1}, "stages": [{"kind": "pipe", "concurrency": "auto",
		"max_concurrency": 3, "timeout_s": 0.25, "op": {"kind": "python", "id": 1}}], "num_threads": null, "cpu_budget": 4}`))
	if err != nil {
		t.Fatal(err)
	}
	st := cfg.Stages[0]
	if !st.AutoConcurrency || st.Concurrency != 1 || st.MaxConcurrency != 3 || st.Timeout != 250*time.Millisecond {
		t.Errorf("stage %+v", st)
	}
	if cfg.BufferSize != 3 || cfg.MaxFailures != -1 || cfg.NumThreads != 0 || cfg.CPUBudget != 4 || cfg.QueueSize != 0 {
		t.Errorf("settings %+v", cfg)
	}
}

// A stage's max_failures, when given, is its own limit (it replaces the
// pipeline's); a fraction is a rate, for a stage or for the pipeline.
func TestMaxFailuresRule(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		count      int
		rate       pipeline.Rate
		own        bool
	}{
		{"unset", `{"kind": "pipe"}`, -1, pipeline.Rate{}, false},
		{"none", `{"kind": "pipe", "max_failures": null}`, -1, pipeline.Rate{}, false},
		{"count", `{"kind": "pipe", "max_failures": 3}`, 3, pipeline.Rate{}, true},
		{"unlimited", `{"kind": "pipe", "max_failures": -1}`, -1, pipeline.Rate{}, true},
		{"rate", `{"kind": "pipe", "max_failures": {"fraction": [1, 10]}}`, -1, pipeline.Rate{Num: 1, Den: 10}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			if err := decodeJSON([]byte(tc.spec), &m); err != nil {
				t.Fatal(err)
			}
			st, _, err := readStage(m)
			if err != nil {
				t.Fatal(err)
			}
			if st.MaxFailures != tc.count || st.MaxFailureRate != tc.rate || st.OwnLimit != tc.own {
				t.Errorf("MaxFailures %d, MaxFailureRate %v, OwnLimit %v; want %d, %v, %v",
					st.MaxFailures, st.MaxFailureRate, st.OwnLimit, tc.count, tc.rate, tc.own)
			}
		})
	}
	cfg, err := buildConfig([]byte(`{"source": {"kind": "range", "stop": 1}, "max_failures": {"fraction": [1, 4]}}`))
	if err != nil || cfg.MaxFailureRate != (pipeline.Rate{Num: 1, Den: 4}) || cfg.MaxFailures != -1 {
		t.Errorf("pipeline rate: %+v, %v", cfg.MaxFailureRate, err)
	}
}
