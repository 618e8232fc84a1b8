// Command capi is libspdl.so: the C ABI of the spdl-go engine, built with
//
//	go build -buildmode=c-shared -ldflags=-extldflags=-Wl,--version-script=$PWD/capi/libspdl.map ./capi
//
// (make build does this). spdl.h documents every function and is the
// header the package is compiled against; libspdl.map exports exactly its
// functions. Each export recovers panics and turns them into SPDL_ERROR,
// since a panic that crossed into the host would kill the user's training
// process.
package main

// #cgo CFLAGS: -I${SRCDIR}/../core/tensor
// #include <stdlib.h>
// #include "bridge.h"
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/cgo"
	"runtime/debug"
	"sync"
	"time"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/columnar"
	"github.com/spdl-go/spdl-go/core/cuda"
	// Media ops register themselves with core/ops.
	"github.com/spdl-go/spdl-go/core/ops"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/value"
	"github.com/spdl-go/spdl-go/core/wire"
)

func main() {}

const version = "0.1.0"

var cVersion = C.CString(version) // static for the life of the process

// setErr stores a malloc'd copy of err's text in *out, which the caller frees.
func setErr(out **C.char, err error) {
	if out != nil {
		*out = C.CString(err.Error())
	}
}

// guard converts a panic in an export into SPDL_ERROR. Use as
// `defer guard(&rc, errOut)` with a named result.
func guard(rc *C.int, errOut **C.char) {
	if r := recover(); r != nil {
		*rc = C.SPDL_ERROR
		setErr(errOut, fmt.Errorf("spdl-go internal error (please report): panic: %v\n%s", r, debug.Stack()))
	}
}

// handle is what a pipeline handle refers to. The mutex serialises
// free against the other calls; Next itself may run while Stats runs.
type handle struct {
	p     *pipeline.Pipeline
	mu    sync.RWMutex
	freed bool
}

func lookup(h C.uint64_t) (*handle, error) {
	if h == 0 {
		return nil, errors.New("invalid pipeline handle 0")
	}
	var hd *handle
	var err error
	func() {
		defer func() {
			if recover() != nil { // cgo.Handle.Value panics on unknown handles
				err = fmt.Errorf("invalid or freed pipeline handle %d", uint64(h))
			}
		}()
		hd = cgo.Handle(h).Value().(*handle)
	}()
	return hd, err
}

// withPipeline runs f on a live pipeline under the read lock.
func withPipeline(h C.uint64_t, f func(p *pipeline.Pipeline) error) error {
	hd, err := lookup(h)
	if err != nil {
		return err
	}
	hd.mu.RLock()
	defer hd.mu.RUnlock()
	if hd.freed {
		return fmt.Errorf("pipeline handle %d was freed", uint64(h))
	}
	return f(hd.p)
}

//export spdl_init
func spdl_init(call C.spdl_call_fn, next C.spdl_next_fn, release C.spdl_release_fn, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	pyCallFn.Store((*byte)(unsafe.Pointer(call)))
	pyNextFn.Store((*byte)(unsafe.Pointer(next)))
	pyReleaseFn.Store((*byte)(unsafe.Pointer(release)))
	return C.SPDL_OK
}

//export spdl_version
func spdl_version() *C.spdl_cchar { return cVersion }

//export spdl_ops
func spdl_ops(outJSON **C.char, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	b, err := json.Marshal(ops.Names())
	if err != nil {
		setErr(errOut, err)
		return C.SPDL_ERROR
	}
	*outJSON = C.CString(string(b))
	return C.SPDL_OK
}

//export spdl_arrow_allocated_bytes
func spdl_arrow_allocated_bytes() C.int64_t {
	return C.int64_t(columnar.Allocator.AllocatedBytes())
}

//export spdl_probe
func spdl_probe(path *C.spdl_cchar, data *C.spdl_cvoid, dataLen C.size_t, outJSON **C.char, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	var bytes []byte
	if data != nil {
		bytes = C.GoBytes(unsafe.Pointer(data), C.int(dataLen))
	}
	info, err := probeMedia(C.GoString(path), bytes)
	if err == nil {
		var b []byte
		if b, err = json.Marshal(info); err == nil {
			*outJSON = C.CString(string(b))
			return C.SPDL_OK
		}
	}
	setErr(errOut, err)
	return C.SPDL_ERROR
}

//export spdl_pipeline_new
func spdl_pipeline_new(spec *C.spdl_cchar, specLen C.size_t, out *C.uint64_t, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	cfg, err := buildConfig(C.GoBytes(unsafe.Pointer(spec), C.int(specLen)))
	if err == nil {
		// Items are encoded for the host on the pipeline's goroutines, so
		// that spdl_pipeline_next only hands over a finished buffer.
		cfg.SinkEncode = handoff
		var p *pipeline.Pipeline
		if p, err = pipeline.New(cfg); err == nil {
			*out = C.uint64_t(cgo.NewHandle(&handle{p: p}))
			return C.SPDL_OK
		}
	}
	setErr(errOut, err)
	return C.SPDL_ERROR
}

