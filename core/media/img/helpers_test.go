package img_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

// noLeak fails t at its end if tensors are still live.
func noLeak(t testing.TB) {
	t.Helper()
	t.Cleanup(func() {
		if s := tensor.MemStats(); s.LiveTensors != 0 || s.LiveBytes != 0 {
			t.Errorf("tensor leak: %+v", s)
		}
	})
}

func mustOp(t testing.TB, name string, opts map[string]any) ops.Op {
	t.Helper()
	op, err := ops.New(name, opts)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

// run processes one item and returns the output tensor (or the output).
func run(t testing.TB, op ops.Op, in any) any {
	t.Helper()
	out, err := op.Process(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func dict(kv ...any) *value.Dict {
	d := value.NewDict(len(kv) / 2)
	for i := 0; i < len(kv); i += 2 {
		d.Set(kv[i].(string), kv[i+1])
	}
	return d
}

// pixels is a decoded image for checks.
type pixels struct {
	h, w, c int
	b       []byte
}

// pix copies t's contents and releases t.
func pix(t testing.TB, v any) pixels {
	t.Helper()
	x, ok := v.(*tensor.Tensor)
	if !ok {
		t.Fatalf("got %s, want a tensor", value.Describe(v))
	}
	defer x.Release()
	s := x.Shape()
	if x.DType() != tensor.UInt8 || len(s) != 3 {
		t.Fatalf("got %v, want a uint8 (H, W, C) tensor", x)
	}
	return pixels{int(s[0]), int(s[1]), int(s[2]), bytes.Clone(x.Bytes())}
}

func (p pixels) at(y, x int) []byte { return p.b[(y*p.w+x)*p.c : (y*p.w+x+1)*p.c] }

// maxDiff is the largest channel difference between p and want anywhere.
func (p pixels) maxDiff(want []byte) int {
	m := 0
	for i := 0; i < len(p.b); i += p.c {
		for ch := range p.c {
			m = max(m, absInt(int(p.b[i+ch])-int(want[ch])))
		}
	}
	return m
}

func absInt(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// meanAbsDiff compares two images of one size.
func meanAbsDiff(t testing.TB, a, b pixels) float64 {
	t.Helper()
	if a.h != b.h || a.w != b.w || a.c != b.c {
		t.Fatalf("sizes differ: %dx%dx%d vs %dx%dx%d", a.h, a.w, a.c, b.h, b.w, b.c)
	}
	var s float64
	for i := range a.b {
		s += math.Abs(float64(a.b[i]) - float64(b.b[i]))
	}
	return s / float64(len(a.b))
}

func luma(c color.RGBA) byte {
	return byte((19595*uint32(c.R) + 38470*uint32(c.G) + 7471*uint32(c.B) + 32768) >> 16)
}

// Test images.

func solid(w, h int, c color.RGBA) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := 0; i < len(m.Pix); i += 4 {
		m.Pix[i], m.Pix[i+1], m.Pix[i+2], m.Pix[i+3] = c.R, c.G, c.B, 255
	}
	return m
}

var (
	red   = color.RGBA{220, 20, 30, 255}
	green = color.RGBA{20, 200, 40, 255}
	blue  = color.RGBA{30, 40, 210, 255}
	white = color.RGBA{250, 250, 250, 255}
	quads = []color.RGBA{red, green, blue, white} // top-left, top-right, bottom-left, bottom-right
)

// quadrants is red | green over blue | white.
func quadrants(w, h int) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			q := 0
			if x >= w/2 {
				q++
			}
			if y >= h/2 {
				q += 2
			}
			m.SetRGBA(x, y, quads[q])
		}
	}
	return m
}

// hgradient goes from black at the left to white at the right.
func hgradient(w, h int) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			v := uint8(x * 255 / (w - 1))
			m.SetRGBA(x, y, color.RGBA{v, v, v, 255})
		}
	}
	return m
}

