"""SPDL's task hooks: ``TaskHook``, ``TaskStatsHook`` and
``build_pipeline(task_hook_factory=)`` / ``PipelineBuilder.build(task_hook_factory=)``."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from fractions import Fraction
from typing import Any

import pytest

from spdl_go import _callbacks, ops
from spdl_go.pipeline import (
    PipelineBuilder,
    PipelineFailure,
    StageInfo,
    TaskHook,
    TaskPerfStats,
    TaskStatsHook,
    build_pipeline,
)
from spdl_go.pipeline.defs import Merge, Pipe, PipelineConfig, SinkConfig, SourceConfig


class Recorder(TaskHook):
    """Records what it sees, in order, in a list shared by every hook."""

    def __init__(self, info: StageInfo, log: list[tuple[Any, ...]], lock: threading.Lock) -> None:
        self.info = info
        self.log = log
        self.lock = lock

    def note(self, *what: Any) -> None:
        with self.lock:
            self.log.append((self.info.stage_name, *what))

    @asynccontextmanager
    async def stage_hook(self) -> AsyncIterator[None]:
        self.note("enter")
        try:
            yield
        except BaseException as e:
            self.note("exit", type(e).__name__)
            raise
        self.note("exit", None)

    @asynccontextmanager
    async def task_hook(self, input_item: Any = None) -> AsyncIterator[None]:
        asyncio.get_running_loop()  # it runs on an event loop
        self.note("before", input_item)
        try:
            yield
        except BaseException as e:
            self.note("error", input_item, type(e).__name__)
            raise
        self.note("after", input_item)


def recording() -> tuple[list[tuple[Any, ...]], list[StageInfo], Any]:
    log: list[tuple[Any, ...]] = []
    infos: list[StageInfo] = []
    lock = threading.Lock()

    def factory(info: StageInfo) -> list[TaskHook]:
        infos.append(info)
        return [Recorder(info, log, lock)]

    return log, infos, factory


def double(x: int) -> int:
    return 2 * x


async def add_one(x: int) -> int:
    await asyncio.sleep(0)
    return x + 1


def test_stage_info_and_factory_calls() -> None:
    log, infos, factory = recording()
    p = (
        PipelineBuilder()
        .add_source(range(3))
        .pipe(double, concurrency=2)
        .aggregate(2)
        .disaggregate()
        .pipe(ops.identity(), name="ident")
        .add_sink()
        .build(task_hook_factory=factory)
    )
    with p:
        names = [s.name for s in p.stats().stages]
        assert [i.stage_name for i in infos] == names
        assert [i.stage_id for i in infos] == ["1", "2", "3", "4"]
        assert infos[0].concurrency == 2 and infos[1].concurrency is None
        assert len({i.pipeline_id for i in infos}) == 1
        assert str(infos[0]) == f"{infos[0].pipeline_id}:1:double[2]"
        assert str(infos[3]) == f"{infos[0].pipeline_id}:4:ident"
        assert sorted(p) == [0, 2, 4]
    other: list[StageInfo] = []
    cfg = PipelineConfig(SourceConfig(range(1)), [Pipe(double)], SinkConfig(2))
    build_pipeline(cfg, task_hook_factory=lambda i: other.append(i) or []).close()
    assert other[0].pipeline_id != infos[0].pipeline_id


def test_task_hook_wraps_each_python_call() -> None:
    log, _, factory = recording()
    with ThreadPoolExecutor(2) as ex:
        p = (
            PipelineBuilder()
            .add_source(range(4))
            .pipe(double)
            .pipe(add_one, concurrency=2)
            .pipe(str, executor=ex)
            .add_sink()
            .build(task_hook_factory=factory)
        )
        with p:
            assert sorted(p) == ["1", "3", "5", "7"]
    for stage, inputs in [("double", [0, 1, 2, 3]), ("add_one", [0, 2, 4, 6]), ("str", [1, 3, 5, 7])]:
        calls = [e for e in log if e[0] == stage and e[1] in ("before", "after")]
        assert sorted(e[2] for e in calls if e[1] == "before") == inputs
        assert sorted(e[2] for e in calls if e[1] == "after") == inputs
        # Each call's "before" comes before its "after".
        for x in inputs:
            assert log.index((stage, "before", x)) < log.index((stage, "after", x))


def test_task_hook_sees_the_ops_exception_and_the_item_fails() -> None:
    seen: list[BaseException] = []

    class Catch(TaskHook):
        @asynccontextmanager
        async def task_hook(self, input_item: Any = None) -> AsyncIterator[None]:
            try:
                yield
            except Exception as e:
                seen.append(e)
                raise

    def boom(x: int) -> int:
        if x == 2:
            raise KeyError(x)
        return x

    p = PipelineBuilder().add_source(range(5)).pipe(boom).add_sink().build(task_hook_factory=lambda i: [Catch()])
    assert sorted(p) == [0, 1, 3, 4]
    assert [type(e) for e in seen] == [KeyError]
    assert p.stats().stages[0].failures == 1

    seen.clear()
    p = (
        PipelineBuilder()
        .add_source(range(5))
        .pipe(boom, max_failures=0)
        .add_sink()
        .build(task_hook_factory=lambda i: [Catch()])
    )
    with pytest.raises(PipelineFailure) as info:
        list(p)
    assert seen and info.value.exceptions[0] is seen[0]


def test_task_hook_that_swallows_drops_the_item_and_one_that_raises_fails_it() -> None:
    class Swallow(TaskHook):
        @asynccontextmanager
        async def task_hook(self, input_item: Any = None) -> AsyncIterator[None]:
            try:
                yield
            except ValueError:
                pass

    class RaiseOn(TaskHook):
        @asynccontextmanager
        async def task_hook(self, input_item: Any = None) -> AsyncIterator[None]:
            yield
            if input_item == 1:
                raise RuntimeError("hook refused 1")

    def bad_at_3(x: int) -> int:
        if x == 3:
            raise ValueError(x)
        return x

    p = PipelineBuilder().add_source(range(5)).pipe(bad_at_3).add_sink().build(task_hook_factory=lambda i: [Swallow()])
    assert sorted(p) == [0, 1, 2, 4]
    assert p.stats().stages[0].failures == 0

    p = PipelineBuilder().add_source(range(3)).pipe(double).add_sink().build(task_hook_factory=lambda i: [RaiseOn()])
    assert sorted(p) == [0, 4]
    assert p.stats().stages[0].failures == 1
    assert "hook refused 1" in "\n".join(p.stats().recent_errors)


def gen_twice(x: int) -> Iterator[int]:
    yield x
    yield x


async def agen_twice(x: int) -> AsyncIterator[int]:
    yield x
    yield -x


@pytest.mark.parametrize("op", [gen_twice, agen_twice])
def test_task_hook_wraps_each_generator_step(op: Any) -> None:
    log, _, factory = recording()
    p = PipelineBuilder().add_source(range(2)).pipe(op).add_sink().build(task_hook_factory=factory)
    assert len(list(p)) == 4
    stage = op.__name__
    for x in range(2):
        steps = [e[1:] for e in log if e[0] == stage and len(e) > 2 and e[2] == x]
        # Two values, then the end, which reaches the hooks as StopAsyncIteration.
        assert steps == [("before", x), ("after", x)] * 2 + [("before", x), ("error", x, "StopAsyncIteration")]


def test_stage_hook_entered_and_left_once_per_epoch() -> None:
    log, _, factory = recording()
    p = (
        PipelineBuilder()
        .add_source(range(6), continuous=True)
        .pipe(double)
        .pipe(ops.identity(), name="native")
        .add_sink()
        .build(task_hook_factory=factory)
    )
    with p:
        for _ in range(2):
            assert len(list(p)) == 6
            marks = [e for e in log if e[1] in ("enter", "exit")]
            assert marks == [
                ("double", "enter"),
                ("native", "enter"),
                ("double", "exit", None),
                ("native", "exit", None),
            ]
            # The native stage's task_hook is never called.
            assert not [e for e in log if e[0] == "native" and e[1] not in ("enter", "exit")]
            log.clear()
        # An epoch stopped early is left when stop() returns (leaving a
        # loop early does not stop it).
        for _ in p:
            break
        assert not [e for e in log if e[1] == "exit"]
        p.stop()
        assert [e for e in log if e[1] == "exit"] == [("double", "exit", None), ("native", "exit", None)]
        log.clear()
        p.start()
        assert [e[1] for e in log if e[1] in ("enter", "exit")] == ["enter", "enter"]
    # close() leaves the running epoch's hooks.
    assert [e[1] for e in log if e[1] == "exit"] == ["exit", "exit"]


def test_stage_hook_sees_the_failure() -> None:
    log, _, factory = recording()

    def boom(x: int) -> int:
        raise KeyError(x)

    p = PipelineBuilder().add_source(range(3)).pipe(boom).add_sink().build(task_hook_factory=factory, max_failures=0)
    with pytest.raises(PipelineFailure):
        list(p)
    assert ("boom", "exit", "PipelineFailure") in log


def test_stage_hook_failing_on_entry_fails_start() -> None:
    left: list[str] = []

    class Good(TaskHook):
        @asynccontextmanager
        async def stage_hook(self) -> AsyncIterator[None]:
            try:
                yield
            finally:
                left.append("good")

        @asynccontextmanager
        async def task_hook(self, input_item: Any = None) -> AsyncIterator[None]:
            yield

    class Bad(Good):
        @asynccontextmanager
        async def stage_hook(self) -> AsyncIterator[None]:
            raise OSError("no stage for you")
            yield

    hooks = {"first": [Good()], "second": [Bad()]}
    p = (
        PipelineBuilder()
        .add_source(range(3))
        .pipe(double, name="first")
        .pipe(double, name="second")
        .add_sink()
        .build(task_hook_factory=lambda i: hooks[i.stage_name])
    )
    with p:
        with pytest.raises(OSError, match="no stage for you"):
            p.start()
        assert left == ["good"]
        assert p.stats().state == "built"


class Periods(TaskStatsHook):
    def __init__(self, info: StageInfo, interval: float = -1) -> None:
        super().__init__(info, interval)
        self.periods: list[TaskPerfStats] = []

    async def interval_stats_callback(self, stats: TaskPerfStats) -> None:
        self.periods.append(stats)


def test_task_stats_hook_on_python_and_native_stages(caplog: pytest.LogCaptureFixture) -> None:
    hooks: dict[str, TaskStatsHook] = {}

    def factory(info: StageInfo) -> list[TaskHook]:
        hooks[info.stage_name] = TaskStatsHook(info)
        return [hooks[info.stage_name]]

    def odd_fails(x: int) -> int:
        if x % 2:
            raise ValueError(x)
        return x

    p = (
        PipelineBuilder()
        .add_source(range(20), continuous=True)
        .pipe(odd_fails)
        .pipe(ops.identity(), name="native", concurrency=2)
        .aggregate(3)
        .add_sink()
        .build(task_hook_factory=factory)
    )
    with caplog.at_level(logging.INFO, logger="spdl_go.pipeline._hooks"):
        assert len(list(p)) == 4
    py, native = hooks["odd_fails"], hooks["native"]
    assert (py.num_tasks, py.num_success) == (20, 10)
    st = p.stats().stages
    assert (native.num_tasks, native.num_success) == (st[1].items_in, st[1].items_in - st[1].failures) == (10, 10)
    agg = hooks[st[2].name]
    assert agg.num_tasks == st[2].items_in == 10
    text = caplog.text
    assert "odd_fails] 20 tasks (10 failed)" in text
    assert ":2:native[2]] 10 tasks (0 failed)" in text
    # The next epoch counts anew.
    assert len(list(p)) == 4
    assert py.num_tasks == 20


def test_task_stats_hook_reports_periodically() -> None:
    hooks: list[Periods] = []

    def factory(info: StageInfo) -> list[TaskHook]:
        hooks.append(Periods(info, interval=0.05))
        return [hooks[-1]]

    def slow(x: int) -> int:
        time.sleep(0.01)
        return x

    p = (
        PipelineBuilder()
        .add_source(range(30))
        .pipe(slow)
        .pipe(ops.identity())
        .add_sink()
        .build(task_hook_factory=factory)
    )
    assert len(list(p)) == 30
    for h in hooks:
        assert len(h.periods) >= 2, h.info
        # The periods add up to at most the epoch's calls (the last part is
        # in the final report, not a period).
        assert 0 < sum(s.num_tasks for s in h.periods) <= 30
        assert all(s.num_failures == 0 for s in h.periods)
    assert hooks[0].periods[0].ave_time > 0.005


def test_hooks_reach_merged_pipelines() -> None:
    log, infos, factory = recording()
    cfg = PipelineConfig(
        Merge(
            [
                PipelineConfig(SourceConfig(range(2)), [Pipe(double)], SinkConfig(2)),
                PipelineConfig(SourceConfig(range(2)), [Pipe(add_one)], SinkConfig(2)),
            ]
        ),
        [Pipe(str)],
        SinkConfig(2),
    )
    p = build_pipeline(cfg, task_hook_factory=factory)
    assert sorted(p) == ["0", "1", "2", "2"]
    assert sorted(i.stage_name for i in infos) == ["add_one", "double", "str"]
    assert len({i.pipeline_id for i in infos}) == 3
    assert sorted(e[2] for e in log if e[0] == "double" and e[1] == "after") == [0, 1]
    p.close()


def test_no_factory_no_hook_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: Any) -> Any:
        raise AssertionError("a hook path ran without a task_hook_factory")

    monkeypatch.setattr(_callbacks, "_hooked_sync", never)
    monkeypatch.setattr(_callbacks, "_hooked_async", never)
    before = {t.name for t in threading.enumerate()}
    p = PipelineBuilder().add_source(range(5)).pipe(double).pipe(add_one).pipe(gen_twice).add_sink().build()
    with p:
        assert p._hooks is None
        assert all(_callbacks.stages[i].hooks is None for i in p._function_ids)
        assert len(list(p)) == 10
    assert "spdl_go-hooks" not in {t.name for t in threading.enumerate()} - before
    # A factory that returns no hooks costs nothing either.
    p = PipelineBuilder().add_source(range(5)).pipe(double).add_sink().build(task_hook_factory=lambda i: [])
    with p:
        assert p._hooks is None
        assert sorted(p) == [0, 2, 4, 6, 8]


def test_bad_factories() -> None:
    b = PipelineBuilder().add_source(range(2)).pipe(double).add_sink()
    with pytest.raises(TypeError, match="task_hook_factory must be callable"):
        b.build(task_hook_factory=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must return TaskHook objects"):
        b.build(task_hook_factory=lambda i: [object()])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        TaskHook()  # type: ignore[abstract]


def test_max_failures_fraction_counts_hooked_calls() -> None:
    # Hooks do not change how failures count against the limits.
    def boom(x: int) -> int:
        raise ValueError(x)

    p = (
        PipelineBuilder()
        .add_source(range(200))
        .pipe(boom)
        .add_sink()
        .build(task_hook_factory=lambda i: [TaskStatsHook(i)], max_failures=Fraction(1, 2))
    )
    with pytest.raises(PipelineFailure):
        list(p)
