package wire

// #include <stdlib.h>
// #include <stdint.h>
import "C"

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/cdata"

	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

// Encode appends v to dst and hands every reference inside v to the
// receiver of the bytes. It checks the whole value first, so on error
// nothing has been handed over and the caller still owns v.
func Encode(dst []byte, v any) ([]byte, error) {
	if err := check(v, 0); err != nil {
		return dst, err
	}
	return encode(dst, v), nil
}

const maxDepth = 64

func check(v any, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("wire: value nested deeper than %d levels", maxDepth)
	}
	switch x := v.(type) {
	case nil, bool, int, int64, float64, float32, string, []byte, *tensor.Tensor, arrow.Array, *PyObject:
		return nil
	case value.List:
		return checkSeq(x, depth)
	case []any:
		return checkSeq(x, depth)
	case value.Tuple:
		return checkSeq(x, depth)
	case *value.Dict:
		return checkSeq(x.Values, depth)
	default:
		return fmt.Errorf("wire: cannot hand a Go %T to Python", v)
	}
}

func checkSeq(xs []any, depth int) error {
	for i, e := range xs {
		if err := check(e, depth+1); err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
	}
	return nil
}

func putU64(dst []byte, n uint64) []byte { return binary.LittleEndian.AppendUint64(dst, n) }

func encode(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, tagNone)
	case bool:
		if x {
			return append(dst, tagTrue)
		}
		return append(dst, tagFalse)
	case int:
		return putU64(append(dst, tagInt), uint64(x))
	case int64:
		return putU64(append(dst, tagInt), uint64(x))
	case float64:
		return putU64(append(dst, tagFloat), math.Float64bits(x))
	case float32:
		return putU64(append(dst, tagFloat), math.Float64bits(float64(x)))
	case string:
		dst = putU64(append(dst, tagStr), uint64(len(x)))
		return append(dst, x...)
	case []byte:
		dst = putU64(append(dst, tagBytes), uint64(len(x)))
		return append(dst, x...)
	case value.List:
		return encodeSeq(dst, tagList, x)
	case []any:
		return encodeSeq(dst, tagList, x)
	case value.Tuple:
		return encodeSeq(dst, tagTuple, x)
	case *value.Dict:
		dst = putU64(append(dst, tagDict), uint64(len(x.Keys)))
		for i, k := range x.Keys {
			dst = putU64(dst, uint64(len(k)))
			dst = append(dst, k...)
			dst = encode(dst, x.Values[i])
		}
		return dst
	case *tensor.Tensor:
		// Go's reference moves to the receiver.
		return putU64(append(dst, tagTensor), uint64(uintptr(x.Detach())))
	case arrow.Array:
		schema := (*cdata.CArrowSchema)(C.calloc(1, C.size_t(unsafe.Sizeof(cdata.CArrowSchema{}))))
		arr := (*cdata.CArrowArray)(C.calloc(1, C.size_t(unsafe.Sizeof(cdata.CArrowArray{}))))
		// The export takes its own reference; the receiver releases it through
		// the structs' release callbacks and frees the two structs.
		cdata.ExportArrowArray(x, arr, schema)
		x.Release()
		dst = putU64(append(dst, tagArrow), uint64(uintptr(unsafe.Pointer(schema))))
		return putU64(dst, uint64(uintptr(unsafe.Pointer(arr))))
	case *PyObject:
		x.detach()
		return putU64(append(dst, tagPyObject), x.ID)
	}
	panic(fmt.Sprintf("wire: unchecked type %T", v)) // check() admits only the cases above
}

func encodeSeq(dst []byte, tag byte, xs []any) []byte {
	dst = putU64(append(dst, tag), uint64(len(xs)))
	for _, e := range xs {
		dst = encode(dst, e)
	}
	return dst
}

// FreeExportedArrow releases an Arrow pair that Encode wrote (the 16 bytes
// after an 'A' tag) when the receiver will never see it, e.g. in tests.
func FreeExportedArrow(b []byte) {
	schema := (*cdata.CArrowSchema)(cPointer(binary.LittleEndian.Uint64(b)))
	arr := (*cdata.CArrowArray)(cPointer(binary.LittleEndian.Uint64(b[8:])))
	cdata.ReleaseCArrowArray(arr)
	cdata.ReleaseCArrowSchema(schema)
	C.free(unsafe.Pointer(arr))
	C.free(unsafe.Pointer(schema))
}
