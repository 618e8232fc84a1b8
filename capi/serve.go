package main

// #include "bridge.h"
import "C"

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/columnar"
	"github.com/spdl-go/spdl-go/core/pipeline"
	"github.com/spdl-go/spdl-go/core/wire"
)

// A worker process serves its pipeline's batches to the parent from Go:
// a batch that is one tensor in the shared arena goes out as its
// descriptor with no Python call in the worker, so the worker's Python
// thread does not wake (or take the GIL) per batch. The protocol is
// python/spdl_go/pipeline/_subprocess.py's, which runs everything else.
var (
	serveItemFast = []byte("D\x01") // _ITEM + _FAST_TENSOR
	serveCredit   = byte('c')       // _CREDIT + the count, in ASCII
)

// serveCmdMax bounds a message from the parent (credits, commands, queries
// are a few bytes).
const serveCmdMax = 1 << 16

//export spdl_pipeline_serve
func spdl_pipeline_serve(h C.uint64_t, fd C.int, timeoutUs C.int64_t, credits *C.int64_t, out *C.spdl_buf, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	timeout := time.Duration(timeoutUs) * time.Microsecond
	if timeoutUs < 0 {
		timeout = -1
	}
	conn := wire.FD(fd)
	var msg []byte
	n := int64(*credits)
	defer func() { *credits = C.int64_t(n) }()
	err := withPipeline(h, func(p *pipeline.Pipeline) error {
		var desc [24 + 16*64]byte // spdl_shm_lend_desc: 24 bytes and 16 a dimension
		frame := make([]byte, 0, 4+len(serveItemFast)+len(desc))
		for {
			for n <= 0 {
				ok, err := conn.Readable(timeout)
				if err != nil {
					return peerError{fmt.Errorf("waiting for the parent: %w", err)}
				}
				if !ok {
					rc = C.SPDL_TIMEOUT
					return nil
				}
				m, err := wire.ReadFrame(conn, nil, serveCmdMax)
				if errors.Is(err, io.EOF) {
					return peerError{errors.New("the parent closed its end of the socket")}
				}
				if err != nil {
					return peerError{fmt.Errorf("reading from the parent: %w", err)}
				}
				if k, ok := parseCredit(m); ok {
					n += k
					continue
				}
				msg, rc = m, C.SPDL_MESSAGE
				return nil
			}
			item, code, err := nextItem(p, timeout)
			if err != nil || code != C.SPDL_OK {
				rc = code
				return err
			}
			if enc, ok := item.(*wire.Encoded); ok {
				if t := (*C.spdl_tensor)(enc.Tensor()); t != nil {
					d := C.spdl_shm_lend_desc(t, (*C.uint8_t)(unsafe.Pointer(&desc[0])), C.int32_t(len(desc)))
					if d > 0 {
						frame = wire.AppendFrame(frame[:0], serveItemFast, desc[:d])
						enc.Release() // the parent's tensor holds the lent buffer now
						if _, err := conn.Write(frame); err != nil {
							return peerError{fmt.Errorf("writing to the parent: %w", err)}
						}
						n--
						continue
					}
				}
			}
			// Anything else is pickled by the caller, as before.
			rc = C.SPDL_OK
			return encodeOut(item, out)
		}
	})
	if pe := (peerError{}); errors.As(err, &pe) {
		setErr(errOut, pe.err)
		return C.SPDL_PEER
	}
	if err != nil {
		setErr(errOut, err)
		return C.SPDL_ERROR
	}
	if rc == C.SPDL_MESSAGE {
		out.data, out.len = (*C.uint8_t)(C.CBytes(msg)), C.size_t(len(msg))
	}
	return rc
}

// peerError is a failure of the socket to the parent (it is gone, or the
// stream is corrupt), not of the pipeline.
type peerError struct{ err error }

func (e peerError) Error() string { return e.err.Error() }

// parseCredit reads a credit message, "c" and a positive count.
func parseCredit(m []byte) (int64, bool) {
	if len(m) < 2 || m[0] != serveCredit {
		return 0, false
	}
	k, err := strconv.ParseInt(string(m[1:]), 10, 64)
	return k, err == nil && k > 0 && !bytes.ContainsAny(m[1:], "+-")
}

//export spdl_shm_lend_buffer
func spdl_shm_lend_buffer(p unsafe.Pointer, n C.int64_t, out *C.uint8_t, capacity C.int32_t) C.int32_t {
	if p == nil || out == nil || capacity <= 0 {
		return 0
	}
	return C.int32_t(columnar.LendShared(p, int64(n), unsafe.Slice((*byte)(unsafe.Pointer(out)), int(capacity))))
}
