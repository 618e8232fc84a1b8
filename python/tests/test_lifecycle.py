"""Process-level behaviour: fork, Ctrl-C, interpreter exit, error reports."""

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


def test_ctrl_c_while_waiting_in_get_item():
    code = """
        import sys, time
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
        forever = threading.Event()
        def f(x):
            if x == 1:
                forever.wait()
            return x
        p = PipelineBuilder().add_source(range(5)).pipe(f).add_sink().build()
        p.start()
        print(p.get_item(timeout=10), flush=True)
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
