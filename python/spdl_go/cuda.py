"""The CUDA runtime, found at run time (spdl-go needs no CUDA to build).

    >>> spdl_go.cuda.status()
    CudaStatus(available=False, path='.../nvidia/cu13/lib/libcudart.so.13', runtime_version=13020,
               driver_version=0, devices=0, error='no usable CUDA device: ... (cudaError 35)')

The runtime is looked for at ``$SPDL_GO_CUDART``, then in the
``nvidia-cuda-runtime`` wheels that PyTorch's Linux wheels install, then on
the linker's search path.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from dataclasses import dataclass

from . import _lib

__all__ = ["CudaStatus", "memory_stats", "runtime_candidates", "runtime_search_paths", "status", "trim_memory"]


@dataclass(frozen=True)
class CudaStatus:
    """What loading the CUDA runtime found."""

    available: bool
    """A runtime loaded and sees at least one GPU."""
    path: str
    runtime_version: int
    driver_version: int
    """0 when no NVIDIA driver is installed."""
    devices: int
    error: str
    """Why it is not available, naming what was tried."""


def runtime_candidates() -> list[str]:
    """libcudart paths from installed ``nvidia-*`` wheels, newest first."""
    found: list[str] = []
    for base in sys.path:
        for pat in ("nvidia/*/lib/libcudart.so*", "nvidia/cuda_runtime/lib/libcudart.so*"):
            found += glob.glob(os.path.join(base or ".", pat))
    return sorted(set(found), reverse=True)


def runtime_search_paths() -> list[str]:
    """Where spdl-go looks for libcudart, in order, before the linker's path:
    ``$SPDL_GO_CUDART``, then the installed ``nvidia-*`` wheels."""
    # $SPDL_GO_CUDART is read here: the Go runtime sees only the
    # environment the process started with.
    env = os.environ.get("SPDL_GO_CUDART")
    return ([env] if env else []) + runtime_candidates()


def status() -> CudaStatus:
    """Loads the CUDA runtime if it can and says what it found."""
    paths = json.dumps(runtime_search_paths()).encode()
    d = _lib.call_json(_lib.LIB.spdl_cuda_status, paths)
    return CudaStatus(
        available=bool(d.get("available")),
        path=d.get("path", ""),
        runtime_version=int(d.get("runtime_version", 0)),
        driver_version=int(d.get("driver_version", 0)),
        devices=int(d.get("devices", 0)),
        error=d.get("error", ""),
    )


def memory_stats() -> dict[str, int]:
    """Counters of the pinned and GPU memory that spdl-go's tensors hold.

    Returns:
        pinned_live_bytes, pinned_cached_bytes, device_live_bytes,
        device_cached_bytes (summed over GPUs), allocations and frees (buffers
        obtained from and given back to CUDA), and reuse_waits (reuses of a
        buffer that queued a wait for its last consumer's stream).
    """
    stats: dict[str, int] = _lib.call_json(_lib.LIB.spdl_cuda_mem_stats)
    return stats


def trim_memory() -> None:
    """Gives every cached pinned and GPU buffer back to CUDA."""
    _lib.LIB.spdl_cuda_mem_trim()
