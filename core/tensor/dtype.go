package tensor

import (
	"fmt"
	"strings"
)

// DType is a tensor element type, laid out as DLPack's DLDataType: a type
// code (DLPack's DLDataTypeCode), the bits of one lane, and the lanes per
// element. The zero DType is invalid. DTypes compare with ==.
type DType struct {
	Code  uint8
	Bits  uint8
	Lanes uint16
}

// DLPack type codes.
const (
	codeInt    = 0
	codeUInt   = 1
	codeFloat  = 2
	codeBfloat = 4
	codeBool   = 6
)

// The element types spdl-go creates and converts between. Tensors imported
// through DLPack may carry other types; they can be held, stacked and
// exported, but not converted.
var (
	Bool     = DType{codeBool, 8, 1}
	Int8     = DType{codeInt, 8, 1}
	Int16    = DType{codeInt, 16, 1}
	Int32    = DType{codeInt, 32, 1}
	Int64    = DType{codeInt, 64, 1}
	UInt8    = DType{codeUInt, 8, 1}
	UInt16   = DType{codeUInt, 16, 1}
	UInt32   = DType{codeUInt, 32, 1}
	UInt64   = DType{codeUInt, 64, 1}
	Float16  = DType{codeFloat, 16, 1}
	BFloat16 = DType{codeBfloat, 16, 1}
	Float32  = DType{codeFloat, 32, 1}
	Float64  = DType{codeFloat, 64, 1}
)

var dtypeNames = []struct {
	name string
	dt   DType
}{
	{"bool", Bool},
	{"int8", Int8}, {"int16", Int16}, {"int32", Int32}, {"int64", Int64},
	{"uint8", UInt8}, {"uint16", UInt16}, {"uint32", UInt32}, {"uint64", UInt64},
	{"float16", Float16}, {"bfloat16", BFloat16}, {"float32", Float32}, {"float64", Float64},
}

// String returns numpy's name for d ("float32", "uint8", "bool"), or a
// description of a type numpy has no name for.
func (d DType) String() string {
	for _, n := range dtypeNames {
		if n.dt == d {
			return n.name
		}
	}
	return fmt.Sprintf("dtype(code=%d, bits=%d, lanes=%d)", d.Code, d.Bits, d.Lanes)
}

// ItemSize is the bytes one element takes.
func (d DType) ItemSize() int { return (int(d.Bits)*int(d.Lanes) + 7) / 8 }

// ParseDType returns the DType of a numpy name such as "float32".
func ParseDType(s string) (DType, error) {
	for _, n := range dtypeNames {
		if n.name == s {
			return n.dt, nil
		}
	}
	names := make([]string, len(dtypeNames))
	for i, n := range dtypeNames {
		names[i] = n.name
	}
	return DType{}, fmt.Errorf("tensor: unknown dtype %q; use one of %s", s, strings.Join(names, ", "))
}

// known reports whether d is one of the named types (the ones Convert,
// Fill and converting copies support).
func (d DType) known() bool {
	for _, n := range dtypeNames {
		if n.dt == d {
			return true
		}
	}
	return false
}
