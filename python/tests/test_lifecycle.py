"""Process-level behaviour: fork, Ctrl-C, interpreter exit, error reports."""

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import pytest

from spdl_go import PipelineBuilder, PipelineError


def run_python(code: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, **kw
    )


def test_python_error_report_names_item_and_keeps_traceback():
    def parse(s):
        return int(s)

    p = PipelineBuilder().add_source(["1", "two", "3"]).pipe(parse, name="parse").add_sink().build()
    assert sorted(p) == [1, 3]
    (err,) = p.stats().recent_errors
    assert 'stage "parse"' in err
    assert "item 'two'" in err
    assert "ValueError: invalid literal for int()" in err
    assert "Traceback (most recent call last)" in err and "in parse" in err
    p.close()


def test_fatal_error_message_names_stage_item_and_limit():
    p = (
        PipelineBuilder()
        .add_source([{"path": "a.jpg"}, {"path": "b.jpg"}])
        .pipe(lambda d: d["label"], name="label", max_failures=1)
        .add_sink()
        .build()
    )
    with pytest.raises(PipelineError) as ei:
        list(p)
    msg = str(ei.value)
    assert 'stage "label"' in msg and "max_failures=1" in msg
    assert "{'path': 'b.jpg'}" in msg and "KeyError: 'label'" in msg
    p.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_use_after_fork_raises_clearly():
    code = """
        import os, sys
        from spdl_go import PipelineBuilder
        p = PipelineBuilder().add_source(range(3)).add_sink().build()
        assert list(p) == [0, 1, 2]
        pid = os.fork()
        if pid == 0:
            try:
                list(p)
            except RuntimeError as e:
                os._exit(0 if "fork" in str(e) else 2)
            os._exit(3)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """
    r = run_python(code, timeout=60)
    assert r.returncode == 0, r.stderr


