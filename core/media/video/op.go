package video

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

func init() {
	ops.Register("decode_video", newDecodeVideo)
}

// decodeVideo is the decode_video op: encoded video ([]byte) or a file
// path (str) in, a uint8 tensor (frames, height, width, channels) out.
//
// Options (each may be omitted or None; see Options for the details):
//
//	indices       list[int]  these frames, in this order (repeats allowed)
//	fps           float      sample the span at this rate
//	num_frames    int        this many frames evenly spaced over the span
//	              (at most one of indices, fps, num_frames; none: every frame)
//	start         float      seconds; the span starts here (default 0)
//	duration      float      seconds; the span's length (default to the end)
//	mode          str        "rgb" (default), "bgr" or "gray" (1 channel)
//	size          [h, w]     resize to exactly this
//	short_side    int        resize so the shorter side is this, keeping aspect
//	interpolation str        "bilinear" (default), "area", "bicubic", "nearest"
//	apply_rotation bool      turn frames as the display matrix says (default false)
//	apply_sar     bool       stretch the width by the sample aspect ratio (default false)
//	threads       int        decoder threads (default 1; 0: FFmpeg chooses)
//	max_frames    int        most frames returned (default 4096)
//	max_pixels    int        most width*height per frame (default 50_000_000)
//	max_output_bytes int     most bytes in the output tensor (default 2 GiB)
//	key           str        the dict field to decode (default "video")
//	output_key    str        where to put the tensor (default key)
type decodeVideo struct {
	field ops.Field
	opts  Options

	// Counters for OpStats: videos decoded, the frames the codec decoded
	// for them, and the frames they hold (where the container says).
	clips, decoded, frames atomic.Int64
}

// OpStats reports how much of the videos was decoded
// (pipeline.OpStatsReporter): decoded_frames out of video_frames, the
// frames of the videos that were decoded (counted where the container
// gives a count).
func (op *decodeVideo) OpStats() map[string]int64 {
	return map[string]int64{"videos": op.clips.Load(), "decoded_frames": op.decoded.Load(), "video_frames": op.frames.Load()}
}

var knownOptions = []string{
	"indices", "fps", "num_frames", "start", "duration", "mode", "size", "short_side",
	"interpolation", "apply_rotation", "apply_sar", "threads", "max_frames", "max_pixels", "max_output_bytes", "key", "output_key",
}

func newDecodeVideo(m map[string]any) (ops.Op, error) {
	field, err := ops.FieldFromOptions(m, "video", "")
	if err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(knownOptions, k) {
			return nil, fmt.Errorf("unknown option %q; known options: %s", k, strings.Join(knownOptions, ", "))
		}
	}
	o, err := parseOptions(m)
	if err != nil {
		return nil, err
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &decodeVideo{field: field, opts: o}, nil
}

func parseOptions(m map[string]any) (o Options, err error) {
	o.Threads = 1
	if v, ok := m["indices"]; ok && v != nil {
		xs, ok := seq(v)
		if !ok {
			return o, fmt.Errorf("option \"indices\" must be a list of ints, not %s", value.Describe(v))
		}
		o.Indices = make([]int64, len(xs))
		for i, x := range xs {
			n, ok := options.AsInt(x)
			if !ok {
				return o, fmt.Errorf("option \"indices\" must be a list of ints; item %d is %s", i, value.Describe(x))
			}
			o.Indices[i] = n
		}
	}
	if v, ok := m["size"]; ok && v != nil {
		xs, ok := seq(v)
		if !ok || len(xs) != 2 {
			return o, fmt.Errorf("option \"size\" must be [height, width], not %s", value.Describe(v))
		}
		h, okh := options.AsInt(xs[0])
		w, okw := options.AsInt(xs[1])
		if !okh || !okw || h < 1 || w < 1 || h > math.MaxInt32 || w > math.MaxInt32 {
			return o, fmt.Errorf("option \"size\" must be [height, width] with ints >= 1, not %s", value.Describe(v))
		}
		o.Height, o.Width = int(h), int(w)
	}
	ints := []struct {
		name string
		dst  *int
		min  int64
	}{{"num_frames", &o.NumFrames, 1}, {"short_side", &o.ShortSide, 1}, {"threads", &o.Threads, 0}, {"max_frames", &o.MaxFrames, 1}}
	for _, x := range ints {
		v, ok := m[x.name]
		if !ok || v == nil {
			continue
		}
		n, ok := options.AsInt(v)
		if !ok || n < x.min || n > math.MaxInt32 {
			return o, fmt.Errorf("option %q must be an int >= %d, not %s", x.name, x.min, value.Describe(v))
		}
		*x.dst = int(n)
	}
	for _, x := range []struct {
		name string
		dst  *int64
	}{{"max_pixels", &o.MaxPixels}, {"max_output_bytes", &o.MaxOutputBytes}} {
		v, ok := m[x.name]
		if !ok || v == nil {
			continue
		}
		n, ok := options.AsInt(v)
		if !ok || n < 1 {
			return o, fmt.Errorf("option %q must be an int >= 1, not %s", x.name, value.Describe(v))
		}
		*x.dst = n
	}
	floats := []struct {
		name string
		dst  *float64
	}{{"fps", &o.FPS}, {"start", &o.Start}, {"duration", &o.Duration}}
	for _, x := range floats {
		v, ok := m[x.name]
		if !ok || v == nil {
			continue
		}
		f, ok := options.AsFloat(v)
		if !ok {
			return o, fmt.Errorf("option %q must be a number, not %s", x.name, value.Describe(v))
		}
		if x.name != "start" && f <= 0 {
			return o, fmt.Errorf("option %q must be > 0, not %v (omit it for the default)", x.name, f)
		}
		*x.dst = f
	}
	for _, x := range []struct {
		name string
		dst  *bool
	}{{"apply_rotation", &o.ApplyRotation}, {"apply_sar", &o.ApplySAR}} {
		v, ok := m[x.name]
		if !ok || v == nil {
			continue
		}
		b, ok := v.(bool)
		if !ok {
			return o, fmt.Errorf("option %q must be a bool, not %s", x.name, value.Describe(v))
		}
		*x.dst = b
	}
	strs := []struct {
		name string
		dst  *string
	}{{"mode", (*string)(&o.Mode)}, {"interpolation", &o.Interpolation}}
	for _, x := range strs {
		v, ok := m[x.name]
		if !ok || v == nil {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return o, fmt.Errorf("option %q must be a str, not %s", x.name, value.Describe(v))
		}
		*x.dst = s
	}
	return o, nil
}

// seq reads a list option; Go callers may also pass []int64 or []int.
func seq(v any) ([]any, bool) {
	if xs, ok := options.AsSeq(v); ok {
		return xs, true
	}
	switch x := v.(type) {
	case []int64:
		out := make([]any, len(x))
		for i, n := range x {
			out[i] = n
		}
		return out, true
	case []int:
		out := make([]any, len(x))
		for i, n := range x {
			out[i] = n
		}
		return out, true
	}
	return nil, false
}

func (op *decodeVideo) Process(ctx context.Context, item any) (any, error) {
	return av.DecodeField(ctx, op.field, item, "decode_video", "video", func(ctx context.Context, src av.Source) (*tensor.Tensor, error) {
		t, st, err := decodeStats(ctx, src, op.opts)
		if err == nil && st.frames > 0 {
			op.clips.Add(1)
			op.decoded.Add(st.decoded)
			op.frames.Add(st.frames)
		}
		return t, err
	})
}
