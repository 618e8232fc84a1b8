// Package formats parses the simple container and array formats that the
// eager API (python/spdl_go/io.py through capi/io.go) reads without FFmpeg:
// NumPy's .npy and .npz, RIFF WAVE, and tar archives. Each parser is pure
// Go over a byte slice, never panics on bad bytes (each has a fuzz target),
// refuses sizes its input cannot hold before allocating, and names what is
// wrong in its errors. It allocates no C memory: callers copy the parsed
// data into tensors.
package formats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// ErrFormat is wrapped by every parse error, so callers can tell bad input
// from other failures.
var ErrFormat = errors.New("invalid data")

// formatError is a parse error; it matches ErrFormat.
type formatError struct{ msg string }

func (e *formatError) Error() string        { return e.msg }
func (e *formatError) Is(target error) bool { return target == ErrFormat }

func errorf(format string, args ...any) error {
	return &formatError{fmt.Sprintf(format, args...)}
}

// MaxNpyHeader is the largest .npy header accepted, as numpy's own
// max_header_size default: longer headers are a sign of a hostile file.
const MaxNpyHeader = 10000

// maxDims bounds the rank of an array (numpy's NPY_MAXDIMS is 64).
const maxDims = 64

// Array is one array parsed from .npy bytes. Data aliases the input.
type Array struct {
	// Kind is numpy's type kind: 'b' bool, 'i' signed, 'u' unsigned, 'f' float.
	Kind byte
	// ItemSize is the bytes of one element.
	ItemSize int
	// BigEndian is set for '>' descriptors of multi-byte elements.
	BigEndian bool
	// Fortran is set for column-major data.
	Fortran bool
	Shape   []int64
	// Data holds exactly Numel()*ItemSize bytes.
	Data []byte
}

// Numel is the number of elements.
func (a *Array) Numel() int64 {
	n := int64(1)
	for _, d := range a.Shape {
		n *= d
	}
	return n
}

// DType is numpy's name of the element type ("float32", "uint8", "bool").
func (a *Array) DType() string {
	switch a.Kind {
	case 'b':
		return "bool"
	case 'i':
		return "int" + strconv.Itoa(a.ItemSize*8)
	case 'u':
		return "uint" + strconv.Itoa(a.ItemSize*8)
	}
	return "float" + strconv.Itoa(a.ItemSize*8)
}

// ParseNpy reads the .npy format (versions 1.0, 2.0 and 3.0): the header's
// dtype, order and shape, and a view of the data. Object, structured,
// string and complex dtypes are refused; so is data shorter than the
// header declares (trailing bytes are ignored, as numpy does).
func ParseNpy(b []byte) (*Array, error) {
	const magic = "\x93NUMPY"
	if len(b) == 0 {
		return nil, errorf("npy: empty input (0 bytes)")
	}
	if len(b) < len(magic)+2 || string(b[:len(magic)]) != magic {
		return nil, errorf("npy: not a .npy file (no \\x93NUMPY magic)")
	}
	major := b[6]
	var hlen, off int
	switch major {
	case 1:
		if len(b) < 10 {
			return nil, errorf("npy: truncated header (%d bytes)", len(b))
		}
		hlen, off = int(binary.LittleEndian.Uint16(b[8:])), 10
	case 2, 3:
		if len(b) < 12 {
			return nil, errorf("npy: truncated header (%d bytes)", len(b))
		}
		n := binary.LittleEndian.Uint32(b[8:])
		if n > MaxNpyHeader {
			return nil, errorf("npy: header of %d bytes is over the limit of %d", n, MaxNpyHeader)
		}
		hlen, off = int(n), 12
	default:
		return nil, errorf("npy: unsupported format version %d.%d", major, b[7])
	}
	if hlen > MaxNpyHeader {
		return nil, errorf("npy: header of %d bytes is over the limit of %d", hlen, MaxNpyHeader)
	}
	if len(b) < off+hlen {
		return nil, errorf("npy: truncated header: it declares %d bytes, %d are present", hlen, len(b)-off)
	}
	a, err := parseNpyHeader(string(b[off : off+hlen]))
	if err != nil {
		return nil, err
	}
	n := int64(1)
	for _, d := range a.Shape {
		hi, lo := bits.Mul64(uint64(n), uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return nil, errorf("npy: shape %v overflows", a.Shape)
		}
		n = int64(lo)
	}
	hi, size := bits.Mul64(uint64(n), uint64(a.ItemSize))
	data := b[off+hlen:]
	if hi != 0 || size > uint64(len(data)) {
		return nil, errorf("npy: truncated data: shape %v of %s needs %d elements of %d bytes, %d bytes are present",
			a.Shape, a.DType(), n, a.ItemSize, len(data))
	}
	a.Data = data[:size]
	return a, nil
}

