"""What a ``pipe()`` op may be and return, as SPDL defines it: None skips
the item, generators emit several, containers look the item up, async ops
run concurrently outside ``num_threads``, ``executor=`` runs a sync op in a
pool, async iterable sources, and ``build(report_stats_interval=)``."""

import asyncio
import concurrent.futures
import multiprocessing
import threading
import time

import pytest

from spdl_go import PipelineBuilder, PipelineError, ops

ORDERS = ["completion", "input"]


def run(src, op, *, order="completion", concurrency=1, then_native=False, **build_kw):
    """Runs ``src`` through one stage of ``op`` (then a native identity
    stage, if asked) and returns (items, stats)."""
    b = PipelineBuilder().add_source(src).pipe(op, concurrency=concurrency, output_order=order, max_failures=-1)
    if then_native:
        b = b.pipe(ops.identity(), output_order=order)
    p = b.add_sink(2).build(**build_kw)
    try:
        got = list(p)
        return got, p.stats()
    finally:
        p.close()


def check_order(got, want, order):
    if order == "input":
        assert got == want
    else:
        assert sorted(got) == sorted(want)


# ---- None skips the item -----------------------------------------------------
def _even_or_none(x):
    return x if x % 2 == 0 else None


async def _async_even_or_none(x):
    await asyncio.sleep(0)
    return x if x % 2 == 0 else None


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("op", [_even_or_none, _async_even_or_none], ids=["sync", "async"])
@pytest.mark.parametrize("then_native", [False, True], ids=["python", "native_next"])
def test_none_skips_the_item(order, op, then_native, no_leaks):
    got, st = run(range(40), op, order=order, concurrency=4, then_native=then_native)
    check_order(got, list(range(0, 40, 2)), order)
    assert st.failures == 0
    assert st.stages[0].items_in == 40 and st.stages[0].items_out == 20


@pytest.mark.parametrize("order", ORDERS)
def test_ordered_output_does_not_stall_on_skips(order, no_leaks):
    # Every item but the last is skipped: the reorder window must move on.
    got, _ = run(range(200), lambda x: x if x == 199 else None, order=order, concurrency=8)
    assert got == [199]


# ---- generators: each yielded value is an item ----------------------------------
def _gen(x):
    for i in range(x % 4):
        yield (x, i)


async def _agen(x):
    for i in range(x % 4):
        await asyncio.sleep(0.0005)
        yield (x, i)


def _gen_want(n):
    return [(x, i) for x in range(n) for i in range(x % 4)]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("op", [_gen, _agen], ids=["generator", "async_generator"])
@pytest.mark.parametrize("then_native", [False, True], ids=["python", "native_next"])
def test_generator_values_are_items(order, op, then_native, no_leaks):
    got, st = run(range(30), op, order=order, concurrency=3, then_native=then_native)
    want = _gen_want(30)
    if then_native:
        want = [list(t) for t in want]  # a native stage reads tuples as sequences
        got = [list(t) for t in got]
    check_order(got, want, order)
    assert st.stages[0].items_in == 30 and st.stages[0].items_out == len(want)


class _GenCallable:
    def __call__(self, x):
        yield x
        yield -x


def test_callable_object_with_generator_call(no_leaks):
    got, _ = run(range(1, 4), _GenCallable(), order="input")
    assert got == [1, -1, 2, -2, 3, -3]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("is_async", [False, True], ids=["generator", "async_generator"])
def test_yielded_values_arrive_before_the_generator_ends(order, is_async, no_leaks):
    release = threading.Event()

    def gen(x):
        yield "first"
        assert release.wait(10)
        yield "second"

    async def agen(x):
        yield "first"
        while not release.is_set():
            await asyncio.sleep(0.001)
        yield "second"

    p = PipelineBuilder().add_source([0]).pipe(agen if is_async else gen, output_order=order).add_sink(2).build()
    try:
        it = iter(p)
        assert next(it) == "first"  # while the generator still waits
        release.set()
        assert list(it) == ["second"]
    finally:
        release.set()
        p.close()


@pytest.mark.parametrize("order", ORDERS)
def test_generator_failing_midway_fails_its_item(order, no_leaks):
    def gen(x):
        yield x
        if x == 3:
            raise ValueError(f"broke at {x}")
        yield x + 100

    got, st = run(range(6), gen, order=order, concurrency=2)
    want = [v for x in range(6) for v in ([x] if x == 3 else [x, x + 100])]
    check_order(got, want, order)
    assert st.failures == 1 and st.stages[0].failures == 1
    assert any("ValueError: broke at 3" in e and "3" in e for e in st.recent_errors)


