package img_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/media/img"
	"github.com/spdl-go/spdl-go/core/tensor"
)

func decode(t testing.TB, data []byte, o img.DecodeOptions) pixels {
	t.Helper()
	x, err := img.Decode(data, "", o)
	if err != nil {
		t.Fatal(err)
	}
	return pix(t, x)
}

// encodings of one image in every format the tests cover; lossless ones
// must decode exactly.
type encoding struct {
	name     string
	lossless bool
	enc      func(t testing.TB, m *image.RGBA) []byte
}

func encodings() []encoding {
	return []encoding{
		{"jpeg", false, func(t testing.TB, m *image.RGBA) []byte { return encJPEG(t, m, 95) }},
		{"png", true, func(t testing.TB, m *image.RGBA) []byte { return encPNG(t, m) }},
		{"bmp", true, func(t testing.TB, m *image.RGBA) []byte { return encBMP(m) }},
		{"gif", true, func(t testing.TB, m *image.RGBA) []byte { return encGIF(t, m) }},
		// Without its trailer byte (some writers omit it): every block is whole.
		{"gif-no-trailer", true, func(t testing.TB, m *image.RGBA) []byte { g := encGIF(t, m); return g[:len(g)-1] }},
		{"webp", true, func(t testing.TB, m *image.RGBA) []byte { return encFFmpeg(t, m, "webp", "-lossless", "1") }},
		{"webp-lossy", false, func(t testing.TB, m *image.RGBA) []byte { return encFFmpeg(t, m, "webp", "-quality", "95") }},
		{"tiff", true, func(t testing.TB, m *image.RGBA) []byte { return encFFmpeg(t, m, "tiff") }},
	}
}

func TestDecodeSolidColour(t *testing.T) {
	noLeak(t)
	c := color.RGBA{200, 30, 90, 255}
	m := solid(40, 30, c)
	modes := []struct {
		mode img.Mode
		want []byte
	}{
		{img.RGB, []byte{200, 30, 90}},
		{img.BGR, []byte{90, 30, 200}},
		{img.Gray, []byte{luma(c)}},
	}
	for _, e := range encodings() {
		t.Run(e.name, func(t *testing.T) {
			data := e.enc(t, m)
			for _, md := range modes {
				p := decode(t, data, img.DecodeOptions{Mode: md.mode})
				if p.h != 30 || p.w != 40 || p.c != len(md.want) {
					t.Fatalf("mode %v: shape %dx%dx%d", md.mode, p.h, p.w, p.c)
				}
				tol := 0
				if !e.lossless {
					tol = 3
				}
				if d := p.maxDiff(md.want); d > tol {
					t.Errorf("mode %v: pixel %v differs from %v by %d (tolerance %d)", md.mode, p.at(0, 0), md.want, d, tol)
				}
			}
		})
	}
}

func TestDecodeQuadrantsAllFormats(t *testing.T) {
	noLeak(t)
	m := quadrants(16, 12)
	for _, e := range encodings() {
		t.Run(e.name, func(t *testing.T) {
			p := decode(t, e.enc(t, m), img.DecodeOptions{})
			tol := 0
			if !e.lossless {
				tol = 40 // at the corners, away from chroma bleeding at the edges
			}
			for q, at := range [][2]int{{0, 0}, {0, 15}, {11, 0}, {11, 15}} {
				got, want := p.at(at[0], at[1]), quads[q]
				for ch, v := range []uint8{want.R, want.G, want.B} {
					if absInt(int(got[ch])-int(v)) > tol {
						t.Fatalf("quadrant %d pixel %v, want %v", q, got, want)
					}
				}
			}
		})
	}
}

