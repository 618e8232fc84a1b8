package video_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spdl-go/spdl-go/core/internal/memtest"
	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/media/video"
	"github.com/spdl-go/spdl-go/core/tensor"
)

// Outputs over max_output_bytes fail, naming the file and the limit,
// before the output (or a chunk of it past the limit) is allocated.
func TestMaxOutputBytes(t *testing.T) {
	noLeak(t)
	mp4 := h264Counter(t)            // 24 frames of 64x48 with a frame count
	raw := counterClip(t, codecs[5]) // the same as a raw stream: no count
	const frame = 64 * 48 * 3        // 9216 bytes
	cases := []struct {
		name string
		path string
		o    video.Options
		want string // "" when it decodes; else in the error after the name
	}{
		{"all frames at the limit", mp4, video.Options{MaxOutputBytes: 24 * frame}, ""},
		{"all frames one byte over", mp4, video.Options{MaxOutputBytes: 24*frame - 1}, "24 frames of 64x48x3 = 221184 bytes is over max_output_bytes (221183)"},
		{"all frames of a stream without a count", raw, video.Options{MaxOutputBytes: 10 * frame}, "11 frames of 64x48x3 = 101376 bytes is over max_output_bytes (92160)"},
		{"all frames of a stream without a count, within", raw, video.Options{MaxOutputBytes: 24 * frame}, ""},
		{"a span", mp4, video.Options{Start: 1, Duration: 1, MaxOutputBytes: 7 * frame}, "8 frames of 64x48x3"},
		{"num_frames gray", mp4, video.Options{NumFrames: 8, Mode: video.Gray, MaxOutputBytes: 8*64*48 - 1}, "8 frames of 64x48x1 = 24576 bytes"},
		{"num_frames gray within", mp4, video.Options{NumFrames: 8, Mode: video.Gray, MaxOutputBytes: 8 * 64 * 48}, ""},
		{"indices resized", mp4, video.Options{Indices: []int64{0, 1, 2}, Height: 100, Width: 100, MaxOutputBytes: 89999}, "3 frames of 100x100x3 = 90000 bytes is over max_output_bytes (89999)"},
		{"fps with short_side", mp4, video.Options{FPS: 2, ShortSide: 96, MaxOutputBytes: 6*96*128*3 - 1}, "6 frames of 128x96x3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := video.Decode(context.Background(), av.Source{Path: tc.path}, tc.o)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				out.Release()
				return
			}
			if err == nil {
				shape := out.Shape()
				out.Release()
				t.Fatalf("decoded %v", shape)
			}
			var ae *av.Error
			if !errors.As(err, &ae) || ae.Source != tc.path || !strings.Contains(err.Error(), "video output too large") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want an *av.Error naming %q saying %q", err, tc.path, tc.want)
			}
			t.Log(err)
		})
	}
}

// At the real default (2 GiB), 800 frames resized to 1000x1000 (2.4 GB)
// are refused before the tensor is allocated: peak RSS stays small.
func TestMaxOutputBytesDefaultAllocatesNothing(t *testing.T) {
	noLeak(t)
	clip := h264Counter(t)
	o := video.Options{Indices: make([]int64, 800), Height: 1000, Width: 1000}
	start := time.Now()
	var err error
	grew := memtest.PeakGrowth(t, func() {
		var out *tensor.Tensor
		if out, err = video.Decode(context.Background(), av.Source{Path: clip}, o); err == nil {
			shape := out.Shape()
			out.Release()
			t.Fatalf("decoded %v", shape)
		}
	})
	if !strings.Contains(err.Error(), clip) || !strings.Contains(err.Error(), "2400000000 bytes is over max_output_bytes ("+strconv.Itoa(video.DefaultMaxOutputBytes)+")") {
		t.Fatalf("err = %v", err)
	}
	if grew > 64<<20 {
		t.Fatalf("refusing took %v and %d MB of peak RSS", time.Since(start), grew>>20)
	}
	t.Logf("refused in %v, peak RSS +%d kB: %v", time.Since(start), grew>>10, err)
}
