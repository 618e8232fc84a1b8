"""Task hooks: code that runs around each stage's op calls and around each
stage's run, as SPDL's ``TaskHook``, and ``TaskStatsHook``, which measures
them.

``build_pipeline(config, task_hook_factory=f)`` calls ``f(StageInfo)`` once
per stage (the source and the sink have none) and keeps the hooks it
returns for the life of the pipeline. For each epoch (from ``start()`` to
the end of the epoch, ``stop()`` or ``close()``) every stage's hooks'
``stage_hook`` is entered once when the epoch starts and left once when it
ends. A Python stage's op calls are each wrapped in the hooks'
``task_hook``; a native stage makes no Python call per item, so its
hooks' ``task_hook`` is never called, and a ``TaskStatsHook`` there reads
the engine's counters for the stage (``Pipeline.stats()``) instead.

Without a ``task_hook_factory`` no hook runs and a Python call costs
nothing extra (SPDL's default is a ``TaskStatsHook`` on every stage; here
``Pipeline.stats()`` and ``report_stats_interval`` measure every stage
already).

Where the hooks run:

* ``task_hook`` runs on the thread that calls the op (an engine worker
  thread), on that thread's event loop. With ``concurrency`` > 1 several
  threads run one stage's hooks at the same time.
* ``stage_hook`` runs on an event loop of its own, one thread per pipeline
  with hooks, which keeps running while the epoch runs, so tasks that a
  ``stage_hook`` starts (``TaskStatsHook``'s periodic report) run too.

Example:
    >>> from spdl_go.pipeline import StageInfo, TaskStatsHook, build_pipeline
    >>> def hooks(info: StageInfo) -> list[TaskStatsHook]:
    ...     return [TaskStatsHook(info, interval=10)]
    >>> pipeline = build_pipeline(config, task_hook_factory=hooks)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _callbacks

if TYPE_CHECKING:
    from ..stats import StageStats
    from ._pipeline import Pipeline

__all__ = ["StageInfo", "TaskHook", "TaskHookFactory", "TaskPerfStats", "TaskStatsHook"]

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageInfo:
    """Who a stage is: what a ``task_hook_factory`` is given.

    ``str()`` is ``"<pipeline_id>:<stage_id>:<stage_name>"``, with
    ``[concurrency]`` appended when it is set.
    """

    pipeline_id: int
    """A number unique to the built pipeline (the parts ``Merge`` and
    ``PathVariants`` build are pipelines of their own)."""
    stage_id: str
    """The stage's position: ``"1"`` for the first stage after the source."""
    stage_name: str
    """The stage's name, as ``Pipeline.stats()`` reports it."""
    concurrency: int | None = None
    """The stage's concurrency when it is a number above 1, else None."""

    def __str__(self) -> str:
        name = self.stage_name if self.concurrency is None else f"{self.stage_name}[{self.concurrency}]"
        return f"{self.pipeline_id}:{self.stage_id}:{name}"


class TaskHook(ABC):
    """Code run around a stage's run and around each of its op calls.

    Override ``task_hook`` (required) and ``stage_hook`` (optional), both
    async context managers (``async def`` with ``@asynccontextmanager``).

    * ``stage_hook()`` is entered once when an epoch starts and left once
      when it ends; an exception it raises on entry fails ``start()``
      (the epoch does not start), one it raises on exit is logged.
    * ``task_hook(input_item)`` wraps one op call of a Python stage with
      its item (for a generator op, each value it yields). The exception
      the op raised reaches it; if the hook swallows it the item is
      dropped, not failed, and if the hook raises, the item fails with the
      hook's exception. A generator's end reaches it as
      ``StopAsyncIteration``: let it through.
    """

    @asynccontextmanager
    async def stage_hook(self) -> AsyncIterator[None]:
        """Runs around one epoch of the stage (does nothing by default)."""
        yield

    @abstractmethod
    @asynccontextmanager
    async def task_hook(self, input_item: Any = None) -> AsyncIterator[None]:
        """Runs around one op call; ``input_item`` is the call's item."""
        yield


