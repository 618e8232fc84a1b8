"""Behaviour of the engine as seen from Python."""

import threading
import time

import pytest

import spdl_go
from spdl_go import PipelineBuilder, PipelineError, ops, sources


def build(src, *stages, buffer_size=3, continuous=False, **kw):
    b = PipelineBuilder().add_source(src, continuous=continuous)
    for st in stages:
        kind, args, opts = st
        getattr(b, kind)(*args, **opts)
    return b.add_sink(buffer_size).build(**kw)


def pipe(op, **kw):
    return ("pipe", (op,), kw)


def agg(n, **kw):
    return ("aggregate", (n,), kw)


def test_docstring_example():
    p = (
        PipelineBuilder()
        .add_source(range(10))
        .pipe(lambda x: x * x, concurrency=4, output_order="input")
        .aggregate(4)
        .add_sink(buffer_size=2)
        .build(num_threads=4)
    )
    assert list(p) == [[0, 1, 4, 9], [16, 25, 36, 49], [64, 81]]


@pytest.mark.parametrize(
    "order,concurrency",
    [("input", 1), ("input", 4), ("completion", 1), ("completion", 4)],
)
def test_output_order(order, concurrency, no_leaks):
    def slow_square(x):
        time.sleep(0.002 * ((x * 7) % 5))  # finish out of order
        return x * x

    p = build(range(40), pipe(slow_square, concurrency=concurrency, output_order=order))
    got = list(p)
    want = [x * x for x in range(40)]
    if order == "input":
        assert got == want
    else:
        assert sorted(got) == want
    p.close()


@pytest.mark.parametrize("concurrency", [1, 3, 6])
def test_concurrency_limit_respected(concurrency):
    lock = threading.Lock()
    active = 0
    peak = 0

    def work(x):
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.01)  # releases the GIL, so calls can overlap
        with lock:
            active -= 1
        return x

    p = build(range(60), pipe(work, concurrency=concurrency))
    assert sorted(p) == list(range(60))
    assert peak == concurrency


def test_num_threads_caps_all_stages():
    lock = threading.Lock()
    active = peak = 0

    def work(x):
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.005)
        with lock:
            active -= 1
        return x

    p = build(range(60), pipe(work, concurrency=4), pipe(work, concurrency=4), num_threads=3)
    assert sorted(p) == list(range(60))
    assert peak <= 3


@pytest.mark.parametrize(
    "n,size,drop_last,want_sizes",
    [
        (10, 3, False, [3, 3, 3, 1]),
        (10, 3, True, [3, 3, 3]),
        (9, 3, True, [3, 3, 3]),
        (2, 5, False, [2]),
        (2, 5, True, []),
    ],
)
def test_aggregate(n, size, drop_last, want_sizes, no_leaks):
    got = list(build(range(n), agg(size, drop_last=drop_last)))
    assert [len(b) for b in got] == want_sizes
    assert [x for b in got for x in b] == list(range(sum(want_sizes)))


def test_disaggregate_after_python_stage(no_leaks):
    p = PipelineBuilder().add_source(range(5)).pipe(lambda x: [x] * x).disaggregate().add_sink().build()
    assert sorted(p) == sorted(x for x in range(5) for _ in range(x))


def test_aggregate_then_disaggregate_roundtrip(no_leaks):
    p = PipelineBuilder().add_source(range(7)).aggregate(3).disaggregate().add_sink().build()
    assert list(p) == list(range(7))


class Opaque:
    def __init__(self, v):
        self.v = v


def test_python_objects_pass_through_unchanged(no_leaks):
    objs = [Opaque(i) for i in range(5)]
    p = build(objs, pipe(lambda o: o, concurrency=2, output_order="input"))
    got = list(p)
    assert all(a is b for a, b in zip(got, objs, strict=True))
    p.close()