//export spdl_pipeline_start
func spdl_pipeline_start(h C.uint64_t, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	if err := withPipeline(h, func(p *pipeline.Pipeline) error { return p.Start() }); err != nil {
		setErr(errOut, err)
		return C.SPDL_ERROR
	}
	return C.SPDL_OK
}

//export spdl_pipeline_next
func spdl_pipeline_next(h C.uint64_t, timeoutUs C.int64_t, out *C.spdl_buf, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	rc = C.SPDL_OK
	err := withPipeline(h, func(p *pipeline.Pipeline) error {
		timeout := time.Duration(timeoutUs) * time.Microsecond
		if timeoutUs < 0 {
			timeout = -1
		}
		item, code, err := nextItem(p, timeout)
		if err != nil || code != C.SPDL_OK {
			rc = code
			return err
		}
		return encodeOut(item, out)
	})
	if err != nil {
		setErr(errOut, err)
		return C.SPDL_ERROR
	}
	return rc
}

// nextItem reads p's next item within timeout (< 0: forever): the item and
// SPDL_OK, SPDL_END (the epoch is over), SPDL_TIMEOUT, or the epoch's
// failure.
func nextItem(p *pipeline.Pipeline, timeout time.Duration) (any, C.int, error) {
	item, err := p.Next(context.Background(), timeout)
	switch {
	case errors.Is(err, pipeline.ErrEndOfData), errors.Is(err, pipeline.ErrNotStarted):
		// Not started: stopped, after the items it left (the host starts an
		// epoch before its first read).
		return nil, C.SPDL_END, nil
	case errors.Is(err, pipeline.ErrTimeout):
		return nil, C.SPDL_TIMEOUT, nil
	case err != nil:
		return nil, C.SPDL_ERROR, err
	}
	return item, C.SPDL_OK, nil
}

// encodeOut hands item to the caller as a malloc'd wire buffer. Every
// item comes encoded: spdl_pipeline_new, the only place a pipeline is
// built, sets Config.SinkEncode to handoff.
func encodeOut(item any, out *C.spdl_buf) error {
	enc, ok := item.(*wire.Encoded)
	if !ok {
		value.Release(item)
		return fmt.Errorf("sink: internal error: got an unencoded %T", item)
	}
	p, n := enc.Take()
	out.data, out.len = (*C.uint8_t)(p), C.size_t(n)
	return nil
}

// handoff encodes v into C memory, as every pipeline's Config.SinkEncode;
// on error it releases v.
func handoff(v any) (any, error) {
	bp := encodeBufs.Get().(*[]byte)
	defer encodeBufs.Put(bp)
	enc, buf, err := wire.EncodeC(*bp, v, pyDecoder)
	*bp = buf
	if err != nil {
		value.Release(v)
		return nil, fmt.Errorf("cannot hand the item to the caller: %w", err)
	}
	return enc, nil
}

//export spdl_pipeline_stop
func spdl_pipeline_stop(h C.uint64_t, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	// Halt, not Stop: the items already produced stay readable.
	var abandoned error
	if err := withPipeline(h, func(p *pipeline.Pipeline) error { abandoned = p.Halt(); return nil }); err != nil {
		setErr(errOut, err)
		return C.SPDL_ERROR
	}
	if abandoned != nil {
		// Calls stuck past the stop grace (a Python call that does not
		// return): stopped all the same; the message names them.
		setErr(errOut, abandoned)
		return C.SPDL_TIMEOUT
	}
	return C.SPDL_OK
}

//export spdl_pipeline_failure
func spdl_pipeline_failure(h C.uint64_t, outJSON **C.char, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	return pipelineJSON(h, outJSON, errOut, func(p *pipeline.Pipeline) any { return failureReport(p.Errors()) })
}

// failureJSON is one fatal error as spdl_pipeline_failure reports it.
type failureJSON struct {
	Stage   string `json:"stage"`
	Message string `json:"message"`
	Exc     uint64 `json:"exc"`
}

// failureReport describes an epoch's fatal errors for the host; nil (JSON
// null) when there are none.
func failureReport(errs []error) any {
	if len(errs) == 0 {
		return nil
	}
	out := make([]failureJSON, len(errs))
	for i, err := range errs {
		f := failureJSON{Message: err.Error()}
		if fl, ok := errors.AsType[*pipeline.FailureLimitError](err); ok {
			f.Stage = fl.Stage
			if f.Stage == "" && fl.Last != nil {
				f.Stage = fl.Last.Stage // the pipeline's limit: the stage whose failure crossed it
			}
		} else if _, ok := errors.AsType[*pipeline.SourceError](err); ok {
			f.Stage = "source"
		}
		if pe, ok := errors.AsType[*PythonError](err); ok {
			f.Exc = pe.ExcID
		}
		out[i] = f
	}
	return map[string]any{"message": errs[0].Error(), "errors": out}
}

//export spdl_pipeline_stats
func spdl_pipeline_stats(h C.uint64_t, outJSON **C.char, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	return pipelineJSON(h, outJSON, errOut, func(p *pipeline.Pipeline) any { return p.Stats() })
}

