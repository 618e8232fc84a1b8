"""Zero-copy handoff of batches: DLPack tensors and Arrow arrays."""

import ctypes
import gc

import numpy as np
import pyarrow as pa
import pytest

import spdl_go
from spdl_go import PipelineBuilder, ops


def collated(samples, batch=None):
    p = PipelineBuilder().add_source(samples).aggregate(batch or len(samples)).pipe(ops.collate()).add_sink().build()
    out = list(p)
    p.close()
    return out


@pytest.mark.parametrize("dtype", ["uint8", "int32", "int64", "float32", "float64", "bool"])
def test_collate_numpy_arrays_into_tensor(dtype, no_leaks):
    rng = np.random.default_rng(0)
    samples = [rng.integers(0, 2 if dtype == "bool" else 100, size=(3, 5)).astype(dtype) for _ in range(4)]
    (batch,) = collated(samples)
    assert isinstance(batch, spdl_go.Tensor)
    assert batch.shape == (4, 3, 5) and batch.dtype == dtype
    arr = np.from_dlpack(batch)
    np.testing.assert_array_equal(arr, np.stack(samples))


def test_dlpack_is_zero_copy_and_shares_memory(no_leaks):
    (batch,) = collated([np.arange(6, dtype=np.float32).reshape(2, 3)] * 2)
    a = np.from_dlpack(batch)
    b = np.from_dlpack(batch)
    assert a.ctypes.data == b.ctypes.data == batch.data_ptr
    a[0, 0, 0] = 42.0  # writes through to the same C memory
    assert b[0, 0, 0] == 42.0


def test_dlpack_memory_released_when_consumers_drop(no_leaks):
    before = spdl_go.memory_stats()
    (batch,) = collated([np.ones((64, 64), dtype=np.float64)] * 8)
    nbytes = 8 * 64 * 64 * 8
    mid = spdl_go.memory_stats()
    assert mid["live_bytes"] - before["live_bytes"] >= nbytes
    arr = np.from_dlpack(batch)
    del batch
    gc.collect()
    # the numpy view keeps the memory alive
    assert spdl_go.memory_stats()["live_bytes"] - before["live_bytes"] >= nbytes
    assert arr.sum() == 8 * 64 * 64
    del arr
    gc.collect()
    assert spdl_go.memory_stats()["live_bytes"] == before["live_bytes"]


def test_legacy_and_versioned_capsules(no_leaks):
    (batch,) = collated([np.arange(4, dtype=np.int64)] * 3)
    legacy = batch.__dlpack__()
    versioned = batch.__dlpack__(max_version=(1, 0))
    api = ctypes.pythonapi
    api.PyCapsule_IsValid.restype = ctypes.c_int
    api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
    assert api.PyCapsule_IsValid(legacy, b"dltensor")
    assert api.PyCapsule_IsValid(versioned, b"dltensor_versioned")
    # unconsumed capsules free their tensors when they die (no_leaks checks)
    del legacy, versioned
    with pytest.raises(BufferError):
        batch.__dlpack__(copy=True)
    assert batch.__dlpack_device__() == (1, 0)


def test_numpy_input_travels_zero_copy_into_go(no_leaks):
    # A numpy array sent to a native identity op comes back as a Tensor
    # over the very same memory.
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    p = PipelineBuilder().add_source([src]).pipe(ops.identity()).add_sink().build()
    (t,) = list(p)
    p.close()
    assert isinstance(t, spdl_go.Tensor)
    assert t.data_ptr == src.ctypes.data
    np.testing.assert_array_equal(np.from_dlpack(t), src)


def test_torch_interop(no_leaks):
    torch = pytest.importorskip("torch")
    (batch,) = collated([torch.arange(6, dtype=torch.float32).reshape(2, 3)] * 4)
    t = torch.from_dlpack(batch)
    assert t.shape == (4, 2, 3) and t.data_ptr() == batch.data_ptr
    assert torch.equal(t[1], torch.arange(6, dtype=torch.float32).reshape(2, 3))


