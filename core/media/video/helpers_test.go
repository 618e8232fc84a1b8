package video_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/asticode/go-astiav"

	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/media/video"
	"github.com/spdl-go/spdl-go/core/tensor"
)

var clipDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spdl-video-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	clipDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// noLeak fails t at its end if tensors are still live.
func noLeak(t testing.TB) {
	t.Helper()
	t.Cleanup(func() {
		if s := tensor.MemStats(); s.LiveTensors != 0 || s.LiveBytes != 0 {
			t.Errorf("tensor leak: %+v", s)
		}
	})
}

var (
	encodersOnce sync.Once
	encoders     string
	encodersErr  error
)

// needEncoder skips t unless the ffmpeg CLI is installed and has encoder.
func needEncoder(t testing.TB, encoder string) {
	t.Helper()
	encodersOnce.Do(func() {
		var out []byte
		out, encodersErr = exec.Command("ffmpeg", "-hide_banner", "-encoders").Output()
		encoders = string(out)
	})
	if encodersErr != nil {
		t.Skipf("the ffmpeg CLI is needed to make test clips: %v", encodersErr)
	}
	for _, line := range strings.Split(encoders, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[1] == encoder {
			return
		}
	}
	t.Skipf("ffmpeg has no %s encoder", encoder)
}

var (
	clipsMu sync.Mutex
	clips   = map[string]string{}
)

// makeClip runs ffmpeg -f lavfi -i graph args... into a file named name
// (its extension picks the container), once per test binary, and returns
// its path. It skips t if ffmpeg or encoder is missing.
func makeClip(t testing.TB, name, graph, encoder string, args ...string) string {
	t.Helper()
	needEncoder(t, encoder)
	clipsMu.Lock()
	defer clipsMu.Unlock()
	if p, ok := clips[name]; ok {
		return p
	}
	p := filepath.Join(clipDir, name)
	cmd := append([]string{"-v", "error", "-y", "-f", "lavfi", "-i", graph}, args...)
	cmd = append(cmd, p)
	if out, err := exec.Command("ffmpeg", cmd...).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg %s: %v\n%s", strings.Join(cmd, " "), err, out)
	}
	clips[name] = p
	return p
}

// counterGraph makes 24 frames at 8 fps, 64x48, where frame k is a flat
// gray of luma 16+8k (limited range), so RGB level about 9.3k.
const counterGraph = "color=c=gray:s=64x48:r=8:d=3,format=yuv420p,geq=lum='16+N*8':cb=128:cr=128"

const counterFrames = 24

type codec struct {
	name, encoder, ext string
	decoders           []string // any one of them will do
	args               []string
}

var codecs = []codec{
	{"h264", "libx264", "mp4", []string{"h264"}, []string{"-bf", "2", "-sc_threshold", "0"}},
	{"hevc", "libx265", "mp4", []string{"hevc"}, []string{"-x265-params", "log-level=error", "-tag:v", "hvc1"}},
	{"vp9", "libvpx-vp9", "webm", []string{"vp9"}, nil},
	{"vp8", "libvpx", "webm", []string{"vp8"}, nil},
	{"mpeg4", "mpeg4", "avi", []string{"mpeg4"}, []string{"-sc_threshold", "1000000000"}},
	// Raw streams: no container index or timestamps to seek by.
	{"h264 raw", "libx264", "h264", []string{"h264"}, []string{"-bf", "2", "-sc_threshold", "0"}},
	{"mpeg4 raw", "mpeg4", "m4v", []string{"mpeg4"}, []string{"-sc_threshold", "1000000000"}},
	{"hevc mkv", "libx265", "mkv", []string{"hevc"}, []string{"-x265-params", "log-level=error"}},
	// FFmpeg's own av1 decoder needs a hardware accelerator.
	{"av1", "libaom-av1", "mkv", []string{"libdav1d", "libaom-av1"}, []string{"-cpu-used", "8"}},
}

// counterClip returns the counter video encoded with c, with a keyframe
// every 4 frames so that seeking matters.
func counterClip(t testing.TB, c codec) string {
	t.Helper()
	if !slices.ContainsFunc(c.decoders, func(n string) bool { return astiav.FindDecoderByName(n) != nil }) {
		t.Skipf("this FFmpeg has no %s decoder (%v)", c.name, c.decoders)
	}
	args := append([]string{"-c:v", c.encoder, "-g", "4", "-pix_fmt", "yuv420p"}, c.args...)
	return makeClip(t, "counter-"+strings.ReplaceAll(c.name, " ", "-")+"."+c.ext, counterGraph, c.encoder, args...)
}

func h264Counter(t testing.TB) string { return counterClip(t, codecs[0]) }

// frameLevels returns each frame's mean value (all pixels and channels).
func frameLevels(x *tensor.Tensor) []float64 {
	s := x.Shape()
	per := int(s[1] * s[2] * s[3])
	b := unsafe.Slice((*byte)(x.Data()), x.NBytes())
	out := make([]float64, s[0])
	for i := range out {
		var sum int
		for _, v := range b[i*per : (i+1)*per] {
			sum += int(v)
		}
		out[i] = float64(sum) / float64(per)
	}
	return out
}

// counterStep is the RGB level of one step of the counter: 8 luma levels
// expanded from limited to full range.
const counterStep = 8 * 255.0 / 219

// checkCounter checks that x holds counter frames want, in order.
func checkCounter(t *testing.T, x *tensor.Tensor, want []int64) {
	t.Helper()
	levels := frameLevels(x)
	if len(levels) != len(want) {
		t.Fatalf("got %d frames, want %d (%v)", len(levels), len(want), want)
	}
	got := make([]int64, len(levels))
	ok := true
	for i, l := range levels {
		got[i] = int64(math.Round(l / counterStep))
		if got[i] != want[i] || math.Abs(l-float64(want[i])*counterStep) > 3 {
			ok = false
		}
	}
	if !ok {
		t.Fatalf("frames %v (levels %.1f), want %v", got, levels, want)
	}
}

func decode(t *testing.T, src av.Source, o video.Options) *tensor.Tensor {
	t.Helper()
	x, err := video.Decode(context.Background(), src, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Release)
	return x
}

func seq(start, n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = start + int64(i)
	}
	return out
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newFrame allocates a w x h frame of pixel format pixFmt, filled with a
// pattern.
func newFrame(pixFmt string, w, h int) *astiav.Frame {
	f := astiav.AllocFrame()
	f.SetWidth(w)
	f.SetHeight(h)
	f.SetPixelFormat(astiav.FindPixelFormatByName(pixFmt))
	if err := f.AllocBuffer(0); err != nil {
		f.Free()
		return nil
	}
	f.ImageFillBlack()
	return f
}
