package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/spdl-go/spdl-go/core/options"

	"github.com/spdl-go/spdl-go/core/columnar"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

// collate turns a list of samples (what aggregate emits) into one batch,
// column by column, recursively:
//
//	tensors            -> one tensor (N, ...shape) in pooled C memory
//	                      (pad=True pads every dim to the largest, with pad_value)
//	None/bool/int/float/str/bytes -> one Arrow array (columnar.FromValues)
//	dicts with the same keys      -> a dict of collated columns
//	tuples (lists) of one length  -> a tuple (list) of collated columns
//
// It copies everything it keeps and releases the input samples, on success
// and on error.
//
// Options: pad (bool, default False), pad_value (number, default 0),
// numbers ("arrow", the default, or "tensor": a column of ints, floats or
// bools without None becomes a 1-D int64, float64 or bool tensor, which is
// what a training loop wants for labels).
type collate struct {
	pad           bool
	padValue      float64
	numbersTensor bool
}

func newCollate(m map[string]any) (Op, error) {
	o := options.New(m)
	pad, err := o.Bool("pad", false)
	if err != nil {
		return nil, err
	}
	padValue, err := o.Number("pad_value", 0)
	if err != nil {
		return nil, err
	}
	numbers, err := o.String("numbers", "arrow")
	if err != nil {
		return nil, err
	}
	if numbers != "arrow" && numbers != "tensor" {
		return nil, fmt.Errorf("option numbers: want \"arrow\" or \"tensor\", got %q", numbers)
	}
	if err := o.Done(); err != nil {
		return nil, err
	}
	return collate{pad: pad, padValue: padValue, numbersTensor: numbers == "tensor"}, nil
}

func (c collate) Process(ctx context.Context, in any) (any, error) {
	defer value.Release(in)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	samples, ok := in.(value.List)
	if !ok {
		if s, isSlice := in.([]any); isSlice {
			samples, ok = s, true
		}
	}
	if !ok {
		return nil, fmt.Errorf("collate: input is %s, but collate takes a list of samples; aggregate samples into batches before collate", value.Describe(in))
	}
	if len(samples) == 0 {
		return nil, errors.New("collate: the batch is empty; aggregate at least one sample before collate")
	}
	out, err := c.column(samples, "")
	if err != nil {
		return nil, fmt.Errorf("collate: %w", err)
	}
	return out, nil
}

type category int

const (
	catNone category = iota
	catScalar
	catTensor
	catDict
	catTuple
	catList
	catArrow
	catOther
)

func categoryOf(v any) category {
	switch v.(type) {
	case nil:
		return catNone
	case bool, int64, float64, string, []byte:
		return catScalar
	case *tensor.Tensor:
		return catTensor
	case *value.Dict:
		return catDict
	case value.Tuple:
		return catTuple
	case value.List, []any:
		return catList
	case arrow.Array:
		return catArrow
	}
	return catOther
}

// at prefixes a column path to a message: `["image"][0]: ...`.
func at(path string) string {
	if path == "" {
		return ""
	}
	return path + ": "
}

// column collates one column: the values at path in every sample.
func (c collate) column(col []any, path string) (any, error) {
	cat, first := catNone, 0
	for i, v := range col {
		if k := categoryOf(v); k != catNone {
			cat, first = k, i
			break
		}
	}
	if cat == catOther {
		return nil, fmt.Errorf("%scannot collate %s (sample %d); collate takes tensors, numbers, bools, str, bytes, None, and dicts, tuples or lists of them", at(path), value.Describe(col[first]), first)
	}
	for i, v := range col {
		k := categoryOf(v)
		if k == cat || (cat == catScalar && k == catNone) {
			continue
		}
		return nil, fmt.Errorf("%ssample %d is %s but sample %d is %s; give every sample the same structure", at(path), i, value.Describe(v), first, value.Describe(col[first]))
	}
	switch cat {
	case catTensor:
		return c.stack(col, path)
	case catDict:
		return c.dicts(col, path)
	case catTuple, catList:
		return c.sequences(col, path, cat == catTuple)
	case catArrow:
		return c.arrowColumn(col, path)
	}
	if c.numbersTensor {
		if t, ok, err := numberTensor(col); ok || err != nil {
			return t, err
		}
	}
	arr, err := columnar.FromValues(col) // scalars, or all None
	if err != nil {
		return nil, fmt.Errorf("%s%w", at(path), err)
	}
	return arr, nil
}

