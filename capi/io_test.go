package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/jpeg"
	"image/png"
	"strings"
	"sync"
	"testing"

	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
	"github.com/spdl-go/spdl-go/core/wire"
)

// testImage is an h x w RGB gradient encoded as format.
func testImage(t testing.TB, format string, h, w int) []byte {
	pix := make([]byte, h*w*3)
	for i := range pix {
		pix[i] = byte(i / 3 % 251)
	}
	o := imageOptions{format: format, pixFmt: "rgb24", quality: 90, subsampling: "444", level: -1}
	var b []byte
	var err error
	if format == "png" {
		b, err = encodePNG(pix, h, w, o)
	} else {
		b, err = encodeJPEG(pix, h, w, o)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wireOf(t testing.TB, v any) []byte {
	b, err := wire.Encode(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestIOApply(t *testing.T) {
	img := testImage(t, "png", 24, 32)
	out, err := ioApply([]byte(`{"op": {"name": "decode_image", "options": {"mode": "gray"}}}`), wireOf(t, img))
	if err != nil {
		t.Fatal(err)
	}
	tt := out.(*tensor.Tensor)
	if fmt.Sprint(tt.Shape()) != "[24 32 1]" {
		t.Fatalf("shape %v", tt.Shape())
	}
	tt.Release()

	for _, tc := range []struct {
		name, req, want string
		in              any
		invalid         bool
	}{
		{"bad option", `{"op": {"name": "decode_image", "options": {"mode": "cmyk"}}}`, `mode "cmyk"`, img, true},
		{"unknown op", `{"op": {"name": "nope"}}`, `unknown op "nope"`, img, true},
		{"no op", `{}`, "names no op", img, true},
		{"unknown field", `{"op": {"name": "identity"}, "nmae": "x"}`, `unknown option "nmae"`, img, true},
		{"negative threads", `{"op": {"name": "identity"}, "threads": -1}`, "threads must be >= 0", img, true},
		{"bytes are named", `{"op": {"name": "decode_image"}, "name": "cat.jpg"}`, "cat.jpg: decode_image", []byte("junk"), false},
		{"zero bytes", `{"op": {"name": "decode_image"}, "name": "z.jpg"}`, "z.jpg: decode_image", []byte{}, false},
		{"truncated", `{"op": {"name": "decode_image"}, "name": "t.png"}`, "t.png", img[:len(img)/2], false},
		{"missing file", `{"op": {"name": "decode_image"}}`, "/nonexistent/x.jpg", "/nonexistent/x.jpg", false},
		{"batch of not a list", `{"op": {"name": "decode_image"}, "batch": true}`, "needs a list", img, true},
		{"empty batch", `{"op": {"name": "decode_image"}, "batch": true}`, "at least one", value.List{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ioApply([]byte(tc.req), wireOf(t, tc.in))
			_, inv := errors.AsType[*invalidError](err)
			if err == nil || !strings.Contains(err.Error(), tc.want) || inv != tc.invalid {
				t.Fatalf("err = %v (invalid %v), want one containing %q (invalid %v)", err, inv, tc.want, tc.invalid)
			}
		})
	}
}

func TestIOApplyBatch(t *testing.T) {
	png1, jpg := testImage(t, "png", 24, 32), testImage(t, "jpeg", 40, 30)
	req := `{"op": {"name": "decode_image", "options": {"size": [16, 16]}}, "batch": true, "threads": 2, "names": ["a", "b", "c", "d"]}`
	out, err := ioApply([]byte(req), wireOf(t, value.List{png1, jpg, png1, jpg}))
	if err != nil {
		t.Fatal(err)
	}
	res := out.(value.Tuple)
	batch := res[0].(*tensor.Tensor)
	if fmt.Sprint(batch.Shape()) != "[4 16 16 3]" || len(res[1].(value.List)) != 0 {
		t.Fatalf("got %v, %v", batch, res[1])
	}
	// Items 0 and 2 are the same image, decoded by different goroutines.
	b := batch.Bytes()
	n := 16 * 16 * 3
	if !bytes.Equal(b[:n], b[2*n:3*n]) {
		t.Fatal("items 0 and 2 differ")
	}
	batch.Release()

	// Strict: the bad item fails the call and is named.
	items := value.List{png1, []byte("junk"), png1, png1}
	_, err = ioApply([]byte(req), wireOf(t, items))
	if err == nil || !strings.Contains(err.Error(), "item 1 (b)") {
		t.Fatalf("err = %v", err)
	}
	// Not strict: it is left out and reported.
	lenient := strings.Replace(req, `"batch": true`, `"batch": true, "strict": false`, 1)
	out, err = ioApply([]byte(lenient), wireOf(t, items))
	if err != nil {
		t.Fatal(err)
	}
	res = out.(value.Tuple)
	if errs := res[1].(value.List); len(errs) != 1 || !strings.Contains(errs[0].(string), "item 1 (b)") {
		t.Fatalf("errors %v", errs)
	}
	if got := res[0].(*tensor.Tensor); got.Shape()[0] != 3 {
		t.Fatalf("batch %v", got)
	} else {
		got.Release()
	}
	// Sizes differ without a resize.
	_, err = ioApply([]byte(`{"op": {"name": "decode_image"}, "batch": true}`), wireOf(t, value.List{png1, jpg}))
	if err == nil || !strings.Contains(err.Error(), "a batch needs one size") {
		t.Fatalf("err = %v", err)
	}
	// Every item failing fails even a lenient batch.
	_, err = ioApply([]byte(lenient), wireOf(t, value.List{[]byte("x"), []byte("y"), []byte("z"), []byte{}}))
	if err == nil || !strings.Contains(err.Error(), "every item failed") {
		t.Fatalf("err = %v", err)
	}
}

// Many callers at once, as Python threads without the GIL call it.
func TestIOConcurrent(t *testing.T) {
	img := testImage(t, "jpeg", 64, 48)
	in := wireOf(t, img)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 8 {
		wg.Go(func() {
			for range 10 {
				out, err := ioApply([]byte(`{"op": {"name": "decode_image", "options": {"size": [32, 32]}}}`), in)
				if err != nil {
					errs <- err
					return
				}
				out.(*tensor.Tensor).Release()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestIOEncode(t *testing.T) {
	pix := make([]byte, 8*6*3)
	for i := range pix {
		pix[i] = byte(i)
	}
	p, err := encodePNG(pix, 8, 6, imageOptions{pixFmt: "bgr24", level: 9})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(p))
	if err != nil {
		t.Fatal(err)
	}
	// Pixel (0, 1) is bytes 3..5 in BGR order: R is byte 5.
	if r, g, b, _ := img.At(1, 0).RGBA(); r>>8 != 5 || g>>8 != 4 || b>>8 != 3 {
		t.Fatalf("pixel (0,1) = %d %d %d", r>>8, g>>8, b>>8)
	}
	j, err := encodeJPEG(pix, 8, 6, imageOptions{pixFmt: "rgb24", quality: 90, subsampling: "420"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := jpeg.DecodeConfig(bytes.NewReader(j)); err != nil || cfg.Width != 6 || cfg.Height != 8 {
		t.Fatalf("jpeg: %v %+v", err, cfg)
	}
	tt, err := tensor.New(tensor.Float32, 4, 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ opts, want string }{
		{`{"format": "png"}`, "needs a uint8 array"},
		{`{"format": "gif"}`, `format must be "jpeg" or "png"`},
		{`{"format": "jpeg", "quality": 0}`, "quality must be 1..100"},
		{`{"format": "png", "pix_fmt": "rgba"}`, "needs 4 channels"},
	} {
		_, err := ioEncodeImage(wireOf(t, tt.Retain()), []byte(tc.opts))
		if _, inv := errors.AsType[*invalidError](err); err == nil || !inv || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: err = %v, want %q", tc.opts, err, tc.want)
		}
	}
	tt.Release()
}

func TestIOLoad(t *testing.T) {
	for _, tc := range []struct {
		format, opts, want string
		invalid            bool
	}{
		{"npy", `{"name": "a.npy"}`, "a.npy: npy: empty input", false},
		{"npz", `{"max_uncompressed_bytes": -1}`, "max_uncompressed_bytes must be >= 0", true},
		{"wav", `{"duration_seconds": -1}`, "duration_seconds must be >= 0", true},
		{"tar", `{"x": 1}`, `unknown option "x"`, true},
		{"gif", `{}`, `unknown format "gif"`, true},
	} {
		_, err := ioLoad(tc.format, []byte(tc.opts), nil)
		if _, inv := errors.AsType[*invalidError](err); err == nil || inv != tc.invalid || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s %s: err = %v, want %q", tc.format, tc.opts, err, tc.want)
		}
	}
}

// panicOp panics on the input "boom", as a buggy op might.
type panicOp struct{}

func (panicOp) Process(_ context.Context, in any) (any, error) {
	if s, _ := in.(string); s == "boom" {
		panic("op bug")
	}
	return tensor.New(tensor.UInt8, 2)
}

// A panic in a batch's goroutine is the batch's error, not the process's death.
func TestIOBatchPanic(t *testing.T) {
	_, err := applyBatch(panicOp{}, value.List{"a", "boom", "c"}, []string{"a", "boom", "c"}, 2, true)
	if err == nil || !strings.Contains(err.Error(), "item 1 (boom): spdl-go internal error") || !strings.Contains(err.Error(), "op bug") {
		t.Fatalf("err = %v", err)
	}
}
