package img_test

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/media/av"
	"github.com/spdl-go/spdl-go/core/media/img"
	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/tensor"
)

// wide is a decoded uint16 image for checks.
type wide struct {
	h, w, c int
	s       []uint16
}

func pix16(t testing.TB, x *tensor.Tensor) wide {
	t.Helper()
	defer x.Release()
	s := x.Shape()
	if x.DType() != tensor.UInt16 || len(s) != 3 {
		t.Fatalf("got %v, want a uint16 (H, W, C) tensor", x)
	}
	n := int(s[0] * s[1] * s[2])
	return wide{int(s[0]), int(s[1]), int(s[2]), append([]uint16(nil), unsafe.Slice((*uint16)(x.Data()), n)...)}
}

func (p wide) at(y, x int) []uint16 { return p.s[(y*p.w+x)*p.c : (y*p.w+x+1)*p.c] }

// pattern64 is a w x h image whose every pixel differs, in all 16 bits of
// every channel, with alpha varying unless opaque.
func pattern64(w, h int, opaque bool) *image.NRGBA64 {
	m := image.NewNRGBA64(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			a := uint16(65535)
			if !opaque {
				a = uint16(x*4099 + y*31)
			}
			m.SetNRGBA64(x, y, color.NRGBA64{uint16(x*2999 + y*7), uint16(y*3001 + x*13), uint16((x ^ y) * 997), a})
		}
	}
	return m
}

func encPNG16(t testing.TB, m image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func narrow(v uint16) byte { return byte((uint32(v)*255 + 32767) / 65535) }

func luma16(r, g, b uint32) uint32 { return (19595*r + 38470*g + 7471*b + 32768) >> 16 }

func TestDecodeRGBAKeepsAlpha(t *testing.T) {
	noLeak(t)
	const w, h = 13, 7
	nrgba := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			nrgba.SetNRGBA(x, y, color.NRGBA{uint8(x * 19), uint8(y * 37), uint8(x * y), uint8(x*17 + y*3)})
		}
	}
	pal := image.NewPaletted(image.Rect(0, 0, w, h), color.Palette{color.NRGBA{10, 20, 30, 0}, color.NRGBA{200, 30, 90, 255}, color.NRGBA{1, 2, 3, 128}})
	for y := range h {
		for x := range w {
			pal.SetColorIndex(x, y, uint8((x+y)%3))
		}
	}
	want8 := func(m image.Image) func(x, y int) []byte {
		return func(x, y int) []byte {
			c := color.NRGBAModel.Convert(m.At(x, y)).(color.NRGBA)
			return []byte{c.R, c.G, c.B, c.A}
		}
	}
	m64 := pattern64(w, h, false)
	for _, tc := range []struct {
		name string
		data []byte
		want func(x, y int) []byte
	}{
		{"png rgba8", encPNG(t, nrgba), want8(nrgba)},
		{"png palette with transparency", encPNG(t, pal), want8(pal)},
		{"png rgba16", encPNG16(t, m64), func(x, y int) []byte {
			c := m64.NRGBA64At(x, y)
			return []byte{narrow(c.R), narrow(c.G), narrow(c.B), narrow(c.A)}
		}},
		{"png rgb (opaque)", encPNG(t, quadrants(w, h)), func(x, y int) []byte {
			c := quadrants(w, h).RGBAAt(x, y)
			return []byte{c.R, c.G, c.B, 255}
		}},
		{"webp lossless with alpha", encFFmpeg(t, nrgba, "webp", "-lossless", "1"), want8(nrgba)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := decode(t, tc.data, img.DecodeOptions{Mode: img.RGBA})
			if p.h != h || p.w != w || p.c != 4 {
				t.Fatalf("shape %dx%dx%d", p.h, p.w, p.c)
			}
			for y := range h {
				for x := range w {
					if got, want := p.at(y, x), tc.want(x, y); !bytes.Equal(got, want) {
						t.Fatalf("pixel (%d, %d) = %v, want %v", x, y, got, want)
					}
				}
			}
			// RGB is RGBA without its alpha.
			rgb := decode(t, tc.data, img.DecodeOptions{})
			for i := range h * w {
				if !bytes.Equal(rgb.b[3*i:3*i+3], p.b[4*i:4*i+3]) {
					t.Fatalf("pixel %d: rgb %v, rgba %v", i, rgb.b[3*i:3*i+3], p.b[4*i:4*i+4])
				}
			}
		})
	}
}