// stack copies equally shaped tensors into one (N, ...shape) tensor.
func (c collate) stack(col []any, path string) (any, error) {
	ts := make([]*tensor.Tensor, len(col))
	for i, v := range col {
		ts[i] = v.(*tensor.Tensor)
	}
	dt, shape0 := ts[0].DType(), ts[0].Shape()
	batch := append([]int64{int64(len(ts))}, shape0...)
	ragged := -1
	for i, t := range ts[1:] {
		i++
		if t.DType() != dt {
			return nil, fmt.Errorf("%ssample %d has dtype %v but sample 0 has %v; convert the samples to one dtype (to_tensor(dtype=...)) before collate", at(path), i, t.DType(), dt)
		}
		shape := t.Shape()
		if len(shape) != len(shape0) {
			return nil, fmt.Errorf("%ssample %d has shape %v but sample 0 has %v; give the samples the same number of dimensions", at(path), i, shape, shape0)
		}
		if slices.Equal(shape, shape0) {
			continue
		}
		if !c.pad {
			return nil, fmt.Errorf("%ssample %d has shape %v but sample 0 has %v; resize the samples to one shape, or pass pad=True to pad them", at(path), i, shape, shape0)
		}
		if ragged < 0 {
			ragged = i
		}
		for d, n := range shape {
			batch[d+1] = max(batch[d+1], n)
		}
	}
	out, err := tensor.New(dt, batch...)
	if err != nil {
		return nil, fmt.Errorf("%s%w", at(path), err)
	}
	if ragged >= 0 {
		if err := out.Fill(c.padValue); err != nil {
			out.Release()
			return nil, fmt.Errorf("%scannot pad: %w", at(path), err)
		}
	}
	for i, t := range ts {
		if err := tensor.CopyInto(out, []int64{int64(i)}, t); err != nil {
			out.Release()
			return nil, fmt.Errorf("%ssample %d: %w", at(path), i, err)
		}
	}
	return out, nil
}

// dicts collates dicts key by key, in the first sample's key order.
func (c collate) dicts(col []any, path string) (any, error) {
	ds := make([]*value.Dict, len(col))
	for i, v := range col {
		ds[i] = v.(*value.Dict)
	}
	d0 := ds[0]
	for i, d := range ds[1:] {
		i++
		for _, k := range d0.Keys {
			if _, ok := d.Get(k); !ok {
				return nil, fmt.Errorf("%ssample %d has no key %q (sample 0 has it); give every sample the same keys", at(path), i, k)
			}
		}
		for _, k := range d.Keys {
			if _, ok := d0.Get(k); !ok {
				return nil, fmt.Errorf("%ssample %d has key %q that sample 0 lacks; give every sample the same keys", at(path), i, k)
			}
		}
	}
	out := value.NewDict(d0.Len())
	column := make([]any, len(ds))
	for _, k := range d0.Keys {
		for i, d := range ds {
			column[i], _ = d.Get(k)
		}
		v, err := c.column(column, fmt.Sprintf("%s[%q]", path, k))
		if err != nil {
			value.Release(out)
			return nil, err
		}
		out.Keys = append(out.Keys, k)
		out.Values = append(out.Values, v)
	}
	return out, nil
}

// sequences collates tuples (or lists) of one length position by position.
func (c collate) sequences(col []any, path string, tuple bool) (any, error) {
	s0, _ := options.AsSeq(col[0])
	for i, v := range col[1:] {
		i++
		if s, _ := options.AsSeq(v); len(s) != len(s0) {
			return nil, fmt.Errorf("%ssample %d has %d items but sample 0 has %d; give every sample the same length", at(path), i, len(s), len(s0))
		}
	}
	out := make([]any, len(s0))
	column := make([]any, len(col))
	for j := range s0 {
		for i, v := range col {
			s, _ := options.AsSeq(v)
			column[i] = s[j]
		}
		v, err := c.column(column, fmt.Sprintf("%s[%d]", path, j))
		if err != nil {
			value.Release(value.List(out))
			return nil, err
		}
		out[j] = v
	}
	if tuple {
		return value.Tuple(out), nil
	}
	return value.List(out), nil
}

// numberTensor stacks a column of numbers (all int64, all bool, or floats
// mixed with ints) into a 1-D tensor; ok is false for any other column,
// which then goes to Arrow.
func numberTensor(col []any) (t *tensor.Tensor, ok bool, err error) {
	var ints, floats, bools int
	for _, v := range col {
		switch v.(type) {
		case int64:
			ints++
		case float64:
			floats++
		case bool:
			bools++
		default:
			return nil, false, nil
		}
	}
	n := int64(len(col))
	switch {
	case ints == len(col):
		if t, err = tensor.New(tensor.Int64, n); err == nil {
			dst := unsafe.Slice((*int64)(t.Data()), n)
			for i, v := range col {
				dst[i] = v.(int64)
			}
		}
	case bools == len(col):
		if t, err = tensor.New(tensor.Bool, n); err == nil {
			dst := t.Bytes()
			for i, v := range col {
				if v.(bool) {
					dst[i] = 1
				} else {
					dst[i] = 0
				}
			}
		}
	case ints+floats == len(col):
		if t, err = tensor.New(tensor.Float64, n); err == nil {
			dst := unsafe.Slice((*float64)(t.Data()), n)
			for i, v := range col {
				if f, isFloat := v.(float64); isFloat {
					dst[i] = f
				} else {
					dst[i] = float64(v.(int64))
				}
			}
		}
	default:
		return nil, false, nil
	}
	return t, true, err
}

