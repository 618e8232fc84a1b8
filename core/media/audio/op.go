package audio

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

func init() {
	ops.Register("decode_audio", newDecodeAudio)
}

// decodeAudio is the decode_audio op: encoded audio ([]byte) or a file
// path (string) in, a float32 tensor (channels, samples) out.
//
// Options (each may be omitted or None):
//
//	sample_rate  int    resample to this rate; default the file's
//	num_channels int    remix to this many channels; default the file's
//	lowpass_filter_width int  the resampling filter's zero crossings on
//	                    each side (1-64); default libswresample's 16
//	start        float  seconds to skip; default 0
//	duration     float  seconds to keep from start; default to the end
//	num_samples  int    crop or zero-pad to exactly this many samples
//	max_samples  int    refuse outputs over this many samples, channels
//	                    times samples per channel (default 400_000_000)
//	key          str    the dict field to decode; default "audio"
//	output_key   str    where to put the tensor; default key
type decodeAudio struct {
	field ops.Field
	opts  Options
}

func newDecodeAudio(m map[string]any) (ops.Op, error) {
	field, err := ops.FieldFromOptions(m, "audio", "")
	if err != nil {
		return nil, err
	}
	var o Options
	known := []string{"sample_rate", "num_channels", "lowpass_filter_width", "start", "duration", "num_samples", "max_samples", "key", "output_key"}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(known, k) {
			return nil, fmt.Errorf("unknown option %q; known options: %s", k, strings.Join(known, ", "))
		}
	}
	if o.SampleRate, err = intOpt(m, "sample_rate", 1); err != nil {
		return nil, err
	}
	if o.NumChannels, err = intOpt(m, "num_channels", 1); err != nil {
		return nil, err
	}
	if o.LowpassFilterWidth, err = intOpt(m, "lowpass_filter_width", 1); err != nil {
		return nil, err
	}
	if o.NumSamples, err = intOpt(m, "num_samples", 1); err != nil {
		return nil, err
	}
	if v := m["max_samples"]; v != nil {
		n, ok := options.AsInt(v)
		if !ok || n < 1 {
			return nil, fmt.Errorf("option \"max_samples\" must be an int >= 1, not %s", value.Describe(v))
		}
		o.MaxSamples = n
	}
	if o.Start, err = secondsOpt(m, "start", false); err != nil {
		return nil, err
	}
	if o.Duration, err = secondsOpt(m, "duration", true); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &decodeAudio{field: field, opts: o}, nil
}

// intOpt reads an integer option >= min; absent or None is 0.
func intOpt(m map[string]any, name string, min int64) (int, error) {
	v := m[name]
	if v == nil {
		return 0, nil
	}
	n, ok := options.AsInt(v)
	if !ok {
		return 0, fmt.Errorf("option %q must be an int, not %s", name, value.Describe(v))
	}
	if n < min || n > math.MaxInt32 {
		return 0, fmt.Errorf("option %q must be an int >= %d, not %d", name, min, n)
	}
	return int(n), nil
}

// secondsOpt reads a number of seconds; absent or None is 0.
func secondsOpt(m map[string]any, name string, positive bool) (float64, error) {
	var s float64
	switch x := m[name].(type) {
	case nil:
		return 0, nil
	case int64:
		s = float64(x)
	case int:
		s = float64(x)
	case json.Number: // options decoded from JSON
		var err error
		if s, err = x.Float64(); err != nil {
			return 0, fmt.Errorf("option %q must be a number of seconds, not %s", name, x)
		}
	case float64:
		s = x
	default:
		return 0, fmt.Errorf("option %q must be a number of seconds, not %s", name, value.Describe(x))
	}
	switch {
	case math.IsNaN(s) || math.IsInf(s, 0) || s < 0:
		return 0, fmt.Errorf("option %q must be a number of seconds >= 0, not %v", name, s)
	case positive && s == 0:
		return 0, fmt.Errorf("option %q must be > 0 seconds (omit it to decode to the end)", name)
	}
	return s, nil
}

func (op *decodeAudio) Process(ctx context.Context, item any) (any, error) {
	return av.DecodeField(ctx, op.field, item, "decode_audio", "audio", func(ctx context.Context, src av.Source) (*tensor.Tensor, error) {
		return Decode(ctx, src, op.opts)
	})
}
