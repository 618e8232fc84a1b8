package video_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/media/video"
	"github.com/spdl-go/spdl-go/core/tensor"
)

// fastClips have textured, moving content (so that a frame decoded from
// the wrong references differs) and the stream structures that decoding
// only what the samples need must get right.
var fastClips = []struct {
	name, file, graph, encoder string
	args                       []string
	cfr                        bool // frame k of a full decode is index k
	fewer                      bool // the fast path must decode fewer frames
}{
	{"h264 B-frames b-pyramid", "fast-bframes.mp4", "testsrc2=s=96x64:r=25:d=4,noise=alls=12:allf=t", "libx264",
		[]string{"-g", "12", "-bf", "3", "-x264-params", "b-pyramid=normal:scenecut=0"}, true, true},
	{"h264 open GOP", "fast-opengop.mp4", "testsrc2=s=96x64:r=25:d=4,noise=alls=12:allf=t", "libx264",
		[]string{"-x264-params", "open-gop=1:keyint=12:min-keyint=12:scenecut=0:bframes=3"}, true, false},
	{"h264 open GOP mkv", "fast-opengop.mkv", "testsrc2=s=96x64:r=25:d=4,noise=alls=12:allf=t", "libx264",
		[]string{"-x264-params", "open-gop=1:keyint=12:min-keyint=12:scenecut=0:bframes=3"}, true, false},
	{"h264 variable frame rate", "fast-vfr.mkv", "testsrc2=s=96x64:r=25:d=4,noise=alls=12:allf=t,select='not(eq(mod(n\\,7)\\,3))'", "libx264",
		[]string{"-fps_mode", "vfr", "-g", "10"}, false, false},
	{"h264 variable frame rate mp4", "fast-vfr.mp4", "testsrc2=s=96x64:r=25:d=4,noise=alls=12:allf=t,select='not(eq(mod(n\\,5)\\,1)+eq(mod(n\\,11)\\,4))'", "libx264",
		[]string{"-fps_mode", "vfr", "-g", "10"}, false, false},
	{"h264 long GOPs seek-heavy", "fast-seek.mp4", "testsrc2=s=96x64:r=25:d=24,noise=alls=12:allf=t", "libx264",
		[]string{"-g", "25", "-bf", "3"}, true, true},
	{"hevc open GOP", "fast-hevc.mp4", "testsrc2=s=96x64:r=25:d=4,noise=alls=12:allf=t", "libx265",
		[]string{"-x265-params", "log-level=error:keyint=12:min-keyint=12:scenecut=0:bframes=4", "-tag:v", "hvc1"}, true, false},
	{"mpeg4 B-frames", "fast-mpeg4.mp4", "testsrc2=s=96x64:r=25:d=4,noise=alls=12:allf=t", "mpeg4",
		[]string{"-bf", "2", "-g", "12", "-q:v", "4"}, true, false},
	{"vp9", "fast-vp9.webm", "testsrc2=s=96x64:r=25:d=4,noise=alls=12:allf=t", "libvpx-vp9",
		[]string{"-g", "12", "-deadline", "realtime", "-cpu-used", "8"}, true, false},
}

var fastSelections = []video.Options{
	{NumFrames: 8},
	{NumFrames: 8, Start: 1.1, Duration: 1.7},
	{NumFrames: 3},
	{NumFrames: 30},
	{FPS: 2},
	{FPS: 7.5, Start: 0.3},
	{Indices: []int64{0}},
	{Indices: []int64{1, 2, 3, 60}},
	{Indices: []int64{99, 0, 50, 13, 13, 26, 77}},
	{Indices: []int64{11, 12, 13, 23, 24, 25, 35, 36, 37}},
	{Indices: []int64{5, 95, 96, 97, 98}},
}

// seekSelections are for the 24 s clip: sparse samples, far apart.
var seekSelections = []video.Options{
	{NumFrames: 8},
	{NumFrames: 5, Start: 3.3, Duration: 17},
	{Indices: []int64{599, 5, 300, 301, 24, 25, 26, 27, 450}},
	{Indices: []int64{1, 100, 200, 300, 400, 500}},
	{FPS: 0.5},
}

// TestDecodeOnlyNeeded checks that decoding only what the samples need
// returns exactly the bytes a straight decode returns, and (for the clips
// marked cfr) the frames of a full decode at those indices.
func TestDecodeOnlyNeeded(t *testing.T) {
	for _, c := range fastClips {
		t.Run(c.name, func(t *testing.T) {
			path := makeClip(t, c.file, c.graph, c.encoder, append([]string{"-c:v", c.encoder, "-pix_fmt", "yuv420p"}, c.args...)...)
			noLeak(t)
			var all *tensor.Tensor
			if c.cfr {
				all = decode(t, av.Source{Path: path}, video.Options{MaxFrames: 1000})
			}
			sels := fastSelections
			if c.file == "fast-seek.mp4" {
				sels = seekSelections
			}
			var fast, straight int64
			for _, o := range sels {
				t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
					for _, src := range []av.Source{{Path: path}, {Data: mustRead(t, path), Name: path}} {
						x, n, err := video.DecodeCounting(context.Background(), src, o)
						y, m, err2 := video.DecodeCounting(context.Background(), src, video.Straight(o))
						if err != nil || err2 != nil {
							// An index past the end of a variable-rate clip.
							if err == nil || err2 == nil || err.Error() != err2.Error() {
								t.Fatalf("error %v; straight decode: %v", err, err2)
							}
							return
						}
						defer x.Release()
						defer y.Release()
						fast, straight = fast+n, straight+m
						if !slices.Equal(x.Shape(), y.Shape()) {
							t.Fatalf("shape %v, straight decode %v", x.Shape(), y.Shape())
						}
						if i := firstDiff(x, y); i >= 0 {
							t.Fatalf("frame %d differs from a straight decode's (decoded %d frames, straight %d)", i, n, m)
						}
						if all != nil && o.Indices != nil {
							per := x.NBytes() / int(x.Shape()[0])
							for i, k := range o.Indices {
								if !bytes.Equal(frameBytes(x, i, per), frameBytes(all, int(k), per)) {
									t.Fatalf("slot %d (frame %d) differs from frame %d of a full decode", i, k, k)
								}
							}
						}
					}
				})
			}
			t.Logf("decoded %d frames, a straight decode %d", fast, straight)
			if c.fewer && fast >= straight {
				t.Errorf("decoded %d frames, no fewer than a straight decode (%d)", fast, straight)
			}
		})
	}
}

