package main

// #include <stdlib.h>
// #include "bridge.h"
import "C"

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/options"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/sources"
	"github.com/spdl-go/spdl-go/core/value"
	"github.com/spdl-go/spdl-go/core/wire"
)

// The host's callbacks, set once by spdl_init. They are C function
// pointers, never Go pointers.
var (
	pyCallFn    atomic.Pointer[byte] // C.spdl_call_fn
	pyNextFn    atomic.Pointer[byte] // C.spdl_next_fn
	pyReleaseFn atomic.Pointer[byte] // C.spdl_release_fn
)

// pyDecoder adopts Python object ids and hands them back through the
// release callback when Go drops them.
var pyDecoder = &wire.Decoder{ReleasePy: releasePyObject, TrustPointers: true}

func releasePyObject(id uint64) {
	if f := pyReleaseFn.Load(); f != nil {
		C.spdl_invoke_release(C.spdl_release_fn(unsafe.Pointer(f)), C.uint64_t(id))
	}
}

func init() { sources.Register("python", newPySource) }

// newPySource reads {"id": n}: the host's registry id of a Python
// iterable, which the host's next callback advances.
func newPySource(m map[string]any) (pipeline.Source, error) {
	r := options.New(m)
	id, err := r.Uint64("id", 0)
	if err != nil {
		return nil, err
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	return &pySource{id: id}, nil
}

// PythonError is a Python exception raised by a stage or source; Msg holds
// its summary and traceback as Python formatted them, Item the repr of the
// stage's input (Python sends "item: <repr>" as a first line), ExcID the
// registry id under which Python keeps the exception object (a first line
// "exc: <id>"), so that a pipeline failure can re-raise the original: the
// engine releases it (pipeline.ErrorReleaser) once it will not report it.
type PythonError struct {
	Msg, Item string
	ExcID     uint64
}

func (e *PythonError) Error() string { return e.Msg }

// FailedItem names the input by its Python repr (pipeline.ItemDescriber).
func (e *PythonError) FailedItem() string { return e.Item }

// ReleaseError lets Python drop the exception object (a no-op if it took
// it back already).
func (e *PythonError) ReleaseError() {
	if e.ExcID != 0 {
		releasePyObject(e.ExcID)
	}
}

func newPythonError(b []byte) *PythonError {
	msg := string(b)
	var id uint64
	if rest, ok := strings.CutPrefix(msg, "exc: "); ok {
		num, tail, _ := strings.Cut(rest, "\n")
		if n, err := strconv.ParseUint(num, 10, 64); err == nil {
			id, msg = n, tail
		}
	}
	if rest, ok := strings.CutPrefix(msg, "item: "); ok {
		item, tail, _ := strings.Cut(rest, "\n")
		return &PythonError{Msg: tail, Item: item, ExcID: id}
	}
	return &PythonError{Msg: msg, ExcID: id}
}

var encodeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// takeBuf copies a buffer that the host filled with spdl_buf_set and frees it.
func takeBuf(out *C.spdl_buf) []byte {
	if out.data == nil {
		return nil
	}
	b := C.GoBytes(unsafe.Pointer(out.data), C.int(out.len))
	C.free(unsafe.Pointer(out.data))
	return b
}

// attachPyThread locks the calling goroutine to its OS thread and gives
// that thread a Python thread state until detachPyThread, which must run on
// the same goroutine. Stages and sources reach these through
// pipeline.ThreadBound, once per worker goroutine.
func attachPyThread() unsafe.Pointer {
	runtime.LockOSThread()
	return C.spdl_py_thread_attach()
}

func detachPyThread(h unsafe.Pointer) {
	C.spdl_py_thread_detach(h)
	runtime.UnlockOSThread()
}

// pyOp runs a Python callable registered under id on the host side.
// ioBound marks an op whose calls only wait (an async op on an event loop,
// a sync op handed to an executor): they take no num_threads token.
type pyOp struct {
	id      uint64
	ioBound bool
	threads threadStates
}

func (o *pyOp) AttachThread()   { o.threads.attach() }
func (o *pyOp) DetachThread()   { o.threads.detach() }
func (o *pyOp) WaitsOnIO() bool { return o.ioBound }

// What the call callback returns besides 0 (a result) and -1 (an error):
// the op returned None (the item is skipped), or a generator, which the
// host registered as a stream whose id (8 bytes, little-endian) fills out.
const (
	pyCallSkip   = 2
	pyCallStream = 3
)

// pyStreamBit marks a stream's id in the release callback (the host drops
// the stream, closing its generator), apart from object ids.
const pyStreamBit = 1 << 63

// pyStream pulls the values a Python generator yields, through the next
// callback (pipeline.Stream).
type pyStream struct{ id uint64 }

func (s *pyStream) Next(ctx context.Context) (any, bool, error) {
	v, err := pyNext(s.id)
	if err == io.EOF {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return v, true, nil
}

func (s *pyStream) Release() { releasePyObject(s.id | pyStreamBit) }

func (o *pyOp) Process(ctx context.Context, in any) (any, error) {
	f := pyCallFn.Load()
	if f == nil {
		value.Release(in)
		return nil, fmt.Errorf("python stage: spdl_init was not called with a call callback")
	}
	bp := encodeBufs.Get().(*[]byte)
	defer encodeBufs.Put(bp)
	buf, err := wire.Encode((*bp)[:0], in)
	if err != nil {
		value.Release(in)
		return nil, fmt.Errorf("cannot pass the item to Python: %w", err)
	}
	*bp = buf
	var out C.spdl_buf
	// The argument bytes are Go memory holding no Go pointers, borrowed
	// only for the duration of the call, which cgo allows.
	rc := C.spdl_invoke_call(C.spdl_call_fn(unsafe.Pointer(f)), C.uint64_t(o.id),
		(*C.uint8_t)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &out)
	return o.result(rc, takeBuf(&out))
}

// result turns what the call callback returned into the op's result.
func (o *pyOp) result(rc C.int, res []byte) (any, error) {
	switch {
	case rc == 0:
		return pyDecoder.Decode(res)
	case rc == pyCallSkip:
		return pipeline.Skip, nil
	case rc == pyCallStream && len(res) == 8:
		return &pyStream{id: binary.LittleEndian.Uint64(res)}, nil
	}
	return nil, newPythonError(res)
}

// pyFlushOp is a Python aggregator: besides its calls, the host runs its
// flush once when the stage's input ends (pipeline.Flusher). Go asks for
// the flush with an empty argument (no wire value is empty).
type pyFlushOp struct{ *pyOp }

func (o *pyFlushOp) Flush(context.Context) (any, error) {
	f := pyCallFn.Load()
	if f == nil {
		return nil, fmt.Errorf("python stage: spdl_init was not called with a call callback")
	}
	var out C.spdl_buf
	rc := C.spdl_invoke_call(C.spdl_call_fn(unsafe.Pointer(f)), C.uint64_t(o.id), nil, 0, &out)
	return o.result(rc, takeBuf(&out))
}

// threadStates tracks the Python thread state of each goroutine that is
// attached, keyed by goroutine-locked OS thread (a goroutine stays on its
// thread between attach and detach).
type threadStates struct {
	mu sync.Mutex
	m  map[int]unsafe.Pointer
}

func (t *threadStates) attach() {
	h := attachPyThread()
	t.mu.Lock()
	if t.m == nil {
		t.m = make(map[int]unsafe.Pointer)
	}
	t.m[gettid()] = h
	t.mu.Unlock()
}

func (t *threadStates) detach() {
	tid := gettid()
	t.mu.Lock()
	h := t.m[tid]
	delete(t.m, tid)
	t.mu.Unlock()
	detachPyThread(h)
}

// pySource pulls items from a Python iterator registered under id; the
// host creates a fresh iterator before each epoch starts.
type pySource struct{ id uint64 }

func (s *pySource) Open(ctx context.Context) (pipeline.Iterator, error) {
	if pyNextFn.Load() == nil {
		return nil, fmt.Errorf("python source: spdl_init was not called with a next callback")
	}
	return &pyIterator{id: s.id}, nil
}

type pyIterator struct {
	id      uint64
	threads threadStates
}

func (it *pyIterator) AttachThread() { it.threads.attach() }
func (it *pyIterator) DetachThread() { it.threads.detach() }

func (it *pyIterator) Next(ctx context.Context) (any, error) { return pyNext(it.id) }

// pyNext advances the host's source or stream id: its next item, io.EOF at
// the end, or its error.
func pyNext(id uint64) (any, error) {
	var out C.spdl_buf
	rc := C.spdl_invoke_next(C.spdl_next_fn(unsafe.Pointer(pyNextFn.Load())), C.uint64_t(id), &out)
	res := takeBuf(&out)
	switch rc {
	case 0:
		return pyDecoder.Decode(res)
	case 1:
		return nil, io.EOF
	default:
		return nil, newPythonError(res)
	}
}

func (it *pyIterator) Close() error { return nil }

func gettid() int { return syscall.Gettid() }
