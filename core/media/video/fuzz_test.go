package video_test

import (
	"context"
	"testing"

	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/media/video"
	"github.com/spdl-go/spdl-go/core/tensor"
)

// fuzzOptions are the selections FuzzDecodeVideo picks from.
var fuzzOptions = []video.Options{
	{},
	{Indices: []int64{3, 0, 3, 7}},
	{NumFrames: 4, Height: 16, Width: 16},
	{FPS: 3, Start: 0.4, Mode: video.Gray},
	{Start: 1, Duration: 0.5, ShortSide: 8, Mode: video.BGR, Interpolation: "area"},
	{Indices: []int64{20}, Threads: 2},
}

// FuzzDecodeVideo feeds arbitrary bytes to Decode: it may fail, but must not
// crash, hang or leak a tensor.
func FuzzDecodeVideo(f *testing.F) {
	for i, name := range []string{"counter.mp4", "counter.webm", "counter-mpeg4.mkv"} {
		data := mustRead(f, "testdata/"+name)
		f.Add(data, uint8(i))
		f.Add(data, uint8(i+3))
		f.Add(data, uint8(i+128))
	}
	f.Fuzz(func(t *testing.T, data []byte, sel uint8) {
		o := fuzzOptions[int(sel)%len(fuzzOptions)]
		o.MaxPixels, o.MaxFrames = 1<<16, 64
		if sel >= 128 { // the output bound, cutting the chunks of "all frames" short
			o.MaxOutputBytes = 1 << 18
		}
		x, err := video.Decode(context.Background(), av.Source{Data: data, Name: "fuzz"}, o)
		if err == nil {
			s := x.Shape()
			if len(s) != 4 || s[0] < 1 || s[0] > 64 || s[1]*s[2] > 1<<16 || (s[3] != 1 && s[3] != 3) ||
				(o.MaxOutputBytes > 0 && int64(x.NBytes()) > o.MaxOutputBytes) {
				t.Errorf("shape %v", s)
			}
			x.Release()
		}
		if s := tensor.MemStats(); s.LiveTensors != 0 {
			t.Fatalf("tensor leak: %+v", s)
		}
	})
}
