package img

/*
#cgo CFLAGS: -O3 -std=gnu11 -fvisibility=hidden
#cgo pkg-config: libturbojpeg libavcodec libavformat libavutil libswscale
#cgo LDFLAGS: -lm
#include "kernels.h"
#include "pngconv.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"

	"github.com/spdl-go/spdl-go/core/tensor"
)

// Reasons a decode fails, for errors.Is. The error returned is an
// *av.Error naming the input, wrapping one of these with the details.
var (
	ErrEmpty       = errors.New("empty input (0 bytes)")
	ErrNotImage    = errors.New("not an image")
	ErrUnsupported = errors.New("unsupported image format")
	ErrTruncated   = errors.New("truncated image data")
	ErrCorrupt     = errors.New("corrupt image data")
	ErrTooLarge    = errors.New("image too large")
)

// DefaultMaxPixels is the largest image (width times height) decoded
// unless DecodeOptions.MaxPixels says otherwise: about 10000x10000.
const DefaultMaxPixels = 100_000_000

// Mode is the pixel layout of decoded images.
type Mode int

const (
	RGB  Mode = iota // (H, W, 3), R G B
	BGR              // (H, W, 3), B G R (OpenCV's order)
	Gray             // (H, W, 1), ITU-R 601-2 luma
	RGBA             // (H, W, 4), R G B A; alpha 255 (65535) where the image has none
)

// ParseMode reads "rgb", "bgr", "gray" or "rgba".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "rgb", "RGB":
		return RGB, nil
	case "bgr", "BGR":
		return BGR, nil
	case "gray", "grey", "L":
		return Gray, nil
	case "rgba", "RGBA":
		return RGBA, nil
	}
	return 0, fmt.Errorf("mode %q is not one of \"rgb\", \"bgr\", \"gray\", \"rgba\"", s)
}

func (m Mode) String() string {
	if m < RGB || m > RGBA {
		return fmt.Sprintf("Mode(%d)", int(m))
	}
	return [...]string{"rgb", "bgr", "gray", "rgba"}[m]
}

// Channels is C of the (H, W, C) tensors of this mode.
func (m Mode) Channels() int {
	switch m {
	case Gray:
		return 1
	case RGBA:
		return 4
	}
	return 3
}

func (m Mode) packed() C.int {
	switch m {
	case BGR:
		return C.SPDL_PK_BGR
	case Gray:
		return C.SPDL_PK_GRAY
	case RGBA:
		return C.SPDL_PK_RGBA
	}
	return C.SPDL_PK_RGB
}

// Interp is a resampling filter.
type Interp int

const (
	// Bilinear is a triangle filter, widened by the scale factor when
	// shrinking (antialiased, as Pillow's and torchvision's antialias=True).
	Bilinear Interp = iota
	// Area averages the source pixels each output pixel covers (a box
	// filter widened by the scale; OpenCV's INTER_AREA when shrinking).
	Area
	// Nearest takes the source pixel under each output pixel's centre
	// (Pillow's NEAREST, torch's "nearest-exact").
	Nearest
)

// ParseInterp reads "bilinear", "area" or "nearest".
func ParseInterp(s string) (Interp, error) {
	switch s {
	case "bilinear", "linear":
		return Bilinear, nil
	case "area", "box":
		return Area, nil
	case "nearest":
		return Nearest, nil
	}
	return 0, fmt.Errorf("interpolation %q is not one of \"bilinear\", \"area\", \"nearest\"", s)
}

func (i Interp) filter() C.int {
	switch i {
	case Area:
		return C.SPDL_FILTER_AREA
	case Nearest:
		return C.SPDL_FILTER_NEAREST
	}
	return C.SPDL_FILTER_BILINEAR
}

// axis is one dimension of a resample: the source window [off, off+len)
// maps onto full output pixels, of which [outOff, outOff+outLen) are made.
type axis struct {
	off, len             float64
	full, outOff, outLen int
}

func whole(n int) axis { return axis{0, float64(n), n, 0, n} }

// copies reports whether the axis only selects pixels: output i is source
// pixel first+i.
func (a axis) copies() (first int, ok bool) {
	if a.len != float64(a.full) || a.off != math.Trunc(a.off) {
		return 0, false
	}
	return int(a.off) + a.outOff, true
}

// scaled maps the axis onto a source scaled by f (a JPEG decoded at a
// reduced DCT size).
func (a axis) scaled(f float64) axis {
	a.off *= f
	a.len *= f
	return a
}

func (a axis) c() C.spdl_axis {
	return C.spdl_axis{src_off: C.double(a.off), src_len: C.double(a.len),
		out_full: C.int32_t(a.full), out_off: C.int32_t(a.outOff), out_len: C.int32_t(a.outLen)}
}

// plan is the geometry of a resize and crop of a source image.
type plan struct {
	y, x   axis
	interp Interp
	flip   bool
}

func identityPlan(h, w int) plan { return plan{y: whole(h), x: whole(w)} }

func (p plan) outH() int { return p.y.outLen }
func (p plan) outW() int { return p.x.outLen }

// isIdentity reports whether the plan returns the source unchanged.
func (p plan) isIdentity(h, w int) bool {
	return !p.flip && p.y == whole(h) && p.x == whole(w)
}

// run applies p to src (h rows of w*c bytes, stride bytes apart) and
// returns a new (outH, outW, c) tensor.
func (p plan) run(src []byte, h, w, c, stride int) (*tensor.Tensor, error) {
	out, err := tensor.New(tensor.UInt8, int64(p.outH()), int64(p.outW()), int64(c))
	if err != nil {
		return nil, err
	}
	if p.outH() == 0 || p.outW() == 0 {
		return out, nil
	}
	dst := out.Bytes()
	fy, okY := p.y.copies()
	fx, okX := p.x.copies()
	if okY && okX && !p.flip {
		row := p.outW() * c
		for y := range p.outH() {
			s := (fy+y)*stride + fx*c
			copy(dst[y*row:(y+1)*row], src[s:s+row])
		}
		return out, nil
	}
	flip := C.int(0)
	if p.flip {
		flip = 1
	}
	rc := C.spdl_resize_u8((*C.uint8_t)(&src[0]), C.int32_t(h), C.int32_t(w), C.int32_t(c), C.int64_t(stride),
		(*C.uint8_t)(&dst[0]), C.int64_t(p.outW()*c), p.y.c(), p.x.c(), p.interp.filter(), flip)
	if rc != 0 {
		out.Release()
		return nil, errors.New("out of memory resizing")
	}
	return out, nil
}

// runWide applies p to 16-bit src (h rows of w*c samples, stride bytes
// apart) and returns a new uint16 (outH, outW, c) tensor. Only plans that
// select pixels (a centre crop, or none) are taken: DecodeOptions.Validate
// refuses the others for uint16.
func (p plan) runWide(src []byte, h, w, c, stride int) (*tensor.Tensor, error) {
	fy, okY := p.y.copies()
	fx, okX := p.x.copies()
	if !okY || !okX || p.flip {
		return nil, errors.New("uint16 images cannot be resized or flipped")
	}
	out, err := tensor.New(tensor.UInt16, int64(p.outH()), int64(p.outW()), int64(c))
	if err != nil {
		return nil, err
	}
	dst := out.Bytes()
	row := p.outW() * c * 2
	for y := range p.outH() {
		s := (fy+y)*stride + fx*c*2
		copy(dst[y*row:(y+1)*row], src[s:s+row])
	}
	return out, nil
}

// convertTensor converts an 8-bit (H, W, C) image of mode from into a new
// tensor of mode to with depth-bit samples (pngconv.h's rules).
func convertTensor(t *tensor.Tensor, from, to Mode, depth int) (*tensor.Tensor, error) {
	shape := t.Shape()
	h, w := shape[0], shape[1]
	dt := tensor.UInt8
	if depth == 16 {
		dt = tensor.UInt16
	}
	out, err := tensor.New(dt, h, w, int64(to.Channels()))
	if err != nil {
		return nil, err
	}
	if h == 0 || w == 0 {
		return out, nil
	}
	if C.spdl_px_convert((*C.uint8_t)(t.Data()), C.int64_t(w)*C.int64_t(from.Channels()), from.packed(), 8, 0, nil,
		(*C.uint8_t)(out.Data()), C.int64_t(w)*C.int64_t(to.Channels()*depth/8), to.packed(), C.int(depth),
		C.int32_t(h), C.int32_t(w)) != 0 {
		out.Release()
		return nil, fmt.Errorf("cannot convert %v pixels to %v", from, to)
	}
	return out, nil
}

// ResizeOptions says how to resize: to Height x Width, or so that the
// shorter side is ShortSide (the longer one keeps the aspect ratio,
// truncated, as torchvision's Resize(int)). The zero value does not resize.
type ResizeOptions struct {
	Height, Width int
	ShortSide     int
	Interp        Interp
}

// Enabled reports whether r resizes.
func (r ResizeOptions) Enabled() bool { return r.Height > 0 || r.ShortSide > 0 }

func (r ResizeOptions) validate() error {
	switch {
	case r.ShortSide < 0 || r.Height < 0 || r.Width < 0:
		return fmt.Errorf("resize sizes must be positive, not %dx%d / short side %d", r.Height, r.Width, r.ShortSide)
	case r.ShortSide > 0 && (r.Height > 0 || r.Width > 0):
		return errors.New("give a resize size or a short side, not both")
	case (r.Height > 0) != (r.Width > 0):
		return fmt.Errorf("resize size %dx%d needs both a height and a width", r.Height, r.Width)
	}
	return nil
}

// size is the full resized size of an h x w image.
func (r ResizeOptions) size(h, w int) (int, int) {
	switch {
	case r.Height > 0:
		return r.Height, r.Width
	case r.ShortSide > 0 && h <= w:
		return r.ShortSide, max(1, int(float64(r.ShortSide)*float64(w)/float64(h)))
	case r.ShortSide > 0:
		return max(1, int(float64(r.ShortSide)*float64(h)/float64(w))), r.ShortSide
	}
	return h, w
}

// CropKind selects a crop.
type CropKind int

const (
	CropNone CropKind = iota
	// CropCenter cuts Height x Width from the centre (after any resize),
	// with torchvision's rounding; it fails if the image is smaller.
	CropCenter
	// CropRandomResized picks a window of random area (Scale, a fraction
	// of the image) and aspect ratio (Ratio, width/height) as torchvision's
	// RandomResizedCrop does, including its fallback to a centre crop after
	// 10 misses, and resizes it to Height x Width.
	CropRandomResized
)

// CropOptions says how to crop.
type CropOptions struct {
	Kind          CropKind
	Height, Width int
	Scale, Ratio  [2]float64 // RandomResizedCrop; zero means (0.08, 1) and (3/4, 4/3)
}

func (c CropOptions) validate() error {
	if c.Kind == CropNone {
		return nil
	}
	if c.Height <= 0 || c.Width <= 0 {
		return fmt.Errorf("crop size %dx%d must be positive", c.Height, c.Width)
	}
	if c.Kind == CropRandomResized {
		s, r := c.scaleRatio()
		if !(s[0] > 0 && s[0] <= s[1]) {
			return fmt.Errorf("scale (%v, %v) must satisfy 0 < min <= max", s[0], s[1])
		}
		if !(r[0] > 0 && r[0] <= r[1]) {
			return fmt.Errorf("ratio (%v, %v) must satisfy 0 < min <= max", r[0], r[1])
		}
	}
	return nil
}

func (c CropOptions) scaleRatio() (s, r [2]float64) {
	s, r = c.Scale, c.Ratio
	if s == [2]float64{} {
		s = [2]float64{0.08, 1}
	}
	if r == [2]float64{} {
		r = [2]float64{3.0 / 4, 4.0 / 3}
	}
	return s, r
}

// makePlan is the geometry of resize then crop on an h x w image.
func makePlan(h, w int, r ResizeOptions, c CropOptions, g *Rand) (plan, error) {
	p := identityPlan(h, w)
	p.interp = r.Interp
	if c.Kind == CropRandomResized {
		if g == nil {
			return p, errors.New("a random resized crop needs a random source")
		}
		s, ratio := c.scaleRatio()
		top, left, ch, cw := randomWindow(h, w, s, ratio, g)
		p.y = axis{float64(top), float64(ch), c.Height, 0, c.Height}
		p.x = axis{float64(left), float64(cw), c.Width, 0, c.Width}
		return p, nil
	}
	rh, rw := r.size(h, w)
	p.y, p.x = axis{0, float64(h), rh, 0, rh}, axis{0, float64(w), rw, 0, rw}
	if c.Kind == CropCenter {
		if c.Height > rh || c.Width > rw {
			what := "the image"
			if r.Enabled() {
				what = "the resized image"
			}
			return p, fmt.Errorf("center crop %dx%d is larger than %s (%dx%d); resize first or crop less", c.Height, c.Width, what, rh, rw)
		}
		p.y.outOff, p.y.outLen = int(math.RoundToEven(float64(rh-c.Height)/2)), c.Height
		p.x.outOff, p.x.outLen = int(math.RoundToEven(float64(rw-c.Width)/2)), c.Width
	}
	return p, nil
}

// randomWindow is torchvision's RandomResizedCrop.get_params: returns
// top, left, height, width.
func randomWindow(h, w int, scale, ratio [2]float64, g *Rand) (int, int, int, int) {
	area := float64(h) * float64(w)
	logLo, logHi := math.Log(ratio[0]), math.Log(ratio[1])
	for range 10 {
		target := area * (scale[0] + (scale[1]-scale[0])*g.Float64())
		aspect := math.Exp(logLo + (logHi-logLo)*g.Float64())
		cw := int(math.RoundToEven(math.Sqrt(target * aspect)))
		ch := int(math.RoundToEven(math.Sqrt(target / aspect)))
		if 0 < cw && cw <= w && 0 < ch && ch <= h {
			top := g.Intn(h - ch + 1)
			left := g.Intn(w - cw + 1)
			return top, left, ch, cw
		}
	}
	// Fallback: a centre crop of the closest allowed aspect ratio.
	in := float64(w) / float64(h)
	cw, ch := w, h
	switch {
	case in < ratio[0]:
		ch = int(math.RoundToEven(float64(cw) / ratio[0]))
	case in > ratio[1]:
		cw = int(math.RoundToEven(float64(ch) * ratio[1]))
	}
	ch, cw = min(max(ch, 1), h), min(max(cw, 1), w)
	return (h - ch) / 2, (w - cw) / 2, ch, cw
}