// parseNpyHeader reads the header, a Python dict literal such as
// "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }".
func parseNpyHeader(h string) (*Array, error) {
	p := &pyLit{s: strings.TrimRight(h, " \n\x00")}
	a := &Array{}
	if !p.eat('{') {
		return nil, errorf("npy: header is not a dict: %.60q", h)
	}
	var seen [3]bool
	for {
		if p.eat('}') {
			break
		}
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		if !p.eat(':') {
			return nil, errorf("npy: header: expected ':' after %q", key)
		}
		switch key {
		case "descr":
			d, err := p.str()
			if err != nil {
				return nil, errorf("npy: header: descr must be a string such as '<f4' (structured dtypes are not supported)")
			}
			if err := a.setDescr(d); err != nil {
				return nil, err
			}
			seen[0] = true
		case "fortran_order":
			v, err := p.boolean()
			if err != nil {
				return nil, err
			}
			a.Fortran = v
			seen[1] = true
		case "shape":
			s, err := p.tuple()
			if err != nil {
				return nil, err
			}
			a.Shape = s
			seen[2] = true
		default:
			return nil, errorf("npy: header: unknown key %q", key)
		}
		if !p.eat(',') {
			if !p.eat('}') {
				return nil, errorf("npy: header: expected ',' or '}' at %.30q", p.s[p.i:])
			}
			break
		}
	}
	if p.skip(); p.i != len(p.s) {
		return nil, errorf("npy: header: trailing text %.30q", p.s[p.i:])
	}
	if !seen[0] || !seen[1] || !seen[2] {
		return nil, errorf("npy: header lacks one of descr, fortran_order, shape: %.80q", h)
	}
	return a, nil
}

// setDescr reads a simple dtype descriptor: byte order, kind, size.
func (a *Array) setDescr(d string) error {
	if len(d) < 3 {
		return errorf("npy: unsupported dtype %q", d)
	}
	order, kind := d[0], d[1]
	size, err := strconv.Atoi(d[2:])
	if err != nil {
		return errorf("npy: unsupported dtype %q", d)
	}
	ok := false
	switch kind {
	case 'b':
		ok = size == 1
	case 'i', 'u':
		ok = size == 1 || size == 2 || size == 4 || size == 8
	case 'f':
		ok = size == 2 || size == 4 || size == 8
	}
	if !ok {
		return errorf("npy: unsupported dtype %q (bool, int, uint and float arrays are supported; not object, string, complex or structured)", d)
	}
	switch order {
	case '<', '|', '=':
	case '>':
		a.BigEndian = size > 1
	default:
		return errorf("npy: unsupported byte order in dtype %q", d)
	}
	a.Kind, a.ItemSize = kind, size
	return nil
}

// CopyC writes the elements into dst (len Numel()*ItemSize) in C order and
// the machine's (little-endian) byte order.
func (a *Array) CopyC(dst []byte) {
	if !a.Fortran || len(a.Shape) < 2 {
		copy(dst, a.Data)
	} else {
		transposeFortran(dst, a.Data, a.Shape, a.ItemSize)
	}
	if a.BigEndian {
		swapBytes(dst, a.ItemSize)
	}
}

// transposeFortran copies column-major src into row-major dst.
func transposeFortran(dst, src []byte, shape []int64, size int) {
	nd := len(shape)
	stride := make([]int64, nd) // element stride in src of each dst dimension
	s := int64(1)
	for k := range nd {
		stride[k] = s
		s *= shape[k]
	}
	if s == 0 {
		return
	}
	idx := make([]int64, nd)
	last := shape[nd-1]
	step := stride[nd-1] * int64(size)
	d := 0
	for {
		var off int64
		for k := range nd - 1 {
			off += idx[k] * stride[k]
		}
		off *= int64(size)
		for range last {
			copy(dst[d:d+size], src[off:off+int64(size)])
			d += size
			off += step
		}
		k := nd - 2
		for ; k >= 0; k-- {
			if idx[k]++; idx[k] < shape[k] {
				break
			}
			idx[k] = 0
		}
		if k < 0 {
			return
		}
	}
}

func swapBytes(b []byte, size int) {
	for i := 0; i+size <= len(b); i += size {
		e := b[i : i+size]
		for l, r := 0, size-1; l < r; l, r = l+1, r-1 {
			e[l], e[r] = e[r], e[l]
		}
	}
}

// pyLit reads the few Python literals a .npy header holds.
type pyLit struct {
	s string
	i int
}

func (p *pyLit) skip() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\n' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *pyLit) eat(c byte) bool {
	p.skip()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *pyLit) str() (string, error) {
	p.skip()
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", errorf("npy: header: expected a string at %.30q", p.s[p.i:])
	}
	q := p.s[p.i]
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", errorf("npy: header: unterminated string")
	}
	v := p.s[p.i+1 : p.i+1+end]
	p.i += end + 2
	return v, nil
}

func (p *pyLit) boolean() (bool, error) {
	p.skip()
	for _, w := range []string{"True", "False"} {
		if strings.HasPrefix(p.s[p.i:], w) {
			p.i += len(w)
			return w == "True", nil
		}
	}
	return false, errorf("npy: header: fortran_order must be True or False")
}

func (p *pyLit) tuple() ([]int64, error) {
	if !p.eat('(') {
		return nil, errorf("npy: header: shape must be a tuple")
	}
	shape := []int64{}
	for {
		if p.eat(')') {
			return shape, nil
		}
		p.skip()
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		if j == p.i || j-p.i > 18 {
			return nil, errorf("npy: header: shape must hold integers >= 0, at %.30q", p.s[p.i:])
		}
		n, _ := strconv.ParseInt(p.s[p.i:j], 10, 64)
		p.i = j
		p.skip()
		if p.i < len(p.s) && p.s[p.i] == 'L' { // Python 2 longs
			p.i++
		}
		if len(shape) == maxDims {
			return nil, errorf("npy: header: shape has more than %d dimensions", maxDims)
		}
		shape = append(shape, n)
		if !p.eat(',') {
			if !p.eat(')') {
				return nil, errorf("npy: header: expected ',' or ')' in shape")
			}
			return shape, nil
		}
	}
}
