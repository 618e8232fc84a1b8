package ops_test

import (
	"context"
	"unsafe"

	"errors"
	"github.com/spdl-go/spdl-go/core/tensor"
	"reflect"
	"strings"
	"testing"

	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/value"
)

func upper(v any) (any, error) {
	s, ok := v.(string)
	if !ok {
		return nil, errors.New("not a string")
	}
	return strings.ToUpper(s), nil
}

func TestFieldApply(t *testing.T) {
	dict := func(kv ...any) *value.Dict {
		d := value.NewDict(len(kv) / 2)
		for i := 0; i < len(kv); i += 2 {
			d.Set(kv[i].(string), kv[i+1])
		}
		return d
	}
	cases := []struct {
		name  string
		field ops.Field
		in    any
		want  any
		err   string
	}{
		{"plain", ops.Field{In: "path", Out: "path"}, "a", "A", ""},
		{"tuple keeps label", ops.Field{In: "path", Out: "path"}, value.Tuple{"a", int64(3)}, value.Tuple{"A", int64(3)}, ""},
		{"list keeps rest", ops.Field{In: "path", Out: "path"}, value.List{"a", "b"}, value.List{"A", "b"}, ""},
		{"dict in place", ops.Field{In: "path", Out: "path"}, dict("path", "a", "label", int64(1)), dict("path", "A", "label", int64(1)), ""},
		{"dict new key", ops.Field{In: "path", Out: "data"}, dict("path", "a"), dict("path", "a", "data", "A"), ""},
		{"dict missing key", ops.Field{In: "path", Out: "path"}, dict("file", "a"), nil, `no key "path"`},
		{"fn error", ops.Field{In: "path", Out: "path"}, value.Tuple{int64(1), "x"}, nil, "not a string"},
		{"empty tuple", ops.Field{In: "path", Out: "path"}, value.Tuple{}, nil, "empty sequence"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.field.Apply(tc.in, upper)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestFieldFromOptions(t *testing.T) {
	f, err := ops.FieldFromOptions(map[string]any{"key": "img"}, "image", "")
	if err != nil || f.In != "img" || f.Out != "img" {
		t.Fatalf("got %+v, %v", f, err)
	}
	if _, err := ops.FieldFromOptions(map[string]any{"key": 3}, "image", ""); err == nil {
		t.Fatal("non-string key accepted")
	}
}

func TestCollateNumbersAsTensor(t *testing.T) {
	cases := []struct {
		name  string
		col   value.List
		dtype string
		want  []float64
		arrow bool
	}{
		{"ints", value.List{int64(3), int64(-1)}, "int64", []float64{3, -1}, false},
		{"mixed", value.List{int64(1), 2.5}, "float64", []float64{1, 2.5}, false},
		{"bools", value.List{true, false}, "bool", []float64{1, 0}, false},
		{"with None stays Arrow", value.List{int64(1), nil}, "", nil, true},
		{"strings stay Arrow", value.List{"a"}, "", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			op, err := ops.New("collate", map[string]any{"numbers": "tensor"})
			if err != nil {
				t.Fatal(err)
			}
			out, err := op.Process(context.Background(), tc.col)
			if err != nil {
				t.Fatal(err)
			}
			defer value.Release(out)
			tt, isTensor := out.(*tensor.Tensor)
			if tc.arrow {
				if isTensor {
					t.Fatalf("got a tensor, want Arrow")
				}
				return
			}
			if !isTensor || tt.DType().String() != tc.dtype {
				t.Fatalf("got %v, want a %s tensor", out, tc.dtype)
			}
			for i, w := range tc.want {
				var g float64
				switch tc.dtype {
				case "int64":
					g = float64(unsafe.Slice((*int64)(tt.Data()), len(tc.want))[i])
				case "float64":
					g = unsafe.Slice((*float64)(tt.Data()), len(tc.want))[i]
				default:
					g = float64(tt.Bytes()[i])
				}
				if g != w {
					t.Fatalf("element %d = %v, want %v", i, g, w)
				}
			}
		})
	}
	if _, err := ops.New("collate", map[string]any{"numbers": "list"}); err == nil {
		t.Fatal("bad numbers option accepted")
	}
}