VALUES = [
    None,
    True,
    False,
    0,
    -(2**63),
    2**63 - 1,
    2**80,  # beyond int64: travels as an opaque object
    1.5,
    float("inf"),
    "",
    "héllo ✓",
    b"",
    b"\x00\xffbytes",
    [],
    [1, [2, [3, "x"]]],
    (1, "a", None),
    {"a": 1, "b": [1.0, 2.0], "c": {"d": b"x"}},
    {1: "int keys travel opaquely"},
    Opaque(3),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_values_roundtrip_through_native_stage(value, no_leaks):
    # A native stage forces the structured encoding in both directions.
    p = build([value], pipe(ops.identity()))
    (got,) = list(p)
    if isinstance(value, Opaque):
        assert got is value
    else:
        assert got == value and type(got) is type(value)
    p.close()


def test_python_stage_failure_under_max_failures(no_leaks):
    def maybe_fail(x):
        if x % 4 == 0:
            raise ValueError(f"bad item {x}")
        return x

    p = build(range(20), pipe(maybe_fail, concurrency=2, max_failures=5, name="checker"))
    got = sorted(p)
    assert got == [x for x in range(20) if x % 4]
    st = p.stats()
    assert st.failures == 5
    checker = st.stages[0]
    assert checker.name == "checker" and checker.failures == 5
    assert any("ValueError: bad item" in e and "checker" in e for e in st.recent_errors)
    p.close()


def test_python_stage_failure_over_max_failures(no_leaks):
    def always_fail(x):
        raise KeyError(x)

    p = build(range(100), pipe(always_fail, max_failures=2, name="picky"))
    with pytest.raises(PipelineError, match=r"picky.*max_failures") as ei:
        list(p)
    assert "KeyError" in str(ei.value)
    p.close()


def test_pipeline_max_failures(no_leaks):
    def fail_odd(x):
        if x % 2:
            raise RuntimeError("odd")
        return x

    p = build(range(100), pipe(fail_odd), pipe(fail_odd), max_failures=3)
    with pytest.raises(PipelineError, match="max_failures"):
        list(p)
    p.close()


def test_python_source_raising_is_fatal_and_named(no_leaks):
    def gen():
        yield 1
        yield 2
        raise OSError("disk on fire")

    p = build(gen(), pipe(lambda x: x))
    with pytest.raises(PipelineError, match="(?s)source.*OSError: disk on fire"):
        list(p)
    p.close()


def test_native_stage_error_names_stage_and_item():
    p = build([[1, 2], [1, [2, 3]]], pipe(ops.to_tensor("int64"), name="tens"), pipe(lambda t: t.shape), max_failures=0)
    with pytest.raises(PipelineError, match=r"(?s)tens.*\[1, \[2, 3\]\]"):
        list(p)
    p.close()


def test_multi_epoch(no_leaks):
    p = build(range(10), pipe(lambda x: x + 1, concurrency=3, output_order="input"), agg(4), continuous=True)
    epochs = [list(p) for _ in range(3)]
    assert epochs[0] == epochs[1] == epochs[2] == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
    assert p.stats().epoch == 3
    p.close()


def test_stop_twice_and_before_start(no_leaks):
    p = build(range(1000), pipe(lambda x: x, concurrency=2))
    p.stop()
    p.stop()
    p.start()
    assert p.get_item(timeout=5) is not None
    p.stop()
    p.stop()
    with pytest.raises(RuntimeError, match="already running"):
        p.start()
        p.start()
    p.stop()
    p.close()
    p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p.start()


def test_stop_mid_stream_releases_everything(no_leaks):
    import numpy as np

    p = build(
        (np.full((4, 4), i, dtype=np.float32) for i in range(10_000)),
        pipe(ops.identity(), concurrency=2),
        agg(8),
        pipe(ops.collate()),
        buffer_size=4,
    )
    with p.auto_stop():
        for _ in range(3):
            p.get_item(timeout=10)
        time.sleep(0.05)  # let the queues fill
    del p


def test_get_item_timeout_then_items_still_arrive(no_leaks):
    gate = threading.Event()

    def wait_for_gate(x):
        gate.wait(10)
        return x

    p = build(range(3), pipe(wait_for_gate))
    with p.auto_stop():
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            p.get_item(timeout=0.2)
        assert 0.15 < time.monotonic() - t0 < 5
        gate.set()
        assert sorted(p.get_item(timeout=10) for _ in range(3)) == [0, 1, 2]
        with pytest.raises(EOFError):
            p.get_item(timeout=10)
    p.close()


def test_break_leaves_the_epoch_to_the_next_iterator(no_leaks):
    # SPDL: leaving a loop does not stop the pipeline; the next iterator
    # reads on in the same epoch; stop() stops it.
    p = build(sources.arange(10**9), pipe(ops.identity(), concurrency=2, output_order="input"), continuous=True)
    for i, _ in enumerate(p):
        if i == 10:
            break
    assert p.stats().state == "running"
    assert next(iter(p)) == 11
    p.stop()
    assert p.stats().state in ("stopped", "done")
    p.close()


def test_async_stage(no_leaks):
    import asyncio

    async def add_one(x):
        await asyncio.sleep(0.001)
        return x + 1

    assert sorted(build(range(20), pipe(add_one, concurrency=4))) == list(range(1, 21))


def test_native_source_and_stats(no_leaks):
    p = build(sources.arange(0, 100, 2), pipe(ops.identity(), concurrency=2, name="id"), agg(10))
    batches = list(p)
    assert sum(len(b) for b in batches) == 50
    st = p.stats()
    assert st.state == "done"
    assert st.source.items_out == 50
    ident = st.stages[0]
    assert (ident.name, ident.concurrency, ident.items_in, ident.items_out) == ("id", 2, 50, 50)
    assert st.stages[1].items_out == 5
    assert st.delivered == 5
    assert "id" in st.format()
    p.close()


def test_latency_and_bottleneck(no_leaks):
    took = []

    def slow(x):
        t0 = time.perf_counter()
        time.sleep(0.02)
        took.append(time.perf_counter() - t0)
        return x

    p = build(range(20), pipe(lambda x: x, name="fast"), pipe(slow, name="slow"), pipe(lambda x: x, name="after"))
    assert sorted(p) == list(range(20))
    st = p.stats()
    s = st.stages[1]
    assert s.name == "slow"
    # Against the calls' own durations: a loaded machine oversleeps.
    took.sort()
    assert 0.9 * took[0] <= s.latency_p50_s <= took[-1] + 0.010, (took, st.format())
    assert s.latency_p50_s <= s.latency_p90_s <= s.latency_p99_s
    assert 0 < s.busy_fraction <= 1 and s.items_per_s > 0
    assert st.bottleneck.stage == "slow", st.format()
    assert st.bottleneck.advice and "bottleneck: slow" in st.format()
    p.close()


def test_auto_concurrency_grows_where_threads_help(no_leaks):
    # time.sleep releases the GIL, so this stage scales with threads on
    # every build, at least from 1 to 2 (further, on a GIL build, the
    # consumer's wait for the GIL can become the limit). The tuner itself
    # is tested in Go (core/pipeline/autotune_test.go).
    def wait(x):
        time.sleep(0.002)
        return x

    p = (
        PipelineBuilder()
        .add_source(range(1500))
        .pipe(wait, concurrency="auto", max_concurrency=6)
        .add_sink(4)
        .build(cpu_budget=6)
    )
    assert sorted(p) == list(range(1500))
    st = p.stats()
    s = st.stages[0]
    assert s.auto and s.max_concurrency == 6 and s.tuning, st.format()
    assert 2 <= s.concurrency <= 6, st.format()
    assert "concurrency auto (max 6)" in st.format()
    p.close()


@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda: PipelineBuilder().add_sink().build(), RuntimeError, "Source is not set. Did you call `add_source`"),
        (lambda: PipelineBuilder().add_source(5), TypeError, "iterable"),
        (lambda: PipelineBuilder().add_source([1]).pipe(3), TypeError, "callable"),
        (lambda: PipelineBuilder().add_source([1]).pipe(str, concurrency=0), ValueError, "concurrency"),
        (lambda: PipelineBuilder().add_source([1]).pipe(str, output_order="random"), ValueError, "output_order"),
        (lambda: PipelineBuilder().add_source([1]).pipe(str, concurrency="fast"), ValueError, "'auto'"),
        (lambda: PipelineBuilder().add_source([1]).pipe(str, max_concurrency=4), ValueError, "only applies"),
        (
            lambda: PipelineBuilder().add_source([1]).pipe(str, concurrency="auto", max_concurrency=0),
            ValueError,
            "max_concurrency",
        ),
        (lambda: PipelineBuilder().add_source([1]).add_sink().build(cpu_budget=0), ValueError, "cpu_budget"),
        (lambda: PipelineBuilder().add_source([1]).pipe(str, timeout=0), ValueError, "timeout"),
        (lambda: PipelineBuilder().add_source([1]).pipe(str, timeout="1s"), ValueError, "timeout"),
        (lambda: PipelineBuilder().add_source([1]).aggregate(0), ValueError, "num_items"),
        (lambda: PipelineBuilder().add_source([1]).add_sink(0), ValueError, "buffer_size"),
        (lambda: PipelineBuilder().add_source([1]).pipe(ops.NativeOp("nope")).add_sink().build(), ValueError, "nope"),
        (
            lambda: PipelineBuilder().add_source([1]).pipe(ops.to_tensor("float5")).add_sink().build(),
            ValueError,
            "float5",
        ),
    ],
)
def test_builder_errors(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_available_ops():
    names = ops.available()
    assert {"identity", "to_tensor", "collate"} <= set(names)


def test_pipelines_from_several_threads(no_leaks):
    results = {}

    def run(k):
        p = build(range(200), pipe(lambda x: x * k, concurrency=2, output_order="input"))
        results[k] = list(p)
        p.close()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {k: [x * k for x in range(200)] for k in range(4)}


def test_version():
    assert spdl_go.__version__ == "0.1.0"


def test_trace_export(tmp_path):
    import json

    def work(x):
        time.sleep(0.002)
        return x

    p = build(range(30), pipe(work, concurrency=2, name="work"), pipe(ops.identity(), name="ident"))
    p.start_trace(max_spans=1000)
    assert sorted(p) == list(range(30))
    out = tmp_path / "t.json"
    p.write_trace(out)
    p.close()
    trace = json.loads(out.read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert sum(e["name"] == "work" for e in spans) == 30
    assert sum(e["name"] == "ident" for e in spans) == 30
    for e in spans:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= e.keys()
        assert e["ts"] >= 0 and e["dur"] >= 0
        assert names[e["tid"]].startswith(e["name"] + " #")
    assert min(e["dur"] for e in spans if e["name"] == "work") >= 1500  # µs
    # Encoding for the host is not a stage: only the user's stages have threads.
    assert {n.split(" #")[0] for n in names.values()} == {"work", "ident"}


def test_periodic_report_logs_stats(caplog):
    import logging

    def slow(x):
        time.sleep(0.02)
        return x

    p = build(range(20), pipe(slow, name="slow"), report_interval=0.1)
    with caplog.at_level(logging.INFO, logger="spdl_go"):
        assert sorted(p) == list(range(20))
    p.close()
    reports = [r.getMessage() for r in caplog.records if r.name == "spdl_go"]
    assert len(reports) >= 2, reports
    assert all("slow" in r and "bottleneck" in r for r in reports)
    with pytest.raises(ValueError, match="report_interval"):
        PipelineBuilder().add_source([1]).add_sink().build(report_interval=0)
