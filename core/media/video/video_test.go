package video_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/media/video"
	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

// selections are checked on the counter video (24 frames at 8 fps) of
// every codec.
var selections = []struct {
	name string
	o    video.Options
	want []int64
}{
	{"all", video.Options{}, seq(0, counterFrames)},
	{"indices", video.Options{Indices: []int64{3, 4, 9}}, []int64{3, 4, 9}},
	{"indices unsorted with repeats", video.Options{Indices: []int64{5, 0, 23, 5, 12, 0}}, []int64{5, 0, 23, 5, 12, 0}},
	{"last index only", video.Options{Indices: []int64{23}}, []int64{23}},
	{"index in the middle of a GOP", video.Options{Indices: []int64{10}}, []int64{10}},
	{"descending", video.Options{Indices: []int64{7, 6, 5}}, []int64{7, 6, 5}},
	{"fps 2", video.Options{FPS: 2}, []int64{0, 4, 8, 12, 16, 20}},
	{"fps 3", video.Options{FPS: 3}, []int64{0, 2, 5, 8, 10, 13, 16, 18, 21}},
	{"fps above the rate repeats", video.Options{FPS: 16, Start: 1, Duration: 0.25}, []int64{8, 8, 9, 9}},
	{"fps over a span", video.Options{FPS: 2, Start: 1, Duration: 1}, []int64{8, 12}},
	{"num_frames 4", video.Options{NumFrames: 4}, []int64{0, 8, 15, 23}},
	{"num_frames 1", video.Options{NumFrames: 1}, []int64{0}},
	{"num_frames over a span", video.Options{NumFrames: 5, Start: 0.5, Duration: 2}, []int64{4, 8, 12, 15, 19}},
	{"num_frames more than frames", video.Options{NumFrames: 6, Start: 2.5}, []int64{20, 21, 21, 22, 22, 23}},
	{"start", video.Options{Start: 1.3}, seq(11, 13)},
	{"start on a frame", video.Options{Start: 2}, seq(16, 8)},
	{"start and duration", video.Options{Start: 2, Duration: 0.5}, seq(16, 4)},
	{"duration past the end", video.Options{Start: 2.5, Duration: 10}, seq(20, 4)},
}

func TestCodecsAndSelections(t *testing.T) {
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			path := counterClip(t, c)
			data := mustRead(t, path)
			for _, sel := range selections {
				t.Run(sel.name, func(t *testing.T) {
					noLeak(t)
					for _, src := range []av.Source{{Path: path}, {Data: data, Name: path}} {
						x := decode(t, src, sel.o)
						if s := x.Shape(); !slices.Equal(s, []int64{int64(len(sel.want)), 48, 64, 3}) || x.DType() != tensor.UInt8 {
							t.Fatalf("%v %v, want uint8 (%d, 48, 64, 3)", x.DType(), s, len(sel.want))
						}
						checkCounter(t, x, sel.want)
					}
				})
			}
		})
	}
}

// TestSeekSkipsWork checks that the decoder starts at the keyframe before
// the first frame needed (one every 4 frames), not at the start, and stops
// after the last.
func TestSeekSkipsWork(t *testing.T) {
	cases := []struct {
		name       string
		o          video.Options
		want       []int64
		maxDecoded int64
	}{
		{"index", video.Options{Indices: []int64{21}}, []int64{21}, 4},
		{"indices", video.Options{Indices: []int64{22, 17}}, []int64{22, 17}, 8},
		{"start", video.Options{Start: 2.5}, seq(20, 4), 4},
		{"span", video.Options{Start: 1.5, Duration: 0.5, NumFrames: 2}, []int64{12, 15}, 5},
		{"first frames only", video.Options{Indices: []int64{0, 2}}, []int64{0, 2}, 4},
	}
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			path := counterClip(t, c)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					noLeak(t)
					x, decoded, err := video.DecodeCounting(context.Background(), av.Source{Path: path}, tc.o)
					if err != nil {
						t.Fatal(err)
					}
					defer x.Release()
					checkCounter(t, x, tc.want)
					// Raw streams have no timestamps to seek by: they are
					// decoded from the start. Open-GOP HEVC may need a GOP more.
					if strings.HasSuffix(c.name, " raw") {
						return
					}
					if limit := tc.maxDecoded + 4*int64(boolInt(strings.HasPrefix(c.name, "hevc"))); decoded > limit {
						t.Errorf("decoded %d frames, want at most %d", decoded, limit)
					}
				})
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestVariableFrameRate drops frames 2 and 5 of the counter, keeping the
// others' timestamps: every decoded frame comes out once, in order, and
// sampling picks existing frames close to the times asked for.
func TestVariableFrameRate(t *testing.T) {
	noLeak(t)
	path := makeClip(t, "counter-vfr.mkv", counterGraph+",select='not(eq(n\\,2)+eq(n\\,5))'", "libx264",
		"-fps_mode", "vfr", "-g", "4", "-pix_fmt", "yuv420p")
	kept := slices.DeleteFunc(seq(0, counterFrames), func(k int64) bool { return k == 2 || k == 5 })
	checkCounter(t, decode(t, av.Source{Path: path}, video.Options{}), kept)
	for _, o := range []video.Options{{FPS: 8}, {NumFrames: 10}, {Indices: seq(0, 22)}} {
		x := decode(t, av.Source{Path: path}, o)
		prev := int64(-1)
		for i, l := range frameLevels(x) {
			k := int64(math.Round(l / counterStep))
			if !slices.Contains(kept, k) || k < prev {
				t.Fatalf("%+v: frame %d is %d after %d", o, i, k, prev)
			}
			prev = k
		}
	}
}

