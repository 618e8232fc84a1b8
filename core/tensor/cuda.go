package tensor

/*
#include "tensor.h"

// The runtime's functions arrive as addresses from purego (core/cuda).
static int spdl_install_cuda(uintptr_t f[9]) {
  spdl_cuda_api api = {
      .host_alloc = (int (*)(void**, size_t, unsigned int))f[0],
      .free_host = (int (*)(void*))f[1],
      .malloc = (int (*)(void**, size_t))f[2],
      .free = (int (*)(void*))f[3],
      .event_create = (int (*)(void**, unsigned int))f[4],
      .event_record = (int (*)(void*, void*))f[5],
      .event_destroy = (int (*)(void*))f[6],
      .stream_wait_event = (int (*)(void*, void*, unsigned int))f[7],
      .event_synchronize = (int (*)(void*))f[8],
  };
  return spdl_cuda_set_api(&api);
}

static spdl_tensor* spdl_alloc_device_u(int32_t device, uintptr_t stream, int32_t ndim,
                                        const int64_t* shape, uint8_t code, uint8_t bits,
                                        uint16_t lanes, int* err) {
  return spdl_tensor_alloc_device(device, (void*)stream, ndim, shape, code, bits, lanes, err);
}
*/
import "C"

import (
	"errors"
	"fmt"
)

// DLPack device types (DLDeviceType).
const (
	DeviceCPU  = 1
	DeviceCUDA = 2
)

// Device is where a tensor's memory is, as DLPack names it.
type Device struct {
	Type int // DeviceCPU or DeviceCUDA
	ID   int // the GPU's ordinal; 0 on the CPU
}

func (d Device) String() string {
	switch d.Type {
	case DeviceCPU:
		return "cpu"
	case DeviceCUDA:
		return fmt.Sprintf("cuda:%d", d.ID)
	}
	return fmt.Sprintf("dlpack-device(%d:%d)", d.Type, d.ID)
}

// Device is where t's memory is. Pinned host memory is DeviceCPU.
func (t *Tensor) Device() Device {
	d := t.view().device
	return Device{Type: int(d.device_type), ID: int(d.device_id)}
}

// OnCPU reports whether the CPU can read t's memory.
func (t *Tensor) OnCPU() bool { return t.view().device.device_type == C.kDLCPU }

// CUDAFuncs are the addresses of the CUDA runtime functions that pinned
// and device tensors use, as core/cuda resolves them.
type CUDAFuncs struct {
	HostAlloc, FreeHost, Malloc, Free               uintptr
	EventCreateWithFlags, EventRecord, EventDestroy uintptr
	StreamWaitEvent, EventSynchronize               uintptr
}

// ErrNoCUDA is returned by NewPinned and NewDevice before InstallCUDA.
var ErrNoCUDA = errors.New("tensor: no CUDA runtime is installed; load one with core/cuda first")

// InstallCUDA gives the tensor package the runtime's functions. The first
// runtime installed stays for the life of the process (its buffers may be
// alive); installing the same functions again is allowed.
func InstallCUDA(f CUDAFuncs) error {
	a := [9]C.uintptr_t{C.uintptr_t(f.HostAlloc), C.uintptr_t(f.FreeHost), C.uintptr_t(f.Malloc), C.uintptr_t(f.Free),
		C.uintptr_t(f.EventCreateWithFlags), C.uintptr_t(f.EventRecord), C.uintptr_t(f.EventDestroy),
		C.uintptr_t(f.StreamWaitEvent), C.uintptr_t(f.EventSynchronize)}
	for _, p := range a {
		if p == 0 {
			return errors.New("tensor: InstallCUDA: a CUDA function address is missing")
		}
	}
	if C.spdl_install_cuda(&a[0]) != 0 {
		return errors.New("tensor: a different CUDA runtime is already installed in this process")
	}
	return nil
}

