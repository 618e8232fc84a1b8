package img_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/spdl-go/spdl-go/core/media/img"
)

// TestJPEGWindowMatchesWholeDecode checks that a crop decoded from only
// the window of the JPEG it needs matches decoding the whole JPEG and then
// resizing and cropping, within 2 levels, across sizes (odd ones, DCT
// scaling 1/2 and 1/4), chroma subsamplings, modes, filters and crop
// windows (centre crops, and random resized crops that touch the edges).
func TestJPEGWindowMatchesWholeDecode(t *testing.T) {
	noLeak(t)
	type src struct {
		name string
		data []byte
	}
	var srcs []src
	for i, size := range [][2]int{{500, 375}, {375, 500}, {333, 251}, {97, 61}, {1000, 750}, {1601, 1203}} {
		srcs = append(srcs, src{fmt.Sprintf("%dx%d_420", size[0], size[1]), encJPEG(t, photo(size[0], size[1], uint64(20+i)), 90)})
	}
	prog, err := os.ReadFile("testdata/progressive.jpg") // 203x157, progressive, 4:2:0
	if err != nil {
		t.Fatal(err)
	}
	srcs = append(srcs, src{"203x157_progressive", prog}) // decoded whole either way
	gray, err := os.ReadFile("testdata/gray.jpg")
	if err != nil {
		t.Fatal(err)
	}
	srcs = append(srcs, src{"16x8_gray", gray})
	for _, pf := range []string{"yuvj444p", "yuvj422p"} {
		data := encFFmpeg(t, photo(341, 227, 7), "jpg", "-pix_fmt", pf, "-q:v", "2")
		srcs = append(srcs, src{"341x227_" + pf, data})
	}

	type geom struct {
		name string
		o    img.DecodeOptions
		seed uint64
	}
	geoms := []geom{
		{"short256_center224", img.DecodeOptions{Resize: img.ResizeOptions{ShortSide: 256}, Crop: img.CropOptions{Kind: img.CropCenter, Height: 224, Width: 224}}, 0},
		{"short64_center57x33_area", img.DecodeOptions{Resize: img.ResizeOptions{ShortSide: 64, Interp: img.Area}, Crop: img.CropOptions{Kind: img.CropCenter, Height: 57, Width: 33}}, 0},
		{"size40x90_center31x77_nearest", img.DecodeOptions{Resize: img.ResizeOptions{Height: 40, Width: 90, Interp: img.Nearest}, Crop: img.CropOptions{Kind: img.CropCenter, Height: 31, Width: 77}}, 0},
		{"center5x3_no_resize", img.DecodeOptions{Crop: img.CropOptions{Kind: img.CropCenter, Height: 5, Width: 3}}, 0},
	}
	for seed := range uint64(6) {
		geoms = append(geoms, geom{fmt.Sprintf("random_resized_%d", seed), img.DecodeOptions{
			Crop: img.CropOptions{Kind: img.CropRandomResized, Height: 224, Width: 224, Scale: [2]float64{0.01, 0.3}},
			Rand: img.NewRand(seed)}, seed})
	}
	geoms = append(geoms, geom{"random_resized_default_odd", img.DecodeOptions{
		Crop: img.CropOptions{Kind: img.CropRandomResized, Height: 37, Width: 23}, Rand: img.NewRand(99)}, 99})

	for _, s := range srcs {
		for _, g := range geoms {
			for mode, mname := range []string{"rgb", "bgr", "gray"} {
				t.Run(s.name+"/"+g.name+"/"+mname, func(t *testing.T) {
					o := g.o
					o.Mode = img.Mode(mode)
					if o.Rand != nil {
						o.Rand = img.NewRand(g.seed)
					}
					win, err := img.Decode(s.data, "", o)
					if o.Rand != nil {
						o.Rand = img.NewRand(g.seed)
					}
					whole, werr := img.DecodeWholeJPEG(s.data, "", o)
					if (err == nil) != (werr == nil) {
						t.Fatalf("window decode: %v; whole decode: %v", err, werr)
					}
					if err != nil {
						return
					}
					a, b := pix(t, win), pix(t, whole)
					if a.h != b.h || a.w != b.w || a.c != b.c {
						t.Fatalf("window decode %dx%dx%d, whole %dx%dx%d", a.h, a.w, a.c, b.h, b.w, b.c)
					}
					if d := maxAbsDiff(a.b, b.b); d > 2 {
						t.Fatalf("window decode differs from a whole decode by up to %d (mean %.3f)", d, meanAbsDiff(t, a, b))
					}
				})
			}
		}
	}
}

func maxAbsDiff(a, b []byte) int {
	m := 0
	for i := range a {
		m = max(m, absInt(int(a[i])-int(b[i])))
	}
	return m
}

// A JPEG cut short fails as truncated with a crop too, although the crop
// needs only rows before the cut.
func TestJPEGWindowTruncated(t *testing.T) {
	noLeak(t)
	jpg := encJPEG(t, photo(500, 375, 3), 90)
	o := img.DecodeOptions{Crop: img.CropOptions{Kind: img.CropCenter, Height: 16, Width: 16}}
	x, err := img.Decode(jpg[:len(jpg)*3/4], "", o)
	if err == nil {
		x.Release()
		t.Fatal("decoded")
	}
	if !errors.Is(err, img.ErrTruncated) {
		t.Fatalf("error %q, want %v", err, img.ErrTruncated)
	}
}
