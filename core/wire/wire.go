// Package wire is the byte format in which values cross the C ABI between
// the Go engine and Python. One call carries one value; Python's codec
// (python/spdl_go/_codec.py) is the other half and must agree byte for byte.
//
// Layout, little endian, one tag byte then the payload:
//
//	'N'                    None
//	'T' / 'F'              True / False
//	'i' int64              int (Python ints outside int64 travel as 'O')
//	'd' float64            float
//	's' u64 n, n bytes     str (UTF-8)
//	'b' u64 n, n bytes     bytes
//	'l' u64 n, n values    list
//	't' u64 n, n values    tuple
//	'm' u64 n, n × (u64 k, k bytes key, value)   dict with str keys
//	'D' u64 spdl_tensor*   a tensor; the sender's reference moves to the receiver
//	'V' u64 DLManagedTensorVersioned*   Python → Go only; ownership moves to Go
//	'v' u64 DLManagedTensor*            Python → Go only, legacy DLPack
//	'A' u64 ArrowSchema*, u64 ArrowArray*   Go → Python only; both structs
//	                       were malloc'd and the receiver owns (releases, frees) them
//	'O' u64 id             a Python object kept in Python's registry; the
//	                       receiver owns the registry entry
//
// Ownership: encoding hands every reference inside the value to the
// receiver (tensors are detached, Arrow arrays exported, Python refs
// forgotten); decoding adopts them. Nothing is shared afterwards.
package wire

import "unsafe"

const (
	tagNone     = 'N'
	tagTrue     = 'T'
	tagFalse    = 'F'
	tagInt      = 'i'
	tagFloat    = 'd'
	tagStr      = 's'
	tagBytes    = 'b'
	tagList     = 'l'
	tagTuple    = 't'
	tagDict     = 'm'
	tagTensor   = 'D'
	tagDLPackV  = 'V'
	tagDLPackV0 = 'v'
	tagArrow    = 'A'
	tagPyObject = 'O'
)

// cPointer turns an address received over the wire back into a pointer.
// The address is C memory (never Go's heap), so the GC need not track it;
// the indirection keeps vet's uintptr check quiet for this one legal case.
func cPointer(addr uint64) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&addr))
}
