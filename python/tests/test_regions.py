"""Execution regions (SPDL's PipelineBuilder.to): stages in a pool of
worker processes or in subinterpreters, their rules, failures, dying
workers and a dying parent."""

from __future__ import annotations

import concurrent.futures
import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import region_fns as fns
import region_unimportable

from spdl_go import ops
from spdl_go.pipeline import PipelineBuilder, PipelineFailure, build_pipeline, run_pipeline_in_subprocess
from spdl_go.pipeline.defs import (
    MAIN_PROCESS,
    InterpreterPoolExecutorConfig,
    Pipe,
    PipelineConfig,
    PlacementConfig,
    ProcessPoolExecutorConfig,
    SinkConfig,
    SourceConfig,
)

HERE = Path(__file__).resolve().parent
POOL2 = ProcessPoolExecutorConfig(max_workers=2)


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_stages_run_in_the_workers_and_every_item_comes_back():
    p = (
        PipelineBuilder()
        .add_source(range(40))
        .pipe(fns.plus_one)
        .to(POOL2)
        .pipe(fns.square, concurrency=2)
        .pipe(ops.identity())  # a native op runs in the worker's engine
        .pipe(fns.pid_of)
        .to(MAIN_PROCESS)
        .pipe(fns.pid_of)
        .add_sink(3)
        .build(num_threads=2)
    )
    with p.auto_stop():
        out = list(p)
    assert sorted(x for (x, _), _ in out) == [(i + 1) ** 2 for i in range(40)]
    workers = {w for (_, w), _ in out}
    assert os.getpid() not in workers and 1 <= len(workers) <= 2
    assert {m for _, m in out} == {os.getpid()}  # after the region: the main process
    p.close()
    for w in workers:
        assert _gone(w), f"worker {w} outlived the pipeline"


@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize(("in_buf", "out_buf"), [(1, 1), (4, 2), (64, 64)])
def test_aggregates_buffers_and_epochs(continuous, in_buf, out_buf):
    p = (
        PipelineBuilder()
        .add_source(range(30), continuous=continuous)
        .to(POOL2, buffer_size=in_buf)
        .pipe(fns.square, concurrency=3)
        .aggregate(4)
        .to(MAIN_PROCESS, buffer_size=out_buf)
        .add_sink(2)
        .build(num_threads=2)
    )
    with p:
        for epoch in range(3):
            batches = list(p)
            if not continuous and epoch:
                assert batches == []  # one pass over the source, as without a region
                continue
            # Each worker batches what it got: every item, in batches of at most 4.
            assert sorted(x for b in batches for x in b) == [i * i for i in range(30)]
            assert all(1 <= len(b) <= 4 for b in batches)


def test_an_epoch_left_early_then_full_ones():
    p = (
        PipelineBuilder()
        .add_source(range(200), continuous=True)
        .to(POOL2)
        .pipe(fns.slow_square, concurrency=2)
        .to(MAIN_PROCESS)
        .add_sink(2)
        .build(num_threads=2)
    )
    with p:
        it = iter(p)
        next(it)
        del it
        rest = list(p)  # the rest of that epoch (SPDL's continuous source)
        assert 150 < len(rest) < 200
        assert sorted(list(p)) == [i * i for i in range(200)]


def test_adjacent_regions_and_a_redundant_main_process_marker():
    p = (
        PipelineBuilder()
        .add_source(range(10))
        .to(MAIN_PROCESS)
        .to(POOL2)
        .pipe(fns.plus_one)
        .to(ProcessPoolExecutorConfig(max_workers=1))
        .pipe(fns.square)
        .to(MAIN_PROCESS)
        .add_sink(2)
        .build()
    )
    with p, p.auto_stop():
        assert sorted(p) == [(i + 1) ** 2 for i in range(10)]


def test_arrays_come_back_through_shared_memory():
    p = PipelineBuilder().add_source(range(12)).to(POOL2).pipe(fns.image).to(MAIN_PROCESS).add_sink(2).build()
    with p, p.auto_stop():
        out = list(p)
    assert sorted(int(a[0, 0, 0]) for a in out) == list(range(12))
    assert all(isinstance(a, np.ndarray) and a.shape == (64, 64, 3) for a in out)
    with open("/proc/self/maps") as f:
        maps = [line for line in f if "spdl-go-batches" in line]
    base = out[0].__array_interface__["data"][0]
    assert any(int(lo, 16) <= base < int(hi, 16) for lo, hi in (m.split()[0].split("-") for m in maps))


