package tensor

/*
#include "tensor.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"
)

// The shared-memory arena (tensor.h) lets a pipeline in a worker process
// hand its batches to the parent without a copy: the worker's pool carves
// buffers from a memfd the parent maps too, and a buffer lent to the parent
// is reused only after the parent's tensor over it is gone. Python's
// spdl_go.pipeline.iterate_in_subprocess drives it through the C ABI; these
// are its Go handles.

// UseSharedArena makes this process's pool take buffers from the memfd fd
// (size bytes) while it has room. Once per process, before tensors are made.
func UseSharedArena(fd int, size int64) error {
	if rc := C.spdl_shm_arena(C.int(fd), C.int64_t(size)); rc != 0 {
		return fmt.Errorf("tensor: shared arena: %w", syscall.Errno(rc))
	}
	return nil
}

// LendShared lends t's buffer to the other process: the offsets of its
// header and of t's first element in the arena. ok is false, and nothing is
// lent, when the buffer is not in the arena.
func (t *Tensor) LendShared() (hdr, data int64, ok bool) {
	var out [2]C.int64_t
	if C.spdl_shm_lend(t.ptr(), &out[0]) == 0 {
		return 0, 0, false
	}
	return int64(out[0]), int64(out[1]), true
}

// shmDescMax is the longest descriptor (tensor.h): 24 bytes and 16 a
// dimension, for at most 64 dimensions.
const shmDescMax = 24 + 16*64

// LendDescriptor lends t's buffer as LendShared does and returns the
// descriptor another process's SharedMap.TensorFromDescriptor reads (one
// message carries the offsets, dtype, shape and strides). ok is false, and
// nothing is lent, when the buffer is not in the arena.
func (t *Tensor) LendDescriptor() (desc []byte, ok bool) {
	var buf [shmDescMax]byte
	n := C.spdl_shm_lend_desc(t.ptr(), (*C.uint8_t)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf)))
	if n <= 0 {
		return nil, false
	}
	return append([]byte(nil), buf[:n]...), true
}

// SharedArenaStats describes this process's arena.
type SharedArenaStats struct {
	Size, Carved, Pending, Lends, Misses int64
}

// SharedStats returns the arena's counters (all zero without one).
func SharedStats() SharedArenaStats {
	var out [5]C.int64_t
	C.spdl_shm_stats(&out[0])
	return SharedArenaStats{int64(out[0]), int64(out[1]), int64(out[2]), int64(out[3]), int64(out[4])}
}

// SharedMap is the other process's mapping of an arena.
type SharedMap struct{ p unsafe.Pointer }

// MapShared maps the arena in memfd fd.
func MapShared(fd int, size int64) (*SharedMap, error) {
	var e C.int
	p := C.spdl_shm_map(C.int(fd), C.int64_t(size), &e)
	if p == nil {
		return nil, fmt.Errorf("tensor: mapping a shared arena: %w", syscall.Errno(e))
	}
	return &SharedMap{p: p}, nil
}

// Tensor makes a tensor over a lent buffer (the offsets LendShared gave).
// Its Release gives the buffer back. It fails when the view reaches outside
// the buffer.
func (m *SharedMap) Tensor(hdr, data int64, dt DType, shape, strides []int64) (*Tensor, error) {
	if len(strides) != len(shape) {
		return nil, errors.New("tensor: shape and strides differ in length")
	}
	var sp, st *C.int64_t
	if len(shape) > 0 {
		sp, st = (*C.int64_t)(unsafe.Pointer(&shape[0])), (*C.int64_t)(unsafe.Pointer(&strides[0]))
	}
	p := C.spdl_shm_tensor(m.p, C.int64_t(hdr), C.int64_t(data), C.int32_t(len(shape)), sp, st,
		C.uint8_t(dt.Code), C.uint8_t(dt.Bits), C.uint16_t(dt.Lanes))
	if p == nil {
		return nil, fmt.Errorf("tensor: a shared view at %d (header %d) of %v %v strides %v lies outside its buffer", data, hdr, dt, shape, strides)
	}
	return wrap(p), nil
}

// TensorFromDescriptor makes a tensor over the lent buffer a descriptor
// (LendDescriptor) names. It fails when the descriptor is malformed or the
// view reaches outside the buffer.
func (m *SharedMap) TensorFromDescriptor(desc []byte) (*Tensor, error) {
	if len(desc) == 0 || len(desc) > shmDescMax {
		return nil, fmt.Errorf("tensor: a shared-tensor descriptor of %d bytes (24 to %d)", len(desc), shmDescMax)
	}
	p := C.spdl_shm_tensor_desc(m.p, (*C.uint8_t)(unsafe.Pointer(&desc[0])), C.int32_t(len(desc)))
	if p == nil {
		return nil, fmt.Errorf("tensor: a shared-tensor descriptor (%d bytes) is malformed or lies outside its buffer", len(desc))
	}
	return wrap(p), nil
}

// Close drops the mapping's handle; tensors over it keep it mapped.
func (m *SharedMap) Close() {
	C.spdl_shm_unmap(m.p)
	m.p = nil
}

// SharedBuf carves n > 0 zeroed bytes from this process's arena, for an
// Arrow buffer (core/columnar's allocator): nil when there is no arena or
// no room. Give it back with FreeSharedBuf.
func SharedBuf(n int) []byte {
	var c C.int64_t
	p := C.spdl_shm_buf_alloc(C.int64_t(n), &c)
	if p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(p), int(c))[:n]
}

// FreeSharedBuf gives back a buffer from SharedBuf (b may be resliced;
// its first byte is the buffer's). A lent buffer is reused once the
// parent's view of it is gone.
func FreeSharedBuf(b []byte) {
	C.spdl_shm_buf_free(unsafe.Pointer(unsafe.SliceData(b)))
}

// LendSharedBuf lends the first n bytes of the buffer at p, from
// SharedBuf (the caller makes sure), as LendDescriptor lends a tensor: the
// descriptor of a 1-D uint8 tensor over them, written to out; its length,
// or 0 (nothing lent) when p is not in the arena or n past its capacity,
// -1 when out is too short.
func LendSharedBuf(p unsafe.Pointer, n int64, out []byte) int {
	if len(out) == 0 {
		return -1
	}
	return int(C.spdl_shm_lend_buf(p, C.int64_t(n), (*C.uint8_t)(unsafe.Pointer(&out[0])), C.int32_t(len(out))))
}
