"""Functions the subprocess tests run in the worker process: importable by
name, as a spawned worker needs them."""

from __future__ import annotations

import ctypes
import os
import random
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from spdl_go import ops
from spdl_go.pipeline import PipelineBuilder


def shm_stats() -> dict[str, int]:
    """This process's shared-memory arena (spdl_shm_stats)."""
    from spdl_go import _lib

    out = (ctypes.c_int64 * 5)()
    _lib.LIB.spdl_shm_stats(out)
    return dict(zip(("size", "carved", "pending", "lends", "misses"), out, strict=True))


def numbers() -> list[Any]:
    return [1, "two", {"three": 3.0}]


def one_shot() -> Iterator[int]:
    yield from range(3)


def pid_per_item() -> Any:
    return _Pids()


class _Pids:
    def __iter__(self) -> Iterator[int]:
        for _ in range(3):
            yield os.getpid()


def fill(i: int) -> np.ndarray:
    return np.full((64, 64, 4), i % 251, dtype=np.uint8)


class Batches:
    """Epochs of batches of (n, 64, 64, 4) uint8 made by a pipeline in the
    worker (collate: one tensor per batch), then the arena's statistics."""

    def __init__(self, batches: int = 8, n: int = 4, stats: bool = True) -> None:
        self.batches, self.n, self.stats = batches, n, stats

    def __iter__(self) -> Iterator[Any]:
        p = (
            PipelineBuilder()
            .add_source(range(self.batches * self.n))
            .pipe(fill)
            .aggregate(self.n)
            .pipe(ops.collate())
            .add_sink(2)
            .build(num_threads=2)
        )
        with p.auto_stop():
            for b in p:
                yield {"images": b, "pid": os.getpid()}
        if self.stats:
            yield shm_stats()


def batches() -> Batches:
    return Batches()


def unlimited_batches() -> Batches:
    return Batches(batches=10_000, stats=False)


class FailsAt:
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        for i in range(10):
            if i == self.n:
                raise KeyError(f"item {i} is missing")
            yield i


def fails_at_2() -> FailsAt:
    return FailsAt(2)


def raises() -> Any:
    raise ZeroDivisionError("no iterable today")


def failing_initializer() -> None:
    raise OSError("cannot open the dataset")


def set_marker() -> None:
    os.environ["SPDL_GO_TEST_MARKER"] = "set"


def marker() -> list[str]:
    return [os.environ.get("SPDL_GO_TEST_MARKER", "")]


class Slow:
    def __iter__(self) -> Iterator[int]:
        yield 1
        time.sleep(30)
        yield 2


def slow() -> Slow:
    return Slow()


def square(x: int) -> int:
    return x * x


def fail_on_3(x: int) -> int:
    if x == 3:
        raise ValueError(f"bad item {x}")
    return x


def rand(x: int) -> float:
    return random.random()


def arrays() -> list[dict[str, Any]]:
    """numpy arrays of several dtypes and layouts, large and small, and
    where they live in the worker's memory."""
    rng = np.random.default_rng(0)
    big = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)
    return [
        {
            "u8": big,
            "f32": rng.standard_normal((32, 40)).astype(np.float32),
            "strided": big[::2, ::-1, :],  # not contiguous: crosses contiguous
            "bool": rng.integers(0, 2, 5000).astype(bool),
            "c64": (rng.standard_normal(600) + 1j).astype(np.complex64),
            "small": np.arange(10, dtype=np.int64),  # under 4 KiB: pickled
            "objects": np.array([{"a": 1}] * 1000, dtype=object),  # no DLPack type: pickled
            "big_endian": np.arange(2000, dtype=">i4"),  # not native: pickled
        }
    ]


def arrow_ints() -> list[Any]:
    import pyarrow as pa

    return [pa.array(np.arange(5000, dtype=np.int64) * k) for k in range(3)]


def arrow_nested() -> list[Any]:
    import pyarrow as pa

    rows = [{"name": f"row{i}", "vals": list(range(i % 7))} for i in range(3000)]
    return [pa.array(rows).slice(100, 2500)]  # an offset into its buffers, too


class _EngineArrow:
    """Arrow columns the engine makes (collate of ints, numbers="arrow")."""

    def __iter__(self) -> Iterator[Any]:
        p = PipelineBuilder().add_source(range(3 * 1024)).aggregate(1024).pipe(ops.collate()).add_sink(2).build()
        with p.auto_stop():
            yield from p


def arrow_from_the_engine() -> Any:
    return _EngineArrow()


def forbid_python_tensor_sends() -> None:
    """An initializer: a worker whose Python would send an item that is one
    Tensor fails the test (a pipeline's tensors are sent from Go)."""
    from spdl_go._buffers import Tensor
    from spdl_go.pipeline import _subprocess

    dumps = _subprocess._dumps

    def checked(item: Any) -> bytes:
        if type(item) is Tensor:
            raise AssertionError("a pipeline's tensor went through the worker's Python")
        return dumps(item)

    _subprocess._dumps = checked


def batch_index(t: Any) -> int:
    return int(np.from_dlpack(t)[0, 0, 0, 0]) // 4


def odd_in_a_dict(t: Any) -> Any:
    """Even batches stay one tensor (sent from Go); odd ones go in a dict
    (pickled by the worker's Python)."""
    k = batch_index(t)
    return t if k % 2 == 0 else {"images": t, "k": k}


def fail_on_batch_5(t: Any) -> Any:
    if batch_index(t) == 5:
        raise ValueError("bad batch 5")
    return t


def batch_config(then: Any, batches: int = 10) -> Any:
    """Batches of (4, 64, 64, 4) uint8 from a native collate, then a Python
    stage, at concurrency 1 (the order of the source)."""
    b = PipelineBuilder().add_source(range(4 * batches)).pipe(fill).aggregate(4).pipe(ops.collate())
    return b.pipe(then).add_sink(2).get_config()


def forbid_arrow_copies() -> None:
    """An initializer: a worker that copies an Arrow buffer into its shared
    memory fails the test (the engine's are there already)."""
    from spdl_go.pipeline import _subprocess

    def copy(buf: Any) -> bytes | None:
        raise AssertionError(f"an Arrow buffer of {buf.size} bytes was copied")

    _subprocess._offload_buffer = copy
