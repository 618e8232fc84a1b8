package img

import (
	"context"
	"errors"
	"fmt"

	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

func init() {
	ops.Register("decode_image", newDecodeOp)
	ops.Register("resize", newResizeOp)
	ops.Register("center_crop", newCenterCropOp)
	ops.Register("random_resized_crop", newRandomResizedCropOp)
	ops.Register("hflip", newHFlipOp)
	ops.Register("random_hflip", newRandomHFlipOp)
	ops.Register("normalize", newNormalizeOp)
}

// decodeOp is decode_image; see the package documentation for options.
type decodeOp struct {
	field   ops.Field
	nameKey string
	opts    DecodeOptions
	rand    *randomizer // random_resized crops only
}

func newDecodeOp(m map[string]any) (ops.Op, error) {
	o := optReader{options.New(m)}
	op := &decodeOp{}
	var err error
	if op.field, err = ops.ReadField(o.Reader, "image"); err != nil {
		return nil, err
	}
	if op.nameKey, err = o.String("name_key", "path"); err != nil {
		return nil, err
	}
	mode, err := o.String("mode", "rgb")
	if err != nil {
		return nil, err
	}
	if op.opts.Mode, err = ParseMode(mode); err != nil {
		return nil, err
	}
	dtype, err := o.String("dtype", "uint8")
	if err != nil {
		return nil, err
	}
	switch dtype {
	case "uint8":
		op.opts.DType = tensor.UInt8
	case "uint16":
		op.opts.DType = tensor.UInt16
	default:
		return nil, fmt.Errorf("option \"dtype\" must be \"uint8\" or \"uint16\", not %q", dtype)
	}
	if op.opts.MaxPixels, err = o.Int("max_pixels", DefaultMaxPixels); err != nil {
		return nil, err
	}
	if op.opts.MaxPixels <= 0 {
		return nil, fmt.Errorf("option \"max_pixels\" must be positive, not %d", op.opts.MaxPixels)
	}
	r := &op.opts.Resize
	if r.Height, r.Width, err = o.size("size", false); err != nil {
		return nil, err
	}
	short, err := o.Int("short_side", 0)
	if err != nil {
		return nil, err
	}
	r.ShortSide = int(short)
	if r.Interp, err = o.interp(); err != nil {
		return nil, err
	}
	crop, err := o.String("crop", "")
	if err != nil {
		return nil, err
	}
	c := &op.opts.Crop
	if c.Height, c.Width, err = o.size("crop_size", true); err != nil {
		return nil, err
	}
	switch crop {
	case "":
		if c.Height > 0 {
			return nil, errors.New("option \"crop_size\" needs crop=\"center\" or crop=\"random_resized\"")
		}
	case "center":
		c.Kind = CropCenter
	case "random_resized":
		c.Kind = CropRandomResized
		if c.Scale, err = o.pair("scale", [2]float64{0.08, 1}); err != nil {
			return nil, err
		}
		if c.Ratio, err = o.pair("ratio", [2]float64{3.0 / 4, 4.0 / 3}); err != nil {
			return nil, err
		}
		if op.rand, err = o.randomizer("decode_image"); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("option \"crop\" must be \"center\", \"random_resized\" or None, not %q", crop)
	}
	if c.Kind != CropNone && c.Height == 0 {
		return nil, fmt.Errorf("crop=%q needs crop_size ([height, width] or an int)", crop)
	}
	if err := op.opts.Validate(); err != nil {
		return nil, err
	}
	if err := o.Done(); err != nil {
		return nil, err
	}
	return op, nil
}

func (op *decodeOp) Process(ctx context.Context, in any) (any, error) {
	if err := ctx.Err(); err != nil {
		value.Release(in)
		return nil, err
	}
	o := op.opts
	if op.rand != nil {
		g, err := op.rand.forItem(in)
		if err != nil {
			value.Release(in)
			return nil, fmt.Errorf("decode_image: %w", err)
		}
		o.Rand = g
	}
	name := ""
	if d, ok := in.(*value.Dict); ok && op.nameKey != op.field.In {
		if v, ok := d.Get(op.nameKey); ok {
			name, _ = v.(string)
		}
	}
	return op.field.Apply(in, func(v any) (any, error) {
		var (
			t   *tensor.Tensor
			err error
		)
		switch x := v.(type) {
		case []byte:
			t, err = Decode(x, name, o)
		case string:
			t, err = DecodeFile(x, o)
		default:
			value.Release(v)
			err = fmt.Errorf("expected encoded image bytes or a path (str), got %s", value.Describe(v))
		}
		if err != nil {
			return nil, fmt.Errorf("decode_image: %w", err)
		}
		return t, nil
	})
}

// tensorOp runs fn on the image tensor of each item. fn returns a new
// tensor (then the input is released), the input itself, or an error
// (then the input is released too).
type tensorOp struct {
	name  string
	field ops.Field
	rand  *randomizer
	fn    func(t *tensor.Tensor, g *Rand) (*tensor.Tensor, error)
}

func (op *tensorOp) Process(ctx context.Context, in any) (any, error) {
	if err := ctx.Err(); err != nil {
		value.Release(in)
		return nil, err
	}
	var g *Rand
	if op.rand != nil {
		var err error
		if g, err = op.rand.forItem(in); err != nil {
			value.Release(in)
			return nil, fmt.Errorf("%s: %w", op.name, err)
		}
	}
	return op.field.Apply(in, func(v any) (any, error) {
		t, ok := v.(*tensor.Tensor)
		if !ok {
			value.Release(v)
			return nil, fmt.Errorf("%s: expects a uint8 (H, W, C) image tensor, got %s; decode images first (decode_image)", op.name, value.Describe(v))
		}
		out, err := op.fn(t, g)
		if err != nil {
			t.Release()
			return nil, fmt.Errorf("%s: %w", op.name, err)
		}
		if out != t {
			t.Release()
		}
		return out, nil
	})
}

// newTensorOp reads key/output_key and the op's own options (read), then
// checks that nothing else was given.
func newTensorOp(name string, m map[string]any, read func(o *optReader, op *tensorOp) error) (ops.Op, error) {
	o := optReader{options.New(m)}
	op := &tensorOp{name: name}
	var err error
	if op.field, err = ops.ReadField(o.Reader, "image"); err != nil {
		return nil, err
	}
	if err := read(&o, op); err != nil {
		return nil, err
	}
	if err := o.Done(); err != nil {
		return nil, err
	}
	return op, nil
}

func newResizeOp(m map[string]any) (ops.Op, error) {
	return newTensorOp("resize", m, func(o *optReader, op *tensorOp) error {
		var r ResizeOptions
		var err error
		if r.Height, r.Width, err = o.size("size", false); err != nil {
			return err
		}
		short, err := o.Int("short_side", 0)
		if err != nil {
			return err
		}
		r.ShortSide = int(short)
		if r.Interp, err = o.interp(); err != nil {
			return err
		}
		if err := r.validate(); err != nil {
			return err
		}
		if !r.Enabled() {
			return errors.New("give size=[height, width] or short_side=n")
		}
		op.fn = func(t *tensor.Tensor, _ *Rand) (*tensor.Tensor, error) { return Resize(t, r) }
		return nil
	})
}

func newCenterCropOp(m map[string]any) (ops.Op, error) {
	return newTensorOp("center_crop", m, func(o *optReader, op *tensorOp) error {
		h, w, err := o.size("size", true)
		if err != nil {
			return err
		}
		if h == 0 {
			return errors.New("option \"size\" ([height, width] or an int) is required")
		}
		op.fn = func(t *tensor.Tensor, _ *Rand) (*tensor.Tensor, error) { return CenterCrop(t, h, w) }
		return nil
	})
}

func newRandomResizedCropOp(m map[string]any) (ops.Op, error) {
	return newTensorOp("random_resized_crop", m, func(o *optReader, op *tensorOp) error {
		c := CropOptions{Kind: CropRandomResized}
		var err error
		if c.Height, c.Width, err = o.size("size", true); err != nil {
			return err
		}
		if c.Height == 0 {
			return errors.New("option \"size\" ([height, width] or an int) is required")
		}
		if c.Scale, err = o.pair("scale", [2]float64{0.08, 1}); err != nil {
			return err
		}
		if c.Ratio, err = o.pair("ratio", [2]float64{3.0 / 4, 4.0 / 3}); err != nil {
			return err
		}
		if err := c.validate(); err != nil {
			return err
		}
		interp, err := o.interp()
		if err != nil {
			return err
		}
		if op.rand, err = o.randomizer("random_resized_crop"); err != nil {
			return err
		}
		op.fn = func(t *tensor.Tensor, g *Rand) (*tensor.Tensor, error) { return RandomResizedCrop(t, c, interp, g) }
		return nil
	})
}

func newHFlipOp(m map[string]any) (ops.Op, error) {
	return newTensorOp("hflip", m, func(o *optReader, op *tensorOp) error {
		op.fn = func(t *tensor.Tensor, _ *Rand) (*tensor.Tensor, error) { return HFlip(t) }
		return nil
	})
}

func newRandomHFlipOp(m map[string]any) (ops.Op, error) {
	return newTensorOp("random_hflip", m, func(o *optReader, op *tensorOp) error {
		p, err := o.Number("p", 0.5)
		if err != nil {
			return err
		}
		if !(p >= 0 && p <= 1) {
			return fmt.Errorf("option \"p\" must be in [0, 1], not %v", p)
		}
		if op.rand, err = o.randomizer("random_hflip"); err != nil {
			return err
		}
		op.fn = func(t *tensor.Tensor, g *Rand) (*tensor.Tensor, error) {
			if g.Float64() >= p {
				if _, _, _, err := imageShape(t); err != nil {
					return nil, err
				}
				return t, nil
			}
			return HFlip(t)
		}
		return nil
	})
}

func newNormalizeOp(m map[string]any) (ops.Op, error) {
	return newTensorOp("normalize", m, func(o *optReader, op *tensorOp) error {
		mean, err := o.numbers("mean", 0, ImageNetMean)
		if err != nil {
			return err
		}
		std, err := o.numbers("std", 0, ImageNetStd)
		if err != nil {
			return err
		}
		layout, err := o.String("layout", "chw")
		if err != nil {
			return err
		}
		if layout != "chw" && layout != "hwc" {
			return fmt.Errorf("option \"layout\" must be \"chw\" or \"hwc\", not %q", layout)
		}
		n, err := NewNormalizer(mean, std, layout == "hwc")
		if err != nil {
			return err
		}
		op.fn = func(t *tensor.Tensor, _ *Rand) (*tensor.Tensor, error) { return n.Apply(t) }
		return nil
	})
}