def test_initializer_runs_in_each_worker():
    pool = ProcessPoolExecutorConfig(max_workers=2, initializer=fns.set_mark, initargs=("ready",))
    p = PipelineBuilder().add_source(range(8)).to(pool).pipe(fns.read_mark).to(MAIN_PROCESS).add_sink(2).build()
    with p, p.auto_stop():
        assert sorted(p) == [(i, "ready") for i in range(8)]


def test_item_failures_follow_max_failures():
    def build(max_failures):
        return (
            PipelineBuilder()
            .add_source(range(8))
            .to(POOL2)
            .pipe(fns.fail_on_3, concurrency=2)
            .to(MAIN_PROCESS)
            .add_sink(2)
            .build(max_failures=max_failures)
        )

    with build(-1) as p, p.auto_stop():
        assert sorted(p) == [0, 1, 2, 4, 5, 6, 7]  # one bad item fails that item only
    with build(0) as p:
        with pytest.raises(PipelineFailure) as e, p.auto_stop():
            list(p)
    text = str(e.value) + repr(e.value.exceptions) + repr([x.__cause__ for x in e.value.exceptions])
    assert "Fused subprocess pipeline failed" in text and "subprocess_pipeline(fail_on_3)" in text
    assert "bad item 3" in text


@pytest.mark.parametrize(("op", "status"), [(fns.die_on_5, "exit status 7"), (fns.kill_self_on_5, "killed by SIGKILL")])
def test_a_dying_worker_is_named(op, status):
    p = PipelineBuilder().add_source(range(20)).to(POOL2).pipe(op).to(MAIN_PROCESS).add_sink(2).build()
    with p:
        t0 = time.monotonic()
        with pytest.raises(PipelineFailure) as e, p.auto_stop():
            list(p)
        assert time.monotonic() - t0 < 10
    text = repr(e.value.exceptions)
    assert "subprocess_pipeline(" in text and "exited unexpectedly" in text and status in text