TaskHookFactory = Callable[[StageInfo], Sequence[TaskHook]]
"""What ``build_pipeline(task_hook_factory=)`` takes: a stage's hooks."""


@dataclass
class TaskPerfStats:
    """What ``TaskStatsHook`` measured over a period (seconds)."""

    num_tasks: int
    """Op calls finished (failed ones included)."""
    num_failures: int
    """Op calls that failed."""
    ave_time: float
    """Mean time of a successful call."""
    p90_time: float
    """90th percentile time of a successful call."""
    p99_time: float
    """99th percentile time of a successful call."""


class _Histogram:
    """Call times in buckets 2**(1/8) apart (1 ns to ~1e5 s): percentiles
    within 9%, in constant memory."""

    _STEPS = 8
    _LOW = -30 * _STEPS  # log2(1e-9 s) ~ -29.9
    _SIZE = 47 * _STEPS

    def __init__(self) -> None:
        self.counts = [0] * self._SIZE
        self.n = 0

    def add(self, seconds: float) -> None:
        k = math.floor(math.log2(seconds) * self._STEPS) - self._LOW if seconds > 0 else 0
        self.counts[min(max(k, 0), self._SIZE - 1)] += 1
        self.n += 1

    def percentile(self, p: float) -> float:
        if self.n == 0:
            return 0.0
        rank = math.ceil(self.n * p / 100)
        seen = 0
        for k, c in enumerate(self.counts):
            seen += c
            if seen >= rank:
                return float(2 ** ((k + self._LOW + 0.5) / self._STEPS))
        return 0.0  # not reached


def _time_str(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:7.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:7.1f} ms"
    return f"{seconds:7.2f} s "


