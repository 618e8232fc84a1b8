package wire

// #include <stdlib.h>
// #include <stdint.h>
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
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
	case string:
		return checkText(x)
	case nil, bool, int, int64, float64, float32, []byte, *tensor.Tensor, arrow.Array, *PyObject:
		return nil
	case value.List:
		return checkSeq(x, depth)
	case []any:
		return checkSeq(x, depth)
	case value.Tuple:
		return checkSeq(x, depth)
	case *value.Dict:
		for i, k := range x.Keys {
			if err := checkText(k); err != nil {
				return fmt.Errorf("key %q: %w", k, err)
			}
			if err := check(x.Values[i], depth+1); err != nil {
				return fmt.Errorf("key %q: %w", k, err)
			}
		}
		return nil
	default:
		return fmt.Errorf("wire: cannot hand a Go %T to Python", v)
	}
}

// checkText admits what Python decodes as the receiver does (UTF-8 with
// "surrogatepass": lone surrogates, which Python's own strings may hold,
// come back as they went), so that a Go string of other bytes fails its
// item here, naming it, instead of raising in the host's loop.
func checkText(s string) error {
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			// ED A0..BF 80..BF: a surrogate (U+D800..U+DFFF), which Go
			// rejects and surrogatepass accepts.
			if i+2 < len(s) && s[i] == 0xED && s[i+1]&0xE0 == 0xA0 && s[i+2]&0xC0 == 0x80 {
				i += 3
				continue
			}
			return fmt.Errorf("wire: text is not valid UTF-8 (byte %d of %d)", i, len(s))
		}
		i += n
	}
	return nil
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

// Encoded is a value already encoded into C memory (malloc'd), ready to be
// handed to the host without further work on the host's thread. It owns
// the references inside the bytes until Take hands them over; Release
// gives them back (tensors dropped, Arrow structs released, Python object
// ids returned through dec.ReleasePy).
type Encoded struct {
	data unsafe.Pointer
	n    int
	dec  *Decoder
}

// EncodeC encodes v into a malloc'd buffer. Like Encode it checks first:
// on error nothing was handed over and v still belongs to the caller.
func EncodeC(scratch []byte, v any, dec *Decoder) (*Encoded, []byte, error) {
	buf, err := Encode(scratch[:0], v)
	if err != nil {
		return nil, scratch, err
	}
	p := C.malloc(C.size_t(max(len(buf), 1)))
	if p == nil {
		// The references are in buf already; give them back.
		releaseEncoded(buf, dec)
		return nil, buf, errors.New("wire: out of memory for an encoded item")
	}
	copy(unsafe.Slice((*byte)(p), len(buf)), buf)
	return &Encoded{data: p, n: len(buf), dec: dec}, buf, nil
}

// Take hands the buffer (and the references in it) to the caller, who
// frees it with free(); the Encoded is empty afterwards.
func (e *Encoded) Take() (unsafe.Pointer, int) {
	p, n := e.data, e.n
	e.data, e.n = nil, 0
	return p, n
}

// Release gives back every reference in the buffer and frees it; a no-op
// after Take.
func (e *Encoded) Release() {
	if e.data == nil {
		return
	}
	p, n := e.Take()
	releaseEncoded(unsafe.Slice((*byte)(p), n), e.dec)
	C.free(p)
}

// Tensor returns the spdl_tensor* when the encoded value is one tensor
// (a collated batch), else nil. e keeps its reference.
func (e *Encoded) Tensor() unsafe.Pointer {
	if e.data == nil || e.n != 9 {
		return nil
	}
	b := unsafe.Slice((*byte)(e.data), e.n)
	if b[0] != tagTensor {
		return nil
	}
	return cPointer(binary.LittleEndian.Uint64(b[1:]))
}

func (e *Encoded) String() string { return fmt.Sprintf("<encoded item, %d bytes>", e.n) }

// releaseEncoded walks encoded bytes and releases what they refer to.
func releaseEncoded(b []byte, dec *Decoder) {
	d := Decoder{TrustPointers: true}
	if dec != nil {
		d.ReleasePy = dec.ReleasePy
	}
	d.releaseArrow = true
	v, err := d.Decode(b)
	if err == nil {
		value.Release(v)
	}
}

// Free frees a buffer taken from an Encoded.
func Free(p unsafe.Pointer) { C.free(p) }
