// Package cudatest is a stand-in for the CUDA runtime on host memory, for
// testing spdl-go's CUDA paths (pools, events, copies, errors) on machines
// without a GPU. It implements the C functions spdl-go binds with cudart's
// signatures, so the code under test calls them exactly as it calls the
// real library. What it cannot show (that copies really overlap, that
// device memory really holds the data) is checked on a GPU by
// benchmarks/gpu_check.py.
package cudatest

/*
#cgo CFLAGS: -O1 -std=gnu11
#include <stdlib.h>
#include "fake.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/spdl-go/spdl-go/core/cuda"
)

// Counter names a count the stand-in keeps.
type Counter int

// The counts: buffers allocated and freed, live streams and events,
// synchronisations, copies and copied bytes, event records and waits.
const (
	HostAllocs Counter = C.FAKE_HOST_ALLOC
	HostFrees  Counter = C.FAKE_FREE_HOST
	Mallocs    Counter = C.FAKE_MALLOC
	Frees      Counter = C.FAKE_FREE
	Streams    Counter = C.FAKE_STREAMS
	Syncs      Counter = C.FAKE_SYNCS
	Copies     Counter = C.FAKE_COPIES
	CopyBytes  Counter = C.FAKE_COPY_BYTES
	Events     Counter = C.FAKE_EVENTS
	Records    Counter = C.FAKE_RECORDS
	Waits      Counter = C.FAKE_WAITS
)

var (
	once sync.Once
	rt   *cuda.Runtime
	err  error
)

// Runtime returns the stand-in runtime, installed as the process's CUDA
// runtime (cuda.Install) on first use.
func Runtime() (*cuda.Runtime, error) {
	once.Do(func() {
		rt, err = cuda.FromSymbols("cudatest", func(name string) (uintptr, error) {
			cs := C.CString(name)
			defer C.free(unsafe.Pointer(cs))
			if a := uintptr(C.fake_symbol(cs)); a != 0 {
				return a, nil
			}
			return 0, fmt.Errorf("cudatest has no %s", name)
		})
		if err == nil {
			err = cuda.Install(rt)
		}
	})
	return rt, err
}

// Reset sets the number of devices and zeroes the counters.
func Reset(devices int) { C.fake_reset(C.int(devices)) }

// Count reads a counter.
func Count(c Counter) int64 { return int64(C.fake_count(C.int(c))) }

// FailNext makes the next call counted by c (HostAllocs, Mallocs, Copies
// or Records) fail.
func FailNext(c Counter) { C.fake_fail_next(C.int(c)) }