// arrowColumn joins Arrow arrays (a table source's rows are 1-row slices of
// its record batches) into one array. Rows that are consecutive slices of
// one batch, as a source in order yields them, become a slice of that
// batch's buffers without a copy; others are concatenated. With
// numbers="tensor", a numeric column without nulls becomes a tensor.
func (c collate) arrowColumn(col []any, path string) (any, error) {
	arrs := make([]arrow.Array, len(col))
	for i, v := range col {
		arrs[i] = v.(arrow.Array)
		if !arrow.TypeEqual(arrs[i].DataType(), arrs[0].DataType()) {
			return nil, fmt.Errorf("%ssample %d is an Arrow %v but sample 0 is an Arrow %v", at(path), i, arrs[i].DataType(), arrs[0].DataType())
		}
	}
	out := contiguousSlice(arrs)
	if out == nil {
		var err error
		if out, err = array.Concatenate(arrs, columnar.Allocator); err != nil {
			return nil, fmt.Errorf("%sjoining Arrow arrays: %w", at(path), err)
		}
	}
	if c.numbersTensor && out.NullN() == 0 {
		if t, ok, err := arrowNumbers(out); ok || err != nil {
			out.Release()
			return t, err
		}
	}
	return out, nil
}

// contiguousSlice returns arrs as one array sharing their buffers when each
// starts where the previous ends in the same buffers; nil otherwise.
func contiguousSlice(arrs []arrow.Array) arrow.Array {
	first := arrs[0].Data()
	if len(first.Children()) > 0 || first.DataType().ID() == arrow.DICTIONARY {
		return nil
	}
	bufs, off, n := first.Buffers(), first.Offset(), first.Len()
	nulls := arrs[0].NullN() // each slice knows its count; an empty validity buffer means none
	for _, a := range arrs[1:] {
		d := a.Data()
		if d.Offset() != off+n || len(d.Buffers()) != len(bufs) || len(d.Children()) > 0 {
			return nil
		}
		for i, b := range d.Buffers() {
			if b != bufs[i] {
				return nil
			}
		}
		n += d.Len()
		nulls += a.NullN()
	}
	data := array.NewData(first.DataType(), n, slices.Clone(bufs), nil, nulls, off) // retains the buffers
	defer data.Release()
	return array.MakeFromData(data)
}

// arrowNumbers copies an integer, float or bool array into a 1-D int64,
// float64 or bool tensor.
func arrowNumbers(a arrow.Array) (*tensor.Tensor, bool, error) {
	n := int64(a.Len())
	switch x := a.(type) {
	case *array.Int8, *array.Int16, *array.Int32, *array.Int64, *array.Uint8, *array.Uint16, *array.Uint32:
		t, err := tensor.New(tensor.Int64, n)
		if err != nil {
			return nil, true, err
		}
		dst := unsafe.Slice((*int64)(t.Data()), n)
		for i := range dst {
			dst[i] = intAt(x, i)
		}
		return t, true, nil
	case *array.Float32, *array.Float64:
		t, err := tensor.New(tensor.Float64, n)
		if err != nil {
			return nil, true, err
		}
		dst := unsafe.Slice((*float64)(t.Data()), n)
		for i := range dst {
			if f, ok := x.(*array.Float32); ok {
				dst[i] = float64(f.Value(i))
			} else {
				dst[i] = x.(*array.Float64).Value(i)
			}
		}
		return t, true, nil
	case *array.Boolean:
		t, err := tensor.New(tensor.Bool, n)
		if err != nil {
			return nil, true, err
		}
		dst := unsafe.Slice((*bool)(t.Data()), n)
		for i := range dst {
			dst[i] = x.Value(i)
		}
		return t, true, nil
	}
	return nil, false, nil
}

func intAt(a arrow.Array, i int) int64 {
	switch x := a.(type) {
	case *array.Int8:
		return int64(x.Value(i))
	case *array.Int16:
		return int64(x.Value(i))
	case *array.Int32:
		return int64(x.Value(i))
	case *array.Int64:
		return x.Value(i)
	case *array.Uint8:
		return int64(x.Value(i))
	case *array.Uint16:
		return int64(x.Value(i))
	case *array.Uint32:
		return int64(x.Value(i))
	}
	panic("unreachable")
}
