package video_test

import (
	"context"
	"os/exec"
	"path/filepath"
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
	// Decoding only what the samples need: non-reference frames skipped
	// (counter.mp4 has B-frames), jumps over keyframes, replanning when
	// timestamps disagree.
	{NumFrames: 8, Height: 8, Width: 8},
	{Indices: []int64{1, 2, 13, 22, 23}, ApplyRotation: true},
	{FPS: 1.5, ApplySAR: true, ShortSide: 8},
	{Indices: []int64{23, 9, 9, 0}, Mode: video.Gray, ApplyRotation: true, ApplySAR: true},
}

// FuzzDecodeVideo feeds arbitrary bytes to Decode: it may fail, but must not
// crash, hang or leak a tensor.
func FuzzDecodeVideo(f *testing.F) {
	for i, name := range []string{"counter.mp4", "counter.webm", "counter-mpeg4.mkv"} {
		data := mustRead(f, "testdata/"+name)
		f.Add(data, uint8(i))
		f.Add(data, uint8(i+3))
		f.Add(data, uint8(i+128))
		for j := 6; j < len(fuzzOptions); j++ {
			f.Add(data, uint8(j))
		}
	}
	// A clip with a display matrix, when the ffmpeg CLI can make one.
	rot := filepath.Join(f.TempDir(), "rot.mp4")
	if exec.Command("ffmpeg", "-v", "error", "-y", "-i", "testdata/counter.mp4", "-c", "copy", "-metadata:s:v:0", "rotate=90", rot).Run() == nil {
		data := mustRead(f, rot)
		f.Add(data, uint8(7))
		f.Add(data, uint8(9))
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
