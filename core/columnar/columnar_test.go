package columnar_test

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/spdl-go/spdl-go/core/columnar"
	"github.com/spdl-go/spdl-go/core/value"
)

func TestFromValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []any
		typ  arrow.DataType
		want string // the array's String()
	}{
		{"int", []any{int64(1), int64(-2), int64(3)}, arrow.PrimitiveTypes.Int64, "[1 -2 3]"},
		{"int null", []any{int64(1), nil, int64(3)}, arrow.PrimitiveTypes.Int64, "[1 (null) 3]"},
		{"float", []any{1.5, nil, -0.25}, arrow.PrimitiveTypes.Float64, "[1.5 (null) -0.25]"},
		{"int then float", []any{int64(1), 2.5, nil, int64(4)}, arrow.PrimitiveTypes.Float64, "[1 2.5 (null) 4]"},
		{"float then int", []any{nil, 0.5, int64(7)}, arrow.PrimitiveTypes.Float64, "[(null) 0.5 7]"},
		{"bool", []any{true, false, nil}, arrow.FixedWidthTypes.Boolean, "[true false (null)]"},
		{"str", []any{"a", nil, "", "héllo"}, arrow.BinaryTypes.String, `["a" (null) "" "héllo"]`},
		{"bytes", []any{[]byte("ab"), nil, []byte{}}, arrow.BinaryTypes.Binary, `["ab" (null) ""]`},
		{"all nil", []any{nil, nil}, arrow.Null, "[(null) (null)]"},
		{"empty", []any{}, arrow.Null, "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arr, err := columnar.FromValues(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				arr.Release()
				columnar.Allocator.AssertSize(t, 0)
			}()
			if !arrow.TypeEqual(arr.DataType(), tc.typ) {
				t.Errorf("type %v, want %v", arr.DataType(), tc.typ)
			}
			if arr.Len() != len(tc.in) {
				t.Errorf("len %d, want %d", arr.Len(), len(tc.in))
			}
			if got := arr.String(); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
			if tc.typ == arrow.Null {
				if arr.NullN() != len(tc.in) {
					t.Errorf("NullN = %d", arr.NullN())
				}
				return // arrow-go's Null array has no bitmap: IsNull reports false
			}
			for i, v := range tc.in {
				if arr.IsNull(i) != (v == nil) {
					t.Errorf("IsNull(%d) = %v for %v", i, arr.IsNull(i), v)
				}
			}
		})
	}
}

func TestFromValuesInt64Exact(t *testing.T) {
	big := int64(1<<62 + 1) // not representable as float64
	arr, err := columnar.FromValues([]any{big, int64(-1)})
	if err != nil {
		t.Fatal(err)
	}
	defer arr.Release()
	if got := arr.(*array.Int64).Value(0); got != big {
		t.Errorf("got %d, want %d", got, big)
	}
}

func TestFromValuesErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []any
		want []string // substrings of the error
	}{
		{"int and str", []any{int64(1), nil, "x"}, []string{"value 2 is str", "value 0 is int"}},
		{"bool and int", []any{nil, true, int64(1)}, []string{"value 2 is int", "value 1 is bool"}},
		{"str and bytes", []any{"a", []byte("b")}, []string{"value 1 is bytes", "value 0 is str"}},
		{"float and str", []any{int64(1), 2.0, "c"}, []string{"value 2 is str", "value 0 is int"}},
		{"list", []any{int64(1), value.List{int64(2)}}, []string{"value 1 is a list"}},
		{"dict", []any{value.NewDict(0)}, []string{"value 0 is a dict"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arr, err := columnar.FromValues(tc.in)
			if err == nil {
				arr.Release()
				t.Fatal("FromValues succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			columnar.Allocator.AssertSize(t, 0)
		})
	}
}

func BenchmarkFromValuesInt64(b *testing.B) {
	vals := make([]any, 1024)
	for i := range vals {
		vals[i] = int64(i)
	}
	b.ReportAllocs()
	for b.Loop() {
		arr, err := columnar.FromValues(vals)
		if err != nil {
			b.Fatal(err)
		}
		arr.Release()
	}
}
