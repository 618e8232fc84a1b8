// Package tensor holds n-dimensional arrays outside Go's heap, so that
// Python can take them without a copy through DLPack while Go keeps
// producing more: in C host memory (pooled here), in pinned host memory or
// in CUDA device memory (cuda.go, through core/cuda's runtime), or imported
// from a foreign DLPack tensor.
//
// A Tensor is one counted reference to a C block (tensor.h) that owns either
// a buffer from this package's pool or a tensor imported through DLPack.
// Data lives in C memory, so it may be handed to C and Python freely; the
// Go garbage collector neither moves nor frees it. Every Tensor must be
// released exactly once by its owner: Release is what returns the buffer to
// the pool. Retain makes a second, independent reference.
//
// Buffers come from size-class free lists (4 KiB steps up to 64 KiB, then
// 8 classes per power of two, so at most 1/8 is wasted) that keep up to
// 256 MiB of freed buffers (SetPoolLimit): a steady stream of batches of
// one shape reuses the same pages instead of faulting in new ones. A pooled
// buffer's contents are whatever it held last: New does not zero memory.
//
// Costs (go test -bench . on a 2-core AMD EPYC VM): New from a warm pool
// plus Release take about 0.7 µs; copies between contiguous tensors run at
// memcpy speed (ops' collate stacks 4.8 MB batches at about 14 GB/s);
// converting uint8 to float32 takes about 2 ns per element.
package tensor