func TestThreads(t *testing.T) {
	noLeak(t)
	path := h264Counter(t)
	for _, threads := range []int{0, 1, 2, 4} {
		x := decode(t, av.Source{Path: path}, video.Options{Threads: threads, Indices: []int64{23, 1, 2, 13}})
		checkCounter(t, x, []int64{23, 1, 2, 13})
	}
}

func TestResize(t *testing.T) {
	path := h264Counter(t)
	cases := []struct {
		name  string
		o     video.Options
		shape []int64
	}{
		{"size", video.Options{Height: 24, Width: 40}, []int64{3, 24, 40, 3}},
		{"size up", video.Options{Height: 100, Width: 90, Interpolation: "bicubic"}, []int64{3, 100, 90, 3}},
		{"short side", video.Options{ShortSide: 24}, []int64{3, 24, 32, 3}},
		{"short side up", video.Options{ShortSide: 100}, []int64{3, 100, 133, 3}},
		{"area", video.Options{Height: 7, Width: 9, Interpolation: "area"}, []int64{3, 7, 9, 3}},
		{"nearest", video.Options{Height: 7, Width: 9, Interpolation: "nearest"}, []int64{3, 7, 9, 3}},
		{"gray", video.Options{Height: 12, Width: 16, Mode: video.Gray}, []int64{3, 12, 16, 1}},
		{"one pixel", video.Options{Height: 1, Width: 1}, []int64{3, 1, 1, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			tc.o.NumFrames = 3
			x := decode(t, av.Source{Path: path}, tc.o)
			if s := x.Shape(); !slices.Equal(s, tc.shape) {
				t.Fatalf("shape %v, want %v", s, tc.shape)
			}
			// Flat frames stay flat, at the same level.
			checkCounter(t, x, []int64{0, 12, 23})
		})
	}
}

// TestModes compares rgb, bgr and gray on a colourful clip.
func TestModes(t *testing.T) {
	noLeak(t)
	path := makeClip(t, "testsrc2.mp4", "testsrc2=s=64x48:r=8:d=1", "libx264", "-pix_fmt", "yuv420p")
	o := video.Options{Indices: []int64{0, 5}}
	rgb := decode(t, av.Source{Path: path}, o)
	o.Mode = video.BGR
	bgr := decode(t, av.Source{Path: path}, o)
	o.Mode = video.Gray
	gray := decode(t, av.Source{Path: path}, o)
	if s := gray.Shape(); !slices.Equal(s, []int64{2, 48, 64, 1}) {
		t.Fatalf("gray shape %v", s)
	}
	c := unsafe.Slice((*byte)(rgb.Data()), rgb.NBytes())
	b := unsafe.Slice((*byte)(bgr.Data()), bgr.NBytes())
	g := unsafe.Slice((*byte)(gray.Data()), gray.NBytes())
	var maxDiff, sumDiff float64
	for i := range g {
		r, gg, bb := c[3*i], c[3*i+1], c[3*i+2]
		if b[3*i] != bb || b[3*i+1] != gg || b[3*i+2] != r {
			t.Fatalf("pixel %d: rgb %v, bgr %v", i, c[3*i:3*i+3], b[3*i:3*i+3])
		}
		luma := 0.299*float64(r) + 0.587*float64(gg) + 0.114*float64(bb)
		d := math.Abs(luma - float64(g[i]))
		maxDiff, sumDiff = max(maxDiff, d), sumDiff+d
	}
	// RGB clips saturated colours and upsamples chroma; gray does neither.
	if mean := sumDiff / float64(len(g)); mean > 3 || maxDiff > 40 {
		t.Fatalf("gray differs from the luma of rgb by %.2f on average, %.0f at most", mean, maxDiff)
	}
}