class TaskStatsHook(TaskHook):
    """Counts a stage's calls and failures and times its successful calls;
    logs the totals (logger ``spdl_go.pipeline._hooks``, level INFO) when
    each epoch ends and, if ``interval`` > 0, what happened in each
    ``interval`` seconds while it runs (``interval_stats_callback``).

    On a native stage the numbers are the engine's for the stage: calls
    are ``items_in``, the mean time is ``busy_s`` over the calls, and the
    percentiles are those of all calls this epoch.

    Args:
        info: The stage (what the factory was given).
        interval: Seconds between periodic reports; <= 0 (the default)
            means none.
    """

    def __init__(self, info: StageInfo, interval: float = -1) -> None:
        self.info = info
        self.interval = interval
        self._lock = threading.Lock()
        self._pull: Callable[[], StageStats | None] | None = None  # a native stage's counters
        self._reset()

    def _reset(self) -> None:
        with self._lock:
            self.num_tasks = 0
            self.num_success = 0
            self._total_time = 0.0
            self._hist = _Histogram()
            self._lap_hist = _Histogram()
            self._lap_tasks = 0
            self._lap_success = 0
            self._lap_time = 0.0
            self._native_p90 = self._native_p99 = 0.0

    @property
    def ave_time(self) -> float:
        """Mean time of a successful call so far this epoch (seconds)."""
        return self._total_time / self.num_success if self.num_success else 0.0

    @asynccontextmanager
    async def stage_hook(self) -> AsyncIterator[None]:
        """Starts counting anew; reports periodically and at the end."""
        self._reset()
        done = asyncio.Event()
        report: asyncio.Task[None] | None = None
        if self.interval > 0:
            report = asyncio.get_running_loop().create_task(self._report_periodically(done))
        try:
            yield
        finally:
            if report is not None:
                done.set()
                await report
            self._log(self._totals())

    async def _report_periodically(self, done: asyncio.Event) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(done.wait(), self.interval)
            if done.is_set():
                return
            try:
                await self.interval_stats_callback(self._lap())
            except Exception:
                _logger.exception("[%s] interval_stats_callback failed", self.info)

    @asynccontextmanager
    async def task_hook(self, input_item: Any = None) -> AsyncIterator[None]:
        """Times the call and counts it (a generator's end is not a call)."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            yield
        except StopAsyncIteration:
            raise
        except BaseException:
            with self._lock:
                self.num_tasks += 1
            raise
        elapsed = loop.time() - t0
        with self._lock:
            self.num_tasks += 1
            self.num_success += 1
            self._total_time += elapsed
            self._hist.add(elapsed)
            self._lap_hist.add(elapsed)

    def _refresh(self) -> None:
        """A native stage: takes the engine's counters."""
        if self._pull is None:
            return
        try:
            s = self._pull()
        except Exception:  # noqa: BLE001 - the pipeline was closed: keep the last numbers
            return
        if s is None:
            return
        with self._lock:
            self.num_tasks = s.items_in
            self.num_success = max(0, s.items_in - s.failures)
            # The engine times every call; spread its busy time evenly.
            self._total_time = s.busy_s / s.items_in * self.num_success if s.items_in else 0.0
            self._native_p90, self._native_p99 = s.latency_p90_s, s.latency_p99_s

    def _totals(self) -> TaskPerfStats:
        self._refresh()
        with self._lock:
            native = self._pull is not None
            return TaskPerfStats(
                num_tasks=self.num_tasks,
                num_failures=self.num_tasks - self.num_success,
                ave_time=self.ave_time,
                p90_time=self._native_p90 if native else self._hist.percentile(90),
                p99_time=self._native_p99 if native else self._hist.percentile(99),
            )

    def _lap(self) -> TaskPerfStats:
        """What happened since the last lap, and starts the next."""
        self._refresh()
        with self._lock:
            tasks = self.num_tasks - self._lap_tasks
            success = self.num_success - self._lap_success
            spent = self._total_time - self._lap_time
            if self._pull is not None:
                p90, p99 = self._native_p90, self._native_p99
            else:
                p90, p99 = self._lap_hist.percentile(90), self._lap_hist.percentile(99)
            self._lap_hist = _Histogram()
            self._lap_tasks, self._lap_success, self._lap_time = self.num_tasks, self.num_success, self._total_time
        return TaskPerfStats(
            num_tasks=tasks,
            num_failures=tasks - success,
            ave_time=max(0.0, spent / success) if success > 0 else 0.0,
            p90_time=p90,
            p99_time=p99,
        )

    async def interval_stats_callback(self, stats: TaskPerfStats) -> None:
        """Called every ``interval`` seconds with what happened since the
        last call; logs it. Override it to send the numbers elsewhere."""
        self._log(stats)

    def _log(self, stats: TaskPerfStats) -> None:
        _logger.info(
            "[%s] %d tasks (%d failed); ave %s, p90 %s, p99 %s",
            self.info,
            stats.num_tasks,
            stats.num_failures,
            _time_str(stats.ave_time),
            _time_str(stats.p90_time),
            _time_str(stats.p99_time),
        )


# ---- one pipeline's hooks --------------------------------------------------------
_pipeline_ids = iter(range(1 << 62))
_pipeline_ids_lock = threading.Lock()


def next_pipeline_id() -> int:
    """A fresh ``StageInfo.pipeline_id``."""
    with _pipeline_ids_lock:
        return next(_pipeline_ids)


def _stop_loop(loop: asyncio.AbstractEventLoop) -> None:
    with contextlib.suppress(RuntimeError):  # already closed
        loop.call_soon_threadsafe(loop.stop)


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


