package img_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/spdl-go/spdl-go/core/media/img"
	"github.com/spdl-go/spdl-go/core/tensor"
)

// benchJPEGs are photo-like JPEGs of ImageNet's typical size (500x375 and
// 375x500), quality 90, 4:2:0 (Go's encoder), 60-70 KB each.
var benchJPEGs = sync.OnceValue(func() [][]byte {
	var tb testing.B
	var out [][]byte
	for i, size := range [][2]int{{500, 375}, {375, 500}, {500, 375}, {500, 333}} {
		out = append(out, encJPEG(&tb, photo(size[0], size[1], uint64(10+i)), 90))
	}
	return out
})

// benchDecode runs decode on the bench JPEGs, one at a time on one
// goroutine: the figures are per core.
func benchDecode(b *testing.B, decode func(data []byte) (*tensor.Tensor, error)) {
	files := benchJPEGs()
	var n int64
	for _, f := range files {
		n += int64(len(f))
	}
	b.SetBytes(n / int64(len(files)))
	b.ReportAllocs()
	// Warm the tensor pool and the decoder handles: start-up is not per-item cost.
	for _, f := range files {
		t, err := decode(f)
		if err != nil {
			b.Fatal(err)
		}
		t.Release()
	}
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; b.Loop(); i++ {
		t, err := decode(files[i%len(files)])
		if err != nil {
			b.Fatal(err)
		}
		t.Release()
	}
	reportRates(b, cpuTime()-cpu)
}

func reportRates(b *testing.B, cpu time.Duration) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
	if cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "images/cpu-s")
	}
}

var fusedOpts = img.DecodeOptions{
	Resize: img.ResizeOptions{ShortSide: 256},
	Crop:   img.CropOptions{Kind: img.CropCenter, Height: 224, Width: 224},
}

// (a) libjpeg-turbo, full size, RGB.
func BenchmarkDecodeJPEG(b *testing.B) {
	benchDecode(b, func(d []byte) (*tensor.Tensor, error) { return img.Decode(d, "", img.DecodeOptions{}) })
}

// (b) decode + resize short side 256 + centre crop 224, fused.
func BenchmarkDecodeJPEGResizeCrop(b *testing.B) {
	benchDecode(b, func(d []byte) (*tensor.Tensor, error) { return img.Decode(d, "", fusedOpts) })
}

// (b') the same as three separate steps, each making a full tensor.
func BenchmarkDecodeJPEGThenResizeThenCrop(b *testing.B) {
	benchDecode(b, func(d []byte) (*tensor.Tensor, error) {
		full, err := img.Decode(d, "", img.DecodeOptions{})
		if err != nil {
			return nil, err
		}
		defer full.Release()
		r, err := img.Resize(full, img.ResizeOptions{ShortSide: 256})
		if err != nil {
			return nil, err
		}
		defer r.Release()
		return img.CenterCrop(r, 224, 224)
	})
}

// The ImageNet training path: random resized crop to 224, fused.
func BenchmarkDecodeJPEGRandomResizedCrop(b *testing.B) {
	o := img.DecodeOptions{Crop: img.CropOptions{Kind: img.CropRandomResized, Height: 224, Width: 224}}
	g := img.NewRand(1)
	benchDecode(b, func(d []byte) (*tensor.Tensor, error) {
		o.Rand = g
		return img.Decode(d, "", o)
	})
}

// (c) FFmpeg's mjpeg decoder, full size, RGB (libswscale from yuvj420p).
func BenchmarkDecodeJPEGFFmpeg(b *testing.B) {
	benchDecode(b, func(d []byte) (*tensor.Tensor, error) { return img.DecodeWithFFmpeg(d, "", img.DecodeOptions{}) })
}

// The decode_image op with a dict item, as a pipeline stage runs it.
func BenchmarkDecodeImageOp(b *testing.B) {
	op := mustOp(b, "decode_image", map[string]any{"short_side": int64(256), "crop": "center", "crop_size": int64(224)})
	ctx := context.Background()
	benchDecode(b, func(d []byte) (*tensor.Tensor, error) {
		out, err := op.Process(ctx, dict("image", d, "label", int64(1)))
		if err != nil {
			return nil, err
		}
		v, _ := out.(interface{ Get(string) (any, bool) }).Get("image")
		return v.(*tensor.Tensor), nil
	})
}

// Transforms on a decoded 375x500 image.
func BenchmarkTransforms(b *testing.B) {
	full, err := img.Decode(benchJPEGs()[0], "", img.DecodeOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer full.Release()
	crop, err := img.CenterCrop(full, 224, 224)
	if err != nil {
		b.Fatal(err)
	}
	defer crop.Release()
	norm, err := img.NewNormalizer(img.ImageNetMean, img.ImageNetStd, false)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		in   *tensor.Tensor
		fn   func(t *tensor.Tensor) (*tensor.Tensor, error)
	}{
		{"resize_short256_bilinear", full, func(t *tensor.Tensor) (*tensor.Tensor, error) {
			return img.Resize(t, img.ResizeOptions{ShortSide: 256})
		}},
		{"resize_short256_area", full, func(t *tensor.Tensor) (*tensor.Tensor, error) {
			return img.Resize(t, img.ResizeOptions{ShortSide: 256, Interp: img.Area})
		}},
		{"resize_224x224_nearest", full, func(t *tensor.Tensor) (*tensor.Tensor, error) {
			return img.Resize(t, img.ResizeOptions{Height: 224, Width: 224, Interp: img.Nearest})
		}},
		{"center_crop_224", full, func(t *tensor.Tensor) (*tensor.Tensor, error) { return img.CenterCrop(t, 224, 224) }},
		{"hflip_224", crop, img.HFlip},
		{"normalize_224_chw", crop, norm.Apply},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.in.Bytes())))
			cpu := cpuTime()
			for b.Loop() {
				out, err := tc.fn(tc.in)
				if err != nil {
					b.Fatal(err)
				}
				out.Release()
			}
			reportRates(b, cpuTime()-cpu)
		})
	}
}

// BenchmarkFusedVsDecodeOnly alternates (a) and (b) on the same image in
// one loop and times each with this thread's CPU clock, so that both see
// the same machine load; it reports their per-core rates and the ratio.
func BenchmarkFusedVsDecodeOnly(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	files := benchJPEGs()
	var decodeCPU, fusedCPU time.Duration
	step := func(d []byte, o img.DecodeOptions) time.Duration {
		start := threadCPUTime()
		t, err := img.Decode(d, "", o)
		if err != nil {
			b.Fatal(err)
		}
		t.Release()
		return threadCPUTime() - start
	}
	for _, f := range files {
		step(f, img.DecodeOptions{})
		step(f, fusedOpts)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		f := files[i%len(files)]
		decodeCPU += step(f, img.DecodeOptions{})
		fusedCPU += step(f, fusedOpts)
	}
	if decodeCPU == 0 || fusedCPU == 0 {
		b.Skip("no thread CPU clock here")
	}
	b.ReportMetric(float64(b.N)/decodeCPU.Seconds(), "decode-images/cpu-s")
	b.ReportMetric(float64(b.N)/fusedCPU.Seconds(), "fused-images/cpu-s")
	b.ReportMetric(decodeCPU.Seconds()/fusedCPU.Seconds(), "fused/decode")
}
