"""Pipelines in a worker process (SPDL's iterate_in_subprocess and
run_pipeline_in_subprocess): epochs, failures, a dying worker or parent, and
tensors that cross through shared memory without a copy or a leak."""

from __future__ import annotations

import gc
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import subprocess_fns as fns

from spdl_go.pipeline import PipelineBuilder, PipelineFailure, iterate_in_subprocess, run_pipeline_in_subprocess

HERE = Path(__file__).resolve().parent


def _memfd_maps() -> int:
    with open("/proc/self/maps") as f:
        return sum("spdl-go-batches" in line for line in f)


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _in_shared_memory(addr: int) -> bool:
    with open("/proc/self/maps") as f:
        for line in f:
            if "spdl-go-batches" in line:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                if lo <= addr < hi:
                    return True
    return False


def test_epochs_reuse_one_worker():
    with iterate_in_subprocess(fns.numbers) as it:
        assert list(it) == [1, "two", {"three": 3.0}]
        assert list(it) == [1, "two", {"three": 3.0}]
    with iterate_in_subprocess(fns.pid_per_item) as it:
        pids = list(it) + list(it)
    assert len(set(pids)) == 1 and pids[0] != os.getpid()


def test_a_generator_gives_one_epoch():
    # As in SPDL: fn() is called once; iter() of a generator is itself.
    with iterate_in_subprocess(fns.one_shot) as it:
        assert list(it) == [0, 1, 2]
        assert list(it) == []


def test_leaving_an_epoch_early_then_a_full_one():
    with iterate_in_subprocess(fns.batches, buffer_size=2) as it:
        for i, _b in enumerate(it):
            if i == 2:
                break
        full = list(it)
        assert len(full) == 9  # 8 batches, then the arena's statistics
        assert [int(np.from_dlpack(b["images"])[0, 0, 0, 0]) for b in full[:8]] == [i * 4 for i in range(8)]
        del full, _b
        gc.collect()


def test_tensors_cross_without_a_copy_and_come_back():
    """Batches live in the shared memory; dropped, their buffers return to
    the worker's pool, so three epochs carve no more than one; a tensor held
    over later epochs keeps its content."""
    with iterate_in_subprocess(fns.batches, buffer_size=2) as it:
        epochs = []
        held = None
        for e in range(3):
            items = list(it)
            stats = items.pop()
            epochs.append(stats)
            for b in items:
                t = b["images"]
                assert t.shape == (4, 64, 64, 4) and t.dtype == "uint8"
                assert _in_shared_memory(t.data_ptr), "the batch was copied, not shared"
            if e == 0:
                held = items[3]["images"]
                want = np.from_dlpack(held).copy()
            del items, b, t
            gc.collect()
        assert np.array_equal(np.from_dlpack(held), want), "a lent buffer was reused while the parent held it"
    assert all(s["lends"] > 0 and s["misses"] == 0 for s in epochs), epochs
    # Later epochs reuse buffers the parent gave back (the pipeline's own
    # prefetch differs a little between epochs).
    assert epochs[2]["carved"] <= epochs[0]["carved"] + 4 * (64 << 10), epochs
    del held
    gc.collect()


def test_copy_when_shared_memory_is_off():
    with iterate_in_subprocess(fns.batches, shm_bytes=0) as it:
        items = list(it)
    stats = items.pop()
    assert stats["size"] == 0 and stats["lends"] == 0
    a = items[5]["images"]
    assert np.from_dlpack(a).shape == (4, 64, 64, 4) and int(np.from_dlpack(a)[0, 0, 0, 0]) == 20


def test_initializers_and_their_failures():
    with iterate_in_subprocess(fns.marker, initializer=fns.set_marker) as it:
        assert list(it) == ["set"]
    with pytest.raises(RuntimeError, match=r"The worker subprocess quit\. Initializer failed: OSError: cannot open"):
        iterate_in_subprocess(fns.marker, initializer=[fns.set_marker, fns.failing_initializer])
    with pytest.raises(RuntimeError, match=r"quit\. Failed to create the iterable: ZeroDivisionError: no iterable"):
        iterate_in_subprocess(fns.raises)


