"""Process-level behaviour: fork, Ctrl-C, interpreter exit, error reports."""

import os
import signal
import subprocess
import sys
import textwrap
import time

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
    assert "stage \"parse\"" in err
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
