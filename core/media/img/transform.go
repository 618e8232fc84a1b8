package img

/*
#include "kernels.h"
*/
import "C"

import (
	"fmt"

	"github.com/spdl-go/spdl-go/core/tensor"
)

// The transforms below take a uint8 (H, W, C) contiguous tensor, return a
// new tensor in pooled C memory, and leave the input to the caller.

// imageShape checks that t is a uint8 (H, W, C) image and returns its size.
func imageShape(t *tensor.Tensor) (h, w, c int, err error) {
	shape := t.Shape()
	if t.DType() != tensor.UInt8 || len(shape) != 3 {
		return 0, 0, 0, fmt.Errorf("expects a uint8 (H, W, C) image tensor, got %v", t)
	}
	if !t.OnCPU() {
		return 0, 0, 0, fmt.Errorf("expects an image in CPU memory, got %v on %v; image ops come before to_device", t, t.Device())
	}
	if !t.Contiguous() {
		return 0, 0, 0, fmt.Errorf("expects a contiguous image tensor, got %v with strides %v", t, t.Strides())
	}
	h, w, c = int(shape[0]), int(shape[1]), int(shape[2])
	if h == 0 || w == 0 || c == 0 {
		return 0, 0, 0, fmt.Errorf("the image %v is empty", t)
	}
	return h, w, c, nil
}

func runPlan(t *tensor.Tensor, p plan, h, w, c int) (*tensor.Tensor, error) {
	return p.run(t.Bytes(), h, w, c, w*c)
}

// Resize resamples t to the size r gives (antialiased when shrinking).
func Resize(t *tensor.Tensor, r ResizeOptions) (*tensor.Tensor, error) {
	h, w, c, err := imageShape(t)
	if err != nil {
		return nil, err
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	p, err := makePlan(h, w, r, CropOptions{}, nil)
	if err != nil {
		return nil, err
	}
	return runPlan(t, p, h, w, c)
}

// CenterCrop cuts height x width from the centre of t, rounding the
// offsets as torchvision does; it fails if t is smaller.
func CenterCrop(t *tensor.Tensor, height, width int) (*tensor.Tensor, error) {
	h, w, c, err := imageShape(t)
	if err != nil {
		return nil, err
	}
	crop := CropOptions{Kind: CropCenter, Height: height, Width: width}
	if err := crop.validate(); err != nil {
		return nil, err
	}
	p, err := makePlan(h, w, ResizeOptions{}, crop, nil)
	if err != nil {
		return nil, err
	}
	return runPlan(t, p, h, w, c)
}

// RandomResizedCrop cuts a random window from t (torchvision's
// algorithm, drawing from g) and resizes it to crop's size with interp.
func RandomResizedCrop(t *tensor.Tensor, crop CropOptions, interp Interp, g *Rand) (*tensor.Tensor, error) {
	h, w, c, err := imageShape(t)
	if err != nil {
		return nil, err
	}
	crop.Kind = CropRandomResized
	if err := crop.validate(); err != nil {
		return nil, err
	}
	p, err := makePlan(h, w, ResizeOptions{Interp: interp}, crop, g)
	if err != nil {
		return nil, err
	}
	return runPlan(t, p, h, w, c)
}

// HFlip mirrors t left to right.
func HFlip(t *tensor.Tensor) (*tensor.Tensor, error) {
	h, w, c, err := imageShape(t)
	if err != nil {
		return nil, err
	}
	out, err := tensor.New(tensor.UInt8, int64(h), int64(w), int64(c))
	if err != nil {
		return nil, err
	}
	C.spdl_hflip_u8((*C.uint8_t)(t.Data()), (*C.uint8_t)(out.Data()), C.int32_t(h), C.int32_t(w), C.int32_t(c))
	return out, nil
}

// ImageNet's channel statistics, torchvision's usual Normalize values.
var (
	ImageNetMean = []float64{0.485, 0.456, 0.406}
	ImageNetStd  = []float64{0.229, 0.224, 0.225}
)

// Normalizer converts uint8 images to float32 (x/255 - mean) / std per
// channel. Each output is the float64 result rounded to float32, looked
// up in a table made once.
type Normalizer struct {
	mean, std []float64
	hwc       bool
	lut       []float32 // 256 per channel
}

// NewNormalizer makes a Normalizer for len(mean) == len(std) channels;
// hwc keeps the (H, W, C) layout instead of making (C, H, W).
func NewNormalizer(mean, std []float64, hwc bool) (*Normalizer, error) {
	if len(mean) == 0 || len(mean) != len(std) {
		return nil, fmt.Errorf("mean (%d values) and std (%d values) need one value per channel", len(mean), len(std))
	}
	n := &Normalizer{mean: mean, std: std, hwc: hwc, lut: make([]float32, 256*len(mean))}
	for ch := range mean {
		if std[ch] == 0 {
			return nil, fmt.Errorf("std[%d] is 0", ch)
		}
		for v := range 256 {
			n.lut[ch*256+v] = float32((float64(v)/255 - mean[ch]) / std[ch])
		}
	}
	return n, nil
}

// Apply normalises t into a new float32 tensor.
func (n *Normalizer) Apply(t *tensor.Tensor) (*tensor.Tensor, error) {
	h, w, c, err := imageShape(t)
	if err != nil {
		return nil, err
	}
	if c != len(n.mean) {
		return nil, fmt.Errorf("the image has %d channels but mean and std have %d values", c, len(n.mean))
	}
	shape := []int64{int64(c), int64(h), int64(w)}
	chw := C.int(1)
	if n.hwc {
		shape = []int64{int64(h), int64(w), int64(c)}
		chw = 0
	}
	out, err := tensor.New(tensor.Float32, shape...)
	if err != nil {
		return nil, err
	}
	C.spdl_normalize_u8((*C.uint8_t)(t.Data()), (*C.float)(out.Data()), C.int64_t(h*w), C.int32_t(c),
		(*C.float)(&n.lut[0]), chw)
	return out, nil
}