func TestDecodeRGBAOpaqueFormats(t *testing.T) {
	noLeak(t)
	m := photo(48, 32, 5)
	for _, e := range encodings() {
		t.Run(e.name, func(t *testing.T) {
			data := e.enc(t, m)
			for _, o := range []img.DecodeOptions{
				{},
				{Resize: img.ResizeOptions{ShortSide: 20}, Crop: img.CropOptions{Kind: img.CropCenter, Height: 16, Width: 16}},
			} {
				rgb := decode(t, data, o)
				o.Mode = img.RGBA
				rgba := decode(t, data, o)
				if rgba.c != 4 || rgba.h != rgb.h || rgba.w != rgb.w {
					t.Fatalf("rgba shape %dx%dx%d, rgb %dx%dx%d", rgba.h, rgba.w, rgba.c, rgb.h, rgb.w, rgb.c)
				}
				for i := range rgb.h * rgb.w {
					// A resize of an opaque RGBA image resamples alpha too: it stays 255.
					if !bytes.Equal(rgb.b[3*i:3*i+3], rgba.b[4*i:4*i+3]) || rgba.b[4*i+3] != 255 {
						t.Fatalf("%+v pixel %d: rgb %v, rgba %v", o, i, rgb.b[3*i:3*i+3], rgba.b[4*i:4*i+4])
					}
				}
			}
		})
	}
}

func TestDecodeUint16(t *testing.T) {
	noLeak(t)
	const w, h = 11, 9
	rgb64 := pattern64(w, h, true)
	rgba64 := pattern64(w, h, false)
	g16 := image.NewGray16(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			g16.SetGray16(x, y, color.Gray16{uint16(x*5003 + y*61)})
		}
	}
	full := func(x, y int, m image.Image) (r, g, b, a uint32) {
		c := color.NRGBA64Model.Convert(m.At(x, y)).(color.NRGBA64)
		return uint32(c.R), uint32(c.G), uint32(c.B), uint32(c.A)
	}
	for _, src := range []struct {
		name string
		m    image.Image
		gray bool
	}{{"rgb48", rgb64, false}, {"rgba64", rgba64, false}, {"gray16", g16, true}} {
		data := encPNG16(t, src.m)
		for _, mode := range []img.Mode{img.RGB, img.BGR, img.Gray, img.RGBA} {
			t.Run(src.name+"/"+mode.String(), func(t *testing.T) {
				x, err := img.Decode(data, "", img.DecodeOptions{Mode: mode, DType: tensor.UInt16})
				if err != nil {
					t.Fatal(err)
				}
				p := pix16(t, x)
				if p.h != h || p.w != w || p.c != mode.Channels() {
					t.Fatalf("shape %dx%dx%d", p.h, p.w, p.c)
				}
				for y := range h {
					for x := range w {
						r, g, b, a := full(x, y, src.m)
						var want []uint32
						switch mode {
						case img.RGB:
							want = []uint32{r, g, b}
						case img.BGR:
							want = []uint32{b, g, r}
						case img.RGBA:
							want = []uint32{r, g, b, a}
						case img.Gray:
							if src.gray {
								want = []uint32{r}
							} else {
								want = []uint32{luma16(r, g, b)}
							}
						}
						for k, v := range p.at(y, x) {
							if uint32(v) != want[k] {
								t.Fatalf("pixel (%d, %d) = %v, want %v", x, y, p.at(y, x), want)
							}
						}
					}
				}
				// A centre crop is the same pixels.
				x, err = img.Decode(data, "", img.DecodeOptions{Mode: mode, DType: tensor.UInt16, Crop: img.CropOptions{Kind: img.CropCenter, Height: 4, Width: 5}})
				if err != nil {
					t.Fatal(err)
				}
				c := pix16(t, x)
				top, left := 2, 3 // (9-4)/2 = 2.5 rounds half to even, as torchvision's
				for y := range 4 {
					for x := range 5 {
						if got, want := c.at(y, x), p.at(top+y, left+x); !equal16(got, want) {
							t.Fatalf("crop pixel (%d, %d) = %v, want %v", x, y, got, want)
						}
					}
				}
			})
		}
	}
}