def test_stop_mid_generator_closes_it(no_leaks):
    closed = []

    def gen(x):
        try:
            yield from range(1000)
        finally:
            closed.append(x)

    p = PipelineBuilder().add_source(range(3)).pipe(gen).add_sink(1).build()
    it = iter(p)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    p.close()
    deadline = time.monotonic() + 10
    while not closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert closed, "the unfinished generator was not closed"


# ---- containers --------------------------------------------------------------
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(
    "container,src,want",
    [
        ({"a": 1, "b": 2}, ["a", "x", "b"], [1, 2]),
        (["zero", "one", "two"], [2, 5, 0], ["two", "zero"]),
        (("t0", "t1"), [1, 1, 9], ["t1", "t1"]),
    ],
    ids=["dict", "list", "tuple"],
)
def test_container_op_looks_up_the_item(order, container, src, want, no_leaks):
    got, st = run(src, container, order=order)
    check_order(got, want, order)
    assert st.stages[0].name == "__getitem__"
    assert st.failures == 1  # the missing key or index fails its item
    assert any(("KeyError" in e or "IndexError" in e) for e in st.recent_errors)


def test_container_op_then_native_stage(no_leaks):
    got, _ = run([0, 1], [[1, 2], [3]], order="input", then_native=True)
    assert got == [[1, 2], [3]]


@pytest.mark.parametrize("op", [3, object(), 1.5])
def test_op_neither_callable_nor_container_is_a_type_error(op):
    with pytest.raises(TypeError, match="op"):
        PipelineBuilder().add_source([1]).pipe(op)


# ---- async ops ---------------------------------------------------------------
@pytest.mark.parametrize("order", ORDERS)
def test_async_ops_run_concurrently_beyond_num_threads(order, no_leaks):
    running = 0
    peak = 0
    lock = threading.Lock()

    async def op(x):
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        await asyncio.sleep(0.05)
        with lock:
            running -= 1
        return x

    t0 = time.monotonic()
    got, _ = run(range(16), op, order=order, concurrency=8, num_threads=1)
    elapsed = time.monotonic() - t0
    check_order(got, list(range(16)), order)
    assert peak > 1, "async calls were serialized by num_threads=1"
    assert peak <= 8
    assert elapsed < 16 * 0.05


def test_sync_ops_stay_under_num_threads(no_leaks):
    running = 0
    peak = 0
    lock = threading.Lock()

    def op(x):
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.005)
        with lock:
            running -= 1
        return x

    run(range(16), op, concurrency=8, num_threads=1)
    assert peak == 1


async def _async_two_args(x, y):
    return x


@pytest.mark.parametrize("op", [_async_two_args, lambda: 1, lambda x, y: 1], ids=["async", "sync0", "sync2"])
def test_op_that_cannot_take_one_argument_fails_at_pipe(op):
    with pytest.raises(TypeError, match="one positional argument"):
        PipelineBuilder().add_source([1]).pipe(op)


def test_async_op_errors_fail_their_items(no_leaks):
    async def op(x):
        if x % 3 == 0:
            raise RuntimeError(f"no {x}")
        return x

    got, st = run(range(9), op, concurrency=3)
    assert sorted(got) == [1, 2, 4, 5, 7, 8]
    assert st.failures == 3


# ---- executor= ---------------------------------------------------------------
@pytest.mark.parametrize("order", ORDERS)
def test_executor_runs_sync_op_in_its_threads(order, no_leaks):
    main = threading.get_ident()
    names = set()

    def op(x):
        names.add(threading.current_thread().name)
        time.sleep(0.02)
        return x * 2

    with concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="mypool") as ex:
        t0 = time.monotonic()
        b = PipelineBuilder().add_source(range(16)).pipe(op, executor=ex, concurrency=4, output_order=order)
        p = b.add_sink(2).build(num_threads=1)
        try:
            got = list(p)
        finally:
            p.close()
        elapsed = time.monotonic() - t0
    check_order(got, [x * 2 for x in range(16)], order)
    assert names and all(n.startswith("mypool") for n in names)
    assert main not in names
    assert elapsed < 16 * 0.02  # four at once, whatever num_threads


