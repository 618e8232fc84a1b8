// Package columnar turns columns of pipeline values into Arrow arrays whose
// buffers live in C memory, so that Python (pyarrow, polars) can hold them
// through the Arrow C Data interface after Go is done with them.
package columnar

import (
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/spdl-go/spdl-go/core/value"
)

type kind int

const (
	kNull kind = iota
	kInt
	kFloat
	kBool
	kString
	kBytes
)

func kindOf(v any) (kind, bool) {
	switch v.(type) {
	case nil:
		return kNull, true
	case int64:
		return kInt, true
	case float64:
		return kFloat, true
	case bool:
		return kBool, true
	case string:
		return kString, true
	case []byte:
		return kBytes, true
	}
	return 0, false
}

// typeName names v's type as Python users know it.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "None"
	case int64:
		return "int"
	case float64:
		return "float"
	case bool:
		return "bool"
	case string:
		return "str"
	case []byte:
		return "bytes"
	case value.List:
		return "list"
	case value.Tuple:
		return "tuple"
	case *value.Dict:
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}

// FromValues builds one Arrow array from a column of values, with nil as
// null in any column:
//
//	int64            -> int64
//	int64 + float64  -> float64
//	bool             -> bool
//	string           -> utf8 (large_utf8 past 2 GiB of text)
//	[]byte           -> binary (large_binary past 2 GiB)
//	only nil, or none -> null
//
// Other mixes, and other types, are errors that name the offending index.
// The caller owns the array and releases it.
func FromValues(vals []any) (arrow.Array, error) {
	k, first := kNull, -1 // the column's kind so far, and where it was set
	var textBytes int
	for i, v := range vals {
		vk, ok := kindOf(v)
		if !ok {
			return nil, fmt.Errorf("columnar: value %d is a %s; a column of scalars holds only int, float, bool, str, bytes or None", i, typeName(v))
		}
		switch {
		case vk == kNull || vk == k:
		case k == kNull:
			k, first = vk, i
		case k == kInt && vk == kFloat:
			k = kFloat
		case k == kFloat && vk == kInt:
		default:
			return nil, fmt.Errorf("columnar: value %d is %s but value %d is %s; make every value of the column one type (int and float may mix; None is allowed anywhere)",
				i, typeName(v), first, typeName(vals[first]))
		}
		switch x := v.(type) {
		case string:
			textBytes += len(x)
		case []byte:
			textBytes += len(x)
		}
	}
	large := textBytes > math.MaxInt32
	switch k {
	case kInt:
		return appendAll(array.NewInt64Builder(Allocator), vals, func(v any) int64 { return v.(int64) }), nil
	case kFloat:
		return appendAll(array.NewFloat64Builder(Allocator), vals, func(v any) float64 {
			if n, ok := v.(int64); ok {
				return float64(n) // ints mixed with floats
			}
			return v.(float64)
		}), nil
	case kBool:
		return appendAll(array.NewBooleanBuilder(Allocator), vals, func(v any) bool { return v.(bool) }), nil
	case kString, kBytes:
		var dt arrow.BinaryDataType
		switch {
		case k == kString && large:
			dt = arrow.BinaryTypes.LargeString
		case k == kString:
			dt = arrow.BinaryTypes.String
		case large:
			dt = arrow.BinaryTypes.LargeBinary
		default:
			dt = arrow.BinaryTypes.Binary
		}
		b := array.NewBinaryBuilder(Allocator, dt)
		defer b.Release()
		b.Reserve(len(vals))
		b.ReserveData(textBytes)
		for _, v := range vals {
			switch x := v.(type) {
			case nil:
				b.AppendNull()
			case string:
				b.AppendString(x)
			case []byte:
				b.Append(x)
			}
		}
		return b.NewArray(), nil
	}
	return array.NewNull(len(vals)), nil
}

// fixedBuilder is what appendAll needs of an arrow-go builder of
// fixed-width values.
type fixedBuilder[T any] interface {
	Reserve(int)
	AppendNull()
	UnsafeAppend(T)
	NewArray() arrow.Array
	Release()
}

// appendAll builds one array from vals (nil is null), converting each
// value with conv, and releases the builder.
func appendAll[T any](b fixedBuilder[T], vals []any, conv func(any) T) arrow.Array {
	defer b.Release()
	b.Reserve(len(vals))
	for _, v := range vals {
		if v == nil {
			b.AppendNull()
		} else {
			b.UnsafeAppend(conv(v))
		}
	}
	return b.NewArray()
}