func equal16(a, b []uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// An 8-bit image in uint16 is its uint8 decode times 257, whatever the
// format and path (libjpeg-turbo, FFmpeg, swscale).
func TestDecodeUint16Widens8Bit(t *testing.T) {
	noLeak(t)
	m := photo(40, 30, 3)
	for _, e := range encodings() {
		for _, mode := range []img.Mode{img.RGB, img.Gray, img.RGBA} {
			t.Run(e.name+"/"+mode.String(), func(t *testing.T) {
				data := e.enc(t, m)
				for _, crop := range []img.CropOptions{{}, {Kind: img.CropCenter, Height: 10, Width: 20}} {
					p8 := decode(t, data, img.DecodeOptions{Mode: mode, Crop: crop})
					x, err := img.Decode(data, "", img.DecodeOptions{Mode: mode, DType: tensor.UInt16, Crop: crop})
					if err != nil {
						t.Fatal(err)
					}
					p16 := pix16(t, x)
					if p16.h != p8.h || p16.w != p8.w || p16.c != p8.c {
						t.Fatalf("shape %dx%dx%d, uint8 %dx%dx%d", p16.h, p16.w, p16.c, p8.h, p8.w, p8.c)
					}
					for i, v := range p8.b {
						if uint32(p16.s[i]) != uint32(v)*257 {
							t.Fatalf("sample %d: %d, want %d*257", i, p16.s[i], v)
						}
					}
				}
			})
		}
	}
}

// The default uint8 of a 16-bit PNG rounds each sample (v*255/65535).
func TestDecode16BitPNGToUint8Rounds(t *testing.T) {
	noLeak(t)
	m := pattern64(9, 5, false)
	p := decode(t, encPNG16(t, m), img.DecodeOptions{Mode: img.RGBA})
	for y := range 5 {
		for x := range 9 {
			c := m.NRGBA64At(x, y)
			if want := []byte{narrow(c.R), narrow(c.G), narrow(c.B), narrow(c.A)}; !bytes.Equal(p.at(y, x), want) {
				t.Fatalf("pixel (%d, %d) = %v, want %v", x, y, p.at(y, x), want)
			}
		}
	}
}

func TestUint16RefusesResize(t *testing.T) {
	noLeak(t)
	data := encPNG16(t, pattern64(8, 8, true))
	for _, o := range []img.DecodeOptions{
		{DType: tensor.UInt16, Resize: img.ResizeOptions{ShortSide: 4}},
		{DType: tensor.UInt16, Crop: img.CropOptions{Kind: img.CropRandomResized, Height: 4, Width: 4}, Rand: img.NewRand(1)},
	} {
		x, err := img.Decode(data, "a.png", o)
		if err == nil {
			x.Release()
			t.Fatalf("%+v decoded", o)
		}
		if !strings.Contains(err.Error(), "uint16 cannot be resized") || !strings.Contains(err.Error(), `"a.png"`) {
			t.Fatalf("error %q", err)
		}
	}
	if _, err := img.Decode(data, "a.png", img.DecodeOptions{DType: tensor.Float32}); err == nil || !strings.Contains(err.Error(), "not uint8 or uint16") {
		t.Fatalf("float32: %v", err)
	}
}

// Corrupt 16-bit and alpha PNGs fail as the 8-bit ones do, in every
// mode and dtype, and a dimension bomb is refused before any allocation.
func TestDecodeWidePNGErrors(t *testing.T) {
	noLeak(t)
	p16 := encPNG16(t, pattern64(64, 48, false))
	flipped := bytes.Clone(p16)
	for i := 60; i < len(flipped)-20; i += 7 {
		flipped[i] ^= 0x5a
	}
	cases := []errCase{
		{"truncated png16", "cut.png", p16[:len(p16)/2], img.ErrTruncated, "PNG ends inside"},
		{"png16 without iend", "noend.png", p16[:len(p16)-12], img.ErrTruncated, "without its IEND"},
		{"flipped png16 data", "flip.png", flipped, img.ErrCorrupt, "FFmpeg cannot decode this PNG"},
		{"zero bytes", "empty.png", []byte{}, img.ErrEmpty, "0 bytes"},
		{"text named png", "notes.png", []byte("not a picture at all\n"), img.ErrNotImage, `"not a pi"`},
		{"png16 bomb", "bomb.png", pngBomb(p16), img.ErrTooLarge, "60000x60000"},
		{"png16 just over max_pixels", "big.png", pngDims(p16, 2049, 2048), img.ErrTooLarge, "2049x2048"},
	}
	for _, tc := range cases {
		for _, o := range []img.DecodeOptions{
			{Mode: img.RGBA, MaxPixels: 1 << 22},
			{Mode: img.RGB, DType: tensor.UInt16, MaxPixels: 1 << 22},
			{Mode: img.RGBA, DType: tensor.UInt16, MaxPixels: 1 << 22, Crop: img.CropOptions{Kind: img.CropCenter, Height: 8, Width: 8}},
		} {
			t.Run(tc.name+"/"+o.Mode.String(), func(t *testing.T) {
				before := tensor.MemStats()
				start := time.Now()
				x, err := img.Decode(tc.data, tc.file, o)
				if err == nil {
					x.Release()
					t.Fatal("decoded")
				}
				var ae *av.Error
				if !errors.As(err, &ae) || ae.Source != tc.file {
					t.Fatalf("error %q does not name %q", err, tc.file)
				}
				if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.substr) {
					t.Fatalf("error %q, want %v and %q", err, tc.is, tc.substr)
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
}

func TestDecodeImageOpModeAndDType(t *testing.T) {
	noLeak(t)
	data := encPNG16(t, pattern64(6, 4, false))
	op := mustOp(t, "decode_image", map[string]any{"mode": "rgba", "dtype": "uint16"})
	x, ok := run(t, op, data).(*tensor.Tensor)
	if !ok {
		t.Fatal("no tensor")
	}
	p := pix16(t, x)
	c := pattern64(6, 4, false).NRGBA64At(5, 3)
	if got := p.at(3, 5); !equal16(got, []uint16{c.R, c.G, c.B, c.A}) {
		t.Fatalf("pixel %v, want %v", got, c)
	}
	for _, tc := range []struct {
		opts map[string]any
		want string
	}{
		{map[string]any{"dtype": "float32"}, `"dtype" must be "uint8" or "uint16"`},
		{map[string]any{"dtype": "uint16", "short_side": 4}, "uint16 cannot be resized"},
		{map[string]any{"mode": "cmyk"}, `"rgba"`},
	} {
		if _, err := ops.New("decode_image", tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.opts, err, tc.want)
		}
	}
}

// A gray PNG decoded to RGB with a resize is resampled as one channel and
// replicated: the result must be what resampling the replicated colour
// image gives, for every filter and crop.
func TestGrayPNGAsColourResizesAsThreeChannels(t *testing.T) {
	noLeak(t)
	ph := photo(203, 151, 6)
	g8 := image.NewGray(ph.Bounds())
	g16 := image.NewGray16(ph.Bounds())
	for y := range 151 {
		for x := range 203 {
			v := ph.RGBAAt(x, y).G
			g8.SetGray(x, y, color.Gray{v})
			g16.SetGray16(x, y, color.Gray16{uint16(v)<<8 | uint16(x*y)&255})
		}
	}
	for _, src := range []struct {
		name string
		data []byte
	}{{"gray8", encPNG(t, g8)}, {"gray16", encPNG16(t, g16)}} {
		for _, interp := range []img.Interp{img.Bilinear, img.Area, img.Nearest} {
			for _, mode := range []img.Mode{img.RGB, img.BGR} {
				t.Run(src.name+"/"+mode.String(), func(t *testing.T) {
					resize := img.ResizeOptions{ShortSide: 64, Interp: interp}
					crop := img.CropOptions{Kind: img.CropCenter, Height: 50, Width: 60}
					fused := decode(t, src.data, img.DecodeOptions{Mode: mode, Resize: resize, Crop: crop})
					full, err := img.Decode(src.data, "", img.DecodeOptions{Mode: mode})
					if err != nil {
						t.Fatal(err)
					}
					defer full.Release()
					r, err := img.Resize(full, resize)
					if err != nil {
						t.Fatal(err)
					}
					defer r.Release()
					c, err := img.CenterCrop(r, 50, 60)
					if err != nil {
						t.Fatal(err)
					}
					if steps := pix(t, c); !bytes.Equal(fused.b, steps.b) {
						t.Fatalf("fused gray-as-colour differs from three-channel steps by %v on average", meanAbsDiff(t, fused, steps))
					}
				})
			}
		}
	}
}