def test_interpreter_exit_with_running_pipeline():
    code = """
        import time
        from spdl_go import PipelineBuilder, sources
        def slow(x):
            time.sleep(0.01)
            return x
        p = PipelineBuilder().add_source(range(10**6)).pipe(slow, concurrency=4).add_sink().build()
        p.start()
        p.get_item(timeout=10)
        print("exiting")
    """
    t0 = time.monotonic()
    r = run_python(code, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "exiting" in r.stdout
    assert time.monotonic() - t0 < 30


# A process started in the background by a non-interactive shell (as CI
# may be) inherits SIGINT ignored, and Python then installs no
# KeyboardInterrupt handler: the children that test Ctrl-C install it.
_CTRL_C = "signal.signal(signal.SIGINT, signal.default_int_handler)"


def test_ctrl_c_while_waiting_in_get_item():
    code = f"""
        import signal, sys, time
        {_CTRL_C}
        from spdl_go import PipelineBuilder
        p = PipelineBuilder().add_source(range(3)).pipe(lambda x: time.sleep(2)).add_sink().build()
        print("waiting", flush=True)
        try:
            with p.auto_stop():
                p.get_item()
        except KeyboardInterrupt:
            print("interrupted", p.stats().state, flush=True)
            sys.exit(0)
        sys.exit(4)
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "waiting"
    time.sleep(0.5)  # inside get_item, long before the first item is ready
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "interrupted stopped" in out


def test_stage_timeout_abandons_a_stuck_python_call(no_leaks):
    release = threading.Event()
    dropped = threading.Event()

    class Late:
        pass

    def stuck_on_3(x):
        if x == 3:
            release.wait(60)
            # Only collected once the engine has dropped the abandoned result.
            late = Late()
            weakref.finalize(late, dropped.set)
            return late
        return x

    p = PipelineBuilder().add_source(range(10)).pipe(stuck_on_3, concurrency=2, timeout=0.2).add_sink(2).build()
    try:
        assert sorted(p) == [0, 1, 2, 4, 5, 6, 7, 8, 9]
        s = p.stats()
        assert (s.stages[0].failures, s.stages[0].abandoned) == (1, 1), s.format()
        assert "timed out after 200ms" in s.recent_errors[0] and "abandoned" in s.recent_errors[0]
        t0 = time.monotonic()
        p.stop()
        assert time.monotonic() - t0 < 5
    finally:
        p.close()
        release.set()
        # The abandoned call returns now, and the engine must drop its result.
        assert dropped.wait(10), "the abandoned call's result was never released"


def test_interpreter_exit_with_a_python_call_stuck_forever():
    # No stage timeout: exit gives the call 2 s, then leaves it to the OS.
    code = """
        import threading
        from spdl_go import PipelineBuilder
        forever, stuck = threading.Event(), threading.Event()
        def f(x):
            if x == 1:
                stuck.set()
                forever.wait()
            return x
        p = PipelineBuilder().add_source(range(5)).pipe(f).add_sink().build()
        p.start()
        print(p.get_item(timeout=10), flush=True)
        assert stuck.wait(10)  # exit while the call is stuck, not before it starts
    """
    t0 = time.monotonic()
    r = run_python(code, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0"
    assert "had not returned" in r.stderr
    assert time.monotonic() - t0 < 30


def test_callables_kept_alive_by_the_pipeline(no_leaks):
    # The builder's only reference to a stage's function and to the source
    # is the pipeline itself; collecting garbage must not free them.
    import gc
    import weakref

    def make():
        def double(x):
            return x * 2

        src = iter(range(50))
        b = PipelineBuilder().add_source(list(src)).pipe(double, concurrency=2, output_order="input")
        return b.add_sink().build(), weakref.ref(double)

    p, ref = make()
    gc.collect()
    assert ref() is not None
    assert list(p) == [2 * x for x in range(50)]
    p.close()
    del p
    gc.collect()
    assert ref() is None, "a closed pipeline keeps its stage function alive"


def test_unsupported_value_for_a_native_stage_fails_its_batch_only(no_leaks):
    from spdl_go import ops

    p = (
        PipelineBuilder()
        .add_source(range(8))
        .pipe(lambda x: object() if x == 5 else x, output_order="input")
        .aggregate(4)
        .pipe(ops.collate(numbers="tensor"))
        .add_sink()
        .build()
    )
    import numpy as np

    batches = [np.from_dlpack(b).tolist() for b in p]
    assert batches == [[0, 1, 2, 3]]
    (err,) = p.stats().recent_errors
    assert "collate" in err and "sample 1 is <python object" in err
    p.close()


# How each exit case leaves the loop; {wrap} opens the block it runs in.
_STUCK_EXIT = """
import os, signal, sys, threading, time, contextlib
signal.signal(signal.SIGINT, signal.default_int_handler)  # see _CTRL_C
from spdl_go import PipelineBuilder

where, how, wrap = sys.argv[1:4]

def work(x):
    if where == "stage" and x >= 2:
        time.sleep(1000)  # a call that never returns
    if where == "cpu" and x >= 2:
        n = 0
        while True:  # CPU-bound Python: it holds the GIL whenever it can
            n += 1
    return x

def source():
    i = 0
    while True:
        if where == "source" and i >= 3:
            time.sleep(1000)
        yield i
        i += 1

if how == "sigterm":
    def on_term(*_):
        raise SystemExit("terminated")
    signal.signal(signal.SIGTERM, on_term)
p = PipelineBuilder().add_source(source()).pipe(work, concurrency=2).add_sink(2).build(num_threads=2)
block = p.auto_stop() if wrap == "auto_stop" else contextlib.nullcontext()
try:
    with block:
        for i, x in enumerate(p):
            if i == 1:
                print("ready", flush=True)
                if how == "raise":
                    raise ValueError("boom")
                if how == "exit":
                    sys.exit(3)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    raise
"""


@pytest.mark.parametrize(
    ("where", "how", "wrap"),
    [
        ("stage", "raise", "auto_stop"),
        ("stage", "exit", "plain"),
        ("stage", "sigint", "auto_stop"),
        ("cpu", "sigint", "auto_stop"),
        ("cpu", "raise", "plain"),
        ("source", "sigterm", "auto_stop"),
        ("stage", "sigterm", "plain"),
    ],
)
def test_process_exits_promptly_with_a_stuck_python_call(where, how, wrap):
    # The loop is left while a Python call (a stage's, or the source's
    # next()) never returns: stop() abandons it after its grace, exit does
    # not wait for it again, and the process ends within a few seconds.
    proc = subprocess.Popen(
        [sys.executable, "-c", _STUCK_EXIT, where, how, wrap],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)  # the stuck calls have begun
        t0 = time.monotonic()
        if how in ("sigint", "sigterm"):
            proc.send_signal(signal.SIGINT if how == "sigint" else signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        proc.kill()
    want_rc = {"raise": 1, "exit": 3, "sigint": 130 if sys.version_info >= (3, 12) else 1, "sigterm": 1}[how]
    assert proc.returncode in (want_rc, 1, -signal.SIGINT), err
    if how == "sigint":
        assert "interrupted" in out, err
    # 2 s of grace for the stuck calls, then exit; generous for loaded CI.
    assert took < 10, f"exit took {took:.1f} s\n{err}"
    if wrap == "auto_stop":
        stuck = "the source's next item" if where == "source" else 'of stage "work"'
        assert stuck in err and "abandoned" in err, err


def test_stop_abandons_a_stuck_call_and_names_it(caplog):
    release = threading.Event()

    def f(x):
        if x == 1:
            release.wait(60)
        return x

    p = PipelineBuilder().add_source(range(5)).pipe(f, concurrency=2).add_sink(1).build()
    try:
        p.start()
        assert p.get_item(timeout=10) in (0, 2)
        time.sleep(0.2)
        t0 = time.monotonic()
        with caplog.at_level("WARNING", logger="spdl_go"):
            p.stop()
        assert time.monotonic() - t0 < 10
        assert any('1 call of stage "f"' in r.getMessage() and "abandoned" in r.getMessage() for r in caplog.records)
        t0 = time.monotonic()
        p.stop()  # the grace was spent: no second wait
        assert time.monotonic() - t0 < 1
    finally:
        release.set()
        p.close()


@pytest.mark.parametrize("continuous", [False, True])
def test_stop_from_another_thread_ends_the_loop(continuous):
    # SPDL: stop() from another thread ends the iteration; get_item then
    # raises EOFError (and with continuous=True starts no next epoch).
    def work(x):
        time.sleep(0.002)
        return x

    for _ in range(10):
        p = (
            PipelineBuilder()
            .add_source(range(10**6), continuous=continuous)
            .pipe(work, concurrency=4)
            .add_sink(4)
            .build(num_threads=4)
        )
        try:
            timer = threading.Timer(0.1, p.stop)
            timer.start()
            n = sum(1 for _ in p)
            assert 0 < n < 10**6
            timer.join()
            with pytest.raises(EOFError):
                p.get_item(timeout=5)
        finally:
            p.close()


def test_dropping_a_pipeline_mid_epoch_releases_its_tensors():
    # No stop() or close(): the pipeline is collected while a Python stage
    # has tensors in flight. Its callbacks are gone by the time some calls
    # arrive; their arguments must still be released.
    import numpy as np

    import spdl_go
    from spdl_go import ops

    gc.collect()
    before = spdl_go.memory_stats()["live_tensors"]
    for _ in range(25):
        p = (
            PipelineBuilder()
            .add_source(list(range(40)))
            .pipe(lambda x: [x, x], concurrency=2, output_order="input")
            .pipe(ops.to_tensor("int64"), concurrency=2, output_order="input")
            .pipe(lambda t: int(np.from_dlpack(t)[0]))
            .add_sink(2)
            .build(num_threads=2)
        )
        for n, _ in enumerate(p):
            if n >= 15:
                break
        del p
        gc.collect()
    deadline = time.monotonic() + 10
    while spdl_go.memory_stats()["live_tensors"] > before and time.monotonic() < deadline:
        time.sleep(0.1)
        gc.collect()
    assert spdl_go.memory_stats()["live_tensors"] <= before