@pytest.mark.parametrize(
    "values,pa_type",
    [
        ([1, 2, None, 4], pa.int64()),
        ([1.5, 2, None], pa.float64()),
        ([True, False, None], pa.bool_()),
        (["a", "bé", None, ""], pa.string()),
        ([b"\x00", None, b"xyz"], pa.binary()),
    ],
)
def test_collate_scalars_into_arrow(values, pa_type, no_leaks):
    (col,) = collated(values)
    assert isinstance(col, spdl_go.ArrowArray)
    assert len(col) == len(values)
    arr = pa.array(col)
    assert arr.type == pa_type
    assert arr.to_pylist() == [float(v) if pa_type == pa.float64() and v is not None else v for v in values]


def test_arrow_is_zero_copy(no_leaks):
    (col,) = collated(list(range(1000)))
    # buffers[1] of the exported ArrowArray struct is the values buffer
    buffers_ptr = ctypes.c_void_p.from_address(col._array + 5 * 8).value
    values_addr = ctypes.c_void_p.from_address(buffers_ptr + 8).value
    arr = pa.array(col)
    assert arr.buffers()[1].address == values_addr
    with pytest.raises(RuntimeError, match="already imported"):
        pa.array(col)
    del arr
    gc.collect()


def test_arrow_unimported_is_freed(no_leaks):
    (col,) = collated(["x"] * 100)
    assert spdl_go.arrow_allocated_bytes() > 0
    del col


def test_collate_dicts(no_leaks):
    samples = [{"image": np.full((2, 2), i, dtype=np.uint8), "label": i, "name": f"s{i}"} for i in range(5)]
    (batch,) = collated(samples)
    assert list(batch) == ["image", "label", "name"]
    np.testing.assert_array_equal(np.from_dlpack(batch["image"]), np.stack([s["image"] for s in samples]))
    assert pa.array(batch["label"]).to_pylist() == list(range(5))
    assert pa.array(batch["name"]).to_pylist() == [f"s{i}" for i in range(5)]


def test_collate_shape_mismatch_fails_item(no_leaks):
    p = (
        PipelineBuilder()
        .add_source([np.zeros((2, 2)), np.zeros((2, 3))])
        .aggregate(2)
        .pipe(ops.collate(), name="stack", max_failures=0)
        .add_sink()
        .build()
    )
    with pytest.raises(spdl_go.PipelineError, match="(?s)stack.*shape"):
        list(p)
    p.close()


def test_collate_pad(no_leaks):
    p = (
        PipelineBuilder()
        .add_source([np.ones((1, 2), np.float32), np.ones((2, 1), np.float32)])
        .aggregate(2)
        .pipe(ops.collate(pad=True, pad_value=-1))
        .add_sink()
        .build()
    )
    (batch,) = list(p)
    p.close()
    np.testing.assert_array_equal(
        np.from_dlpack(batch), np.array([[[1, 1], [-1, -1]], [[1, -1], [1, -1]]], dtype=np.float32)
    )


def test_many_batches_memory_returns_to_baseline(no_leaks):
    # A leak test in the style of the style guide: many batches, then the
    # engine's live memory must be back where it started.
    gc.collect()
    base = spdl_go.memory_stats()["live_bytes"]
    p = (
        PipelineBuilder()
        .add_source(np.full((3, 32, 32), i % 255, dtype=np.uint8) for i in range(4096))
        .pipe(ops.identity(), concurrency=2)
        .aggregate(32)
        .pipe(ops.collate(), concurrency=2)
        .add_sink()
        .build()
    )
    n = 0
    for batch in p:
        arr = np.from_dlpack(batch)
        n += arr.shape[0]
    p.close()
    del batch, arr
    gc.collect()
    assert n == 4096
    assert spdl_go.memory_stats()["live_bytes"] == base
