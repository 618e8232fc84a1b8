package ops

import (
	"context"
	"fmt"
	"strings"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

// toTensor makes a tensor of one dtype from a number, a bool, a nested
// rectangular list or tuple of them, or a tensor (converted with a copy,
// or passed through if it already has the dtype).
//
// Options: dtype (str, numpy name, default "float32").
type toTensor struct {
	dtype tensor.DType
}

func newToTensor(m map[string]any) (Op, error) {
	o := options.New(m)
	name, err := o.String("dtype", "float32")
	if err != nil {
		return nil, err
	}
	dt, err := tensor.ParseDType(name)
	if err != nil {
		return nil, fmt.Errorf("option \"dtype\": %w", err)
	}
	if err := o.Done(); err != nil {
		return nil, err
	}
	return toTensor{dt}, nil
}

func (op toTensor) Process(_ context.Context, in any) (any, error) {
	out, err := op.convert(in)
	if err != nil {
		value.Release(in)
		return nil, fmt.Errorf("to_tensor: %w", err)
	}
	return out, nil
}

func (op toTensor) convert(in any) (any, error) {
	if t, ok := in.(*tensor.Tensor); ok {
		if t.DType() == op.dtype {
			return t, nil
		}
		out, err := t.Convert(op.dtype)
		if err != nil {
			return nil, err
		}
		t.Release()
		return out, nil
	}
	var shape []int64
	for v := in; ; {
		s, ok := options.AsSeq(v)
		if !ok {
			break
		}
		shape = append(shape, int64(len(s)))
		if len(s) == 0 {
			break
		}
		v = s[0]
	}
	f := flattener{shape: shape, allInt: true}
	if err := f.walk(in, 0); err != nil {
		return nil, err
	}
	// Fill an int64 or float64 tensor (exact for every input), then convert.
	var (
		t   *tensor.Tensor
		err error
	)
	if f.allInt {
		t, err = tensor.New(tensor.Int64, shape...)
		if err == nil && len(f.ints) > 0 {
			copy(unsafe.Slice((*int64)(t.Data()), len(f.ints)), f.ints)
		}
	} else {
		t, err = tensor.New(tensor.Float64, shape...)
		if err == nil && len(f.floats) > 0 {
			copy(unsafe.Slice((*float64)(t.Data()), len(f.floats)), f.floats)
		}
	}
	if err != nil {
		return nil, err
	}
	if t.DType() == op.dtype {
		return t, nil
	}
	defer t.Release()
	return t.Convert(op.dtype)
}

// flattener checks that a nested list is rectangular and collects its
// numbers in row-major order.
type flattener struct {
	shape  []int64
	allInt bool
	ints   []int64
	floats []float64
	at     []int // indices from the top to the element being visited
}

// walk visits v at depth; f.at holds the indices that lead to it, and is
// rendered only for an error message (this runs once per element).
func (f *flattener) walk(v any, depth int) error {
	if depth < len(f.shape) {
		s, ok := options.AsSeq(v)
		if !ok {
			return fmt.Errorf("ragged input: item%s is %s, but a list of %d items is expected there; give every list the same length", f.path(), value.Describe(v), f.shape[depth])
		}
		if int64(len(s)) != f.shape[depth] {
			return fmt.Errorf("ragged input: item%s has %d items, but item%s has %d; give every list the same length (or use collate(pad=True))", f.path(), len(s), firstPath(depth), f.shape[depth])
		}
		for i, e := range s {
			f.at = append(f.at, i)
			if err := f.walk(e, depth+1); err != nil {
				return err
			}
			f.at = f.at[:len(f.at)-1]
		}
		return nil
	}
	var x float64
	switch n := v.(type) {
	case int64:
		f.ints = append(f.ints, n)
		x = float64(n)
	case bool:
		if n {
			f.ints = append(f.ints, 1)
			x = 1
		} else {
			f.ints = append(f.ints, 0)
		}
	case float64:
		f.allInt = false
		x = n
	case *tensor.Tensor:
		return fmt.Errorf("item%s is a tensor; to_tensor takes numbers or lists of numbers (stack tensors with collate)", f.path())
	default:
		if _, ok := options.AsSeq(v); ok {
			return fmt.Errorf("ragged input: item%s is a list, but item%s is a number; give every list the same depth", f.path(), firstPath(depth))
		}
		return fmt.Errorf("cannot make a tensor from %s at item%s; pass int, float, bool or (nested) lists of them", value.Describe(v), f.path())
	}
	f.floats = append(f.floats, x)
	return nil
}

func (f *flattener) path() string {
	var b strings.Builder
	for _, i := range f.at {
		fmt.Fprintf(&b, "[%d]", i)
	}
	return b.String()
}

// firstPath is the path of the first item at depth: "[0][0]...".
func firstPath(depth int) string {
	s := ""
	for range depth {
		s += "[0]"
	}
	return s
}