def test_a_killed_parent_takes_its_workers():
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(HERE)!r})
        import region_fns as fns
        from spdl_go.pipeline import PipelineBuilder
        from spdl_go.pipeline.defs import MAIN_PROCESS, ProcessPoolExecutorConfig
        if __name__ == "__main__":
            p = (PipelineBuilder().add_source(range(1000)).to(ProcessPoolExecutorConfig(max_workers=2))
                 .pipe(fns.pid_of).to(MAIN_PROCESS).add_sink(2).build())
            pids = set()
            for _, pid in p:
                pids.add(pid)
                if len(pids) == 2:
                    break
            print(*pids, flush=True)
            time.sleep(60)
        """
    )
    before = set(os.listdir("/dev/shm"))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(x) for x in proc.stdout.readline().split()]
        assert len(workers) == 2
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        for w in workers:
            if not _gone(w):
                os.kill(w, signal.SIGKILL)
                pytest.fail(f"worker {w} outlived its parent")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert set(os.listdir("/dev/shm")) <= before


def test_closing_leaves_no_process_fd_or_mapping():
    gc.collect()
    fds = set(os.listdir("/proc/self/fd"))
    p = PipelineBuilder().add_source(range(6)).to(POOL2).pipe(fns.pid_of).to(MAIN_PROCESS).add_sink(2).build()
    with p.auto_stop():
        pids = {w for _, w in p}
    p.close()
    del p
    gc.collect()
    for w in pids:
        assert _gone(w)
    assert set(os.listdir("/proc/self/fd")) <= fds
    with open("/proc/self/maps") as f:
        assert not any("spdl-go-batches" in line for line in f)


def test_a_region_inside_run_pipeline_in_subprocess():
    cfg = PipelineBuilder().add_source(range(10)).to(POOL2).pipe(fns.square).to(MAIN_PROCESS).add_sink(2).get_config()
    with run_pipeline_in_subprocess(cfg, num_threads=2) as it:
        assert sorted(it) == [i * i for i in range(10)]


# ---- bad input ----------------------------------------------------------------

_OPEN = ProcessPoolExecutorConfig(max_workers=1)


@pytest.mark.parametrize(
    ("make", "exc", "match"),
    [
        (lambda b: b.to("process"), TypeError, "target must be"),
        (lambda b: b.to(concurrent.futures.ThreadPoolExecutor(1)), TypeError, "pipe\\(executor=...\\)"),
        (lambda b: b.to(_OPEN, buffer_size=0), ValueError, "buffer_size must be a positive int"),
        (lambda b: b.to(_OPEN).to(MAIN_PROCESS).get_config(), ValueError, "has no stages"),
        (lambda b: b.to(_OPEN).pipe(fns.square).get_config(), ValueError, "is not closed"),
        (
            lambda b: b.to(_OPEN).pipe(fns.square, output_order="input").to(MAIN_PROCESS).get_config(),
            ValueError,
            "output_order='input'",
        ),
        (lambda b: ProcessPoolExecutorConfig(mp_context="fork"), ValueError, "mp_context"),
        (lambda b: ProcessPoolExecutorConfig(max_workers=0), ValueError, "max_workers"),
        (lambda b: ProcessPoolExecutorConfig(initializer=3), TypeError, "initializer"),
    ],
)
def test_bad_regions_fail_where_they_are_given(make, exc, match):
    b = PipelineBuilder().add_source(range(3)).add_sink(2)
    with pytest.raises(exc, match=match):
        make(b)


def test_a_hand_built_config_is_checked_by_build_pipeline():
    cfg = PipelineConfig(SourceConfig(range(3)), [PlacementConfig(_OPEN), Pipe(fns.square)], SinkConfig(2))
    with pytest.raises(ValueError, match="is not closed"):
        build_pipeline(cfg)


@pytest.mark.parametrize(
    ("op", "match"),
    [
        (lambda x: x, "stage '<lambda>' of the region subprocess_pipeline\\(<lambda>\\) cannot be sent"),
        (region_unimportable.op, "failed loading the region's stages: ImportError: region_unimportable"),
    ],
)
def test_stages_a_worker_cannot_get_fail_the_build(op, match):
    b = PipelineBuilder().add_source(range(3)).to(POOL2).pipe(op).to(MAIN_PROCESS).add_sink(2)
    with pytest.raises((ValueError, RuntimeError), match=match):
        b.build()


def test_a_failing_initializer_fails_the_build():
    pool = ProcessPoolExecutorConfig(max_workers=1, initializer=fns.failing_init)
    b = PipelineBuilder().add_source(range(3)).to(pool).pipe(fns.square).to(MAIN_PROCESS).add_sink(2)
    with pytest.raises(RuntimeError, match="running the initializer: RuntimeError: no dataset here"):
        b.build()


def test_an_item_that_does_not_pickle_is_named():
    p = (
        PipelineBuilder()
        .add_source(range(3))
        .pipe(fns.make_unpicklable)
        .to(POOL2)
        .pipe(fns.square)
        .to(MAIN_PROCESS)
        .add_sink(2)
        .build()
    )
    with p, pytest.raises(PipelineFailure) as e, p.auto_stop():
        list(p)
    assert "cannot be sent to the region's worker processes" in repr(e.value.exceptions)


# ---- subinterpreters ----------------------------------------------------------


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="3.14 has subinterpreters")
def test_a_subinterpreter_region_needs_3_14():
    b = PipelineBuilder().add_source(range(3)).to(InterpreterPoolExecutorConfig()).pipe(fns.square)
    with pytest.raises(RuntimeError, match="needs Python 3.14"):
        b.to(MAIN_PROCESS).add_sink(2).get_config()


@pytest.mark.skipif(sys.version_info < (3, 14), reason="subinterpreter pools are new in 3.14")
def test_python_stages_run_in_subinterpreters():
    p = (
        PipelineBuilder()
        .add_source(range(16))
        .to(InterpreterPoolExecutorConfig(max_workers=2))
        .pipe(fns.interp_id, concurrency=2)
        .aggregate(4)
        .disaggregate()
        .to(MAIN_PROCESS)
        .add_sink(2)
        .build()
    )
    with p, p.auto_stop():
        out = list(p)
    assert sorted(x for x, _ in out) == list(range(16))
    assert all(i != 0 for _, i in out)  # never the main interpreter


@pytest.mark.skipif(sys.version_info < (3, 14), reason="subinterpreter pools are new in 3.14")
def test_a_stage_that_cannot_load_in_a_subinterpreter_fails_the_build():
    b = (
        PipelineBuilder()
        .add_source(range(3))
        .to(InterpreterPoolExecutorConfig(max_workers=1))
        .pipe(np.asarray)
        .to(MAIN_PROCESS)
        .add_sink(2)
    )
    with pytest.raises(ValueError, match="'asarray' cannot run in a subinterpreter"):
        b.build()


def _fails_at_5():
    for i in range(10):
        if i == 5:
            raise OSError("the source broke at 5")
        yield i


@pytest.mark.parametrize("before", [False, True])
def test_a_failing_source_fails_the_epoch_and_names_its_error(before):
    b = PipelineBuilder().add_source(_fails_at_5())
    if before:  # read through the pipeline of the stages before the region
        b = b.pipe(fns.plus_one)
    p = b.to(POOL2).pipe(fns.square).to(MAIN_PROCESS).add_sink(2).build()
    with p:
        t0 = time.monotonic()
        with pytest.raises(PipelineFailure) as e, p.auto_stop():
            list(p)
        assert time.monotonic() - t0 < 10
    assert "the source broke at 5" in repr(e.value.exceptions) + repr([x.__cause__ for x in e.value.exceptions])


def test_a_native_source_feeds_a_region():
    from spdl_go import sources

    p = PipelineBuilder().add_source(sources.arange(12)).to(POOL2).pipe(fns.square).to(MAIN_PROCESS).add_sink(2).build()
    with p, p.auto_stop():
        assert sorted(p) == [i * i for i in range(12)]


def test_stats_show_the_stages_before_in_and_after_a_region():
    """Pipeline.stats() lists the source, the stages before the region, the
    region's (summed over its workers, as they last reported), and those
    after, in order."""
    p = (
        PipelineBuilder()
        .add_source(range(40))
        .pipe(fns.plus_one, name="before")
        .to(POOL2, buffer_size=2)
        .pipe(fns.square, concurrency=2, name="inside")
        .aggregate(4)
        .to(MAIN_PROCESS)
        .pipe(fns.pid_of, name="after")
        .add_sink(3)
        .build(num_threads=2)
    )
    with p.auto_stop():
        assert sum(len(batch) for batch, _ in p) == 40  # each worker batches its own items
        mid = p.stats()
    names = [s.name for s in mid.stages]
    assert [n.split(" [")[0].split("(")[0] for n in names][:2] == ["before", "inside"], names
    assert names[1].endswith("[2 processes]") and names[-1] == "after", names
    inside = mid.stages[1]
    assert inside.items_in == 40 and inside.items_out == 40 and inside.concurrency == 4, inside
    assert mid.stages[0].items_out == 40 and mid.source.items_out == 40
    with p.auto_stop():
        assert sum(len(batch) for batch, _ in p) == 40
    # The second epoch's counters (each worker's pipeline is new each epoch).
    assert p.stats().stages[1].items_out == 40
    p.close()


def test_stats_of_a_first_region_and_adjacent_ones():
    p = (
        PipelineBuilder()
        .add_source(range(12))
        .to(POOL2)
        .pipe(fns.plus_one, name="one")
        .to(ProcessPoolExecutorConfig(max_workers=1))
        .pipe(fns.square, name="two")
        .to(MAIN_PROCESS)
        .add_sink(3)
        .build(num_threads=1)
    )
    with p.auto_stop():
        assert sorted(p) == [(i + 1) ** 2 for i in range(12)]
    st = p.stats()
    assert [s.name for s in st.stages] == ["one [2 processes]", "two [1 process]"], st.stages
    assert [s.items_out for s in st.stages] == [12, 12]
    p.close()