class PipelineHooks:
    """The hooks of one pipeline's stages, and the event loop thread their
    ``stage_hook`` runs on (started at the first epoch, stopped when the
    pipeline is closed or collected; it holds the pipeline only weakly).

    ``begin()`` enters every stage's ``stage_hook`` (``Pipeline.start``);
    ``end(exc)`` leaves them, once per ``begin()``, passing the epoch's
    failure, if any.
    """

    def __init__(self, stages: list[list[TaskHook]]) -> None:
        self._stages = stages
        self._open: list[AsyncExitStack] | None = None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._leaving: concurrent.futures.Future[None] | None = None  # the last end()

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=_run_loop, args=(loop,), name="spdl_go-hooks", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
            weakref.finalize(self, _stop_loop, loop)
        return self._loop

    def begin(self) -> None:
        """Enters each stage's ``stage_hook`` (in stage order). If one
        raises, those entered are left with its exception, which is raised."""
        with self._lock:
            if self._open is not None:
                return
            loop = self._ensure_loop()
            self._open = asyncio.run_coroutine_threadsafe(self._enter(), loop).result()

    async def _enter(self) -> list[AsyncExitStack]:
        opened: list[AsyncExitStack] = []
        try:
            for hooks in self._stages:
                stack = AsyncExitStack()
                opened.append(stack)
                for h in hooks:
                    cm = h.stage_hook()
                    if not hasattr(cm, "__aenter__") or not hasattr(cm, "__aexit__"):
                        raise TypeError(
                            f"{type(h).__name__}.stage_hook() must return an async context manager "
                            "(decorate it with contextlib.asynccontextmanager)"
                        )
                    await stack.enter_async_context(cm)
        except BaseException as e:
            for stack in opened:
                with contextlib.suppress(BaseException):
                    await stack.__aexit__(type(e), e, e.__traceback__)
            raise
        return opened

    def end(self, exc: BaseException | None = None, *, wait: bool = True, timeout: float | None = None) -> None:
        """Leaves the stage hooks entered by ``begin()``, if any, waiting
        at most ``timeout`` seconds (None: as long as it takes); errors are
        logged. ``wait=False`` only schedules it (a finaliser)."""
        with self._lock:
            opened, self._open = self._open, None
        if opened is None or self._loop is None:
            return
        fut = self._leaving = asyncio.run_coroutine_threadsafe(self._leave(opened, exc), self._loop)
        if wait and threading.current_thread() is not self._thread:
            with contextlib.suppress(Exception):
                fut.result(timeout)

    async def _leave(self, opened: list[AsyncExitStack], exc: BaseException | None) -> None:
        for stack in opened:
            try:
                if exc is None:
                    await stack.__aexit__(None, None, None)
                else:
                    await stack.__aexit__(type(exc), exc, exc.__traceback__)
            except Exception:
                _logger.exception("a stage_hook raised when the epoch ended")

    def close(self) -> None:
        """Stops the event loop thread once the last ``end`` is done."""
        loop, leaving = self._loop, self._leaving
        if loop is None:
            return
        if leaving is not None and not leaving.done():
            leaving.add_done_callback(lambda _: _stop_loop(loop))
        else:
            _stop_loop(loop)


def attach(pipeline: Pipeline, factory: TaskHookFactory, python_stages: Sequence[int | None]) -> None:
    """Gives ``pipeline`` the hooks ``factory`` makes for each of its stages:
    ``python_stages[i]`` is stage i's Python op's registry id (None for a
    native stage)."""
    pid = next_pipeline_id()
    stats = pipeline.stats().stages
    per_stage: list[list[TaskHook]] = []
    ref = weakref.ref(pipeline)
    for i, (fid, st) in enumerate(zip(python_stages, stats, strict=True)):
        conc = st.concurrency if st.concurrency > 1 and not st.auto else None
        hooks = list(factory(StageInfo(pid, str(i + 1), st.name, conc)))
        for h in hooks:
            if not isinstance(h, TaskHook):
                raise TypeError(f"task_hook_factory must return TaskHook objects, got {type(h).__name__}")
        if fid is not None:
            _callbacks.stages[fid].hooks = hooks or None
        else:
            for h in hooks:
                if isinstance(h, TaskStatsHook):
                    h._pull = _stage_stats(ref, i)
        per_stage.append(hooks)
    if any(per_stage):
        pipeline._hooks = PipelineHooks(per_stage)


def _stage_stats(ref: weakref.ref[Pipeline], i: int) -> Callable[[], StageStats | None]:
    def pull() -> StageStats | None:
        p = ref()
        return None if p is None else p.stats().stages[i]

    return pull
