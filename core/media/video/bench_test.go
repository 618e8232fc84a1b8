package video_test

import (
	"context"
	"os"
	"testing"

	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/media/video"
)

// BenchmarkDecodeVideo decodes a 10 s 320x240 H.264 clip (30 fps, x264's
// default GOP of 250 frames, B-frames) from memory, one thread per clip.
// "open" is the start-up cost (open, find stream info, decode frame 0);
// "8 frames 112x112" is the training use: 8 evenly spaced frames resized;
// "all frames" decodes and converts all 300 (cost per frame = ns/op / 300).
func BenchmarkDecodeVideo(b *testing.B) {
	path := makeClip(b, "bench-320x240-10s.mp4", "testsrc2=s=320x240:r=30:d=10", "libx264", "-pix_fmt", "yuv420p")
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		o    video.Options
	}{
		{"open", video.Options{Indices: []int64{0}}},
		{"8 frames 112x112", video.Options{NumFrames: 8, Height: 112, Width: 112}},
		{"8 frames 112x112 area", video.Options{NumFrames: 8, Height: 112, Width: 112, Interpolation: "area"}},
		{"all frames", video.Options{}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			tc.o.Threads = 1
			b.ReportAllocs()
			for b.Loop() {
				x, err := video.Decode(context.Background(), av.Source{Data: data}, tc.o)
				if err != nil {
					b.Fatal(err)
				}
				x.Release()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "clips/s")
		})
	}
}
