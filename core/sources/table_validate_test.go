package sources

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func i32s(xs ...int32) *memory.Buffer {
	var b []byte
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	return memory.NewBufferBytes(b)
}

func TestValidData(t *testing.T) {
	mem := memory.DefaultAllocator
	sv := array.NewStringViewBuilder(mem)
	sv.AppendValues([]string{"short", "a string longer than twelve bytes"}, nil)
	view := sv.NewArray()
	defer view.Release()
	dict := array.NewData(arrow.BinaryTypes.String, 2, []*memory.Buffer{nil, i32s(0, 1, 2), memory.NewBufferBytes([]byte("ab"))}, nil, 0, 0)
	defer dict.Release()
	cases := []struct {
		name string
		data arrow.ArrayData
		want string // "" when valid
	}{
		{"string", array.NewData(arrow.BinaryTypes.String, 2, []*memory.Buffer{nil, i32s(0, 1, 3), memory.NewBufferBytes([]byte("abc"))}, nil, 0, 0), ""},
		{"string past the end", array.NewData(arrow.BinaryTypes.String, 2, []*memory.Buffer{nil, i32s(0, 1, 9), memory.NewBufferBytes([]byte("abc"))}, nil, 0, 0),
			"offset 9 past the end of the values buffer (3 bytes)"},
		{"offsets decrease", array.NewData(arrow.BinaryTypes.Binary, 2, []*memory.Buffer{nil, i32s(0, 2, 1), memory.NewBufferBytes([]byte("abc"))}, nil, 0, 0),
			"offset 1 at 2 is below the one before (2)"},
		{"too few offsets", array.NewData(arrow.BinaryTypes.String, 3, []*memory.Buffer{nil, i32s(0, 1), memory.NewBufferBytes([]byte("abc"))}, nil, 0, 0),
			"offsets buffer of 8 bytes for 4 values"},
		{"short values", array.NewData(arrow.PrimitiveTypes.Int64, 3, []*memory.Buffer{nil, memory.NewBufferBytes(make([]byte, 16))}, nil, 0, 0),
			"values buffer of 16 bytes, need 24"},
		{"short validity", array.NewData(arrow.PrimitiveTypes.Int8, 20, []*memory.Buffer{memory.NewBufferBytes([]byte{0xff}), memory.NewBufferBytes(make([]byte, 20))}, nil, 1, 0),
			"validity bitmap of 1 bytes for 20 slots"},
		{"list past its child", array.NewData(arrow.ListOf(arrow.PrimitiveTypes.Int8), 1, []*memory.Buffer{nil, i32s(0, 5)},
			[]arrow.ArrayData{array.NewData(arrow.PrimitiveTypes.Int8, 2, []*memory.Buffer{nil, memory.NewBufferBytes(make([]byte, 2))}, nil, 0, 0)}, 0, 0),
			"list offset 5 past the end of its 2 values"},
		{"dictionary index out of range", func() arrow.ArrayData {
			d := array.NewData(&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}, 2,
				[]*memory.Buffer{nil, memory.NewBufferBytes([]byte{1, 2})}, nil, 0, 0)
			d.SetDictionary(dict)
			return d
		}(), "dictionary index 2 at 1 is outside the 2 values"},
		{"string view", view.Data(), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := validData(c.data, 0)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("valid data: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}
