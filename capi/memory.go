package main

// #include "bridge.h"
import "C"

import (
	"encoding/json"

	"github.com/spdl-go/spdl-go/core/tensor"
)

// memStats is spdl_mem_stats' answer (see tensor.Stats).
type memStats struct {
	LiveTensors int64 `json:"live_tensors"`
	LiveBytes   int64 `json:"live_bytes"`
	PooledBytes int64 `json:"pooled_bytes"`
	Allocations int64 `json:"allocations"`
}

// cudaMemStats is spdl_cuda_mem_stats' answer (see tensor.CUDAStats).
type cudaMemStats struct {
	PinnedLiveBytes   int64 `json:"pinned_live_bytes"`
	PinnedCachedBytes int64 `json:"pinned_cached_bytes"`
	DeviceLiveBytes   int64 `json:"device_live_bytes"`
	DeviceCachedBytes int64 `json:"device_cached_bytes"`
	Allocations       int64 `json:"allocations"`
	Frees             int64 `json:"frees"`
	ReuseWaits        int64 `json:"reuse_waits"`
}

//export spdl_mem_stats
func spdl_mem_stats(outJSON **C.char, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	s := tensor.MemStats()
	return writeJSON(memStats{s.LiveTensors, s.LiveBytes, s.PooledBytes, s.SystemAllocs}, outJSON, errOut)
}

//export spdl_cuda_mem_stats
func spdl_cuda_mem_stats(outJSON **C.char, errOut **C.char) (rc C.int) {
	defer guard(&rc, errOut)
	s := tensor.CUDAMemStats()
	return writeJSON(cudaMemStats{
		s.PinnedLiveBytes, s.PinnedCachedBytes, s.DeviceLiveBytes, s.DeviceCachedBytes,
		s.Allocs, s.Frees, s.ReuseWaits,
	}, outJSON, errOut)
}

// writeJSON stores v as a malloc'd JSON string in *outJSON, which the
// caller frees.
func writeJSON(v any, outJSON **C.char, errOut **C.char) C.int {
	b, err := json.Marshal(v)
	if err != nil {
		setErr(errOut, err)
		return C.SPDL_ERROR
	}
	*outJSON = C.CString(string(b))
	return C.SPDL_OK
}
