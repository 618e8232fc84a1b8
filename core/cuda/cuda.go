// Package cuda loads the CUDA runtime (libcudart) at run time with purego,
// so that spdl-go builds and runs without CUDA and uses it where it is
// installed: pinned host memory, device memory, streams and asynchronous
// copies, which host-to-device batch transfer is built from.
//
// Load finds the library from explicit paths, then $SPDL_GO_CUDART, then
// the linker's search path (libcudart.so, .so.13, .so.12). Without it, Load
// returns an error that says what was tried and how to point at the
// library; nothing else in spdl-go needs it.
package cuda

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/spdl-go/spdl-go/core/tensor"
)

// Error is a CUDA runtime error: the call, its code and CUDA's description.
type Error struct {
	Call string
	Code int32
	Msg  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (cudaError %d)", e.Call, e.Msg, e.Code)
}

// Copy directions (cudaMemcpyKind).
const (
	HostToDevice = 1
	DeviceToHost = 2
)

// Runtime is a loaded CUDA runtime library. Its methods are safe for
// concurrent use, as the CUDA runtime's are.
type Runtime struct {
	Path string // the library that was loaded

	getDeviceCount      func(*int32) int32
	setDevice           func(int32) int32
	getErrorString      func(int32) string
	hostAlloc           func(*unsafe.Pointer, uintptr, uint32) int32
	freeHost            func(unsafe.Pointer) int32
	malloc              func(*uintptr, uintptr) int32
	free                func(uintptr) int32
	streamCreate        func(*uintptr) int32
	streamSynchronize   func(uintptr) int32
	streamDestroy       func(uintptr) int32
	memcpyAsync         func(uintptr, uintptr, uintptr, int32, uintptr) int32
	runtimeGetVersion   func(*int32) int32
	driverGetVersionFun func(*int32) int32
	streamCreateFlags   func(*uintptr, uint32) int32
	streamWaitEvent     func(uintptr, uintptr, uint32) int32
	eventCreateFlags    func(*uintptr, uint32) int32
	eventRecord         func(uintptr, uintptr) int32
	eventSynchronize    func(uintptr) int32
	eventDestroy        func(uintptr) int32

	addrs   map[string]uintptr // every bound function's address
	streams streamPool
}

// symbols are the runtime functions spdl-go binds.
var symbols = []string{
	"cudaGetDeviceCount", "cudaSetDevice", "cudaGetErrorString", "cudaHostAlloc", "cudaFreeHost",
	"cudaMalloc", "cudaFree", "cudaStreamCreate", "cudaStreamSynchronize", "cudaStreamDestroy",
	"cudaMemcpyAsync", "cudaRuntimeGetVersion", "cudaDriverGetVersion", "cudaStreamCreateWithFlags",
	"cudaStreamWaitEvent", "cudaEventCreateWithFlags", "cudaEventRecord", "cudaEventSynchronize",
	"cudaEventDestroy",
}

var (
	mu        sync.Mutex
	installed *Runtime // the process's runtime, once one is in use
)

// Default loads the runtime from $SPDL_GO_CUDART or the linker's search
// path, as Use does with no paths.
func Default() (*Runtime, error) { return Use() }

// Use returns the process's CUDA runtime, loading it (Load(paths...)) and
// installing it on first success. Pinned and device tensors need one
// runtime for the life of the process, so later calls return the same
// one whatever their paths.
func Use(paths ...string) (*Runtime, error) {
	mu.Lock()
	defer mu.Unlock()
	if installed != nil {
		return installed, nil
	}
	r, err := Load(paths...)
	if err != nil {
		return nil, err
	}
	if err := installLocked(r); err != nil {
		return nil, err
	}
	return r, nil
}

// Install makes r the process's CUDA runtime (what Use returns), unless
// one is already installed; installing the same one again is allowed.
func Install(r *Runtime) error {
	mu.Lock()
	defer mu.Unlock()
	if installed == r {
		return nil
	}
	if installed != nil {
		return fmt.Errorf("cuda: a runtime (%s) is already in use in this process", installed.Path)
	}
	return installLocked(r)
}

func installLocked(r *Runtime) error {
	if err := tensor.InstallCUDA(r.TensorFuncs()); err != nil {
		return err
	}
	installed = r
	return nil
}