def test_a_failing_iterator_ends_the_worker():
    it = iterate_in_subprocess(fns.fails_at_2)
    got = []
    with pytest.raises(RuntimeError, match=r"The worker subprocess quit\. Failed to fetch the next item: 'item 2") as e:
        for x in it:
            got.append(x)
    assert got == [0, 1]
    assert isinstance(e.value.__cause__, KeyError)
    with pytest.raises(RuntimeError, match="Cannot iterate again"):
        iter(it)


def test_bad_arguments():
    with pytest.raises(ValueError, match="'fork'"):
        iterate_in_subprocess(fns.numbers, mp_context="fork")
    with pytest.raises(ValueError, match="buffer_size"):
        iterate_in_subprocess(fns.numbers, buffer_size=0)
    with pytest.raises(ValueError, match="shm_bytes"):
        iterate_in_subprocess(fns.numbers, shm_bytes=100)
    with pytest.raises(ValueError, match="pickled"):
        iterate_in_subprocess(lambda: [1])


def test_timeout():
    # The timeout covers the start too: long enough for a loaded machine.
    it = iterate_in_subprocess(fns.slow, timeout=5)
    got = []
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"did not produce any data for 5\.00 seconds"):
        for x in it:
            got.append(x)
    assert got == [1] and time.monotonic() - t0 < 15


@pytest.mark.parametrize(
    "sig, status",
    [
        (signal.SIGKILL, "killed by SIGKILL"),
        (signal.SIGTERM, "killed by SIGTERM"),
        # Go's handler takes a SIGSEGV, prints the goroutines and ends the
        # process its own way.
        (signal.SIGSEGV, "(killed by SIG[A-Z]+|exit status 2)"),
    ],
)
def test_a_killed_worker_is_reported_and_its_batches_stay_valid(sig, status):
    # The first worker of a process starts multiprocessing's resource
    # tracker, whose descriptors stay: start one before counting.
    iterate_in_subprocess(fns.numbers).close()
    gc.collect()
    fds, maps = _fds(), _memfd_maps()
    it = iterate_in_subprocess(fns.unlimited_batches, buffer_size=2)
    gen = iter(it)
    first = next(gen)
    want = np.from_dlpack(first["images"]).copy()
    os.kill(first["pid"], sig)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=f"exited unexpectedly \\({status}\\)"):
        for item in gen:
            del item
    # Go's handler prints every goroutine before a SIGSEGV ends the process:
    # the death itself can take a while on a loaded machine.
    assert time.monotonic() - t0 < (2 if sig != signal.SIGSEGV else 30), "the death took more than a second to see"
    assert np.array_equal(np.from_dlpack(first["images"]), want)
    with pytest.raises(RuntimeError, match="Cannot iterate again"):
        iter(it)
    del first, gen, it
    gc.collect()
    # No descriptor, and once the last tensor is gone no mapping, is left.
    assert _fds() <= fds, {f: os.readlink(f"/proc/self/fd/{f}") for f in _fds() - fds}
    assert _memfd_maps() <= maps


