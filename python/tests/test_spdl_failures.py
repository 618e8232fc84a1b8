"""SPDL's failure semantics: a failure keeps what was produced and is
raised as a PipelineFailure; per-stage and rate failure limits; the
pipeline's lifecycle (get_item, stop, auto_stop, add_sink)."""

import sys
import textwrap
import threading
import time
from fractions import Fraction

import pytest

from spdl_go import PipelineBuilder, PipelineError, PipelineFailure, ops


def make(src, *stages, buffer_size=3, **build):
    b = PipelineBuilder().add_source(src)
    for op, kw in stages:
        b.pipe(op, **kw)
    return b.add_sink(buffer_size).build(**build)


def read_all(p):
    """Reads items until the end or the failure; returns (items, failure)."""
    out = []
    try:
        for x in p:
            out.append(x)
    except PipelineFailure as e:
        return out, e
    return out, None


def run(p):
    """read_all, then closes the pipeline."""
    try:
        return read_all(p)
    finally:
        p.close()


def wait_failed(p, timeout=10.0):
    deadline = time.monotonic() + timeout
    while p.stats().state != "failed":
        assert time.monotonic() < deadline, "the pipeline never failed"
        time.sleep(0.005)


DISK = OSError("disk on fire")


def failing_source(n=3):
    yield from range(n)
    raise DISK


def fail_on(*bad, exc=KeyError):
    def op(x):
        if x in bad:
            raise exc(x)
        return x

    return op


# ---- a failure keeps what was produced ---------------------------------------
@pytest.mark.parametrize("stages", [(), ((lambda x: x, {"concurrency": 2, "output_order": "input"}),)])
def test_source_failure_delivers_items_then_raises_the_original(no_leaks, stages):
    p = make(failing_source(), *stages)
    out, failure = read_all(p)
    assert out == [0, 1, 2]
    assert isinstance(failure, PipelineFailure) and isinstance(failure, PipelineError)
    assert failure.exceptions[0] is DISK
    assert "disk on fire" in str(failure) and "source" in str(failure)
    # Later reads raise the same failure; stop() does not raise it again.
    with pytest.raises(PipelineFailure) as again:
        p.get_item()
    assert again.value is failure
    p.stop()
    p.close()


def test_stop_raises_a_failure_no_read_raised(no_leaks):
    p = make(failing_source(), buffer_size=8)
    p.start()
    wait_failed(p)
    assert p.get_item(timeout=5) == 0
    with pytest.raises(PipelineFailure) as e:
        p.stop()
    assert e.value.exceptions[0] is DISK
    p.stop()  # once only
    # What the failure left is still readable after stop, then the failure.
    assert [p.get_item(timeout=5), p.get_item(timeout=5)] == [1, 2]
    with pytest.raises(PipelineFailure):
        p.get_item(timeout=5)
    p.close()


def test_auto_stop_raises_the_failure_once(no_leaks):
    p = make(failing_source())
    out = []
    with pytest.raises(PipelineFailure):
        with p.auto_stop():
            for x in p:
                out.append(x)
    assert out == [0, 1, 2]
    p.close()


def test_auto_stop_raises_a_failure_left_unread(no_leaks):
    p = make(failing_source(), buffer_size=8)
    with pytest.raises(PipelineFailure):
        with p.auto_stop():
            wait_failed(p)
            assert p.get_item() == 0
    p.close()


@pytest.mark.parametrize("order", ["completion", "input"])
def test_stage_over_its_limit_delivers_what_succeeded_first(no_leaks, order):
    p = make(range(50), (fail_on(5), {"max_failures": 0, "name": "picky", "output_order": order}))
    out, failure = read_all(p)
    assert out == [0, 1, 2, 3, 4]
    (exc,) = failure.exceptions
    assert isinstance(exc, KeyError) and exc.args == (5,)
    assert 'stage "picky" exceeded max_failures=0' in str(failure)
    if sys.version_info >= (3, 11):
        assert "Pipeline stage: picky" in exc.__notes__
    p.close()