// Load opens the first CUDA runtime library that loads: paths, then
// $SPDL_GO_CUDART, then libcudart.so, libcudart.so.13 and libcudart.so.12
// from the linker's search path.
func Load(paths ...string) (*Runtime, error) {
	cands := append([]string(nil), paths...)
	if p := os.Getenv("SPDL_GO_CUDART"); p != "" {
		cands = append(cands, p)
	}
	cands = append(cands, "libcudart.so", "libcudart.so.13", "libcudart.so.12")
	var tried []string
	for _, p := range cands {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", p, err))
			continue
		}
		r, err := bind(h, p)
		if err != nil {
			_ = purego.Dlclose(h)
			tried = append(tried, fmt.Sprintf("%s (%v)", p, err))
			continue
		}
		return r, nil
	}
	return nil, fmt.Errorf("cuda: no CUDA runtime library could be loaded; tried %s. Install the CUDA runtime "+
		"(e.g. pip install nvidia-cuda-runtime) or set SPDL_GO_CUDART to the path of libcudart.so", strings.Join(tried, ", "))
}

// bind resolves every function spdl-go uses; a library that lacks one is
// not a CUDA runtime it can use.
func bind(h uintptr, path string) (*Runtime, error) {
	return FromSymbols(path, func(name string) (uintptr, error) { return purego.Dlsym(h, name) })
}

// FromSymbols builds a Runtime from function addresses that lookup
// returns: Load uses the loaded library's, and tests may give a stand-in
// implementation of the same C functions.
func FromSymbols(path string, lookup func(name string) (uintptr, error)) (*Runtime, error) {
	r := &Runtime{Path: path, addrs: map[string]uintptr{}}
	for _, name := range symbols {
		a, err := lookup(name)
		if err != nil || a == 0 {
			return nil, fmt.Errorf("missing %s (%v)", name, err)
		}
		r.addrs[name] = a
	}
	for name, fn := range map[string]any{
		"cudaGetDeviceCount":        &r.getDeviceCount,
		"cudaSetDevice":             &r.setDevice,
		"cudaGetErrorString":        &r.getErrorString,
		"cudaHostAlloc":             &r.hostAlloc,
		"cudaFreeHost":              &r.freeHost,
		"cudaMalloc":                &r.malloc,
		"cudaFree":                  &r.free,
		"cudaStreamCreate":          &r.streamCreate,
		"cudaStreamSynchronize":     &r.streamSynchronize,
		"cudaStreamDestroy":         &r.streamDestroy,
		"cudaMemcpyAsync":           &r.memcpyAsync,
		"cudaRuntimeGetVersion":     &r.runtimeGetVersion,
		"cudaDriverGetVersion":      &r.driverGetVersionFun,
		"cudaStreamCreateWithFlags": &r.streamCreateFlags,
		"cudaStreamWaitEvent":       &r.streamWaitEvent,
		"cudaEventCreateWithFlags":  &r.eventCreateFlags,
		"cudaEventRecord":           &r.eventRecord,
		"cudaEventSynchronize":      &r.eventSynchronize,
		"cudaEventDestroy":          &r.eventDestroy,
	} {
		purego.RegisterFunc(fn, r.addrs[name])
	}
	return r, nil
}

// TensorFuncs are the addresses core/tensor needs for pinned and device
// tensors (tensor.InstallCUDA).
func (r *Runtime) TensorFuncs() tensor.CUDAFuncs {
	a := r.addrs
	return tensor.CUDAFuncs{
		HostAlloc: a["cudaHostAlloc"], FreeHost: a["cudaFreeHost"], Malloc: a["cudaMalloc"], Free: a["cudaFree"],
		EventCreateWithFlags: a["cudaEventCreateWithFlags"], EventRecord: a["cudaEventRecord"],
		EventDestroy: a["cudaEventDestroy"], StreamWaitEvent: a["cudaStreamWaitEvent"],
		EventSynchronize: a["cudaEventSynchronize"],
	}
}

func (r *Runtime) check(call string, code int32) error {
	if code == 0 {
		return nil
	}
	msg := r.getErrorString(code)
	if msg == "" {
		msg = "unknown error"
	}
	return &Error{Call: call, Code: code, Msg: msg}
}

// Version is the runtime's and the driver's CUDA version (e.g. 13000); the
// driver's is 0 when no driver is installed.
func (r *Runtime) Version() (runtime, driver int, err error) {
	var rv, dv int32
	if err := r.check("cudaRuntimeGetVersion", r.runtimeGetVersion(&rv)); err != nil {
		return 0, 0, err
	}
	_ = r.driverGetVersionFun(&dv)
	return int(rv), int(dv), nil
}

