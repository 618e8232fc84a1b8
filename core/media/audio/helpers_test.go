package audio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/media/audio"
	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/tensor"
)

// checkLeaks fails t if a tensor is still alive when the test ends.
func checkLeaks(t testing.TB) {
	t.Helper()
	t.Cleanup(func() {
		if n := tensor.MemStats().LiveTensors; n != 0 {
			t.Errorf("%d tensors still alive after the test", n)
		}
	})
}

var (
	encodersOnce sync.Once
	encoders     string
)

// needFFmpeg skips t without the ffmpeg CLI, or without an encoder for the
// codec it is about to use (empty: any).
func needFFmpeg(t testing.TB, encoder string) {
	t.Helper()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("the ffmpeg CLI is not installed; it generates the test clips")
	}
	encodersOnce.Do(func() {
		out, _ := exec.Command("ffmpeg", "-hide_banner", "-encoders").Output()
		encoders = string(out)
	})
	if encoder != "" && !strings.Contains(encoders, " "+encoder+" ") {
		t.Skipf("this FFmpeg build has no %s encoder", encoder)
	}
}

// ffmpeg runs the ffmpeg CLI to write dir/name and returns its path.
func ffmpeg(t testing.TB, dir, name string, args ...string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("ffmpeg", append(append([]string{"-v", "error", "-y"}, args...), out)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg %v: %v\n%s", args, err, b)
	}
	return out
}

// format is an output format for generated clips.
type format struct {
	ext     string
	encoder string // the codec's encoder, for -c:a
	rate    int    // the rate it decodes at, when the codec fixes it
}

var formats = []format{
	{"wav", "pcm_s16le", 0},
	{"flac", "flac", 0},
	{"mp3", "libmp3lame", 0},
	{"ogg", "libvorbis", 0},
	{"opus", "libopus", 48000},
	{"m4a", "aac", 0},
}

// tone writes a clip of sine tones (one per channel) with ffmpeg.
func (f format) tone(t testing.TB, dir string, rate int, secs float64, freqs ...int) string {
	t.Helper()
	needFFmpeg(t, f.encoder)
	var args []string
	for _, fr := range freqs {
		args = append(args, "-f", "lavfi", "-i", sineSpec(fr, rate, secs))
	}
	if len(freqs) > 1 {
		var in strings.Builder
		for i := range freqs {
			in.WriteString("[" + itoa(i) + ":a]")
		}
		args = append(args, "-filter_complex", in.String()+"amerge=inputs="+itoa(len(freqs)))
	}
	args = append(args, "-c:a", f.encoder)
	return ffmpeg(t, dir, "tone-"+itoa(len(freqs))+"."+f.ext, args...)
}

func sineSpec(freq, rate int, secs float64) string {
	return "sine=frequency=" + itoa(freq) + ":sample_rate=" + itoa(rate) + ":duration=" + ftoa(secs)
}

func itoa(n int) string     { return strconv.Itoa(n) }
func ftoa(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// decoded is a decoded clip copied out of its tensor (which is released).
type decoded struct {
	ch [][]float32
}

func (d decoded) samples() int {
	if len(d.ch) == 0 {
		return 0
	}
	return len(d.ch[0])
}

func decode(t testing.TB, src av.Source, o audio.Options) decoded {
	t.Helper()
	out, err := audio.Decode(context.Background(), src, o)
	if err != nil {
		t.Fatalf("Decode(%v, %+v): %v", src, o, err)
	}
	defer out.Release()
	return copyOut(t, out)
}

func copyOut(t testing.TB, out *tensor.Tensor) decoded {
	t.Helper()
	sh := out.Shape()
	if out.DType() != tensor.Float32 || len(sh) != 2 {
		t.Fatalf("got %v, want a float32 (channels, samples) tensor", out)
	}
	var d decoded
	var all []float32
	if sh[0]*sh[1] > 0 {
		all = unsafe.Slice((*float32)(out.Data()), sh[0]*sh[1])
	}
	for c := range sh[0] {
		d.ch = append(d.ch, append([]float32{}, all[c*sh[1]:(c+1)*sh[1]]...))
	}
	for c, x := range d.ch {
		for i, v := range x {
			if !(v >= -1 && v <= 1) {
				t.Fatalf("channel %d sample %d = %v, outside [-1, 1]", c, i, v)
			}
		}
	}
	return d
}

// frequency estimates the frequency of a tone from its upward zero
// crossings (interpolated), ignoring the edges.
func frequency(x []float32, rate int) float64 {
	lo, hi := len(x)/20, len(x)-len(x)/20
	first, last, n := -1.0, -1.0, 0
	for i := lo + 1; i < hi; i++ {
		if x[i-1] < 0 && x[i] >= 0 {
			at := float64(i-1) + float64(-x[i-1])/float64(x[i]-x[i-1])
			if first < 0 {
				first = at
			}
			last = at
			n++
		}
	}
	if n < 2 {
		return 0
	}
	return float64(n-1) / ((last - first) / float64(rate))
}

func near(got, want, rel float64) bool { return math.Abs(got-want) <= rel*want }

// rms is the root mean square of a-b.
func rms(a, b []float32) float64 {
	var s float64
	for i := range a {
		d := float64(a[i] - b[i])
		s += d * d
	}
	return math.Sqrt(s / float64(max(1, len(a))))
}

// wav encodes 16-bit PCM (interleaved by channel) as a WAV file.
func wav(rate int, ch ...[]float64) []byte {
	var b bytes.Buffer
	n := len(ch[0])
	le := binary.LittleEndian
	w := func(v any) { binary.Write(&b, le, v) }
	b.WriteString("RIFF")
	w(uint32(36 + n*len(ch)*2))
	b.WriteString("WAVEfmt ")
	w(uint32(16))
	w(uint16(1))
	w(uint16(len(ch)))
	w(uint32(rate))
	w(uint32(rate * len(ch) * 2))
	w(uint16(len(ch) * 2))
	w(uint16(16))
	b.WriteString("data")
	w(uint32(n * len(ch) * 2))
	for i := range n {
		for _, c := range ch {
			w(int16(math.Round(c[i] * 32767)))
		}
	}
	return b.Bytes()
}

func sine(freq float64, rate, n int, amp float64) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = amp * math.Sin(2*math.Pi*freq*float64(i)/float64(rate))
	}
	return x
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