// AllocError is a failed pinned or device allocation; Code is the CUDA
// error (cudaError_t), -1 when there is no runtime.
type AllocError struct {
	What  string // "pinned" or "cuda:N"
	Bytes uint64
	Code  int
}

func (e *AllocError) Error() string {
	if e.Code == -1 {
		return ErrNoCUDA.Error()
	}
	return fmt.Sprintf("tensor: cannot allocate %d bytes of %s memory (cudaError %d)", e.Bytes, e.What, e.Code)
}

func (e *AllocError) Unwrap() error {
	if e.Code == -1 {
		return ErrNoCUDA
	}
	return nil
}

// NewPinned allocates a contiguous tensor in pinned host memory (from a
// pool), which copies to a GPU read asynchronously. Its contents are not
// initialized. It is freed, or kept for reuse, when released: a copy that
// reads it must have finished by then.
func NewPinned(dt DType, shape ...int64) (*Tensor, error) {
	size, sp, err := checkShape(dt, shape)
	if err != nil {
		return nil, err
	}
	var code C.int
	p := C.spdl_tensor_alloc_pinned(C.int32_t(len(shape)), sp, C.uint8_t(dt.Code), C.uint8_t(dt.Bits), C.uint16_t(dt.Lanes), &code)
	if p == nil {
		return nil, &AllocError{What: "pinned", Bytes: size, Code: int(code)}
	}
	return wrap(p), nil
}

// NewDevice allocates a contiguous tensor on CUDA device `device` (from a
// pool), to be written by work queued on stream (a cudaStream_t); if the
// buffer's last consumer may still be reading it, stream first waits for
// that. The calling OS thread must have device current. Its contents are
// not initialized.
func NewDevice(device int, stream uintptr, dt DType, shape ...int64) (*Tensor, error) {
	size, sp, err := checkShape(dt, shape)
	if err != nil {
		return nil, err
	}
	var code C.int
	p := C.spdl_alloc_device_u(C.int32_t(device), C.uintptr_t(stream), C.int32_t(len(shape)), sp,
		C.uint8_t(dt.Code), C.uint8_t(dt.Bits), C.uint16_t(dt.Lanes), &code)
	if p == nil {
		return nil, &AllocError{What: fmt.Sprintf("cuda:%d", device), Bytes: size, Code: int(code)}
	}
	return wrap(p), nil
}

// NoteStream records that a consumer uses t on a CUDA stream (DLPack's
// numbering: 1 and 2 are the legacy and per-thread default streams), so
// that its memory is not reused before that stream's work is done.
func (t *Tensor) NoteStream(stream uintptr) {
	C.spdl_tensor_note_stream(t.ptr(), C.intptr_t(stream))
}

// CUDAStats describes pinned and device memory held by tensors.
type CUDAStats struct {
	PinnedLiveBytes, PinnedCachedBytes int64
	DeviceLiveBytes, DeviceCachedBytes int64
	Allocs, Frees                      int64 // buffers obtained from and given back to CUDA
	ReuseWaits                         int64 // reuses that waited for a consumer's event
}

// CUDAMemStats returns the current CUDA memory statistics.
func CUDAMemStats() CUDAStats {
	var o [7]C.int64_t
	C.spdl_cuda_pool_stats(&o[0])
	return CUDAStats{int64(o[0]), int64(o[1]), int64(o[2]), int64(o[3]), int64(o[4]), int64(o[5]), int64(o[6])}
}

// SetCUDAPoolLimits sets how many bytes of free pinned memory, and of free
// memory per device, are kept for reuse (defaults 256 MiB and 1 GiB), and
// frees what is cached beyond them.
func SetCUDAPoolLimits(pinned, perDevice int64) {
	C.spdl_cuda_set_pool_limits(C.int64_t(pinned), C.int64_t(perDevice))
}

// TrimCUDA frees every cached pinned and device buffer.
func TrimCUDA() { C.spdl_cuda_mem_trim() }
