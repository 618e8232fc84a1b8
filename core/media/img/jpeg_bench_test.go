package img_test

import (
	"bytes"
	"image"
	"image/jpeg"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spdl-go/spdl-go/core/media/img"
)

// photoSizes are usual photo sizes (width, height), both orientations,
// 375x500 to 800x600, as benchmarks/datasets.py's photos_mixed.
var photoSizes = [][2]int{{500, 375}, {375, 500}, {500, 333}, {640, 480}, {480, 640}, {640, 427}, {800, 600}, {600, 800}}

// fractalNoise is (w*h) noise of unit-ish variance with an amplitude
// spectrum falling about as 1/f**1.2, natural images' statistics: octaves
// of bilinearly interpolated random grids, coarse ones stronger.
func fractalNoise(w, h int, r *rand.Rand) []float64 {
	out := make([]float64, w*h)
	for cell := 256; cell >= 1; cell /= 2 {
		amp := math.Pow(float64(cell), 0.28)
		gw, gh := w/cell+2, h/cell+2
		g := make([]float64, gw*gh)
		for i := range g {
			g[i] = r.NormFloat64() * amp
		}
		for y := range h {
			fy := float64(y) / float64(cell)
			y0 := int(fy)
			ty := fy - float64(y0)
			for x := range w {
				fx := float64(x) / float64(cell)
				x0 := int(fx)
				tx := fx - float64(x0)
				a := g[y0*gw+x0]*(1-tx) + g[y0*gw+x0+1]*tx
				b := g[(y0+1)*gw+x0]*(1-tx) + g[(y0+1)*gw+x0+1]*tx
				out[y*w+x] += a*(1-ty) + b*ty
			}
		}
	}
	var ss float64
	for _, v := range out {
		ss += v * v
	}
	sd := math.Sqrt(ss / float64(len(out)))
	for i := range out {
		out[i] /= sd
	}
	return out
}

// cameraPhoto is a w x h photo-like image: 1/f texture in luminance and
// chroma, a few flat objects with hard edges, faint sensor noise. At
// quality 90 it costs about as many bits per pixel as camera photos.
func cameraPhoto(w, h int, seed uint64) *image.RGBA {
	r := rand.New(rand.NewPCG(seed, 16))
	lum := fractalNoise(w, h, r)
	var chroma [3][]float64
	var base, mix [3]float64
	for c := range 3 {
		chroma[c] = fractalNoise(w, h, r)
		base[c] = 70 + 100*r.Float64()
		mix[c] = 0.7 + 0.6*r.Float64()
	}
	type box struct {
		x0, y0, x1, y1 int
		c              [3]float64
		round          bool
	}
	var boxes []box
	for range 3 + r.IntN(6) {
		x0, y0 := r.IntN(w), r.IntN(h)
		boxes = append(boxes, box{x0, y0, x0 + 10 + r.IntN(w/3), y0 + 10 + r.IntN(h/3),
			[3]float64{float64(r.IntN(256)), float64(r.IntN(256)), float64(r.IntN(256))}, r.IntN(2) == 0})
	}
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			i := y*w + x
			var v [3]float64
			for c := range 3 {
				v[c] = base[c] + 45*mix[c]*lum[i] + 15*chroma[c][i]
			}
			for _, b := range boxes {
				if x < b.x0 || x >= b.x1 || y < b.y0 || y >= b.y1 {
					continue
				}
				if b.round {
					cx, cy := float64(b.x0+b.x1)/2, float64(b.y0+b.y1)/2
					rx, ry := float64(b.x1-b.x0)/2, float64(b.y1-b.y0)/2
					dx, dy := (float64(x)-cx)/rx, (float64(y)-cy)/ry
					if dx*dx+dy*dy > 1 {
						continue
					}
				}
				v = b.c
			}
			for c := range 3 {
				m.Pix[y*m.Stride+4*x+c] = clampByte(v[c] + 2*r.NormFloat64())
			}
			m.Pix[y*m.Stride+4*x+3] = 255
		}
	}
	return m
}

// benchPhotos are the mixed-size photo JPEGs the decode-cost benchmarks
// run on: the *.jpg under $SPDL_GO_BENCH_PHOTOS (e.g. the folder of
// benchmarks/datasets.py's photos_mixed, encoded by Pillow) if set, else
// 16 generated here (quality 90, 4:2:0, about 120 KB on average).
var benchPhotos = sync.OnceValues(func() ([][]byte, error) {
	if dir := os.Getenv("SPDL_GO_BENCH_PHOTOS"); dir != "" {
		var out [][]byte
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || filepath.Ext(p) != ".jpg" {
				return err
			}
			b, err := os.ReadFile(p)
			out = append(out, b)
			return err
		})
		return out, err
	}
	var out [][]byte
	for i := range 16 {
		s := photoSizes[i%len(photoSizes)]
		var b bytes.Buffer
		if err := jpeg.Encode(&b, cameraPhoto(s[0], s[1], uint64(i)), &jpeg.Options{Quality: 90}); err != nil {
			return nil, err
		}
		out = append(out, b.Bytes())
	}
	return out, nil
})

func mustPhotos(b testing.TB) [][]byte {
	files, err := benchPhotos()
	if err != nil {
		b.Fatal(err)
	}
	if len(files) == 0 {
		b.Fatal("no photos")
	}
	return files
}

// BenchmarkPhotosDecodeVsTJ decodes the photos whole (no resize) with
// Decode and with the anchor (a C loop of tjDecompress2 into one warm
// buffer) by turns on one locked thread, timing each pass with the
// thread's CPU clock so that both see the same load; it reports the CPU
// milliseconds per image of each and their ratio (target <= 1.05).
func BenchmarkPhotosDecodeVsTJ(b *testing.B) {
	benchVsTJ(b, img.DecodeOptions{})
}

// BenchmarkPhotosFusedVsTJ is the same for the pipeline's decode (short
// side 256, centre crop 224), against the whole-image anchor.
func BenchmarkPhotosFusedVsTJ(b *testing.B) {
	benchVsTJ(b, fusedOpts)
}

func benchVsTJ(b *testing.B, o img.DecodeOptions) {
	files := mustPhotos(b)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	a, err := img.NewTJAnchor(files, 1000*1000)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Free()
	decodeAll := func() {
		for _, f := range files {
			t, err := img.Decode(f, "", o)
			if err != nil {
				b.Fatal(err)
			}
			t.Release()
		}
	}
	// Warm the pool, the handles and the caches.
	decodeAll()
	if err := a.Run(); err != nil {
		b.Fatal(err)
	}
	var ours, anchor []time.Duration
	for b.Loop() {
		t0 := threadCPUTime()
		decodeAll()
		t1 := threadCPUTime()
		if err := a.Run(); err != nil {
			b.Fatal(err)
		}
		t2 := threadCPUTime()
		ours, anchor = append(ours, t1-t0), append(anchor, t2-t1)
	}
	if ours[0] == 0 {
		b.Skip("no thread CPU clock here")
	}
	n := float64(len(files))
	mo, ma := median(ours), median(anchor)
	b.ReportMetric(mo.Seconds()*1000/n, "ms/img")
	b.ReportMetric(ma.Seconds()*1000/n, "tj-ms/img")
	b.ReportMetric(mo.Seconds()/ma.Seconds(), "x-tj")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
