package img_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spdl-go/spdl-go/core/media/img"
	"github.com/spdl-go/spdl-go/core/tensor"
)

// FuzzDecodeImage feeds arbitrary bytes, with varied options, to Decode:
// it must never crash, must fail or return a tensor of the planned shape,
// and must leave no tensor alive. Seeds: the small files in testdata/.
//
//	go test -run '^$' -fuzz FuzzDecodeImage -fuzztime 30s ./core/media/img
func FuzzDecodeImage(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*")
	for _, p := range seeds {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			continue // testdata/fuzz: the corpus Go reads itself
		}
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, opt := range []uint8{0, 0x15, 0x2a, 0x3f} {
			f.Add(b, opt)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, opt uint8) {
		o := img.DecodeOptions{
			Mode:      img.Mode(opt % 4),
			MaxPixels: 1 << 22,
		}
		switch (opt >> 2) % 4 {
		case 1:
			o.Resize = img.ResizeOptions{ShortSide: 1 + int(opt>>4), Interp: img.Interp(opt % 3)}
		case 2:
			o.Resize = img.ResizeOptions{Height: 3, Width: 5}
			o.Crop = img.CropOptions{Kind: img.CropCenter, Height: 2, Width: 2}
		case 3:
			o.Crop = img.CropOptions{Kind: img.CropRandomResized, Height: 4, Width: 3}
			o.Rand = img.NewRand(uint64(opt))
		}
		x, err := img.Decode(data, "fuzz", o)
		if err == nil {
			s := x.Shape()
			if len(s) != 3 || s[0] <= 0 || s[1] <= 0 || s[2] != int64(o.Mode.Channels()) {
				t.Errorf("shape %v for mode %v", s, o.Mode)
			}
			if o.Crop.Kind != img.CropNone && (s[0] != int64(o.Crop.Height) || s[1] != int64(o.Crop.Width)) {
				t.Errorf("shape %v, want the crop %dx%d", s, o.Crop.Height, o.Crop.Width)
			}
			x.Release()
		}
		if s := tensor.MemStats(); s.LiveTensors != 0 {
			t.Fatalf("tensor leak: %+v", s)
		}
	})
}

// FuzzDecodeImageWide is FuzzDecodeImage for the alpha and 16-bit
// outputs (mode RGBA, dtype uint16, with and without a centre crop): the
// converters of pngconv.c and the uint16 crop. Seeds: testdata/, which
// holds 16-bit, gray+alpha, RGBA and transparent-palette PNGs.
//
//	go test -run '^$' -fuzz FuzzDecodeImageWide -fuzztime 30s ./core/media/img
func FuzzDecodeImageWide(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*")
	for _, p := range seeds {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, opt := range []uint8{3, 4, 0x0b, 0x0e} {
			f.Add(b, opt)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, opt uint8) {
		o := img.DecodeOptions{Mode: img.Mode(opt % 4), MaxPixels: 1 << 22}
		if opt&4 != 0 {
			o.DType = tensor.UInt16
		}
		switch (opt >> 3) % 3 {
		case 1:
			o.Crop = img.CropOptions{Kind: img.CropCenter, Height: 2, Width: 3}
		case 2:
			if o.DType != tensor.UInt16 {
				o.Resize = img.ResizeOptions{ShortSide: 3}
			}
		}
		x, err := img.Decode(data, "fuzz", o)
		if err == nil {
			s := x.Shape()
			want := tensor.UInt8
			if o.DType == tensor.UInt16 {
				want = tensor.UInt16
			}
			if x.DType() != want || len(s) != 3 || s[0] <= 0 || s[1] <= 0 || s[2] != int64(o.Mode.Channels()) {
				t.Errorf("%v for mode %v dtype %v", x, o.Mode, o.DType)
			}
			if o.Crop.Kind != img.CropNone && (s[0] != 2 || s[1] != 3) {
				t.Errorf("shape %v, want the crop 2x3", s)
			}
			x.Release()
		}
		if s := tensor.MemStats(); s.LiveTensors != 0 {
			t.Fatalf("tensor leak: %+v", s)
		}
	})
}
