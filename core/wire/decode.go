package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/spdl-go/spdl-go/core/tensor"
	"github.com/spdl-go/spdl-go/core/value"
)

// Decoder turns bytes from Python into Go values, adopting every
// reference they carry.
type Decoder struct {
	// ReleasePy is called when Go drops a Python object reference.
	ReleasePy func(id uint64)
	// TrustPointers admits the tags that carry raw C pointers ('D', 'V',
	// 'v'). Only bytes from the in-process host may carry them; without it
	// those tags are an error, so arbitrary bytes can be decoded safely.
	TrustPointers bool

	// releaseArrow makes 'A' entries release their structs: used only to
	// drop an Encoded buffer that was never handed over.
	releaseArrow bool
}

// Decode reads one value that fills b. On error, whatever was adopted so
// far is released.
func (d *Decoder) Decode(b []byte) (any, error) {
	r := reader{buf: b, dec: d}
	v, err := r.value(0)
	if err == nil && r.pos != len(r.buf) {
		value.Release(v)
		err = fmt.Errorf("wire: %d trailing bytes after value", len(r.buf)-r.pos)
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

type reader struct {
	buf []byte
	pos int
	dec *Decoder
}

func (r *reader) need(n int) error {
	if n < 0 || len(r.buf)-r.pos < n {
		return fmt.Errorf("wire: truncated value at byte %d (need %d more)", r.pos, n)
	}
	return nil
}

func (r *reader) u64() (uint64, error) {
	if err := r.need(8); err != nil {
		return 0, err
	}
	n := binary.LittleEndian.Uint64(r.buf[r.pos:])
	r.pos += 8
	return n, nil
}

func (r *reader) length() (int, error) {
	n, err := r.u64()
	if err != nil {
		return 0, err
	}
	if n > uint64(len(r.buf)) {
		return 0, fmt.Errorf("wire: length %d at byte %d exceeds the %d-byte message", n, r.pos-8, len(r.buf))
	}
	return int(n), nil
}

func (r *reader) bytes() ([]byte, error) {
	n, err := r.length()
	if err != nil {
		return nil, err
	}
	if err := r.need(n); err != nil {
		return nil, err
	}
	b := r.buf[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

func (r *reader) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("wire: value nested deeper than %d levels", maxDepth)
	}
	if err := r.need(1); err != nil {
		return nil, err
	}
	tag := r.buf[r.pos]
	r.pos++
	if (tag == tagTensor || tag == tagDLPackV || tag == tagDLPackV0) && !r.dec.TrustPointers {
		return nil, fmt.Errorf("wire: pointer tag %q at byte %d from an untrusted sender", tag, r.pos-1)
	}
	switch tag {
	case tagNone:
		return nil, nil
	case tagTrue:
		return true, nil
	case tagFalse:
		return false, nil
	case tagInt:
		n, err := r.u64()
		return int64(n), err
	case tagFloat:
		n, err := r.u64()
		return math.Float64frombits(n), err
	case tagStr:
		b, err := r.bytes()
		if err != nil {
			return nil, err
		}
		// What Encode would refuse (it cannot come from Python's encoder).
		if err := checkText(string(b)); err != nil {
			return nil, err
		}
		return string(b), nil
	case tagBytes:
		b, err := r.bytes()
		if err != nil {
			return nil, err
		}
		out := make([]byte, len(b)) // a copy: b aliases the sender's buffer
		copy(out, b)
		return out, nil
	case tagList, tagTuple:
		n, err := r.length()
		if err != nil {
			return nil, err
		}
		xs := make([]any, 0, n)
		for i := 0; i < n; i++ {
			e, err := r.value(depth + 1)
			if err != nil {
				value.Release(value.List(xs))
				return nil, err
			}
			xs = append(xs, e)
		}
		if tag == tagTuple {
			return value.Tuple(xs), nil
		}
		return value.List(xs), nil
	case tagDict:
		n, err := r.length()
		if err != nil {
			return nil, err
		}
		d := value.NewDict(n)
		for i := 0; i < n; i++ {
			k, err := r.bytes()
			if err == nil {
				err = checkText(string(k))
			}
			if err != nil {
				value.Release(d)
				return nil, err
			}
			e, err := r.value(depth + 1)
			if err != nil {
				value.Release(d)
				return nil, err
			}
			d.Keys = append(d.Keys, string(k))
			d.Values = append(d.Values, e)
		}
		return d, nil
	case tagTensor:
		p, err := r.u64()
		if err != nil {
			return nil, err
		}
		if p == 0 {
			return nil, fmt.Errorf("wire: null tensor at byte %d", r.pos-8)
		}
		return tensor.Adopt(cPointer(p)), nil
	case tagDLPackV, tagDLPackV0:
		p, err := r.u64()
		if err != nil {
			return nil, err
		}
		if p == 0 {
			return nil, fmt.Errorf("wire: null DLPack tensor at byte %d", r.pos-8)
		}
		t, err := importDLPack(cPointer(p), tag == tagDLPackV)
		if err != nil {
			return nil, err
		}
		return t, nil
	case tagPyObject:
		id, err := r.u64()
		if err != nil {
			return nil, err
		}
		return NewPyObject(id, r.dec.ReleasePy), nil
	case tagArrow:
		if !r.dec.releaseArrow {
			return nil, fmt.Errorf("wire: Arrow arrays cannot be sent from Python to Go yet")
		}
		if err := r.need(16); err != nil {
			return nil, err
		}
		FreeExportedArrow(r.buf[r.pos : r.pos+16])
		r.pos += 16
		return nil, nil
	default:
		return nil, fmt.Errorf("wire: unknown tag 0x%02x at byte %d", tag, r.pos-1)
	}
}