func TestResizeKeepsGradientMonotonic(t *testing.T) {
	noLeak(t)
	data := encPNG(t, hgradient(300, 20))
	for _, interp := range []img.Interp{img.Bilinear, img.Area, img.Nearest} {
		for _, size := range [][2]int{{10, 37}, {20, 150}, {7, 299}, {40, 600}, {20, 1000}} {
			p := decode(t, data, img.DecodeOptions{Resize: img.ResizeOptions{Height: size[0], Width: size[1], Interp: interp}})
			if p.h != size[0] || p.w != size[1] {
				t.Fatalf("shape %dx%d, want %v", p.h, p.w, size)
			}
			for y := range p.h {
				for x := 1; x < p.w; x++ {
					if p.at(y, x)[0] < p.at(y, x-1)[0] {
						t.Fatalf("interp %v size %v: row %d falls at x=%d: %d then %d", interp, size, y, x, p.at(y, x-1)[0], p.at(y, x)[0])
					}
				}
			}
			if p.at(0, 0)[0] > 20 || p.at(0, p.w-1)[0] < 235 {
				t.Fatalf("interp %v size %v: ends %d..%d, want about 0..255", interp, size, p.at(0, 0)[0], p.at(0, p.w-1)[0])
			}
		}
	}
}

func TestResizeSolidStaysExact(t *testing.T) {
	noLeak(t)
	c := color.RGBA{200, 30, 90, 255}
	data := encPNG(t, solid(123, 77, c))
	for _, interp := range []img.Interp{img.Bilinear, img.Area, img.Nearest} {
		for _, size := range [][2]int{{10, 10}, {77, 300}, {200, 50}, {1, 1}} {
			p := decode(t, data, img.DecodeOptions{Resize: img.ResizeOptions{Height: size[0], Width: size[1], Interp: interp}})
			if d := p.maxDiff([]byte{200, 30, 90}); d != 0 {
				t.Fatalf("interp %v size %v: off by %d", interp, size, d)
			}
		}
	}
}

func TestShortSide(t *testing.T) {
	noLeak(t)
	for _, tc := range []struct{ w, h, short, wantH, wantW int }{
		{500, 375, 256, 256, 341}, // torchvision: int(256 * 500 / 375)
		{375, 500, 256, 341, 256},
		{100, 100, 64, 64, 64},
		{30, 20, 40, 40, 60}, // upscaling
	} {
		p := decode(t, encPNG(t, photo(tc.w, tc.h, 1)), img.DecodeOptions{Resize: img.ResizeOptions{ShortSide: tc.short}})
		if p.h != tc.wantH || p.w != tc.wantW {
			t.Errorf("%dx%d short side %d: got %dx%d, want %dx%d", tc.w, tc.h, tc.short, p.w, p.h, tc.wantW, tc.wantH)
		}
	}
}

func TestCenterCropPicksCentre(t *testing.T) {
	noLeak(t)
	// 20x16 quadrants; a 6x4 centre crop is 3x2 of each colour.
	for _, data := range [][]byte{encPNG(t, quadrants(20, 16)), encBMP(quadrants(20, 16))} {
		p := decode(t, data, img.DecodeOptions{Crop: img.CropOptions{Kind: img.CropCenter, Height: 4, Width: 6}})
		if p.h != 4 || p.w != 6 {
			t.Fatalf("shape %dx%d", p.h, p.w)
		}
		for y := range 4 {
			for x := range 6 {
				q := y/2*2 + x/3
				want := quads[q]
				if got := p.at(y, x); !bytes.Equal(got, []byte{want.R, want.G, want.B}) {
					t.Fatalf("(%d, %d) = %v, want quadrant %d %v", y, x, got, q, want)
				}
			}
		}
	}
}