def test_a_killed_parent_takes_its_worker():
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(HERE)!r})
        import subprocess_fns as fns
        from spdl_go.pipeline import iterate_in_subprocess
        if __name__ == "__main__":
            it = iterate_in_subprocess(fns.unlimited_batches, buffer_size=2)
            b = next(iter(it))
            print(b["pid"], flush=True)
            time.sleep(60)
        """
    )
    before = set(os.listdir("/dev/shm"))
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        worker = int(p.stdout.readline())
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.kill(worker, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(worker, signal.SIGKILL)
            pytest.fail("the worker outlived its parent")
    finally:
        if p.poll() is None:
            p.kill()
    assert set(os.listdir("/dev/shm")) <= before


def test_run_pipeline_in_subprocess_epochs_and_stats():
    cfg = PipelineBuilder().add_source(range(10)).pipe(fns.square, concurrency=2).add_sink(3).get_config()
    with run_pipeline_in_subprocess(cfg, num_threads=2) as it:
        assert it.stats() is None  # no epoch yet
        assert sorted(it) == [x * x for x in range(10)]
        assert sorted(it) == [x * x for x in range(10)]
        st = it.stats()
    (stage,) = [s for s in st.stages if "square" in s.name]
    assert stage.items_out == 10


def test_run_pipeline_in_subprocess_failure_names_the_stage():
    cfg = PipelineBuilder().add_source(range(10)).pipe(fns.fail_on_3).add_sink(3).get_config()
    it = run_pipeline_in_subprocess(cfg, num_threads=1, max_failures=0)
    with pytest.raises(RuntimeError, match="The worker subprocess quit") as e:
        list(it)
    cause = e.value.__cause__
    assert isinstance(cause, PipelineFailure)
    assert "bad item 3" in str(cause.exceptions[0])
    if sys.version_info >= (3, 11):  # exception notes name the stage
        assert any("fail_on_3" in n for n in cause.exceptions[0].__notes__)


def test_run_pipeline_in_subprocess_copies_the_random_state():
    random.seed(1234)
    cfg = PipelineBuilder().add_source([0]).pipe(fns.rand).add_sink(1).get_config()
    with run_pipeline_in_subprocess(cfg, num_threads=1) as it:
        (got,) = list(it)
    assert got == random.random()


def test_run_pipeline_in_subprocess_checks_what_it_sends():
    cfg = PipelineBuilder().add_source(range(3)).pipe(lambda x: x, name="inline").add_sink(1).get_config()
    with pytest.raises(ValueError, match=r"stage 0 \(inline.*cannot be sent to the worker"):
        run_pipeline_in_subprocess(cfg, num_threads=1)
    builder = PipelineBuilder().add_source(range(3)).pipe(fns.square).add_sink(1)
    with pytest.warns(DeprecationWarning, match="get_config"):
        it = run_pipeline_in_subprocess(builder, num_threads=1)
    with it:
        assert sorted(it) == [0, 1, 4]


def test_forkserver():
    with iterate_in_subprocess(fns.batches, mp_context="forkserver") as it:
        items = list(it)
    assert len(items) == 9 and items[-1]["lends"] > 0
    assert int(np.from_dlpack(items[3]["images"])[0, 0, 0, 0]) == 12


def test_run_pipeline_in_subprocess_continuous_source_reshuffles():
    """A continuous source is one pipeline kept running in the worker: each
    epoch is the next epoch of the source (a native sampler reshuffles), the
    same epochs as in the parent."""
    from spdl_go import sources

    def cfg():
        src = sources.sampler(16, shuffle=True, seed=3)
        return PipelineBuilder().add_source(src, continuous=True).pipe(fns.square).add_sink(4).get_config()

    from spdl_go.pipeline import build_pipeline

    here = build_pipeline(cfg(), num_threads=1)
    want = [list(here), list(here)]
    here.stop()
    with run_pipeline_in_subprocess(cfg(), num_threads=1) as it:
        got = [list(it), list(it)]
    assert sorted(got[0]) == sorted(x * x for x in range(16))
    assert got[0] != got[1], "the second epoch was not reshuffled"
    assert [sorted(e) for e in got] == [sorted(e) for e in want]


def test_numpy_arrays_cross_through_shared_memory():
    """As SPDL's arena does: arrays of 4 KiB or more are copied once, in
    the worker, into shared memory, and arrive as numpy arrays over it;
    smaller ones and those DLPack cannot describe are pickled."""
    gc.collect()
    maps = _memfd_maps()
    with iterate_in_subprocess(fns.arrays) as it:
        (got,) = list(it)
    (want,) = fns.arrays()
    for k, w in want.items():
        g = got[k]
        assert type(g) is np.ndarray and g.dtype == w.dtype and g.shape == w.shape, k
        if w.dtype == object:
            assert list(g) == list(w)
        else:
            assert np.array_equal(g, w), k
        shared = _in_shared_memory(g.ctypes.data) if w.dtype != object else False
        assert shared == (k in ("u8", "f32", "strided", "bool", "c64")), k
    del got, g
    gc.collect()
    assert _memfd_maps() <= maps


def test_resumable_source_tracks_a_pipeline_in_a_worker(tmp_path):
    import spdl_go
    from spdl_go import sources

    for i in range(33):
        (tmp_path / f"{i:02d}.bin").write_bytes(b"x")

    def make():
        return spdl_go.ResumableSource(sources.files(str(tmp_path), shuffle=True, seed=1, with_index=True))

    def run(src):
        cfg = PipelineBuilder().add_source(src.source, continuous=True).aggregate(4).add_sink(2).get_config()
        return run_pipeline_in_subprocess(cfg, num_threads=2, buffer_size=2)

    def idx(batch):
        return [i for _, i in batch]

    full = make()
    with run(full) as it:
        whole = [i for b in full.track(it, index=idx) for i in idx(b)]
    assert sorted(whole) == list(range(33))

    part = make()
    with run(part) as it:
        seen = []
        for k, b in enumerate(part.track(it, index=idx)):
            seen += idx(b)
            if k == 1:
                break
        state = part.state_dict()
        # Left early, with batches on their way: the next track() reads on
        # in the same epoch, and they are not lost.
        more = [i for b in part.track(it, index=idx) for i in idx(b)]
    assert seen + more == whole

    again = make()
    again.load_state_dict(state)
    with run(again) as it:
        rest = [i for b in again.track(it, index=idx) for i in idx(b)]
    assert seen + rest == whole


@pytest.mark.parametrize(
    "make",
    [
        fns.arrow_ints,
        fns.arrow_nested,
        fns.arrow_from_the_engine,
    ],
)
def test_arrow_arrays_cross_through_shared_memory(make):
    pa = pytest.importorskip("pyarrow")
    # The engine's own Arrow buffers are made in the shared memory: the
    # worker lends them as they are (the initializer fails any copy).
    init = fns.forbid_arrow_copies if make is fns.arrow_from_the_engine else None
    with iterate_in_subprocess(make, initializer=init) as it:
        got = list(it)
    want = list(make())
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        w = pa.array(w) if not isinstance(w, pa.Array) else w
        assert isinstance(g, pa.Array) and g.equals(w)
        # Every buffer of 4 KiB or more lies in the shared memory.
        big = [b for b in g.buffers() if b is not None and b.size >= 4096]
        assert big and all(_in_shared_memory(b.address) for b in big)
    del got
    gc.collect()


def _index(item) -> int:
    return fns.batch_index(item if not isinstance(item, dict) else item["images"])


@pytest.mark.parametrize("buffer_size", [1, 2, 3, 16])
def test_a_pipelines_tensors_are_sent_from_go(buffer_size):
    """run_pipeline_in_subprocess: a batch that is one tensor goes out from
    the worker's Go (its Python never sees it; the initializer checks),
    anything else is pickled by its Python, in the pipeline's order; a
    stats query mid-epoch is answered; every batch lies in the shared
    memory."""
    cfg = fns.batch_config(fns.odd_in_a_dict)
    with run_pipeline_in_subprocess(
        cfg, num_threads=2, buffer_size=buffer_size, initializer=fns.forbid_python_tensor_sends
    ) as it:
        for _ in range(2):
            got = []
            for i, item in enumerate(it):
                got.append(item)
                if i == 3:
                    assert it.stats() is not None
            assert [_index(x) for x in got] == list(range(10))
            assert [isinstance(x, dict) for x in got] == [k % 2 == 1 for k in range(10)]
            for x in got:
                t = x["images"] if isinstance(x, dict) else x
                assert t.shape == (4, 64, 64, 4) and _in_shared_memory(t.data_ptr)
                assert int(np.from_dlpack(t)[3, 63, 63, 3]) == (_index(x) * 4 + 3) % 251
            del got, x, t, item
            gc.collect()


def test_a_served_epoch_left_early_then_full_ones():
    cfg = fns.batch_config(fns.odd_in_a_dict)
    with run_pipeline_in_subprocess(cfg, num_threads=2, buffer_size=2) as it:
        for i, _x in enumerate(it):
            if i == 1:
                break
        assert [_index(x) for x in it] == list(range(10))
        assert [_index(x) for x in it] == list(range(10))


def test_a_served_pipeline_failure_comes_after_its_batches():
    cfg = fns.batch_config(fns.fail_on_batch_5)
    it = run_pipeline_in_subprocess(cfg, num_threads=2, max_failures=0, buffer_size=3)
    got = []
    with pytest.raises(RuntimeError, match="The worker subprocess quit") as e:
        for x in it:
            got.append(_index(x))
    assert got == [0, 1, 2, 3, 4]
    assert isinstance(e.value.__cause__, PipelineFailure) and "bad batch 5" in str(e.value.__cause__.exceptions[0])