// photo is photo-like: smooth gradients, blocks with hard edges, a disc,
// and sensor-like noise.
func photo(w, h int, seed uint64) *image.RGBA {
	r := rand.New(rand.NewPCG(seed, 7))
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	cx, cy, rad := float64(w)*0.6, float64(h)*0.45, float64(min(w, h))*0.25
	for y := range h {
		for x := range w {
			fx, fy := float64(x), float64(y)
			v := [3]float64{
				128 + 90*math.Sin(fx/37+fy/53),
				128 + 80*math.Cos(fx/23-fy/41),
				128 + 70*math.Sin((fx+fy)/61),
			}
			if (x/64+y/48)%2 == 0 {
				v[0] += 35
				v[2] -= 25
			}
			if (fx-cx)*(fx-cx)+(fy-cy)*(fy-cy) < rad*rad {
				v[1] += 60
			}
			for i := range v {
				v[i] += r.NormFloat64() * 10
			}
			m.Pix[y*m.Stride+4*x] = clampByte(v[0])
			m.Pix[y*m.Stride+4*x+1] = clampByte(v[1])
			m.Pix[y*m.Stride+4*x+2] = clampByte(v[2])
			m.Pix[y*m.Stride+4*x+3] = 255
		}
	}
	return m
}

func clampByte(v float64) uint8 { return uint8(max(0, min(255, math.Round(v)))) }

// Encoders.

func encJPEG(t testing.TB, m image.Image, q int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: q}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encPNG(t testing.TB, m image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// encGIF uses a palette holding every colour of m (up to 256), so the
// image round-trips exactly.
func encGIF(t testing.TB, m *image.RGBA) []byte {
	t.Helper()
	var pal color.Palette
	seen := map[color.RGBA]bool{}
	for i := 0; i < len(m.Pix); i += 4 {
		c := color.RGBA{m.Pix[i], m.Pix[i+1], m.Pix[i+2], 255}
		if !seen[c] && len(pal) < 256 {
			seen[c] = true
			pal = append(pal, c)
		}
	}
	if len(pal) < 2 {
		pal = append(pal, color.RGBA{0, 0, 0, 255})
	}
	p := image.NewPaletted(m.Bounds(), pal)
	for y := range m.Bounds().Dy() {
		for x := range m.Bounds().Dx() {
			p.Set(x, y, m.At(x, y))
		}
	}
	var b bytes.Buffer
	if err := gif.Encode(&b, p, &gif.Options{NumColors: len(pal)}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// encBMP writes a 24-bit bottom-up BMP.
func encBMP(m *image.RGBA) []byte {
	w, h := m.Bounds().Dx(), m.Bounds().Dy()
	stride := (w*3 + 3) &^ 3
	b := make([]byte, 54+stride*h)
	le := binary.LittleEndian
	b[0], b[1] = 'B', 'M'
	le.PutUint32(b[2:], uint32(len(b)))
	le.PutUint32(b[10:], 54)
	le.PutUint32(b[14:], 40)
	le.PutUint32(b[18:], uint32(w))
	le.PutUint32(b[22:], uint32(h))
	le.PutUint16(b[26:], 1)
	le.PutUint16(b[28:], 24)
	le.PutUint32(b[34:], uint32(stride*h))
	for y := range h {
		row := b[54+(h-1-y)*stride:]
		for x := range w {
			c := m.RGBAAt(x, y)
			row[3*x], row[3*x+1], row[3*x+2] = c.B, c.G, c.R
		}
	}
	return b
}

// encFFmpeg converts a PNG of m with the ffmpeg CLI to ext ("webp",
// "tiff", ...) with extra output arguments; it skips the test without
// ffmpeg or its encoder.
func encFFmpeg(t testing.TB, m image.Image, ext string, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("the ffmpeg CLI is not installed")
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.png"), filepath.Join(dir, "out."+ext)
	if err := os.WriteFile(in, encPNG(t, m), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ffmpeg", append(append([]string{"-v", "error", "-y", "-i", in}, args...), out)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("ffmpeg cannot write %s here: %v: %s", ext, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wav is a short silent 8 kHz mono WAV file.
func wav() []byte {
	n := 800
	b := make([]byte, 44+2*n)
	le := binary.LittleEndian
	copy(b, "RIFF")
	le.PutUint32(b[4:], uint32(36+2*n))
	copy(b[8:], "WAVEfmt ")
	le.PutUint32(b[16:], 16)
	le.PutUint16(b[20:], 1)
	le.PutUint16(b[22:], 1)
	le.PutUint32(b[24:], 8000)
	le.PutUint32(b[28:], 16000)
	le.PutUint16(b[32:], 2)
	le.PutUint16(b[34:], 16)
	copy(b[36:], "data")
	le.PutUint32(b[40:], uint32(2*n))
	return b
}

// writeFile writes data to name in a temporary directory.
func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
