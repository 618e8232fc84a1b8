package img_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

// field returns the value under key of a dict output.
func field(t testing.TB, out any, key string) any {
	t.Helper()
	d, ok := out.(*value.Dict)
	if !ok {
		t.Fatalf("got %s, want a dict", value.Describe(out))
	}
	v, ok := d.Get(key)
	if !ok {
		t.Fatalf("no key %q in %s", key, value.Describe(out))
	}
	return v
}

func TestDecodeImageOpItems(t *testing.T) {
	noLeak(t)
	data := encPNG(t, quadrants(8, 6))
	path := writeFile(t, "q.png", data)
	cases := []struct {
		name string
		opts map[string]any
		in   any
		get  func(t testing.TB, out any) any
		keep string // what the rest of the item must still say
	}{
		{"bytes", nil, data, func(_ testing.TB, out any) any { return out }, ""},
		{"path", nil, path, func(_ testing.TB, out any) any { return out }, ""},
		{"tuple keeps label", nil, value.Tuple{data, int64(7)}, func(t testing.TB, out any) any {
			tu := out.(value.Tuple)
			if tu[1] != int64(7) {
				t.Fatalf("label %v", tu[1])
			}
			return tu[0]
		}, ""},
		{"dict in place", nil, dict("image", data, "label", int64(3)), func(t testing.TB, out any) any {
			return field(t, out, "image")
		}, `"label": 3`},
		{"dict keeps path", map[string]any{"key": "path", "output_key": "image"}, dict("path", path), func(t testing.TB, out any) any {
			return field(t, out, "image")
		}, `"path": "`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := run(t, mustOp(t, "decode_image", tc.opts), tc.in)
			if tc.keep != "" && !strings.Contains(value.Describe(out), tc.keep) {
				t.Fatalf("output %s lost %s", value.Describe(out), tc.keep)
			}
			p := pix(t, tc.get(t, out))
			if p.h != 6 || p.w != 8 || !bytes.Equal(p.at(0, 0), []byte{red.R, red.G, red.B}) {
				t.Fatalf("%dx%d, (0,0) = %v", p.h, p.w, p.at(0, 0))
			}
		})
	}
}

func TestDecodeImageOpModesAndFusion(t *testing.T) {
	noLeak(t)
	data := encPNG(t, quadrants(40, 30))
	cases := []struct {
		opts    map[string]any
		h, w, c int
		first   []byte
	}{
		{map[string]any{"mode": "bgr"}, 30, 40, 3, []byte{red.B, red.G, red.R}},
		{map[string]any{"mode": "gray"}, 30, 40, 1, []byte{luma(red)}},
		{map[string]any{"size": value.List{int64(15), int64(20)}}, 15, 20, 3, []byte{red.R, red.G, red.B}},
		{map[string]any{"short_side": int64(12)}, 12, 16, 3, []byte{red.R, red.G, red.B}},
		{map[string]any{"crop": "center", "crop_size": int64(10)}, 10, 10, 3, []byte{red.R, red.G, red.B}},
		{map[string]any{"short_side": int64(20), "crop": "center", "crop_size": value.List{int64(10), int64(12)}, "interpolation": "area"}, 10, 12, 3, []byte{red.R, red.G, red.B}},
		{map[string]any{"crop": "random_resized", "crop_size": int64(8), "seed": int64(3)}, 8, 8, 3, nil},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.opts), func(t *testing.T) {
			p := pix(t, run(t, mustOp(t, "decode_image", tc.opts), data))
			if p.h != tc.h || p.w != tc.w || p.c != tc.c {
				t.Fatalf("shape %dx%dx%d, want %dx%dx%d", p.h, p.w, p.c, tc.h, tc.w, tc.c)
			}
			if tc.first != nil && !bytes.Equal(p.at(0, 0), tc.first) {
				t.Fatalf("(0,0) = %v, want %v", p.at(0, 0), tc.first)
			}
		})
	}
}