def test_executor_wait_frees_the_gil(no_leaks):
    # While the pool's thread holds the item, Python code on this thread
    # keeps running: the stage's thread waits without the GIL.
    started, done = threading.Event(), threading.Event()

    def op(x):
        started.set()
        assert done.wait(10)
        return x

    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        p = PipelineBuilder().add_source([1]).pipe(op, executor=ex).add_sink(1).build()
        try:
            p.start()
            assert started.wait(10)
            spins = 0
            t0 = time.monotonic()
            while time.monotonic() - t0 < 0.1:
                spins += 1
            assert spins > 1000
            done.set()
            assert list(p) == [1]
        finally:
            done.set()
            p.close()


def test_executor_process_pool(no_leaks):
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as ex:
        p = PipelineBuilder().add_source(range(-3, 3)).pipe(abs, executor=ex, output_order="input").add_sink(2).build()
        try:
            assert list(p) == [3, 2, 1, 0, 1, 2]
        finally:
            p.close()


def test_executor_with_async_op_is_an_error():
    async def op(x):
        return x

    with concurrent.futures.ThreadPoolExecutor(1) as ex, pytest.raises(ValueError, match="executor"):
        PipelineBuilder().add_source([1]).pipe(op, executor=ex)


def test_executor_with_native_op_is_an_error():
    with concurrent.futures.ThreadPoolExecutor(1) as ex, pytest.raises(ValueError, match="executor"):
        PipelineBuilder().add_source([1]).pipe(ops.identity(), executor=ex)


def test_executor_must_be_an_executor():
    with pytest.raises(TypeError, match="executor"):
        PipelineBuilder().add_source([1]).pipe(abs, executor=object())


# ---- async iterable sources -----------------------------------------------------
class _AsyncRange:
    def __init__(self, n):
        self.n = n
        self.opened = 0
        self.closed = 0

    def __aiter__(self):
        self.opened += 1
        return self._items()

    async def _items(self):
        try:
            for i in range(self.n):
                await asyncio.sleep(0)
                yield i
        finally:
            self.closed += 1


@pytest.mark.parametrize("order", ORDERS)
def test_async_iterable_source(order, no_leaks):
    src = _AsyncRange(20)
    p = (
        PipelineBuilder()
        .add_source(src, continuous=True)
        .pipe(lambda x: x * x, output_order=order, concurrency=2)
        .add_sink(2)
        .build()
    )
    try:
        for _ in range(2):  # each epoch takes a fresh aiter()
            check_order(list(p), [x * x for x in range(20)], order)
    finally:
        p.close()
    assert src.opened == 2 and src.closed == 2


def test_async_source_left_unfinished_is_closed_at_next_epoch(no_leaks):
    src = _AsyncRange(1000)
    p = PipelineBuilder().add_source(src, continuous=True).add_sink(1).build()
    try:
        it = iter(p)
        assert next(it) == 0
        p.stop()
        assert list(p) == list(range(1000))
    finally:
        p.close()
    assert src.opened == 2 and src.closed == 2


def test_async_source_error_fails_the_pipeline(no_leaks):
    async def broken():
        yield 1
        raise OSError("gone")

    class Src:
        def __aiter__(self):
            return broken()

    p = PipelineBuilder().add_source(Src()).add_sink(1).build()
    try:
        with pytest.raises(PipelineError, match="gone"):
            list(p)
    finally:
        p.close()


# ---- report_stats_interval ------------------------------------------------------
def test_report_stats_interval(caplog, no_leaks):
    import logging

    caplog.set_level(logging.INFO, logger="spdl_go")

    def slow(x):
        time.sleep(0.01)
        return x

    p = PipelineBuilder().add_source(range(30)).pipe(slow).add_sink(1).build(report_stats_interval=0.05)
    try:
        assert list(p) == list(range(30))
    finally:
        p.close()
    assert any(r.name == "spdl_go" for r in caplog.records)


def test_report_stats_interval_off_and_alias_conflict():
    b = PipelineBuilder().add_source([1]).add_sink()
    p = b.build(report_stats_interval=-1)  # SPDL's default: no reports
    p.close()
    with pytest.raises(TypeError, match="report_stats_interval"):
        PipelineBuilder().add_source([1]).add_sink().build(report_stats_interval=1.0, report_interval=1.0)