func TestFusedMatchesSteps(t *testing.T) {
	noLeak(t)
	ph := photo(500, 375, 3)
	resize := img.ResizeOptions{ShortSide: 256}
	crop := img.CropOptions{Kind: img.CropCenter, Height: 224, Width: 224}
	steps := func(t *testing.T, data []byte) pixels {
		full, err := img.Decode(data, "", img.DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer full.Release()
		r, err := img.Resize(full, resize)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Release()
		c, err := img.CenterCrop(r, 224, 224)
		if err != nil {
			t.Fatal(err)
		}
		return pix(t, c)
	}
	t.Run("png exact", func(t *testing.T) {
		data := encPNG(t, ph)
		fused := decode(t, data, img.DecodeOptions{Resize: resize, Crop: crop})
		if d := meanAbsDiff(t, fused, steps(t, data)); d != 0 {
			t.Fatalf("fused differs from decode+resize+crop by %v on average", d)
		}
	})
	t.Run("jpeg", func(t *testing.T) {
		data := encJPEG(t, ph, 90)
		fused := decode(t, data, img.DecodeOptions{Resize: resize, Crop: crop})
		if d := meanAbsDiff(t, fused, steps(t, data)); d != 0 {
			t.Fatalf("fused differs from decode+resize+crop by %v on average", d)
		}
	})
	t.Run("jpeg at a reduced DCT scale", func(t *testing.T) {
		// 1000x750 to short side 256: decoded at 1/2 (500x375), then resized.
		data := encJPEG(t, photo(1000, 750, 4), 90)
		fused := decode(t, data, img.DecodeOptions{Resize: resize, Crop: crop})
		d := meanAbsDiff(t, fused, steps(t, data))
		t.Logf("mean abs difference from a full-size decode: %.3f", d)
		if d > 1.5 {
			t.Fatalf("fused differs from decode+resize+crop by %v on average", d)
		}
	})
}

func TestRandomResizedCropDecode(t *testing.T) {
	noLeak(t)
	data := encJPEG(t, photo(320, 240, 5), 90)
	o := img.DecodeOptions{Crop: img.CropOptions{Kind: img.CropRandomResized, Height: 64, Width: 48}}
	var prev []byte
	for seed := range uint64(3) {
		o.Rand = img.NewRand(seed)
		a := decode(t, data, o)
		o.Rand = img.NewRand(seed)
		b := decode(t, data, o)
		if a.h != 64 || a.w != 48 || !bytes.Equal(a.b, b.b) {
			t.Fatalf("seed %d: %dx%d, same twice: %v", seed, a.h, a.w, bytes.Equal(a.b, b.b))
		}
		if bytes.Equal(a.b, prev) {
			t.Fatalf("seed %d gave the same crop as seed %d", seed, seed-1)
		}
		prev = a.b
	}
}

// errCase is a bad input and what its error must say.
type errCase struct {
	name   string
	file   string // written to a file of this name and decoded by path, and decoded as bytes
	data   []byte
	is     error
	substr string
}

func TestDecodeErrors(t *testing.T) {
	noLeak(t)
	jpg := encJPEG(t, photo(64, 48, 2), 90)
	pngData := encPNG(t, photo(64, 48, 2))
	gifData := encGIF(t, quadrants(64, 48))
	gifTable := 3 << (gifData[10]&7 + 1)
	cases := []errCase{
		{"truncated jpeg", "cut.jpg", jpg[:len(jpg)/2], img.ErrTruncated, "JPEG data ends early"},
		{"truncated jpeg header", "head.jpg", jpg[:40], img.ErrTruncated, "header"},
		{"truncated png", "cut.png", pngData[:len(pngData)/2], img.ErrTruncated, "PNG ends inside"},
		{"png without iend", "noend.png", pngData[:len(pngData)-12], img.ErrTruncated, "without its IEND"},
		{"zero bytes", "empty.jpg", []byte{}, img.ErrEmpty, "0 bytes"},
		{"text named jpg", "notes.jpg", []byte("just some text, no pixels here\n"), img.ErrNotImage, `"just som"`},
		{"random bytes", "noise.png", bytes.Repeat([]byte{0x13, 0x37, 0x00, 0xaa}, 100), img.ErrNotImage, "no image format"},
		{"wav", "sound.png", wav(), img.ErrUnsupported, "WAV"},
		{"heic", "phone.jpg", append([]byte("\x00\x00\x00\x18ftypheic"), make([]byte, 100)...), img.ErrUnsupported, "HEIF"},
		{"jpeg bomb", "bomb.jpg", jpegBomb(t, jpg), img.ErrTooLarge, "60000x60000"},
		{"png bomb", "bomb.png", pngBomb(pngData), img.ErrTooLarge, "60000x60000"},
		{"png zero width", "zero.png", pngDims(pngData, 0, 48), img.ErrCorrupt, "0x48"},
		{"gif bomb", "bomb.gif", gifBomb(encGIF(t, quadrants(8, 8))), img.ErrTooLarge, "60000x60000"},
		{"truncated gif", "cut.gif", gifData[:len(gifData)/2], img.ErrTruncated, "GIF ends inside its image 1's data"},
		{"gif without its last sub-block's terminator", "noterm.gif", gifData[:len(gifData)-2], img.ErrTruncated, "GIF ends inside its image 1's data"},
		{"gif cut in its color table", "table.gif", gifData[:20], img.ErrTruncated, "global color table"},
		{"gif cut after its header", "head.gif", gifData[:13+gifTable], img.ErrTruncated, "before any image"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.file, tc.data)
			before := tensor.MemStats()
			start := time.Now()
			for _, named := range []struct {
				name string
				call func() (*tensor.Tensor, error)
			}{
				{path, func() (*tensor.Tensor, error) { return img.DecodeFile(path, img.DecodeOptions{}) }},
				{tc.file, func() (*tensor.Tensor, error) { return img.Decode(tc.data, tc.file, img.DecodeOptions{}) }},
				{"<" + itoa(len(tc.data)) + " bytes>", func() (*tensor.Tensor, error) { return img.Decode(tc.data, "", img.DecodeOptions{}) }},
			} {
				x, err := named.call()
				if err == nil {
					x.Release()
					t.Fatalf("%s decoded", named.name)
				}
				var ae *av.Error
				if !errors.As(err, &ae) || ae.Source != named.name {
					t.Fatalf("error %q does not name %q", err, named.name)
				}
				if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.substr) {
					t.Fatalf("error %q, want %v and %q", err, tc.is, tc.substr)
				}
				t.Log(err)
			}
			if errors.Is(tc.is, img.ErrTooLarge) {
				if d := time.Since(start); d > time.Second {
					t.Errorf("refusing a bomb took %v", d)
				}
				if after := tensor.MemStats(); after.SystemAllocs != before.SystemAllocs {
					t.Errorf("refusing a bomb allocated tensor memory: %+v then %+v", before, after)
				}
			}
		})
	}
}

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}