@pytest.mark.parametrize("order", ["completion", "input"])
def test_concurrent_stage_over_its_limit_keeps_the_order(no_leaks, order):
    p = make(range(200), (fail_on(20), {"max_failures": 0, "concurrency": 4, "output_order": order}))
    out, failure = read_all(p)
    assert failure is not None and 20 not in out
    if order == "input":
        assert out[:20] == list(range(20)) and out == sorted(out)
    else:
        # Every item taken before the failing one is delivered (and those
        # that other threads finished before it failed).
        assert set(range(20)) <= set(out)
    p.close()


def test_downstream_stages_drain_after_a_failure(no_leaks):
    p = (
        PipelineBuilder()
        .add_source(range(40))
        .pipe(fail_on(7), max_failures=0, name="picky")
        .pipe(lambda x: x * 10, concurrency=3, output_order="input")
        .aggregate(3)
        .add_sink()
        .build()
    )
    out, failure = read_all(p)
    assert out == [[0, 10, 20], [30, 40, 50], [60]]
    assert failure is not None
    p.close()


def test_native_stage_failure_is_a_runtime_error_in_the_group(no_leaks):
    p = make([[1, 2], [3, 4], [1, [2]], [5, 6]], (ops.to_tensor("int64"), {"max_failures": 0, "name": "tens"}))
    out, failure = read_all(p)
    assert [t.shape for t in out] == [(2,), (2,)]
    (exc,) = failure.exceptions
    assert type(exc) is RuntimeError and "tens" in str(exc)
    del out
    p.close()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="ExceptionGroup is 3.11+")
def test_except_star_and_subgroup(no_leaks):
    p = make(range(20), (fail_on(3, exc=ValueError), {"max_failures": 0}))
    code = textwrap.dedent(
        """
        caught = []
        try:
            list(p)
        except* ValueError as eg:
            caught.extend(eg.exceptions)
        """
    )
    scope = {"p": p}
    exec(code, scope)
    (exc,) = scope["caught"]
    assert isinstance(exc, ValueError) and exc.args == (3,)
    failure = p._take_failure()
    assert isinstance(failure, ExceptionGroup)  # noqa: F821 - 3.11+
    sub = failure.subgroup(ValueError)
    assert isinstance(sub, PipelineFailure) and sub.exceptions == failure.exceptions
    assert failure.subgroup(KeyError) is None
    p.close()


def test_exceptions_on_every_python(no_leaks):
    p = make(range(20), (fail_on(3), {"max_failures": 0}))
    with pytest.raises(PipelineFailure) as e:
        list(p)
    assert [type(x) for x in e.value.exceptions] == [KeyError]
    p.close()


# ---- failure limits ----------------------------------------------------------
def every(k):
    def op(x):
        if x % k == k - 1:
            raise ValueError(x)
        return x

    return op


def test_stage_limit_replaces_the_pipeline_limit(no_leaks):
    # 4 failures: within the stage's own limit, over the pipeline's 0.
    out, failure = run(make(range(20), (every(5), {"max_failures": 4}), max_failures=0))
    assert failure is None and len(out) == 16
    # A stage without its own limit is held to the pipeline's.
    out, failure = run(make(range(20), (every(5), {}), max_failures=2))
    assert failure is not None and "pipeline exceeded max_failures=2" in str(failure)
    # Explicitly unlimited wins over the pipeline's 0.
    out, failure = run(make(range(20), (every(5), {"max_failures": -1}), max_failures=0))
    assert failure is None and len(out) == 16


@pytest.mark.parametrize(
    "rate,k,fails",
    [
        (Fraction(1, 10), 5, True),  # 20% > 10%
        (Fraction(1, 4), 5, False),  # 20% < 25%
        (Fraction(1, 5), 5, False),  # equal is not over
        (Fraction(1, 1), 1, False),  # every call fails: 100% is not over 1
    ],
)
def test_stage_failure_rate(no_leaks, rate, k, fails):
    out, failure = run(make(range(300), (every(k), {"max_failures": rate, "name": "r"})))
    if fails:
        assert failure is not None and f'stage "r" exceeded max_failures={rate.numerator}/{rate.denominator}' in str(
            failure
        )
        assert len(out) >= 100 - 100 // k  # at least the probation's successes
    else:
        assert failure is None and len(out) == 300 - 300 // k