// ErrNoDevice is wrapped by DeviceCount's error when the runtime loads but
// finds no usable GPU (no driver, or no device).
var ErrNoDevice = errors.New("no usable CUDA device")

// DeviceCount is the number of CUDA devices.
func (r *Runtime) DeviceCount() (int, error) {
	var n int32
	if err := r.check("cudaGetDeviceCount", r.getDeviceCount(&n)); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoDevice, err)
	}
	return int(n), nil
}

// SetDevice makes dev the calling thread's current device.
func (r *Runtime) SetDevice(dev int) error { return r.check("cudaSetDevice", r.setDevice(int32(dev))) }

// HostAlloc allocates n bytes of pinned (page-locked) host memory, which
// copies to the device can read asynchronously.
func (r *Runtime) HostAlloc(n int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	if err := r.check("cudaHostAlloc", r.hostAlloc(&p, uintptr(n), 0)); err != nil {
		return nil, err
	}
	return p, nil
}

// FreeHost frees memory from HostAlloc.
func (r *Runtime) FreeHost(p unsafe.Pointer) error { return r.check("cudaFreeHost", r.freeHost(p)) }

// Malloc allocates n bytes on the current device.
func (r *Runtime) Malloc(n int) (uintptr, error) {
	var p uintptr
	if err := r.check("cudaMalloc", r.malloc(&p, uintptr(n))); err != nil {
		return 0, err
	}
	return p, nil
}

// Free frees device memory from Malloc.
func (r *Runtime) Free(p uintptr) error { return r.check("cudaFree", r.free(p)) }

// Stream is a CUDA stream.
type Stream uintptr

// StreamCreate creates a stream on the current device.
func (r *Runtime) StreamCreate() (Stream, error) {
	var s uintptr
	if err := r.check("cudaStreamCreate", r.streamCreate(&s)); err != nil {
		return 0, err
	}
	return Stream(s), nil
}

// StreamNonBlocking makes a stream that does not wait for, nor hold up,
// work on the legacy default stream (where PyTorch computes by default).
const StreamNonBlocking = 0x01

// StreamCreateWithFlags creates a stream on the current device.
func (r *Runtime) StreamCreateWithFlags(flags uint32) (Stream, error) {
	var s uintptr
	if err := r.check("cudaStreamCreateWithFlags", r.streamCreateFlags(&s, flags)); err != nil {
		return 0, err
	}
	return Stream(s), nil
}

// Synchronize waits until everything queued on s has run.
func (r *Runtime) Synchronize(s Stream) error {
	return r.check("cudaStreamSynchronize", r.streamSynchronize(uintptr(s)))
}

// StreamDestroy destroys s once its work is done.
func (r *Runtime) StreamDestroy(s Stream) error {
	return r.check("cudaStreamDestroy", r.streamDestroy(uintptr(s)))
}

// MemcpyAsync queues a copy of n bytes on s; kind is HostToDevice or
// DeviceToHost. From pinned host memory it returns at once.
func (r *Runtime) MemcpyAsync(dst, src uintptr, n int, kind int, s Stream) error {
	return r.check("cudaMemcpyAsync", r.memcpyAsync(dst, src, uintptr(n), int32(kind), uintptr(s)))
}

// streamPool keeps idle streams per device: a transfer borrows one, so
// concurrent transfers do not wait for each other's copies.
type streamPool struct {
	mu   sync.Mutex
	idle map[int][]Stream
}

// BorrowStream returns an idle non-blocking stream of device dev, creating
// one if none is idle; the calling OS thread must have dev current. Give
// it back with ReturnStream once its work is synchronised. Streams live as
// long as the process, and there are at most as many as transfers ever ran
// at once.
func (r *Runtime) BorrowStream(dev int) (Stream, error) {
	r.streams.mu.Lock()
	if idle := r.streams.idle[dev]; len(idle) > 0 {
		s := idle[len(idle)-1]
		r.streams.idle[dev] = idle[:len(idle)-1]
		r.streams.mu.Unlock()
		return s, nil
	}
	r.streams.mu.Unlock()
	return r.StreamCreateWithFlags(StreamNonBlocking)
}

// ReturnStream gives back a stream from BorrowStream.
func (r *Runtime) ReturnStream(dev int, s Stream) {
	r.streams.mu.Lock()
	defer r.streams.mu.Unlock()
	if r.streams.idle == nil {
		r.streams.idle = map[int][]Stream{}
	}
	r.streams.idle[dev] = append(r.streams.idle[dev], s)
}
