"""Python stages on Go threads: parallel with the GIL off, serialised with it.

These run on both builds; what they assert depends on the build, read from
the interpreter (Py_GIL_DISABLED, sys._is_gil_enabled), not its version. CI
runs the whole suite on each free-threaded CPython it builds (GIL off).
"""

import resource
import sys
import sysconfig
import threading
import time

import numpy as np
import pytest

from spdl_go import PipelineBuilder, ops

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
GIL_OFF = FREE_THREADED and not sys._is_gil_enabled()


def spin(x):
    """About a millisecond of pure-Python work that never releases the GIL."""
    s = 0
    for i in range(15_000):
        s += i * i
    return x


def cpu_over_wall(concurrency: int, n: int) -> float:
    p = PipelineBuilder().add_source(range(n)).pipe(spin, concurrency=concurrency).add_sink(4).build()
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    got = sorted(p)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    p.close()
    assert got == list(range(n))
    return (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / wall


def test_build_is_what_make_test_ft_expects():
    if FREE_THREADED:
        # PYTHON_GIL=0 (make py-test-ft) keeps it off whatever is imported.
        assert GIL_OFF, "free-threaded build running with the GIL on; run with PYTHON_GIL=0"


@pytest.mark.skipif((__import__("os").cpu_count() or 1) < 2, reason="needs 2 cores")
def test_cpu_bound_python_stage_uses_two_cores_only_without_gil():
    # CPU time over wall time: about 2 when two Go threads run Python code
    # at once, about 1 when the GIL serialises them.
    ratio = cpu_over_wall(2, 400)
    if GIL_OFF:
        assert ratio >= 1.4, f"concurrency 2 used {ratio:.2f} cores with the GIL off"
    else:
        assert ratio <= 1.3, f"concurrency 2 used {ratio:.2f} cores with the GIL on"


def test_pipelines_iterated_from_four_threads_with_python_and_native_stages(no_leaks):
    # Four Python threads each build and drain their own pipeline (a Python
    # stage, a native stage, batching into tensors) at once, twice.
    results: dict[int, list] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def run(k: int) -> None:
        try:
            p = (
                PipelineBuilder()
                .add_source(range(300), continuous=True)
                .pipe(lambda x: np.full((4,), x * k, dtype=np.int64), concurrency=2, output_order="input")
                .pipe(ops.identity(), concurrency=2, output_order="input")
                .aggregate(10)
                .pipe(ops.collate())
                .add_sink(3)
                .build()
            )
            start.wait()
            out = []
            for _ in range(2):
                out.append([np.from_dlpack(b).copy() for b in p])
            p.close()
            results[k] = out
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    for k in range(4):
        for epoch in results[k]:
            got = np.concatenate(epoch)
            assert got.shape == (300, 4)
            assert (got[:, 0] == np.arange(300) * k).all()


def test_one_pipeline_read_from_four_threads(no_leaks):
    # get_item from several threads: each item goes to exactly one of them.
    p = PipelineBuilder().add_source(range(2000)).pipe(spin, concurrency=2).add_sink(8).build()
    p.start()
    got: list[list[int]] = [[] for _ in range(4)]

    def read(k: int) -> None:
        while True:
            try:
                got[k].append(p.get_item(timeout=30))
            except EOFError:
                return

    threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    p.close()
    assert sorted(x for g in got for x in g) == list(range(2000))