func frameBytes(x *tensor.Tensor, i, per int) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(x.Data(), i*per)), per)
}

// firstDiff is the first frame where x and y differ, or -1.
func firstDiff(x, y *tensor.Tensor) int {
	per := x.NBytes() / int(x.Shape()[0])
	for i := range int(x.Shape()[0]) {
		if !bytes.Equal(frameBytes(x, i, per), frameBytes(y, i, per)) {
			return i
		}
	}
	return -1
}

// TestDecodeOnlyNeededCorrupt runs the fast path on truncated and damaged
// copies of a clip with B-frames: each fails with an error naming the
// input, or returns frames; nothing crashes or leaks.
func TestDecodeOnlyNeededCorrupt(t *testing.T) {
	c := fastClips[0]
	path := makeClip(t, c.file, c.graph, c.encoder, append([]string{"-c:v", c.encoder, "-pix_fmt", "yuv420p"}, c.args...)...)
	data := mustRead(t, path)
	noLeak(t)
	variants := map[string][]byte{
		"truncated to 60%": data[:len(data)*6/10],
		"truncated to 95%": data[:len(data)*95/100],
		"empty":            {},
	}
	for _, at := range []int{len(data) / 3, len(data) / 2, len(data) * 4 / 5} {
		b := slices.Clone(data)
		for i := at; i < min(at+64, len(b)); i++ {
			b[i] ^= 0x5a
		}
		variants[fmt.Sprintf("64 bytes flipped at %d", at)] = b
	}
	for name, b := range variants {
		for _, o := range []video.Options{{NumFrames: 8}, {Indices: []int64{99, 3, 50}}, {FPS: 3, ApplyRotation: true}} {
			x, _, err := video.DecodeCounting(context.Background(), av.Source{Data: b, Name: "clip-" + name}, o)
			if err != nil {
				if !strings.Contains(err.Error(), "clip-"+name) {
					t.Errorf("%s %+v: error does not name the input: %v", name, o, err)
				}
				continue
			}
			if x.Shape()[0] == 0 {
				t.Errorf("%s %+v: no frames and no error", name, o)
			}
			x.Release()
		}
	}
}

// TestHeaderOnlyOpen checks that opening an MP4 from its header alone
// (without avformat_find_stream_info) decodes the same frames as a full
// probe, on the streams where it is used and where it must not be.
func TestHeaderOnlyOpen(t *testing.T) {
	const graph = "testsrc2=s=96x64:r=25:d=3,noise=alls=12:allf=t"
	cases := []struct {
		name, file, encoder string
		args                []string
		headerOnly          bool
	}{
		{"h264 B-frames", "hdr-bframes.mp4", "libx264", []string{"-bf", "3", "-g", "12"}, true},
		{"h264 no B-frames", "hdr-nob.mp4", "libx264", []string{"-bf", "0", "-g", "12"}, false},
		{"hevc", "hdr-hevc.mp4", "libx265", []string{"-x265-params", "log-level=error:bframes=4", "-tag:v", "hvc1"}, true},
		{"vp9 mp4", "hdr-vp9.mp4", "libvpx-vp9", []string{"-g", "12", "-deadline", "realtime", "-cpu-used", "8"}, true},
		{"mpeg4 mp4", "hdr-mpeg4.mp4", "mpeg4", []string{"-bf", "2", "-g", "12"}, false},
		{"h264 mkv", "hdr-h264.mkv", "libx264", []string{"-bf", "3", "-g", "12"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := makeClip(t, c.file, graph, c.encoder, append([]string{"-c:v", c.encoder, "-pix_fmt", "yuv420p"}, c.args...)...)
			noLeak(t)
			in, err := av.Open(av.Source{Path: path}, av.OpenOptions{VideoOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			probed := in.Probed()
			in.Close()
			if probed == c.headerOnly {
				t.Errorf("probed %v, want %v", probed, !c.headerOnly)
			}
			for _, o := range []video.Options{{MaxFrames: 1000}, {NumFrames: 8}, {Indices: []int64{74, 0, 37}}} {
				x := decode(t, av.Source{Path: path}, o)
				y := decode(t, av.Source{Path: path}, video.FullProbe(o))
				if !slices.Equal(x.Shape(), y.Shape()) {
					t.Fatalf("%+v: shape %v, with a full probe %v", o, x.Shape(), y.Shape())
				}
				if i := firstDiff(x, y); i >= 0 {
					t.Fatalf("%+v: frame %d differs from the frame a full probe gives", o, i)
				}
				x.Release()
				y.Release()
			}
		})
	}
}