// jpegBomb patches the SOF0 marker of a JPEG to claim 60000x60000.
func jpegBomb(t testing.TB, jpg []byte) []byte {
	b := bytes.Clone(jpg)
	i := bytes.Index(b, []byte{0xff, 0xc0})
	if i < 0 {
		t.Fatal("no SOF0 marker")
	}
	binary.BigEndian.PutUint16(b[i+5:], 60000)
	binary.BigEndian.PutUint16(b[i+7:], 60000)
	return b
}

func pngDims(p []byte, w, h uint32) []byte {
	b := bytes.Clone(p)
	binary.BigEndian.PutUint32(b[16:], w)
	binary.BigEndian.PutUint32(b[20:], h)
	return b
}

func pngBomb(p []byte) []byte { return pngDims(p, 60000, 60000) }

func gifBomb(g []byte) []byte {
	b := bytes.Clone(g)
	binary.LittleEndian.PutUint16(b[6:], 60000)
	binary.LittleEndian.PutUint16(b[8:], 60000)
	return b
}

func TestSniffsBytesNotNames(t *testing.T) {
	noLeak(t)
	m := quadrants(8, 6)
	path := writeFile(t, "really_a_png.jpg", encPNG(t, m))
	x, err := img.DecodeFile(path, img.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := pix(t, x)
	if !bytes.Equal(p.at(0, 0), []byte{red.R, red.G, red.B}) || !bytes.Equal(p.at(5, 7), []byte{white.R, white.G, white.B}) {
		t.Fatalf("corners %v %v", p.at(0, 0), p.at(5, 7))
	}
}

func TestFFmpegJPEGMatchesTurbo(t *testing.T) {
	noLeak(t)
	data := encJPEG(t, photo(64, 48, 9), 90)
	a := decode(t, data, img.DecodeOptions{})
	x, err := img.DecodeWithFFmpeg(data, "", img.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := pix(t, x)
	if d := meanAbsDiff(t, a, b); d > 1.5 {
		t.Fatalf("FFmpeg and libjpeg-turbo differ by %v on average", d)
	}
}

func TestOptionErrors(t *testing.T) {
	noLeak(t)
	data := encPNG(t, solid(10, 8, red))
	for _, tc := range []struct {
		name string
		o    img.DecodeOptions
		want string
	}{
		{"crop too big", img.DecodeOptions{Crop: img.CropOptions{Kind: img.CropCenter, Height: 9, Width: 4}}, "center crop 9x4 is larger than the image (8x10)"},
		{"crop too big after resize", img.DecodeOptions{Resize: img.ResizeOptions{Height: 4, Width: 4}, Crop: img.CropOptions{Kind: img.CropCenter, Height: 5, Width: 5}}, "larger than the resized image (4x4)"},
		{"size and short side", img.DecodeOptions{Resize: img.ResizeOptions{Height: 4, Width: 4, ShortSide: 3}}, "not both"},
		{"random crop and resize", img.DecodeOptions{Resize: img.ResizeOptions{ShortSide: 3}, Crop: img.CropOptions{Kind: img.CropRandomResized, Height: 2, Width: 2}}, "drop the resize"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, err := img.Decode(data, "a.png", tc.o)
			if err == nil {
				x.Release()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"a.png"`) {
				t.Fatalf("error %q, want %q naming a.png", err, tc.want)
			}
		})
	}
}

func TestDecodePNGPixelFormats(t *testing.T) {
	noLeak(t)
	c := color.NRGBA{200, 30, 90, 255}
	fill := func(m interface {
		Set(x, y int, c color.Color)
	}, c color.Color) {
		for y := range 4 {
			for x := range 6 {
				m.Set(x, y, c)
			}
		}
	}
	r := image.Rect(0, 0, 6, 4)
	gray, gray16 := image.NewGray(r), image.NewGray16(r)
	fill(gray, color.Gray{77})
	fill(gray16, color.Gray16{77 * 257})
	rgba64 := image.NewRGBA64(r)
	fill(rgba64, color.RGBA64{200 * 257, 30 * 257, 90 * 257, 65535})
	pal := image.NewPaletted(r, color.Palette{color.Black, c})
	fill(pal, c)
	nrgba := image.NewNRGBA(r)
	fill(nrgba, color.NRGBA{200, 30, 90, 128}) // alpha is dropped, colour kept
	for _, tc := range []struct {
		name string
		m    image.Image
		rgb  []byte
	}{
		{"gray8", gray, []byte{77, 77, 77}},
		{"gray16", gray16, []byte{77, 77, 77}},
		{"rgb48", rgba64, []byte{200, 30, 90}},
		{"palette", pal, []byte{200, 30, 90}},
		{"rgba", nrgba, []byte{200, 30, 90}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := encPNG(t, tc.m)
			p := decode(t, data, img.DecodeOptions{})
			if d := p.maxDiff(tc.rgb); d != 0 {
				t.Fatalf("rgb %v, want %v", p.at(0, 0), tc.rgb)
			}
			g := decode(t, data, img.DecodeOptions{Mode: img.Gray})
			want := luma(color.RGBA{tc.rgb[0], tc.rgb[1], tc.rgb[2], 255})
			if d := g.maxDiff([]byte{want}); d > 1 {
				t.Fatalf("gray %v, want %d", g.at(0, 0), want)
			}
		})
	}
}

func TestDecodeGrayJPEG(t *testing.T) {
	noLeak(t)
	data, err := os.ReadFile("testdata/gray.jpg") // 16x8, one component, a horizontal ramp
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []img.Mode{img.RGB, img.Gray} {
		p := decode(t, data, img.DecodeOptions{Mode: mode})
		if p.h != 8 || p.w != 16 || p.c != mode.Channels() {
			t.Fatalf("shape %dx%dx%d", p.h, p.w, p.c)
		}
		if px := p.at(4, 15); px[0] < 200 || (p.c == 3 && (px[0] != px[1] || px[1] != px[2])) {
			t.Fatalf("mode %v: right edge %v", mode, px)
		}
	}
}