// TestColours checks channel order and levels on flat colours.
func TestColours(t *testing.T) {
	noLeak(t)
	cases := []struct {
		colour string
		rgb    [3]float64
	}{{"red", [3]float64{255, 0, 0}}, {"blue", [3]float64{0, 0, 255}}, {"0x208040", [3]float64{0x20, 0x80, 0x40}}}
	for _, tc := range cases {
		path := makeClip(t, tc.colour+".mp4", "color=c="+tc.colour+":s=64x48:r=8:d=0.5", "libx264", "-pix_fmt", "yuv420p")
		for _, mode := range []video.Mode{video.RGB, video.BGR, video.Gray} {
			x := decode(t, av.Source{Path: path}, video.Options{Indices: []int64{1}, Mode: mode})
			b := unsafe.Slice((*byte)(x.Data()), x.NBytes())
			want := tc.rgb
			switch mode {
			case video.BGR:
				want[0], want[2] = want[2], want[0]
			case video.Gray:
				want[0] = 0.299*tc.rgb[0] + 0.587*tc.rgb[1] + 0.114*tc.rgb[2]
			}
			for ch := range x.Shape()[3] {
				if v := float64(b[(48*32+32)*x.Shape()[3]+ch]); math.Abs(v-want[ch]) > 6 {
					t.Errorf("%s %s: channel %d is %v, want %v", tc.colour, mode, ch, v, want[ch])
				}
			}
		}
	}
}

// TestBT709 checks that the frame's colour matrix is honoured: the same
// colour encoded with BT.709 and BT.601 decodes to the same RGB.
func TestBT709(t *testing.T) {
	noLeak(t)
	for _, m := range []string{"bt709", "bt470bg"} {
		path := makeClip(t, "green-"+m+".mp4", "color=c=0x20c040:s=64x48:r=8:d=0.5", "libx264",
			"-vf", "scale=out_color_matrix="+m, "-colorspace", m, "-pix_fmt", "yuv420p")
		x := decode(t, av.Source{Path: path}, video.Options{Indices: []int64{0}})
		b := unsafe.Slice((*byte)(x.Data()), x.NBytes())
		px := b[(24*64+32)*3:][:3]
		for ch, want := range []float64{0x20, 0xc0, 0x40} {
			if math.Abs(float64(px[ch])-want) > 6 {
				t.Errorf("%s: pixel %v, want about [32 192 64]", m, px)
				break
			}
		}
	}
}