//export spdl_pipeline_source_state
func spdl_pipeline_source_state(h C.uint64_t, outJSON **C.char, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	return pipelineJSON(h, outJSON, errOut, func(p *pipeline.Pipeline) any { return p.SourceState() })
}

// pipelineJSON sets *outJSON to a malloc'd JSON of what f says of the
// pipeline; the caller frees it.
func pipelineJSON(h C.uint64_t, outJSON **C.char, errOut **C.char, f func(*pipeline.Pipeline) any) C.int {
	err := withPipeline(h, func(p *pipeline.Pipeline) error {
		b, err := json.Marshal(f(p))
		if err != nil {
			return err
		}
		*outJSON = C.CString(string(b))
		return nil
	})
	if err != nil {
		setErr(errOut, err)
		return C.SPDL_ERROR
	}
	return C.SPDL_OK
}

//export spdl_pipeline_trace_start
func spdl_pipeline_trace_start(h C.uint64_t, maxSpans C.int64_t, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	if err := withPipeline(h, func(p *pipeline.Pipeline) error { return p.StartTrace(int(maxSpans)) }); err != nil {
		setErr(errOut, err)
		return C.SPDL_ERROR
	}
	return C.SPDL_OK
}

//export spdl_pipeline_trace_write
func spdl_pipeline_trace_write(h C.uint64_t, path *C.spdl_cchar, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	name := C.GoString(path)
	err := withPipeline(h, func(p *pipeline.Pipeline) error {
		p.StopTrace()
		f, err := os.Create(name)
		if err != nil {
			return err
		}
		if err := p.WriteTrace(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
	if err != nil {
		setErr(errOut, fmt.Errorf("writing trace %q: %w", name, err))
		return C.SPDL_ERROR
	}
	return C.SPDL_OK
}

//export spdl_pipeline_free
func spdl_pipeline_free(h C.uint64_t, waitMs C.int64_t, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	hd, err := lookup(h)
	if err != nil {
		setErr(errOut, err)
		return C.SPDL_ERROR
	}
	switch {
	case waitMs == 0:
		// A finaliser may free a pipeline from one of that pipeline's own
		// callback threads; waiting for its threads there would deadlock.
		// The reaper goroutine ends when Close returns.
		hd.invalidate(h)
		go hd.p.Close()
		return C.SPDL_OK
	case waitMs < 0:
		// Before taking the lock: a Next in flight returns once stopped.
		// Calls stuck past the stop grace are abandoned: the host keeps
		// what they use (its callbacks) and is told so.
		err := hd.p.Close()
		hd.invalidate(h)
		if err != nil {
			setErr(errOut, err)
			return C.SPDL_TIMEOUT
		}
		return C.SPDL_OK
	}
	done := hd.p.StopWithin(time.Duration(waitMs) * time.Millisecond)
	hd.invalidate(h)
	if !done {
		return C.SPDL_TIMEOUT
	}
	return C.SPDL_OK
}

// invalidate makes every later call with h fail; the first caller deletes
// the cgo handle.
func (hd *handle) invalidate(h C.uint64_t) {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if !hd.freed {
		hd.freed = true
		cgo.Handle(h).Delete()
	}
}

//export spdl_sampler_call
func spdl_sampler_call(req *C.spdl_cchar, reqLen C.size_t, outJSON **C.char, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	res, err := samplerCall(C.GoBytes(unsafe.Pointer(req), C.int(reqLen)))
	if err == nil {
		var b []byte
		if b, err = json.Marshal(res); err == nil {
			*outJSON = C.CString(string(b))
			return C.SPDL_OK
		}
	}
	setErr(errOut, err)
	return C.SPDL_ERROR
}

// cudaStatus is what spdl_cuda_status reports.
type cudaStatus struct {
	Available bool   `json:"available"` // a runtime loaded and sees at least one device
	Path      string `json:"path,omitempty"`
	Runtime   int    `json:"runtime_version,omitempty"`
	Driver    int    `json:"driver_version,omitempty"`
	Devices   int    `json:"devices"`
	Error     string `json:"error,omitempty"`
}

//export spdl_cuda_status
func spdl_cuda_status(pathsJSON *C.spdl_cchar, outJSON **C.char, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	var paths []string
	if pathsJSON != nil {
		if err := json.Unmarshal([]byte(C.GoString(pathsJSON)), &paths); err != nil {
			setErr(errOut, fmt.Errorf("cuda status: paths must be a JSON list of strings: %w", err))
			return C.SPDL_ERROR
		}
	}
	st := cudaStatus{}
	if r, err := cuda.Load(paths...); err != nil {
		st.Error = err.Error()
	} else {
		st.Path = r.Path
		st.Runtime, st.Driver, _ = r.Version()
		if n, err := r.DeviceCount(); err != nil {
			st.Error = err.Error()
		} else {
			st.Devices, st.Available = n, n > 0
		}
	}
	b, err := json.Marshal(st)
	if err != nil {
		setErr(errOut, err)
		return C.SPDL_ERROR
	}
	*outJSON = C.CString(string(b))
	return C.SPDL_OK
}
