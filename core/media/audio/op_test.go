package audio_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/spdl-go/spdl-go/core/media/audio"
	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

func TestOptions(t *testing.T) {
	cases := []struct {
		name string
		opts map[string]any
		err  string // "" if valid
	}{
		{"none", nil, ""},
		{"all", map[string]any{"sample_rate": int64(16000), "num_channels": int64(2), "start": 1.5, "duration": int64(2), "num_samples": int64(32000), "key": "wav", "output_key": "audio"}, ""},
		{"None means default", map[string]any{"sample_rate": nil, "duration": nil}, ""},
		{"int as float", map[string]any{"sample_rate": 8000.0}, ""},
		{"unknown", map[string]any{"rate": int64(8000)}, `unknown option "rate"`},
		{"fractional rate", map[string]any{"sample_rate": 8000.5}, `"sample_rate" must be an int`},
		{"zero rate", map[string]any{"sample_rate": int64(0)}, `"sample_rate" must be an int >= 1`},
		{"huge rate", map[string]any{"sample_rate": int64(1 << 30)}, "sample_rate must be between"},
		{"string channels", map[string]any{"num_channels": "2"}, `"num_channels" must be an int`},
		{"65 channels", map[string]any{"num_channels": int64(65)}, "num_channels must be between 1 and 64"},
		{"negative start", map[string]any{"start": -1.0}, `"start" must be a number of seconds >= 0`},
		{"NaN start", map[string]any{"start": math.NaN()}, `"start" must be`},
		{"zero duration", map[string]any{"duration": 0.0}, `"duration" must be > 0`},
		{"bool duration", map[string]any{"duration": true}, `"duration" must be a number`},
		{"zero num_samples", map[string]any{"num_samples": int64(0)}, `"num_samples" must be an int >= 1`},
		{"zero filter width", map[string]any{"lowpass_filter_width": int64(0)}, `"lowpass_filter_width" must be an int >= 1`},
		{"huge filter width", map[string]any{"lowpass_filter_width": int64(65)}, `lowpass_filter_width must be between 1 and 64, not 65`},
		{"float filter width", map[string]any{"lowpass_filter_width": 6.5}, `"lowpass_filter_width" must be an int`},
		{"max_samples", map[string]any{"max_samples": int64(5_000_000_000)}, ""},
		{"zero max_samples", map[string]any{"max_samples": int64(0)}, `"max_samples" must be an int >= 1`},
		{"float max_samples", map[string]any{"max_samples": 1.5}, `"max_samples" must be an int >= 1`},
		{"bad key", map[string]any{"key": int64(1)}, `"key" must be a string`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ops.New("decode_audio", tc.opts)
			switch {
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

func TestOp(t *testing.T) {
	checkLeaks(t)
	b := wav(16000, sine(440, 16000, 16000, 0.5), sine(880, 16000, 16000, 0.5))
	path := filepath.Join(t.TempDir(), "tone.wav")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	dict := func(kv ...any) *value.Dict {
		d := value.NewDict(len(kv) / 2)
		for i := 0; i < len(kv); i += 2 {
			d.Set(kv[i].(string), kv[i+1])
		}
		return d
	}
	opts := map[string]any{"sample_rate": int64(8000), "num_channels": int64(1), "num_samples": int64(4000)}
	withKeys := map[string]any{"key": "path", "output_key": "wave", "duration": 0.25}
	cases := []struct {
		name  string
		opts  map[string]any
		in    any
		check func(out any) (*tensor.Tensor, string)
	}{
		{"bytes", opts, b, func(out any) (*tensor.Tensor, string) { t, _ := out.(*tensor.Tensor); return t, "" }},
		{"path", opts, path, func(out any) (*tensor.Tensor, string) { t, _ := out.(*tensor.Tensor); return t, "" }},
		{"tuple keeps label", opts, value.Tuple{b, int64(7)}, func(out any) (*tensor.Tensor, string) {
			tu := out.(value.Tuple)
			t, _ := tu[0].(*tensor.Tensor)
			return t, fmt.Sprint(tu[1])
		}},
		{"dict key and output_key", withKeys, dict("path", path, "label", int64(3)), func(out any) (*tensor.Tensor, string) {
			d := out.(*value.Dict)
			w, _ := d.Get("wave")
			p, _ := d.Get("path")
			t, _ := w.(*tensor.Tensor)
			return t, fmt.Sprint(d.Keys, p == path)
		}},
	}
	want := map[string]string{"bytes": "tensor(float32, [1 4000]) ", "path": "tensor(float32, [1 4000]) ",
		"tuple keeps label": "tensor(float32, [1 4000]) 7", "dict key and output_key": "tensor(float32, [2 4000]) [path label wave] true"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			op, err := ops.New("decode_audio", tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			out, err := op.Process(context.Background(), tc.in)
			if err != nil {
				t.Fatal(err)
			}
			defer value.Release(out)
			tt, rest := tc.check(out)
			if got := fmt.Sprint(tt, " ", rest); got != want[tc.name] {
				t.Fatalf("got %q, want %q", got, want[tc.name])
			}
		})
	}
	t.Run("errors name the input", func(t *testing.T) {
		op, _ := ops.New("decode_audio", nil)
		for in, msg := range map[any]string{int64(3): "expected encoded audio (bytes) or a file path (str), got 3", "nope.wav": `"nope.wav"`} {
			if _, err := op.Process(context.Background(), in); err == nil || !strings.Contains(err.Error(), msg) || !strings.HasPrefix(err.Error(), "decode_audio: ") {
				t.Errorf("Process(%v): err = %v, want %q", in, err, msg)
			}
		}
		// A failed item releases the rest of it.
		big, _ := tensor.New(tensor.Float32, 4)
		if _, err := op.Process(context.Background(), value.Tuple{[]byte("junk"), big}); err == nil {
			t.Error("decoded junk")
		}
	})
}