/*
#cgo CFLAGS: -O2 -std=gnu11 -fvisibility=hidden
#cgo LDFLAGS: -lpthread
#include "tensor.h"
#include "copy.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync/atomic"
	"unsafe"
)

// MaxNDim is the most dimensions that Convert, CopyInto and Fill accept.
const MaxNDim = C.SPDL_COPY_MAX_NDIM

// Tensor is a reference to a C tensor block. Its methods may be called
// from several goroutines at once; Release and Detach end the reference,
// after which every other method panics.
type Tensor struct {
	p  unsafe.Pointer // *C.spdl_tensor, nil once released; accessed atomically
	dl *C.DLTensor    // the block's view; valid while p is set
}

func wrap(p *C.spdl_tensor) *Tensor {
	t := &Tensor{dl: (*C.DLTensor)(unsafe.Pointer(C.spdl_tensor_dltensor(p)))}
	t.p = unsafe.Pointer(p)
	return t
}

func (t *Tensor) ptr() *C.spdl_tensor {
	p := atomic.LoadPointer(&t.p)
	if p == nil {
		panic("tensor: use of a released or detached Tensor")
	}
	return (*C.spdl_tensor)(p)
}

// view returns the DLTensor of a live tensor.
func (t *Tensor) view() *C.DLTensor {
	t.ptr()
	return t.dl
}

// New allocates a contiguous tensor. Its contents are not initialized.
func New(dt DType, shape ...int64) (*Tensor, error) {
	size, sp, err := checkShape(dt, shape)
	if err != nil {
		return nil, err
	}
	p := C.spdl_tensor_alloc(C.int32_t(len(shape)), sp, C.uint8_t(dt.Code), C.uint8_t(dt.Bits), C.uint16_t(dt.Lanes))
	if p == nil {
		return nil, fmt.Errorf("tensor: out of memory allocating %v %v (%d bytes)", dt, shape, size)
	}
	return wrap(p), nil
}

// checkShape validates an allocation and returns its size in bytes and
// the shape as C sees it.
func checkShape(dt DType, shape []int64) (uint64, *C.int64_t, error) {
	if dt.Bits == 0 || dt.Bits%8 != 0 || dt.Lanes == 0 {
		return 0, nil, fmt.Errorf("tensor: cannot allocate %v: element size must be whole bytes", dt)
	}
	if len(shape) > 1<<20 {
		return 0, nil, fmt.Errorf("tensor: %d dimensions is too many", len(shape))
	}
	size := uint64(dt.ItemSize())
	for _, d := range shape {
		if d < 0 {
			return 0, nil, fmt.Errorf("tensor: negative dimension in shape %v", shape)
		}
		hi, lo := bits.Mul64(size, uint64(d))
		if hi != 0 || lo > 1<<62 {
			return 0, nil, fmt.Errorf("tensor: shape %v of %v is too large", shape, dt)
		}
		size = lo
	}
	var sp *C.int64_t
	if len(shape) > 0 {
		sp = (*C.int64_t)(unsafe.Pointer(&shape[0]))
	}
	return size, sp, nil
}

// FromDLPackVersioned takes ownership of p, a DLManagedTensorVersioned*,
// and returns a Tensor over its memory; the producer's deleter runs when
// the last reference is released. On error, p still belongs to the caller
// (who must call its deleter).
func FromDLPackVersioned(p unsafe.Pointer) (*Tensor, error) {
	m := (*C.DLManagedTensorVersioned)(p)
	if m == nil {
		return nil, errors.New("tensor: FromDLPackVersioned: nil DLManagedTensorVersioned")
	}
	if m.version.major != 1 {
		return nil, fmt.Errorf("tensor: DLPack version %d.%d is not supported (need 1.x); ask the producer for an older version", m.version.major, m.version.minor)
	}
	if err := checkImport(&m.dl_tensor); err != nil {
		return nil, err
	}
	t := C.spdl_tensor_from_dlpack_versioned(m)
	if t == nil {
		return nil, errors.New("tensor: out of memory importing a DLPack tensor")
	}
	return wrap(t), nil
}

// FromDLPackLegacy is FromDLPackVersioned for the pre-1.0 DLManagedTensor.
func FromDLPackLegacy(p unsafe.Pointer) (*Tensor, error) {
	m := (*C.DLManagedTensor)(p)
	if m == nil {
		return nil, errors.New("tensor: FromDLPackLegacy: nil DLManagedTensor")
	}
	if err := checkImport(&m.dl_tensor); err != nil {
		return nil, err
	}
	t := C.spdl_tensor_from_dlpack_legacy(m)
	if t == nil {
		return nil, errors.New("tensor: out of memory importing a DLPack tensor")
	}
	return wrap(t), nil
}

func checkImport(dl *C.DLTensor) error {
	if dl.device.device_type != C.kDLCPU {
		return fmt.Errorf("tensor: cannot import a tensor on DLPack device type %d; move it to the CPU first", dl.device.device_type)
	}
	if dl.ndim < 0 || (dl.ndim > 0 && dl.shape == nil) {
		return fmt.Errorf("tensor: malformed DLPack tensor (ndim %d, shape %p)", dl.ndim, dl.shape)
	}
	return nil
}

// Adopt wraps p, a spdl_tensor* whose reference the caller gives to Go.
// Adopt(nil) returns nil.
func Adopt(p unsafe.Pointer) *Tensor {
	if p == nil {
		return nil
	}
	return wrap((*C.spdl_tensor)(p))
}

// Detach ends t and returns its reference as a spdl_tensor*, which the
// caller now owns (and gives back with spdl_tensor_decref).
func (t *Tensor) Detach() unsafe.Pointer {
	p := atomic.SwapPointer(&t.p, nil)
	if p == nil {
		panic("tensor: Detach of a released or detached Tensor")
	}
	return p
}

// Retain returns a new reference to the same tensor; release both.
func (t *Tensor) Retain() *Tensor {
	p := t.ptr()
	C.spdl_tensor_incref(p)
	return wrap(p)
}

// Release drops t's reference. Calling it again on the same *Tensor, or on
// a nil *Tensor, does nothing.
func (t *Tensor) Release() {
	if t == nil {
		return
	}
	if p := atomic.SwapPointer(&t.p, nil); p != nil {
		C.spdl_tensor_decref((*C.spdl_tensor)(p))
	}
}

// ToDLPackVersioned returns a new DLManagedTensorVersioned* that holds its
// own reference to the tensor; t stays the caller's. Whoever receives the
// struct calls its deleter exactly once.
func (t *Tensor) ToDLPackVersioned() (unsafe.Pointer, error) {
	m := C.spdl_tensor_to_dlpack_versioned(t.ptr())
	if m == nil {
		return nil, errors.New("tensor: out of memory exporting a DLPack tensor")
	}
	return unsafe.Pointer(m), nil
}

// ToDLPackLegacy is ToDLPackVersioned for the pre-1.0 DLManagedTensor.
func (t *Tensor) ToDLPackLegacy() (unsafe.Pointer, error) {
	m := C.spdl_tensor_to_dlpack_legacy(t.ptr())
	if m == nil {
		return nil, errors.New("tensor: out of memory exporting a DLPack tensor")
	}
	return unsafe.Pointer(m), nil
}

// DLTensor returns the tensor's C DLTensor*, valid while t is held.
func (t *Tensor) DLTensor() unsafe.Pointer { return unsafe.Pointer(t.view()) }

// DType is the element type.
func (t *Tensor) DType() DType {
	d := t.view().dtype
	return DType{Code: uint8(d.code), Bits: uint8(d.bits), Lanes: uint16(d.lanes)}
}

// NDim is the number of dimensions.
func (t *Tensor) NDim() int { return int(t.view().ndim) }

// Shape returns a copy of the shape.
func (t *Tensor) Shape() []int64 { return t.dims(t.view().shape) }

// Strides returns a copy of the strides, in elements.
func (t *Tensor) Strides() []int64 { return t.dims(t.view().strides) }

func (t *Tensor) dims(p *C.int64_t) []int64 {
	n := int(t.dl.ndim)
	if n == 0 {
		return []int64{}
	}
	return slices.Clone(unsafe.Slice((*int64)(unsafe.Pointer(p)), n))
}

// Numel is the number of elements.
func (t *Tensor) Numel() int64 {
	dl := t.view()
	n := int64(1)
	for _, d := range unsafe.Slice((*int64)(unsafe.Pointer(dl.shape)), int(dl.ndim)) {
		n *= d
	}
	return n
}

// NBytes is the size of the elements, Numel times the item size.
func (t *Tensor) NBytes() int { return int(t.Numel()) * t.DType().ItemSize() }

// Contiguous reports whether the elements are compact and row-major.
func (t *Tensor) Contiguous() bool {
	dl := t.view()
	n := int(dl.ndim)
	shape := unsafe.Slice((*int64)(unsafe.Pointer(dl.shape)), n)
	strides := unsafe.Slice((*int64)(unsafe.Pointer(dl.strides)), n)
	want := int64(1)
	for i := n - 1; i >= 0; i-- {
		if shape[i] == 0 {
			return true
		}
		if shape[i] != 1 && strides[i] != want {
			return false
		}
		want *= shape[i]
	}
	return true
}

// ReadOnly reports whether the producer of an imported tensor marked it
// read-only; such a tensor must not be written, and exports stay read-only.
func (t *Tensor) ReadOnly() bool { return C.spdl_tensor_read_only(t.ptr()) != 0 }

// Data is the address of the first element (nil for some empty imported
// tensors). It is C memory, valid while t is held; for a tensor that is
// not OnCPU it is a device address, which the CPU must not dereference.
func (t *Tensor) Data() unsafe.Pointer { return t.view().data }

// Bytes views the elements of a contiguous tensor as bytes, without a copy;
// the slice is valid while t is held. It is nil for a non-contiguous or
// empty tensor, and for one in GPU memory.
func (t *Tensor) Bytes() []byte {
	n := t.NBytes()
	if n == 0 || t.Data() == nil || !t.Contiguous() || !t.OnCPU() {
		return nil
	}
	return unsafe.Slice((*byte)(t.Data()), n)
}

// String describes t as "tensor(float32, [32 3 224 224])".
func (t *Tensor) String() string {
	if t == nil || atomic.LoadPointer(&t.p) == nil {
		return "tensor(released)"
	}
	return fmt.Sprintf("tensor(%v, %v)", t.DType(), t.Shape())
}

// Convert returns a new contiguous tensor with t's elements converted to dt
// (as numpy's astype, except that floats to integers truncate and then
// saturate to the target's range, NaN becoming 0). t is not released.
func (t *Tensor) Convert(dt DType) (*Tensor, error) {
	if !dt.known() || !t.DType().known() {
		return nil, fmt.Errorf("tensor: cannot convert %v to %v", t.DType(), dt)
	}
	out, err := New(dt, t.Shape()...)
	if err != nil {
		return nil, err
	}
	if err := CopyInto(out, nil, t); err != nil {
		out.Release()
		return nil, err
	}
	return out, nil
}

// CopyInto copies src into the block of dst that starts at index: dst's
// leading len(index) dimensions are fixed to index, and src's shape must
// fit within dst's remaining dimensions (the block starts at 0 in each).
// So CopyInto(batch, []int64{i}, sample) writes batch[i], and a smaller
// sample fills only the top-left corner of batch[i]. Elements are
// converted if the dtypes differ. Neither tensor is released.
func CopyInto(dst *Tensor, index []int64, src *Tensor) error {
	ddl, sdl := dst.view(), src.view()
	if !dst.OnCPU() || !src.OnCPU() {
		return fmt.Errorf("tensor: cannot copy %v on %v into %v on %v on the CPU; CPU ops come before to_device", src, src.Device(), dst, dst.Device())
	}
	dshape, sshape := dst.Shape(), src.Shape()
	if len(index)+len(sshape) != len(dshape) {
		return fmt.Errorf("tensor: cannot copy %v into %v at index %v: dimensions differ", src, dst, index)
	}
	if len(sshape) > MaxNDim {
		return fmt.Errorf("tensor: cannot copy a tensor of %d dimensions (the limit is %d)", len(sshape), MaxNDim)
	}
	if dst.ReadOnly() {
		return fmt.Errorf("tensor: cannot copy into read-only %v", dst)
	}
	dstrides := dst.Strides()
	itemsize := int64(dst.DType().ItemSize())
	var off int64
	for i, x := range index {
		if x < 0 || x >= dshape[i] {
			return fmt.Errorf("tensor: index %v is out of range for %v", index, dst)
		}
		off += x * dstrides[i]
	}
	for i, d := range sshape {
		if d > dshape[len(index)+i] {
			return fmt.Errorf("tensor: cannot copy %v into %v at index %v: it does not fit", src, dst, index)
		}
	}
	if src.Numel() == 0 {
		return nil
	}
	sstrides := src.Strides()
	rest := dstrides[len(index):]
	rc := C.spdl_copy_nd(unsafe.Add(ddl.data, off*itemsize), cInts(rest), ddl.dtype,
		sdl.data, cInts(sstrides), sdl.dtype, cInts(sshape), C.int32_t(len(sshape)))
	if rc != 0 {
		return fmt.Errorf("tensor: cannot convert %v to %v", src.DType(), dst.DType())
	}
	return nil
}

// Fill sets every element of t to v, converted to t's dtype.
func (t *Tensor) Fill(v float64) error {
	dl := t.view()
	if !t.OnCPU() {
		return fmt.Errorf("tensor: cannot fill %v on %v on the CPU", t, t.Device())
	}
	if t.ReadOnly() {
		return fmt.Errorf("tensor: cannot fill read-only %v", t)
	}
	if t.Numel() == 0 {
		return nil
	}
	if int(dl.ndim) > MaxNDim || C.spdl_fill_nd(dl.data, dl.strides, dl.dtype, dl.shape, dl.ndim, C.double(v)) != 0 {
		return fmt.Errorf("tensor: cannot fill %v", t)
	}
	return nil
}

func cInts(s []int64) *C.int64_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.int64_t)(unsafe.Pointer(&s[0]))
}

// Stats describes the C memory behind tensors. Each field is exact; the
// fields together are not one snapshot.
type Stats struct {
	LiveTensors  int64 // tensor blocks alive (allocated and imported)
	LiveBytes    int64 // bytes of pooled buffers held by live tensors
	PooledBytes  int64 // bytes of free buffers cached for reuse
	SystemAllocs int64 // buffers ever allocated from the system (pool misses)
}

// MemStats returns the current statistics.
func MemStats() Stats {
	var out [4]C.int64_t
	C.spdl_pool_stats(&out[0])
	return Stats{int64(out[0]), int64(out[1]), int64(out[2]), int64(out[3])}
}

// SetPoolLimit sets how many bytes of free buffers the pool keeps (default
// 256 MiB) and frees what is cached beyond it.
func SetPoolLimit(bytes int64) { C.spdl_mem_set_pool_limit(C.int64_t(bytes)) }

// Trim frees every cached buffer.
func Trim() { C.spdl_mem_trim() }