func TestOp(t *testing.T) {
	noLeak(t)
	path := h264Counter(t)
	data := mustRead(t, path)
	op, err := ops.New("decode_video", map[string]any{
		"indices": value.List{int64(2), int64(1)}, "size": value.List{int64(24), int64(32)}, "mode": "bgr",
		"interpolation": "area", "threads": int64(1), "max_frames": int64(10), "max_pixels": int64(1 << 20),
		"fps": nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(v any) {
		t.Helper()
		x, ok := v.(*tensor.Tensor)
		if !ok {
			t.Fatalf("got %s, want a tensor", value.Describe(v))
		}
		if s := x.Shape(); !slices.Equal(s, []int64{2, 24, 32, 3}) {
			t.Fatalf("shape %v", s)
		}
		checkCounter(t, x, []int64{2, 1})
	}
	// A dict: the "video" field is decoded, the rest kept.
	d := value.NewDict(2)
	d.Set("video", data)
	d.Set("label", int64(7))
	out, err := op.Process(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	od := out.(*value.Dict)
	check(od.Values[0])
	if l, _ := od.Get("label"); l != int64(7) {
		t.Fatalf("label %v", l)
	}
	value.Release(out)
	// A (path, label) tuple, and a bare path.
	out, err = op.Process(context.Background(), value.Tuple{path, int64(3)})
	if err != nil {
		t.Fatal(err)
	}
	check(out.(value.Tuple)[0])
	value.Release(out)
	out, err = op.Process(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	check(out)
	value.Release(out)
	// Errors name the input and release the item.
	_, err = op.Process(context.Background(), value.Tuple{"nope.mp4", int64(3)})
	if err == nil || !strings.Contains(err.Error(), "decode_video") || !strings.Contains(err.Error(), "nope.mp4") {
		t.Fatalf("err = %v", err)
	}
	_, err = op.Process(context.Background(), int64(3))
	if err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Fatalf("err = %v", err)
	}
	// The "key" option.
	op, err = ops.New("decode_video", map[string]any{"key": "clip", "output_key": "frames", "num_frames": int64(2)})
	if err != nil {
		t.Fatal(err)
	}
	d = value.NewDict(1)
	d.Set("clip", data)
	out, err = op.Process(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if fr, ok := out.(*value.Dict).Get("frames"); !ok || fr.(*tensor.Tensor).Shape()[0] != 2 {
		t.Fatalf("frames %v", value.Describe(out))
	}
	value.Release(out)
}

func TestOptionErrors(t *testing.T) {
	cases := []struct {
		opts map[string]any
		want string
	}{
		{map[string]any{"indices": value.List{int64(1)}, "fps": 2.0}, "at most one of"},
		{map[string]any{"num_frames": int64(3), "fps": 2.0}, "at most one of"},
		{map[string]any{"indices": value.List{}}, "indices is empty"},
		{map[string]any{"indices": value.List{int64(-1)}}, "negative"},
		{map[string]any{"indices": value.List{"a"}}, "list of ints"},
		{map[string]any{"indices": int64(3)}, "list of ints"},
		{map[string]any{"indices": value.List{int64(1)}, "start": 1.0}, "cannot be combined"},
		{map[string]any{"fps": 0.0}, `"fps" must be > 0`},
		{map[string]any{"fps": "x"}, `"fps" must be a number`},
		{map[string]any{"num_frames": int64(0)}, `"num_frames" must be an int >= 1`},
		{map[string]any{"num_frames": 1.5}, `"num_frames" must be an int`},
		{map[string]any{"start": -1.0}, "start must be"},
		{map[string]any{"duration": 0.0}, `"duration" must be > 0`},
		{map[string]any{"mode": "rgba"}, "mode must be"},
		{map[string]any{"size": value.List{int64(3)}}, "[height, width]"},
		{map[string]any{"size": value.List{int64(3), int64(0)}}, "[height, width]"},
		{map[string]any{"size": value.List{int64(3), int64(4)}, "short_side": int64(3)}, "not both"},
		{map[string]any{"interpolation": "lanczos"}, "interpolation must be"},
		{map[string]any{"threads": int64(-1)}, `"threads" must be an int >= 0`},
		{map[string]any{"max_frames": int64(2), "num_frames": int64(3)}, "more than max_frames"},
		{map[string]any{"max_pixels": int64(10), "size": value.List{int64(3), int64(4)}}, "more than max_pixels"},
		{map[string]any{"max_output_bytes": int64(0)}, `"max_output_bytes" must be an int >= 1`},
		{map[string]any{"max_output_bytes": "1GB"}, `"max_output_bytes" must be an int >= 1`},
		{map[string]any{"num_frame": int64(3)}, `unknown option "num_frame"`},
		{map[string]any{"key": int64(3)}, `"key" must be a string`},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			_, err := ops.New("decode_video", tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("options %v: err = %v, want it to contain %q", tc.opts, err, tc.want)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	noLeak(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	clip := h264Counter(t)
	data := mustRead(t, clip)
	faststart := mustRead(t, makeClip(t, "faststart.mp4", counterGraph, "libx264", "-g", "4", "-movflags", "+faststart"))
	webm := mustRead(t, counterClip(t, codecs[2]))
	wav := makeClip(t, "tone.wav", "sine=d=0.5", "pcm_s16le")
	m4a := makeClip(t, "tone.m4a", "sine=d=0.5", "aac")
	// An MP4 whose codec FFmpeg does not know.
	unknown := slices.Clone(faststart)
	for i := 0; i+4 <= len(unknown); i++ {
		if string(unknown[i:i+4]) == "avc1" {
			copy(unknown[i:], "zzzz")
		}
	}
	cases := []struct {
		name string
		src  av.Source
		o    video.Options
		want []string // all in the error
	}{
		{"zero bytes", av.Source{Data: []byte{}, Name: "zero.mp4"}, video.Options{}, []string{`"zero.mp4"`, "empty"}},
		{"empty file", av.Source{Path: write("empty.mp4", nil)}, video.Options{}, []string{"empty.mp4", "empty"}},
		{"missing file", av.Source{Path: filepath.Join(dir, "missing.mp4")}, video.Options{}, []string{"missing.mp4", "no such file"}},
		{"text", av.Source{Data: []byte(strings.Repeat("hello, world\n", 200)), Name: "notes.txt"}, video.Options{}, []string{`"notes.txt"`}},
		{"wav", av.Source{Path: wav}, video.Options{}, []string{"tone.wav", "no video stream"}},
		{"audio only", av.Source{Path: m4a}, video.Options{NumFrames: 2}, []string{"tone.m4a", "no video stream"}},
		{"unknown codec", av.Source{Data: unknown, Name: "unknown.mp4"}, video.Options{}, []string{`"unknown.mp4"`, "no decoder"}},
		{"index past the end", av.Source{Path: clip}, video.Options{Indices: []int64{0, 30, 2}}, []string{clip, "frame index 30", "24 frames"}},
		{"index just past the end", av.Source{Data: data, Name: "c.mp4"}, video.Options{Indices: []int64{24}}, []string{`"c.mp4"`, "frame index 24", "24 frames"}},
		{"start past the end", av.Source{Path: clip}, video.Options{Start: 5, NumFrames: 2}, []string{clip, "no frames between 5s"}},
		{"start past the end, all frames", av.Source{Path: clip}, video.Options{Start: 5}, []string{clip, "no frames between 5s"}},
		{"max_pixels", av.Source{Path: clip}, video.Options{MaxPixels: 1000}, []string{clip, "64x48", "max_pixels"}},
		{"resize past max_pixels", av.Source{Path: clip}, video.Options{MaxPixels: 4000, ShortSide: 100}, []string{clip, "max_pixels"}},
		{"max_frames", av.Source{Path: clip}, video.Options{MaxFrames: 10}, []string{clip, "max_frames (10)"}},
		{"fps past max_frames", av.Source{Path: clip}, video.Options{MaxFrames: 10, FPS: 30}, []string{clip, "max_frames (10)"}},
		{"truncated mp4", av.Source{Data: data[:len(data)/2], Name: "half.mp4"}, video.Options{}, []string{`"half.mp4"`}},
		{"truncated faststart mp4", av.Source{Data: faststart[:len(faststart)*2/3], Name: "fs.mp4"}, video.Options{}, []string{`"fs.mp4"`}},
		{"truncated faststart mp4, sampled", av.Source{Data: faststart[:len(faststart)*2/3], Name: "fs.mp4"}, video.Options{NumFrames: 8}, []string{`"fs.mp4"`}},
		{"truncated faststart mp4, index", av.Source{Data: faststart[:len(faststart)*2/3], Name: "fs.mp4"}, video.Options{Indices: []int64{23}}, []string{`"fs.mp4"`}},
		{"header only", av.Source{Data: faststart[:1200], Name: "head.mp4"}, video.Options{}, []string{`"head.mp4"`}},
		{"truncated webm", av.Source{Data: webm[:len(webm)/2], Name: "half.webm"}, video.Options{}, []string{`"half.webm"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			x, err := video.Decode(context.Background(), tc.src, tc.o)
			if err == nil {
				t.Fatalf("decoded %v, want an error", x.Shape())
				x.Release()
			}
			t.Log(err)
			var ae *av.Error
			if !errors.As(err, &ae) {
				t.Errorf("err = %v (%T), want an *av.Error", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestCancel(t *testing.T) {
	noLeak(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := video.Decode(ctx, av.Source{Path: h264Counter(t)}, video.Options{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

// TestConvertBounds checks that conversion writes exactly its rectangle,
// for odd sizes and many pixel formats, resized or not: swscale writes
// straight into tensors, and a byte past the end would be someone else's.
func TestConvertBounds(t *testing.T) {
	noLeak(t)
	formats := []string{"yuv420p", "yuvj420p", "yuv422p", "yuv444p", "nv12", "yuv420p10le", "gray", "rgb24", "bgra", "pal8"}
	for _, pf := range formats {
		for _, mode := range []video.Mode{video.RGB, video.BGR, video.Gray} {
			for w := 1; w <= 37; w += 3 {
				for _, h := range []int{1, 2, 5} {
					for _, out := range [][2]int{{w, h}, {w + 7, h + 1}, {max(1, w/2), h}, {3, 3}} {
						if err := checkBounds(pf, mode, w, h, out[0], out[1]); err != nil {
							t.Fatalf("%s %dx%d -> %s %dx%d: %v", pf, w, h, mode, out[0], out[1], err)
						}
					}
				}
			}
		}
	}
}

func checkBounds(pixFmt string, mode video.Mode, w, h, ow, oh int) error {
	f := newFrame(pixFmt, w, h)
	if f == nil {
		return fmt.Errorf("cannot allocate a frame")
	}
	defer f.Free()
	channels := 3
	if mode == video.Gray {
		channels = 1
	}
	size := ow * oh * channels
	const guard = 1024 // video's SPDL_VIDEO_GUARD
	// Without room after the image (it goes through scratch memory), and
	// with room (it is written in place, and the room restored).
	for _, room := range []int{0, guard} {
		x, err := tensor.New(tensor.UInt8, int64(guard+size+room+guard))
		if err != nil {
			return err
		}
		b := unsafe.Slice((*byte)(x.Data()), x.NBytes())
		for i := range b {
			b[i] = byte(i*7 + 1)
		}
		err = video.ConvertOne(f, video.Options{Mode: mode}, ow, oh, unsafe.Add(x.Data(), guard), room)
		for i := range b {
			if (i < guard || i >= guard+size) && b[i] != byte(i*7+1) {
				err = errors.Join(err, fmt.Errorf("with %d bytes of room, it changed byte %d of the %d after its image", room, i-guard-size, room+guard))
				break
			}
		}
		x.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// rss is the process's resident memory in bytes.
func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm: %v", err)
	}
	var size, res int64
	fmt.Sscan(string(b), &size, &res)
	return res * int64(os.Getpagesize())
}

// TestFFmpegObjectsFreed decodes good and bad inputs many times and checks
// that resident memory stops growing: a leaked format context, decoder,
// frame or scaler on any path would add tens of KB per call.
func TestFFmpegObjectsFreed(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	noLeak(t)
	clip := h264Counter(t)
	data := mustRead(t, clip)
	webm := mustRead(t, counterClip(t, codecs[2]))
	wav := makeClip(t, "tone.wav", "sine=d=0.5", "pcm_s16le")
	runs := []struct {
		src av.Source
		o   video.Options
	}{
		{av.Source{Data: data}, video.Options{Threads: 1}},
		{av.Source{Data: data}, video.Options{Indices: []int64{21, 3}, Height: 20, Width: 30}},
		{av.Source{Data: webm}, video.Options{NumFrames: 5, Start: 0.5}},             // counts packets, reopens
		{av.Source{Data: data}, video.Options{Indices: []int64{99}}},                 // past the end
		{av.Source{Data: data[:len(data)/2]}, video.Options{}},                       // truncated
		{av.Source{Data: webm[:len(webm)*2/3]}, video.Options{FPS: 4}},               // truncated
		{av.Source{Path: wav}, video.Options{}},                                      // no video
		{av.Source{Data: []byte("not a video at all, not at all")}, video.Options{}}, // garbage
		{av.Source{Data: data}, video.Options{MaxFrames: 5}},                         // too many frames
	}
	round := func() {
		for _, r := range runs {
			if x, err := video.Decode(context.Background(), r.src, r.o); err == nil {
				x.Release()
			}
		}
	}
	for range 100 {
		round()
	}
	before := rss(t)
	const n = 300
	for range n {
		round()
	}
	after := rss(t)
	t.Logf("resident memory %d KB -> %d KB after %d more decodes", before>>10, after>>10, n*len(runs))
	if grew := after - before; grew > 8<<20 {
		t.Fatalf("resident memory grew by %d KB over %d decodes: FFmpeg objects leak", grew>>10, n*len(runs))
	}
}
