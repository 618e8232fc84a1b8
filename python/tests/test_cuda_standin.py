"""The Python side of CUDA tensors, without a GPU: a libspdl built with
``-tags cudatest`` (``make cudatest-lib``) installs core/cuda/cudatest, a
stand-in for the CUDA runtime's C functions working in host memory. Each
test runs in a subprocess that loads that library (SPDL_GO_LIBRARY)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

LIB = os.environ.get("SPDL_GO_CUDATEST_LIB", "")

pytestmark = pytest.mark.skipif(
    not os.path.exists(LIB) and not os.environ.get("SPDL_GO_REQUIRE_SERVERS"),
    reason="no cudatest build of libspdl (make cudatest-lib; make test sets SPDL_GO_CUDATEST_LIB)",
)

PRELUDE = """
import ctypes, gc, json
import numpy as np
import spdl_go
from spdl_go import _lib, cuda, ops
LIB = _lib.LIB
LIB.spdl_cudatest_install.argtypes = [ctypes.c_int64]
LIB.spdl_cudatest_install.restype = ctypes.c_int64
LIB.spdl_cudatest_count.argtypes = [ctypes.c_int64]
LIB.spdl_cudatest_count.restype = ctypes.c_int64
assert LIB.spdl_cudatest_install(2) == 0
RECORDS, WAITS, FREES = 9, 10, 3
count = LIB.spdl_cudatest_count
"""


def run(body: str) -> None:
    if not os.path.exists(LIB):
        pytest.fail(f"SPDL_GO_CUDATEST_LIB={LIB!r} does not exist")
    code = PRELUDE + textwrap.dedent(body)
    env = {**os.environ, "SPDL_GO_LIBRARY": LIB}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"


def test_batches_become_cuda_tensors():
    run("""
    rows = [{"x": np.full((2, 3), i, np.float32), "y": i} for i in range(8)]
    p = (spdl_go.PipelineBuilder().add_source(rows).aggregate(4)
         .pipe(ops.collate(numbers="tensor")).pipe(ops.to_device("cuda:1")).add_sink(2).build())
    with p.auto_stop():
        batches = list(p)
    x = batches[0]["x"]
    assert x.device == "cuda:1" and x.__dlpack_device__() == (2, 1), x.device
    assert "device='cuda:1'" in repr(x) and x.shape == (4, 2, 3)
    try:
        x.numpy()
        raise AssertionError("numpy() of a device tensor must fail")
    except BufferError as e:
        assert "cuda:1" in str(e)
    for bad in (0, -2, "s"):
        try:
            x.__dlpack__(stream=bad)
            raise AssertionError(f"stream={bad!r} accepted")
        except BufferError:
            pass
    st = cuda.memory_stats()
    assert st["device_live_bytes"] > 0 and st["pinned_live_bytes"] == 0, st
    """)


def test_release_records_the_consumer_stream_and_reuse_waits():
    run("""
    src = [np.arange(1024, dtype=np.float32) for _ in range(20)]
    p = spdl_go.PipelineBuilder().add_source(src).pipe(ops.to_device()).add_sink(1).build()
    with p.auto_stop():
        for t in p:
            cap = t.__dlpack__(stream=7)        # a consumer on stream 7 ...
            del cap, t                          # ... lets go while its work may be queued
            gc.collect()
    # (The loop's last batch is released when the pipeline's generator ends.)
    assert count(RECORDS) >= 19, count(RECORDS)  # an event recorded on stream 7 at each release
    assert count(WAITS) >= 10, count(WAITS)      # reuses waited for them
    assert cuda.memory_stats()["reuse_waits"] == count(WAITS)
    # Two streams: the buffer goes back to CUDA instead of the pool.
    frees = count(FREES)
    p = spdl_go.PipelineBuilder().add_source(src[:1]).pipe(ops.to_device()).add_sink(1).build()
    with p.auto_stop():
        (t,) = list(p)
    t.__dlpack__(stream=1); t.__dlpack__(stream=2)
    del t
    gc.collect()
    assert count(FREES) == frees + 1
    cuda.trim_memory()
    st = cuda.memory_stats()
    assert st["device_cached_bytes"] == 0 and st["pinned_cached_bytes"] == 0 and st["device_live_bytes"] == 0, st
    """)


def test_data_loader_on_a_device_keeps_indices_for_state_dict():
    run("""
    ds = [(np.full(3, i, np.float32), i) for i in range(10)]
    dl = spdl_go.DataLoader(ds, batch_size=4, output="native", device="cuda:0", shuffle=True, seed=1)
    with dl:
        it = iter(dl)
        x, y = next(it)
        assert x.device == "cuda:0" and y.device == "cuda:0"
        state = json.loads(json.dumps(dl.state_dict()))
    assert state["progress"]["epoch"] == 0
    """)
