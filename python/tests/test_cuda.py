"""spdl_go.cuda: the CUDA runtime is optional and found at run time."""

import subprocess
import sys

import numpy as np
import pytest

import spdl_go
from spdl_go import cuda, ops


def test_status_reports_what_it_found():
    st = cuda.status()
    if st.available:
        assert st.devices >= 1 and st.path and st.runtime_version > 0
        return
    # No GPU here (CI): either no runtime at all, or a runtime without a
    # driver or device; either way the reason is spelled out.
    assert st.devices == 0 and st.error
    if st.path:
        assert st.runtime_version >= 11000
        assert "cuda" in st.error.lower()
    else:
        assert "SPDL_GO_CUDART" in st.error


def test_no_runtime_is_a_clear_message_not_a_crash():
    code = """
import os
os.environ["SPDL_GO_CUDART"] = "/nonexistent/libcudart.so"
from spdl_go import cuda
cuda.runtime_candidates = lambda: []
st = cuda.status()
print(st.available, st.error)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # A runtime on the linker's default path would load; otherwise the
    # message names what was tried.
    assert out.startswith("True") or ("/nonexistent/libcudart.so" in out and "False" in out)


def _batches_pipeline(to_device: ops.NativeOp) -> spdl_go.PipelineBuilder:
    def sample(i: int) -> dict:
        return {"x": np.full((3, 4), i, dtype=np.float32), "y": i}

    return (
        spdl_go.PipelineBuilder()
        .add_source(range(12))
        .pipe(sample)
        .aggregate(4)
        .pipe(ops.collate(numbers="tensor"))
        .pipe(to_device, concurrency=2, output_order="input")
        .add_sink(2)
    )


@pytest.mark.parametrize(
    "device, want",
    [("cuda", 0), ("cuda:1", 1), (2, 2), ("cuda:0", 0)],
)
def test_to_device_parses_devices(device, want):
    assert ops._cuda_ordinal(device) == want


@pytest.mark.parametrize("device", ["cpu", "cuda:x", -1, True, "gpu:0"])
def test_to_device_rejects_bad_devices(device):
    with pytest.raises((ValueError, TypeError), match="to_device: device"):
        ops.to_device(device)


def test_to_device_accepts_a_torch_device():
    torch = pytest.importorskip("torch")
    assert ops._cuda_ordinal(torch.device("cuda", 3)) == 3


def test_cpu_tensors_say_where_they_are():
    b = spdl_go.PipelineBuilder().add_source([[1.0, 2.0]]).pipe(ops.to_tensor()).add_sink(1).build()
    with b.auto_stop():
        (t,) = list(b)
    assert t.device == "cpu" and t.__dlpack_device__() == (1, 0)
    assert "device" not in repr(t)


def test_to_device_without_a_gpu_fails_the_build_and_says_why():
    if cuda.status().available:
        pytest.skip("a GPU is present: test_to_device_on_a_gpu covers it")
    with pytest.raises(ValueError) as e:
        _batches_pipeline(ops.to_device("cuda:0")).build()
    msg = str(e.value)
    assert "to_device" in msg
    assert "cuda:0 is not available" in msg or "no CUDA runtime library could be loaded" in msg
    # output="native": the device is what fails, whether or not torch is installed.
    with pytest.raises(ValueError, match="to_device"):
        spdl_go.DataLoader([np.zeros(2, np.float32)] * 4, batch_size=2, device="cuda", output="native")


def test_to_device_without_a_runtime_names_what_it_tried():
    code = """
import os
os.environ["SPDL_GO_CUDART"] = "/nonexistent/libcudart.so"
import spdl_go
from spdl_go import cuda, ops
cuda.runtime_candidates = lambda: []
b = spdl_go.PipelineBuilder().add_source(range(2)).pipe(ops.to_device()).add_sink(1)
try:
    b.build()
    print("built")
except ValueError as e:
    print(e)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # With a CUDA runtime on the linker's default path, the build gets as
    # far as asking for a device.
    assert (
        out.startswith("built")
        or "cuda:0 is not available" in out
        or ("/nonexistent/libcudart.so" in out and "SPDL_GO_CUDART" in out)
    ), out


def test_data_loader_device_needs_torch_output():
    with pytest.raises(ValueError, match="output='numpy' needs CPU batches"):
        spdl_go.DataLoader([np.zeros(2, np.float32)] * 4, batch_size=2, output="numpy", device="cuda")


def test_to_device_on_a_gpu():
    """Runs where a GPU is: batches arrive on the device with their data."""
    if not cuda.status().available:
        pytest.skip("no GPU here; benchmarks/gpu_check.py runs this and more where one is lent")
    torch = pytest.importorskip("torch")
    p = _batches_pipeline(ops.to_device("cuda:0")).build()
    with p.auto_stop():
        for k, batch in enumerate(p):
            x, y = torch.from_dlpack(batch["x"]), torch.from_dlpack(batch["y"])
            assert x.device.type == "cuda" and y.device.type == "cuda"
            want = torch.arange(4 * k, 4 * k + 4, device="cuda", dtype=torch.float32)
            assert torch.equal(x[:, 0, 0], want) and torch.equal(y, want.long())
    st = cuda.memory_stats()
    assert st["device_cached_bytes"] > 0 and st["pinned_live_bytes"] == 0