func TestDecodeImageOpErrorsNameTheInput(t *testing.T) {
	noLeak(t)
	bad := []byte("not an image at all")
	path := writeFile(t, "bad.jpg", bad)
	keep, _ := tensor.New(tensor.UInt8, 2) // released with the failed item
	cases := []struct {
		name string
		opts map[string]any
		in   any
		want string
	}{
		{"path", nil, path, `decode_image: decode "` + path + `": not an image`},
		{"bytes alone", nil, bad, `decode "<19 bytes>": not an image`},
		{"bytes with a path in the item", map[string]any{"key": "data"}, dict("path", "a/b.jpg", "data", bad, "extra", keep), `decode "a/b.jpg": not an image`},
		{"bytes with a name_key", map[string]any{"name_key": "file"}, dict("file", "c.jpg", "image", bad), `decode "c.jpg"`},
		{"not bytes", nil, int64(3), "expected encoded image bytes or a path (str), got 3"},
		{"missing file", nil, path + ".missing", "no such file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mustOp(t, "decode_image", tc.opts).Process(context.Background(), tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestOpOptionErrors(t *testing.T) {
	noLeak(t)
	cases := []struct {
		op   string
		opts map[string]any
		want string
	}{
		{"decode_image", map[string]any{"mode": "cmyk"}, `mode "cmyk"`},
		{"decode_image", map[string]any{"crop": "center"}, "needs crop_size"},
		{"decode_image", map[string]any{"crop_size": int64(3)}, `needs crop="center"`},
		{"decode_image", map[string]any{"crop": "middle", "crop_size": int64(3)}, `option "crop" must be`},
		{"decode_image", map[string]any{"size": int64(256)}, "use short_side=n"},
		{"decode_image", map[string]any{"sizes": int64(256)}, `unknown option "sizes"`},
		{"decode_image", map[string]any{"max_pixels": int64(0)}, "must be positive"},
		{"decode_image", map[string]any{"interpolation": "cubic"}, `interpolation "cubic"`},
		{"resize", nil, "give size=[height, width] or short_side=n"},
		{"resize", map[string]any{"size": value.List{int64(3)}}, "must be [height, width]"},
		{"center_crop", nil, `"size"`},
		{"random_resized_crop", map[string]any{"size": int64(8), "scale": value.List{0.5, 0.1}}, "scale (0.5, 0.1)"},
		{"random_resized_crop", map[string]any{"size": int64(8), "seed": "x"}, `"seed" must be an int`},
		{"random_hflip", map[string]any{"p": 1.5}, `"p" must be in [0, 1]`},
		{"normalize", map[string]any{"mean": value.List{0.5}, "std": value.List{0.5, 0.5}}, "one value per channel"},
		{"normalize", map[string]any{"layout": "nchw"}, `"layout"`},
		{"hflip", map[string]any{"p": 0.5}, `unknown option "p"`},
	}
	for _, tc := range cases {
		t.Run(tc.op+" "+tc.want, func(t *testing.T) {
			_, err := ops.New(tc.op, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// imageTensor decodes m (as PNG) into a tensor.
func imageTensor(t testing.TB, data []byte) *tensor.Tensor {
	t.Helper()
	return run(t, mustOp(t, "decode_image", nil), data).(*tensor.Tensor)
}

func TestCenterCropOp(t *testing.T) {
	noLeak(t)
	in := imageTensor(t, encPNG(t, quadrants(20, 16)))
	p := pix(t, run(t, mustOp(t, "center_crop", map[string]any{"size": value.List{int64(4), int64(6)}}), in))
	for y := range 4 {
		for x := range 6 {
			want := quads[y/2*2+x/3]
			if !bytes.Equal(p.at(y, x), []byte{want.R, want.G, want.B}) {
				t.Fatalf("(%d, %d) = %v, want %v", y, x, p.at(y, x), want)
			}
		}
	}
	// Too large: the error names both sizes, and the input is released.
	in = imageTensor(t, encPNG(t, quadrants(20, 16)))
	_, err := mustOp(t, "center_crop", map[string]any{"size": int64(17)}).Process(context.Background(), in)
	if err == nil || !strings.Contains(err.Error(), "center_crop: center crop 17x17 is larger than the image (16x20)") {
		t.Fatalf("err = %v", err)
	}
}

func TestHFlipOps(t *testing.T) {
	noLeak(t)
	data := encPNG(t, quadrants(6, 4))
	check := func(t *testing.T, p pixels, flipped bool) {
		t.Helper()
		tl := quads[0]
		if flipped {
			tl = quads[1]
		}
		if !bytes.Equal(p.at(0, 0), []byte{tl.R, tl.G, tl.B}) {
			t.Fatalf("top-left %v, want %v (flipped %v)", p.at(0, 0), tl, flipped)
		}
		// A mirror: column x equals column w-1-x of the original.
		orig := pix(t, imageTensor(t, data))
		for y := range p.h {
			for x := range p.w {
				src := x
				if flipped {
					src = p.w - 1 - x
				}
				if !bytes.Equal(p.at(y, x), orig.at(y, src)) {
					t.Fatalf("(%d, %d) = %v, want %v", y, x, p.at(y, x), orig.at(y, src))
				}
			}
		}
	}
	t.Run("hflip", func(t *testing.T) {
		check(t, pix(t, run(t, mustOp(t, "hflip", nil), imageTensor(t, data))), true)
	})
	t.Run("p=1", func(t *testing.T) {
		check(t, pix(t, run(t, mustOp(t, "random_hflip", map[string]any{"p": 1.0}), imageTensor(t, data))), true)
	})
	t.Run("p=0", func(t *testing.T) {
		check(t, pix(t, run(t, mustOp(t, "random_hflip", map[string]any{"p": int64(0)}), imageTensor(t, data))), false)
	})
	t.Run("gray", func(t *testing.T) {
		x := run(t, mustOp(t, "decode_image", map[string]any{"mode": "gray"}), data)
		p := pix(t, run(t, mustOp(t, "hflip", nil), x))
		if p.at(0, 0)[0] != luma(quads[1]) || p.at(3, 0)[0] != luma(quads[3]) {
			t.Fatalf("gray flip %v %v", p.at(0, 0), p.at(3, 0))
		}
	})
	t.Run("about half flip", func(t *testing.T) {
		op := mustOp(t, "random_hflip", map[string]any{"seed": int64(5)})
		flips := 0
		for range 200 {
			p := pix(t, run(t, op, imageTensor(t, data)))
			if p.at(0, 0)[1] == quads[1].G {
				flips++
			}
		}
		if flips < 70 || flips > 130 {
			t.Fatalf("%d of 200 flipped with p=0.5", flips)
		}
	})
}

func TestNormalizeOp(t *testing.T) {
	noLeak(t)
	// A 2x3 image with known values.
	vals := []byte{0, 128, 255, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 250}
	mk := func() *tensor.Tensor {
		x, err := tensor.New(tensor.UInt8, 2, 3, 3)
		if err != nil {
			t.Fatal(err)
		}
		copy(x.Bytes(), vals)
		return x
	}
	mean, std := []float64{0.485, 0.456, 0.406}, []float64{0.229, 0.224, 0.225}
	want := func(i, ch int) float32 { return float32((float64(vals[i*3+ch])/255 - mean[ch]) / std[ch]) }
	for _, layout := range []string{"chw", "hwc"} {
		t.Run(layout, func(t *testing.T) {
			out := run(t, mustOp(t, "normalize", map[string]any{"layout": layout}), mk()).(*tensor.Tensor)
			defer out.Release()
			if out.DType() != tensor.Float32 {
				t.Fatalf("dtype %v", out.DType())
			}
			got := unsafe.Slice((*float32)(out.Data()), out.Numel())
			for i := range 6 {
				for ch := range 3 {
					idx := ch*6 + i
					if layout == "hwc" {
						idx = i*3 + ch
					}
					if got[idx] != want(i, ch) {
						t.Fatalf("pixel %d channel %d = %v, want %v", i, ch, got[idx], want(i, ch))
					}
				}
			}
			wantShape := map[string]string{"chw": "[3 2 3]", "hwc": "[2 3 3]"}[layout]
			if fmt.Sprint(out.Shape()) != wantShape {
				t.Fatalf("shape %v, want %s", out.Shape(), wantShape)
			}
		})
	}
	t.Run("custom single channel", func(t *testing.T) {
		x, _ := tensor.New(tensor.UInt8, 1, 2, 1)
		copy(x.Bytes(), []byte{0, 255})
		out := run(t, mustOp(t, "normalize", map[string]any{"mean": value.List{0.5}, "std": value.List{0.5}}), x).(*tensor.Tensor)
		defer out.Release()
		got := unsafe.Slice((*float32)(out.Data()), 2)
		if got[0] != -1 || got[1] != 1 {
			t.Fatalf("got %v, want [-1 1]", got)
		}
	})
	t.Run("wrong channels", func(t *testing.T) {
		x, _ := tensor.New(tensor.UInt8, 1, 2, 1)
		_, err := mustOp(t, "normalize", nil).Process(context.Background(), x)
		if err == nil || !strings.Contains(err.Error(), "1 channels but mean and std have 3") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("not uint8", func(t *testing.T) {
		x, _ := tensor.New(tensor.Float32, 1, 2, 3)
		_, err := mustOp(t, "normalize", nil).Process(context.Background(), x)
		if err == nil || !strings.Contains(err.Error(), "expects a uint8 (H, W, C) image tensor") {
			t.Fatalf("err = %v", err)
		}
	})
}

// randomOutputs runs op on n items (dicts with an "id") in the given order
// and returns each item's pixels by id.
func randomOutputs(t *testing.T, op ops.Op, data []byte, order []int) map[int][]byte {
	t.Helper()
	out := map[int][]byte{}
	for _, id := range order {
		item := dict("id", int64(id), "image", imageTensor(t, data))
		res := run(t, op, item)
		out[id] = pix(t, field(t, res, "image")).b
	}
	return out
}

func TestRandomOpsReproducible(t *testing.T) {
	noLeak(t)
	data := encPNG(t, photo(64, 48, 8))
	order := []int{0, 1, 2, 3, 4, 5, 6, 7}
	reversed := []int{7, 6, 5, 4, 3, 2, 1, 0}
	for _, tc := range []struct {
		op   string
		opts map[string]any
	}{
		{"random_resized_crop", map[string]any{"size": int64(16)}},
		{"random_hflip", map[string]any{}},
		{"decode_image", map[string]any{"crop": "random_resized", "crop_size": int64(16)}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			mk := func(seed int64, key string) ops.Op {
				opts := map[string]any{"seed": seed}
				for k, v := range tc.opts {
					opts[k] = v
				}
				if key != "" {
					opts["rng_key"] = key
				}
				return mustOp(t, tc.op, opts)
			}
			outputs := func(op ops.Op, order []int) map[int][]byte {
				if tc.op != "decode_image" {
					return randomOutputs(t, op, data, order)
				}
				out := map[int][]byte{}
				for _, id := range order {
					res := run(t, op, dict("id", int64(id), "image", data))
					out[id] = pix(t, field(t, res, "image")).b
				}
				return out
			}
			same := func(a, b map[int][]byte) bool {
				for id := range a {
					if !bytes.Equal(a[id], b[id]) {
						return false
					}
				}
				return true
			}
			a, b := outputs(mk(1, ""), order), outputs(mk(1, ""), order)
			if !same(a, b) {
				t.Fatal("the same seed and order gave different draws")
			}
			if c := outputs(mk(2, ""), order); same(a, c) {
				t.Fatal("seeds 1 and 2 gave the same draws")
			}
			distinct := map[string]bool{}
			for _, v := range a {
				distinct[string(v)] = true
			}
			if len(distinct) < 2 {
				t.Fatal("every item got the same draw")
			}
			// rng_key: draws depend on (seed, id) only, not on the order.
			k1, k2 := outputs(mk(1, "id"), order), outputs(mk(1, "id"), reversed)
			if !same(k1, k2) {
				t.Fatal("rng_key draws depend on the item order")
			}
			if k3 := outputs(mk(3, "id"), order); same(k1, k3) {
				t.Fatal("rng_key draws ignore the seed")
			}
		})
	}
	t.Run("rng_key needs dicts", func(t *testing.T) {
		op := mustOp(t, "random_hflip", map[string]any{"rng_key": "id"})
		_, err := op.Process(context.Background(), imageTensor(t, data))
		if err == nil || !strings.Contains(err.Error(), `rng_key "id" needs dict items`) {
			t.Fatalf("err = %v", err)
		}
		_, err = op.Process(context.Background(), dict("image", imageTensor(t, data)))
		if err == nil || !strings.Contains(err.Error(), "no such key") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestRandomResizedCropFallback(t *testing.T) {
	noLeak(t)
	// A very wide image: no window with ratio in [3/4, 4/3] and scale near 1
	// fits, so torchvision's fallback crops the centre at ratio 4/3.
	data := encPNG(t, hgradient(400, 20))
	op := mustOp(t, "random_resized_crop", map[string]any{"size": value.List{int64(20), int64(40)}, "scale": value.List{0.99, 1.0}, "seed": int64(1)})
	p := pix(t, run(t, op, imageTensor(t, data)))
	// The centre 27 columns of 400 hold values about 119..136.
	if v := p.at(10, 0)[0]; v < 110 || v > 128 {
		t.Fatalf("left edge %d, want the centre of the gradient", v)
	}
	if v := p.at(10, 39)[0]; v < 126 || v > 145 {
		t.Fatalf("right edge %d, want the centre of the gradient", v)
	}
}

func TestResizeOp(t *testing.T) {
	noLeak(t)
	data := encPNG(t, hgradient(300, 20))
	p := pix(t, run(t, mustOp(t, "resize", map[string]any{"short_side": int64(10)}), imageTensor(t, data)))
	if p.h != 10 || p.w != 150 {
		t.Fatalf("shape %dx%d", p.h, p.w)
	}
	p = pix(t, run(t, mustOp(t, "resize", map[string]any{"size": value.Tuple{int64(5), int64(7)}, "interpolation": "nearest"}), imageTensor(t, data)))
	if p.h != 5 || p.w != 7 {
		t.Fatalf("shape %dx%d", p.h, p.w)
	}
	// Not a tensor: the error says what to do.
	_, err := mustOp(t, "resize", map[string]any{"short_side": int64(10)}).Process(context.Background(), "a.jpg")
	if err == nil || !strings.Contains(err.Error(), "decode images first") {
		t.Fatalf("err = %v", err)
	}
}

func ExampleDecode() {
	ctx := context.Background()
	decode, _ := ops.New("decode_image", map[string]any{
		"short_side": 256, "crop": "center", "crop_size": 224,
	})
	normalize, _ := ops.New("normalize", nil)
	var tb testing.T
	item := dict("image", encJPEG(&tb, photo(500, 375, 1), 90), "label", int64(3))
	out, err := decode.Process(ctx, item)
	if err != nil {
		panic(err)
	}
	out, err = normalize.Process(ctx, out)
	if err != nil {
		panic(err)
	}
	defer value.Release(out)
	fmt.Println(value.Describe(out))
	// Output: {"image": tensor(float32, [3 224 224]), "label": 3}
}
