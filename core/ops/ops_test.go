package ops_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/spdl-go/spdl-go/core/columnar"
	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

// noLeak fails t at its end if tensors or Arrow buffers are still live.
func noLeak(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		if s := tensor.MemStats(); s.LiveTensors != 0 || s.LiveBytes != 0 {
			t.Errorf("tensor leak: %+v", s)
		}
		columnar.Allocator.AssertSize(t, 0)
	})
}

func mustOp(t testing.TB, name string, opts map[string]any) ops.Op {
	t.Helper()
	op, err := ops.New(name, opts)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

// newTensor makes a tensor of dt and shape holding vals (converted).
func newTensor(t testing.TB, dt tensor.DType, shape []int64, vals ...float64) *tensor.Tensor {
	t.Helper()
	f, err := tensor.New(tensor.Float64, shape...)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	copy(unsafe.Slice((*float64)(f.Data()), f.Numel()), vals)
	x, err := f.Convert(dt)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// seq returns n values start, start+1, ...
func seq(start float64, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = start + float64(i)
	}
	return v
}

// elems returns x's elements as float64, row-major.
func elems(t *testing.T, x *tensor.Tensor) []float64 {
	t.Helper()
	y, err := x.Convert(tensor.Float64)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Release()
	return slices.Clone(unsafe.Slice((*float64)(y.Data()), y.Numel()))
}

func TestNew(t *testing.T) {
	if got, want := ops.Names(), []string{"collate", "identity", "read_file", "to_device", "to_tensor"}; !slices.Equal(got, want) {
		t.Errorf("Names = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name string
		op   string
		opts map[string]any
		want string // substring of the error; "" for success
	}{
		{"identity", "identity", nil, ""},
		{"to_tensor default", "to_tensor", nil, ""},
		{"to_tensor dtype", "to_tensor", map[string]any{"dtype": "uint8"}, ""},
		{"collate opts", "collate", map[string]any{"pad": true, "pad_value": int64(-1)}, ""},
		{"collate None opt", "collate", map[string]any{"pad_value": nil}, ""},
		{"unknown op", "no_such_op", nil, `unknown op "no_such_op"; known ops: collate, identity, read_file, to_device, to_tensor`},
		{"identity option", "identity", map[string]any{"x": int64(1)}, `unknown option "x"; this op takes no options`},
		{"bad dtype", "to_tensor", map[string]any{"dtype": "float128"}, `option "dtype": tensor: unknown dtype "float128"`},
		{"dtype not str", "to_tensor", map[string]any{"dtype": int64(3)}, `option "dtype" must be a str, not 3`},
		{"pad not bool", "collate", map[string]any{"pad": "yes"}, `option "pad" must be True or False, not "yes"`},
		{"pad_value not number", "collate", map[string]any{"pad_value": "0"}, `option "pad_value" must be a number`},
		{"unknown option", "collate", map[string]any{"padd": true}, `unknown option "padd"; known options: numbers, pad, pad_value`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op, err := ops.New(tc.op, tc.opts)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "" && op == nil:
				t.Fatal("nil op")
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

type double struct{}

func (double) Process(_ context.Context, in any) (any, error) { return in.(int64) * 2, nil }

func TestRegister(t *testing.T) {
	ops.Register("test_double", func(map[string]any) (ops.Op, error) { return double{}, nil })
	out, err := mustOp(t, "test_double", nil).Process(context.Background(), int64(21))
	if err != nil || out != int64(42) {
		t.Fatalf("got %v, %v", out, err)
	}
	defer func() {
		if recover() == nil {
			t.Error("duplicate Register did not panic")
		}
	}()
	ops.Register("identity", func(map[string]any) (ops.Op, error) { return double{}, nil })
}

func TestIdentity(t *testing.T) {
	noLeak(t)
	x := newTensor(t, tensor.Float32, []int64{2}, 1, 2)
	out, err := mustOp(t, "identity", nil).Process(context.Background(), x)
	if err != nil || out != any(x) {
		t.Fatalf("got %v, %v", out, err)
	}
	x.Release()
}

func TestToTensor(t *testing.T) {
	L := func(v ...any) value.List { return value.List(v) }
	for _, tc := range []struct {
		name  string
		dtype string
		in    any
		dt    tensor.DType
		shape []int64
		want  []float64
	}{
		{"int scalar", "", int64(3), tensor.Float32, []int64{}, []float64{3}},
		{"float scalar", "float64", 2.5, tensor.Float64, []int64{}, []float64{2.5}},
		{"bool scalar", "bool", true, tensor.Bool, []int64{}, []float64{1}},
		{"list", "", L(int64(1), 2.5, true), tensor.Float32, []int64{3}, []float64{1, 2.5, 1}},
		{"nested", "int32", L(L(int64(1), int64(2), int64(3)), L(int64(4), int64(5), int64(6))), tensor.Int32, []int64{2, 3}, []float64{1, 2, 3, 4, 5, 6}},
		{"tuple of lists", "uint8", value.Tuple{L(int64(1)), L(int64(300))}, tensor.UInt8, []int64{2, 1}, []float64{1, 44}},
		{"int64 exact", "int64", L(int64(1<<53 + 1)), tensor.Int64, []int64{1}, []float64{1 << 53}}, // checked exactly below
		{"float16", "float16", L(0.1, -2.0), tensor.Float16, []int64{2}, []float64{0.0999755859375, -2}},
		{"empty", "", L(), tensor.Float32, []int64{0}, []float64{}},
		{"empty rows", "", L(L(), L()), tensor.Float32, []int64{2, 0}, []float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			opts := map[string]any{}
			if tc.dtype != "" {
				opts["dtype"] = tc.dtype
			}
			out, err := mustOp(t, "to_tensor", opts).Process(context.Background(), tc.in)
			if err != nil {
				t.Fatal(err)
			}
			x := out.(*tensor.Tensor)
			defer x.Release()
			if x.DType() != tc.dt || !slices.Equal(x.Shape(), tc.shape) {
				t.Errorf("got %v, want %v %v", x, tc.dt, tc.shape)
			}
			if got := elems(t, x); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if tc.name == "int64 exact" {
				if v := *(*int64)(x.Data()); v != 1<<53+1 {
					t.Errorf("int64 value %d, want %d", v, int64(1<<53+1))
				}
			}
		})
	}
}

func TestToTensorFromTensor(t *testing.T) {
	noLeak(t)
	op := mustOp(t, "to_tensor", map[string]any{"dtype": "float32"})
	same := newTensor(t, tensor.Float32, []int64{2}, 1, 2)
	out, err := op.Process(context.Background(), same)
	if err != nil || out != any(same) {
		t.Fatalf("same dtype: got %v, %v; want the input back", out, err)
	}
	same.Release()

	in := newTensor(t, tensor.UInt8, []int64{2, 2}, 0, 1, 254, 255)
	out, err = op.Process(context.Background(), in) // releases in
	if err != nil {
		t.Fatal(err)
	}
	x := out.(*tensor.Tensor)
	defer x.Release()
	if x.DType() != tensor.Float32 || !slices.Equal(elems(t, x), []float64{0, 1, 254, 255}) || !x.Contiguous() {
		t.Errorf("converted %v = %v", x, elems(t, x))
	}
}

func TestToTensorErrors(t *testing.T) {
	L := func(v ...any) value.List { return value.List(v) }
	for _, tc := range []struct {
		name string
		in   func(t *testing.T) any
		want string
	}{
		{"ragged", func(*testing.T) any { return L(L(int64(1), int64(2)), L(int64(3))) }, "item[1] has 1 items, but item[0] has 2"},
		{"deeper", func(*testing.T) any { return L(L(int64(1)), L(L(int64(2)))) }, "item[1][0] is a list, but item[0][0] is a number"},
		{"shallower", func(*testing.T) any { return L(L(int64(1)), int64(2)) }, "item[1] is 2, but a list of 1 items is expected"},
		{"str", func(*testing.T) any { return "abc" }, `cannot make a tensor from "abc"`},
		{"str in list", func(*testing.T) any { return L(int64(1), "x") }, `cannot make a tensor from "x" at item[1]`},
		{"tensor in list", func(t *testing.T) any { return L(newTensor(t, tensor.Float32, []int64{1}, 1)) }, "item[0] is a tensor"},
		{"dict", func(t *testing.T) any {
			d := value.NewDict(1)
			d.Set("x", newTensor(t, tensor.Float32, []int64{1}, 1))
			return d
		}, "cannot make a tensor from {"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t) // the op releases its input on error
			_, err := mustOp(t, "to_tensor", nil).Process(context.Background(), tc.in(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// batch is a check of one collated value.
type check func(t *testing.T, v any)

func isTensor(dt tensor.DType, shape []int64, want []float64) check {
	return func(t *testing.T, v any) {
		t.Helper()
		x, ok := v.(*tensor.Tensor)
		if !ok {
			t.Fatalf("got %s, want a tensor", value.Describe(v))
		}
		if x.DType() != dt || !slices.Equal(x.Shape(), shape) || !x.Contiguous() {
			t.Errorf("got %v, want %v %v", x, dt, shape)
		}
		if got := elems(t, x); !slices.Equal(got, want) {
			t.Errorf("elements\n got %v\nwant %v", got, want)
		}
	}
}

func isArray(typ arrow.DataType, want string) check {
	return func(t *testing.T, v any) {
		t.Helper()
		a, ok := v.(arrow.Array)
		if !ok {
			t.Fatalf("got %s, want an Arrow array", value.Describe(v))
		}
		if !arrow.TypeEqual(a.DataType(), typ) || a.String() != want {
			t.Errorf("got %v %s, want %v %s", a.DataType(), a, typ, want)
		}
	}
}

func isDict(keys []string, checks ...check) check {
	return func(t *testing.T, v any) {
		t.Helper()
		d, ok := v.(*value.Dict)
		if !ok || !slices.Equal(d.Keys, keys) {
			t.Fatalf("got %s, want a dict with keys %v", value.Describe(v), keys)
		}
		for i, c := range checks {
			c(t, d.Values[i])
		}
	}
}

func isSeq(tuple bool, checks ...check) check {
	return func(t *testing.T, v any) {
		t.Helper()
		var s []any
		if x, ok := v.(value.Tuple); ok && tuple {
			s = x
		} else if x, ok := v.(value.List); ok && !tuple {
			s = x
		} else {
			t.Fatalf("got %s (%T), want tuple=%v", value.Describe(v), v, tuple)
		}
		if len(s) != len(checks) {
			t.Fatalf("got %d items, want %d", len(s), len(checks))
		}
		for i, c := range checks {
			c(t, s[i])
		}
	}
}

func dict(kv ...any) *value.Dict {
	d := value.NewDict(len(kv) / 2)
	for i := 0; i < len(kv); i += 2 {
		d.Set(kv[i].(string), kv[i+1])
	}
	return d
}

func TestCollate(t *testing.T) {
	f32, u8 := tensor.Float32, tensor.UInt8
	for _, tc := range []struct {
		name  string
		opts  map[string]any
		batch func(t *testing.T) value.List
		check check
	}{
		{"tensors", nil, func(t *testing.T) value.List {
			return value.List{
				newTensor(t, u8, []int64{2, 3}, seq(0, 6)...),
				newTensor(t, u8, []int64{2, 3}, seq(10, 6)...),
				newTensor(t, u8, []int64{2, 3}, seq(20, 6)...),
			}
		}, isTensor(u8, []int64{3, 2, 3}, slices.Concat(seq(0, 6), seq(10, 6), seq(20, 6)))},
		{"scalar tensors", nil, func(t *testing.T) value.List {
			return value.List{newTensor(t, f32, []int64{}, 1.5), newTensor(t, f32, []int64{}, -2)}
		}, isTensor(f32, []int64{2}, []float64{1.5, -2})},
		{"pad", map[string]any{"pad": true, "pad_value": -1.0}, func(t *testing.T) value.List {
			return value.List{
				newTensor(t, f32, []int64{1, 2}, 1, 2),
				newTensor(t, f32, []int64{2, 1}, 3, 4),
				newTensor(t, f32, []int64{1, 1}, 5),
			}
		}, isTensor(f32, []int64{3, 2, 2}, []float64{1, 2, -1, -1, 3, -1, 4, -1, 5, -1, -1, -1})},
		{"pad equal shapes", map[string]any{"pad": true}, func(t *testing.T) value.List {
			return value.List{newTensor(t, f32, []int64{2}, 1, 2), newTensor(t, f32, []int64{2}, 3, 4)}
		}, isTensor(f32, []int64{2, 2}, []float64{1, 2, 3, 4})},
		{"ints", nil, func(*testing.T) value.List {
			return value.List{int64(1), int64(2), nil}
		}, isArray(arrow.PrimitiveTypes.Int64, "[1 2 (null)]")},
		{"floats", nil, func(*testing.T) value.List {
			return value.List{int64(1), 0.5}
		}, isArray(arrow.PrimitiveTypes.Float64, "[1 0.5]")},
		{"strs", nil, func(*testing.T) value.List {
			return value.List{"a", "bc"}
		}, isArray(arrow.BinaryTypes.String, `["a" "bc"]`)},
		{"bytes", nil, func(*testing.T) value.List {
			return value.List{[]byte("x"), nil}
		}, isArray(arrow.BinaryTypes.Binary, `["x" (null)]`)},
		{"nones", nil, func(*testing.T) value.List {
			return value.List{nil, nil}
		}, isArray(arrow.Null, "[(null) (null)]")},
		{"dicts", nil, func(t *testing.T) value.List {
			return value.List{
				dict("image", newTensor(t, u8, []int64{2}, 1, 2), "label", int64(7), "path", "a.jpg"),
				dict("label", int64(8), "image", newTensor(t, u8, []int64{2}, 3, 4), "path", "b.jpg"),
			}
		}, isDict([]string{"image", "label", "path"},
			isTensor(u8, []int64{2, 2}, []float64{1, 2, 3, 4}),
			isArray(arrow.PrimitiveTypes.Int64, "[7 8]"),
			isArray(arrow.BinaryTypes.String, `["a.jpg" "b.jpg"]`))},
		{"tuples", nil, func(t *testing.T) value.List {
			return value.List{
				value.Tuple{newTensor(t, f32, []int64{1}, 1), true},
				value.Tuple{newTensor(t, f32, []int64{1}, 2), false},
			}
		}, isSeq(true, isTensor(f32, []int64{2, 1}, []float64{1, 2}), isArray(arrow.FixedWidthTypes.Boolean, "[true false]"))},
		{"lists", nil, func(*testing.T) value.List {
			return value.List{value.List{int64(1), "a"}, value.List{int64(2), "b"}}
		}, isSeq(false, isArray(arrow.PrimitiveTypes.Int64, "[1 2]"), isArray(arrow.BinaryTypes.String, `["a" "b"]`))},
		{"nested", nil, func(t *testing.T) value.List {
			return value.List{
				dict("x", value.Tuple{dict("y", newTensor(t, f32, []int64{1}, 1))}),
				dict("x", value.Tuple{dict("y", newTensor(t, f32, []int64{1}, 2))}),
			}
		}, isDict([]string{"x"}, isSeq(true, isDict([]string{"y"}, isTensor(f32, []int64{2, 1}, []float64{1, 2}))))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			out, err := mustOp(t, "collate", tc.opts).Process(context.Background(), tc.batch(t))
			if err != nil {
				t.Fatal(err)
			}
			defer value.Release(out)
			tc.check(t, out)
		})
	}
}

func TestCollateErrors(t *testing.T) {
	f32 := tensor.Float32
	for _, tc := range []struct {
		name  string
		opts  map[string]any
		batch func(t *testing.T) any
		want  string
	}{
		{"not a list", nil, func(t *testing.T) any { return newTensor(t, f32, []int64{1}, 1) }, "collate takes a list of samples; aggregate"},
		{"empty", nil, func(*testing.T) any { return value.List{} }, "the batch is empty"},
		{"shapes", nil, func(t *testing.T) any {
			return value.List{
				newTensor(t, f32, []int64{2, 2}, seq(0, 4)...),
				newTensor(t, f32, []int64{2, 2}, seq(0, 4)...),
				newTensor(t, f32, []int64{2, 3}, seq(0, 6)...),
			}
		}, "sample 2 has shape [2 3] but sample 0 has [2 2]; resize the samples to one shape, or pass pad=True"},
		{"ndim with pad", map[string]any{"pad": true}, func(t *testing.T) any {
			return value.List{newTensor(t, f32, []int64{2}, 1, 2), newTensor(t, f32, []int64{1, 2}, 1, 2)}
		}, "sample 1 has shape [1 2] but sample 0 has [2]; give the samples the same number of dimensions"},
		{"dtypes", nil, func(t *testing.T) any {
			return value.List{newTensor(t, f32, []int64{1}, 1), newTensor(t, tensor.Int64, []int64{1}, 1)}
		}, "sample 1 has dtype int64 but sample 0 has float32"},
		{"tensor and None", nil, func(t *testing.T) any {
			return value.List{nil, newTensor(t, f32, []int64{1}, 1)}
		}, "sample 0 is None but sample 1 is tensor(float32, [1])"},
		{"mixed scalars", nil, func(*testing.T) any {
			return value.List{int64(1), "a"}
		}, "columnar: value 1 is str but value 0 is int"},
		{"missing key", nil, func(t *testing.T) any {
			return value.List{
				dict("image", newTensor(t, f32, []int64{1}, 1), "label", int64(1)),
				dict("image", newTensor(t, f32, []int64{1}, 1)),
			}
		}, `sample 1 has no key "label" (sample 0 has it)`},
		{"extra key", nil, func(t *testing.T) any {
			return value.List{dict("a", int64(1)), dict("a", int64(2), "b", int64(3))}
		}, `sample 1 has key "b" that sample 0 lacks`},
		{"nested shapes", nil, func(t *testing.T) any {
			return value.List{
				dict("ok", newTensor(t, f32, []int64{1}, 1), "image", value.Tuple{newTensor(t, f32, []int64{1}, 1)}),
				dict("ok", newTensor(t, f32, []int64{1}, 1), "image", value.Tuple{newTensor(t, f32, []int64{2}, 1, 2)}),
			}
		}, `["image"][0]: sample 1 has shape [2] but sample 0 has [1]`},
		{"tuple lengths", nil, func(*testing.T) any {
			return value.List{value.Tuple{int64(1), int64(2)}, value.Tuple{int64(1)}}
		}, "sample 1 has 1 items but sample 0 has 2"},
		{"tuple and list", nil, func(*testing.T) any {
			return value.List{value.Tuple{int64(1)}, value.List{int64(1)}}
		}, "sample 1 is [1] but sample 0 is (1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t) // the op releases its input, and what it built, on error
			_, err := mustOp(t, "collate", tc.opts).Process(context.Background(), tc.batch(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestCollateCancelled(t *testing.T) {
	noLeak(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	in := value.List{newTensor(t, tensor.Float32, []int64{1}, 1)}
	if _, err := mustOp(t, "collate", nil).Process(ctx, in); err != context.Canceled {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

// BenchmarkCollate stacks 32 uint8 images of 3x224x224 (4.8 MB per batch).
// Setup (the samples) is outside the timer; each iteration gives collate
// new references to the same samples, which it releases.
func BenchmarkCollate(b *testing.B) {
	const n = 32
	shape := []int64{3, 224, 224}
	samples := make([]*tensor.Tensor, n)
	for i := range samples {
		x, err := tensor.New(tensor.UInt8, shape...)
		if err != nil {
			b.Fatal(err)
		}
		clear(x.Bytes())
		samples[i] = x
	}
	defer func() {
		for _, x := range samples {
			x.Release()
		}
	}()
	op := mustOp(b, "collate", nil)
	ctx := context.Background()
	b.SetBytes(n * 3 * 224 * 224)
	b.ReportAllocs()
	for b.Loop() {
		in := make(value.List, n)
		for i, x := range samples {
			in[i] = x.Retain()
		}
		out, err := op.Process(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		out.(*tensor.Tensor).Release()
	}
}