def test_rate_waits_for_100_calls(no_leaks):
    out, failure = run(make(range(60), (lambda x: x if x >= 50 else 1 / 0, {"max_failures": Fraction(1, 100)})))
    assert failure is None and out == list(range(50, 60))


def test_pipeline_failure_rate(no_leaks):
    out, failure = run(make(range(300), (every(5), {}), max_failures=Fraction(1, 10)))
    assert failure is not None and "pipeline exceeded max_failures=1/10" in str(failure)
    out, failure = run(make(range(300), (every(5), {}), max_failures=Fraction(1, 2)))
    assert failure is None and len(out) == 240


@pytest.mark.parametrize(
    "value,shown",
    [
        (Fraction(3, 2), "Fraction(3, 2)"),
        (Fraction(0), "Fraction(0, 1)"),
        (Fraction(-1, 2), "Fraction(-1, 2)"),
        (0.5, "0.5"),
        (True, "True"),
        ("3", "'3'"),
    ],
)
def test_bad_max_failures_named_at_the_call(value, shown):
    want = f"max_failures must be an int or a fractions.Fraction in (0, 1], got {shown}"
    with pytest.raises(ValueError, match=r"^pipe: " + want.replace("(", r"\(").replace(")", r"\)")):
        PipelineBuilder().add_source([1]).pipe(str, max_failures=value)
    with pytest.raises(ValueError, match=r"^build: " + want.replace("(", r"\(").replace(")", r"\)")):
        PipelineBuilder().add_source([1]).add_sink().build(max_failures=value)


# ---- lifecycle ---------------------------------------------------------------
def test_build_needs_a_sink():
    with pytest.raises(RuntimeError, match=r"Sink is not set. Did you call `add_sink`\?"):
        PipelineBuilder().add_source([1]).build()
    with pytest.raises(ValueError, match="Sink is already set"):
        PipelineBuilder().add_source([1]).add_sink().add_sink()


def test_get_item_starts_then_eof(no_leaks):
    p = make(range(3))
    assert [p.get_item(timeout=5) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(EOFError):
        p.get_item(timeout=5)
    with pytest.raises(EOFError):
        p.get_item(timeout=5)
    assert list(p) == []  # one pass (continuous=False): a new iterator ends at once
    p.close()


def test_after_stop_the_sink_then_eof(no_leaks):
    p = make(range(100), buffer_size=4)
    p.start()
    deadline = time.monotonic() + 10
    while p.stats().sink_len < 4:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    p.stop()
    got = []
    with pytest.raises(EOFError):
        while True:
            got.append(p.get_item(timeout=5))
    assert got == [0, 1, 2, 3]
    p.close()


def test_get_item_timeout(no_leaks):
    release = threading.Event()
    p = make([1], (lambda x: release.wait(10) and x, {}))
    with pytest.raises(TimeoutError):
        p.get_item(timeout=0.05)
    release.set()
    assert p.get_item(timeout=5) == 1
    p.close()


def test_start_stop_auto_stop_timeouts(no_leaks):
    p = make(range(3))
    p.start(timeout=5)
    assert p.get_item(timeout=5) == 0
    p.stop(timeout=5)
    with p.auto_stop(timeout=5):
        assert list(p.get_iterator(timeout=5)) == [0, 1, 2]
    release = threading.Event()
    p2 = make([1, 2], (lambda x: release.wait(10) and x, {}))
    p2.start()
    time.sleep(0.05)  # the stage is inside its call
    with pytest.raises(TimeoutError, match="stop"):
        p2.stop(timeout=0.05)
    release.set()
    p2.stop(timeout=10)
    with pytest.raises(ValueError, match="timeout"):
        p.stop(timeout=-1)
    p.close()
    p2.close()
