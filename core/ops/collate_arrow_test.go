package ops_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/spdl-go/spdl-go/core/columnar"
	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

// rowsOf slices a into 1-row arrays, in the given order (what a table
// source yields per row).
func rowsOf(a arrow.Array, order ...int) value.List {
	out := make(value.List, len(order))
	for i, r := range order {
		out[i] = array.NewSlice(a, int64(r), int64(r)+1)
	}
	return out
}

func TestCollateArrowRows(t *testing.T) {
	noLeak(t)
	sb := array.NewStringBuilder(columnar.Allocator)
	sb.AppendValues([]string{"a", "bb", "", "dddd", "e"}, []bool{true, true, false, true, true})
	strs := sb.NewArray()
	sb.Release()
	defer strs.Release()
	ib := array.NewInt64Builder(columnar.Allocator)
	ib.AppendValues([]int64{5, 6, 7, 8, 9}, nil)
	ints := ib.NewArray()
	ib.Release()
	defer ints.Release()
	str := func(a any) []string {
		s := a.(*array.String)
		out := make([]string, s.Len())
		for i := range out {
			if s.IsNull(i) {
				out[i] = "<null>"
			} else {
				out[i] = s.Value(i)
			}
		}
		return out
	}
	t.Run("consecutive rows share the batch's buffers", func(t *testing.T) {
		out, err := mustOp(t, "collate", nil).Process(context.Background(), rowsOf(strs, 1, 2, 3))
		if err != nil {
			t.Fatal(err)
		}
		defer value.Release(out)
		if got := str(out); !slices.Equal(got, []string{"bb", "<null>", "dddd"}) {
			t.Errorf("got %v", got)
		}
		if out.(arrow.Array).Data().Buffers()[2] != strs.Data().Buffers()[2] {
			t.Errorf("the string data was copied")
		}
	})
	t.Run("rows out of order are copied", func(t *testing.T) {
		out, err := mustOp(t, "collate", nil).Process(context.Background(), rowsOf(strs, 4, 0, 3))
		if err != nil {
			t.Fatal(err)
		}
		defer value.Release(out)
		if got := str(out); !slices.Equal(got, []string{"e", "a", "dddd"}) {
			t.Errorf("got %v", got)
		}
	})
	t.Run("numbers as a tensor", func(t *testing.T) {
		out, err := mustOp(t, "collate", map[string]any{"numbers": "tensor"}).Process(context.Background(), rowsOf(ints, 2, 3, 0))
		if err != nil {
			t.Fatal(err)
		}
		defer value.Release(out)
		tt := out.(*tensor.Tensor)
		if got := unsafe.Slice((*int64)(tt.Data()), tt.Numel()); !slices.Equal(got, []int64{7, 8, 5}) {
			t.Errorf("got %v", got)
		}
	})
	t.Run("types must agree", func(t *testing.T) {
		mixed := append(rowsOf(ints, 0), rowsOf(strs, 0)...)
		_, err := mustOp(t, "collate", nil).Process(context.Background(), mixed)
		if err == nil || !strings.Contains(err.Error(), "sample 1 is an Arrow utf8 but sample 0 is an Arrow int64") {
			t.Errorf("err = %v", err)
		}
	})
}
