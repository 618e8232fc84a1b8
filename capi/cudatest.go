//go:build cudatest

package main

// A libspdl built with -tags cudatest can install core/cuda/cudatest, a
// host-memory stand-in for the CUDA runtime, so that the Python side of
// CUDA tensors (device, __dlpack__ streams, pools) is tested without a
// GPU. Release builds do not have these exports.

// #include "bridge.h"
import "C"

import (
	"github.com/spdl-go/spdl-go/core/cuda/cudatest"
)

// spdl_cudatest_install installs the stand-in with ndevices GPUs; 0 on
// success, -1 if a real runtime was installed first.
//
//export spdl_cudatest_install
func spdl_cudatest_install(ndevices C.int64_t) C.int64_t {
	if _, err := cudatest.Runtime(); err != nil {
		return -1
	}
	cudatest.Reset(int(ndevices))
	return 0
}

// spdl_cudatest_count reads one of the stand-in's counters (cudatest.Counter).
//
//export spdl_cudatest_count
func spdl_cudatest_count(which C.int64_t) C.int64_t {
	return C.int64_t(cudatest.Count(cudatest.Counter(which)))
}
