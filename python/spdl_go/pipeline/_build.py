"""Building a ``Pipeline`` from a ``PipelineConfig``: ``build_pipeline``.

``PipelineBuilder.build`` is ``build_pipeline(builder.get_config(), ...)``.
The run's settings are checked first (``BuildConfig``, by the engine);
then the config's Python callables are registered with the callback
registry and the spec goes to ``Pipeline``, which unregisters them when
it fails or is closed.

Example:
    >>> from spdl_go.pipeline import build_pipeline
    >>> from spdl_go.pipeline.defs import Pipe, PipelineConfig, SinkConfig, SourceConfig
    >>> config = PipelineConfig(SourceConfig(range(3)), [Pipe(str)], SinkConfig(2))
    >>> list(build_pipeline(config, num_threads=2))
    ['0', '1', '2']
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, cast

from .. import _callbacks
from ..ops import NativeOp
from ..sources import NativeSource
from ..stats import StageStats
from . import _hooks
from ._hooks import TaskHookFactory
from ._pipeline import Pipeline, PipelineFailure
from .defs import (
    InterpreterPoolExecutorConfig,
    MergeConfig,
    PathVariantsConfig,
    PipeConfig,
    PipelineConfig,
    PlacementConfig,
    ProcessPoolExecutorConfig,
    SinkConfig,
    SourceConfig,
    StageConfig,
    _arg,
    _check,
    _check_regions,
    _limit,
    _MainProcess,
)

__all__ = ["BuildConfig", "build_pipeline"]


@dataclass(frozen=True, slots=True)
class BuildConfig:
    """Settings of the whole pipeline (see ``PipelineBuilder.build``)."""

    num_threads: int | None = None
    max_failures: int | Fraction = -1
    queue_size: int | None = None
    report_interval: float | None = None
    cpu_budget: int | None = None
    task_hook_factory: TaskHookFactory | None = None

    def __post_init__(self) -> None:
        # report_interval and task_hook_factory are Python's own; the rest is the engine's.
        if self.task_hook_factory is not None and not callable(self.task_hook_factory):
            raise TypeError(f"build: task_hook_factory must be callable, got {type(self.task_hook_factory).__name__}")
        if self.report_interval is not None and not self.report_interval > 0:
            raise ValueError(f"build: report_interval must be > 0 seconds or None, got {self.report_interval!r}")
        _check("pipeline", self.to_spec())

    def to_spec(self) -> dict[str, Any]:
        """The engine's settings (``report_interval`` and
        ``task_hook_factory`` are Python's own)."""
        return {
            "max_failures": _limit(self.max_failures),
            "num_threads": _arg(self.num_threads),
            "cpu_budget": _arg(self.cpu_budget),
            "queue_size": _arg(self.queue_size),
        }


def _launch(config: PipelineConfig, settings: BuildConfig, served: bool = False) -> Pipeline:
    """Registers the config's Python callables and builds the pipeline;
    ``Pipeline`` unregisters them when it fails or is closed. ``served``:
    a worker process's server reads the sink (``Pipeline._serve``), so a
    ``Tensor`` a Python stage hands to it travels as a tensor the engine
    can lend to the parent, not as an opaque object."""
    source_ids: list[int] = []
    function_ids: list[int] = []
    source_id: int | None = None
    assert isinstance(config.src, SourceConfig)  # _build replaced a MergeConfig
    src = config.src.source
    if not isinstance(src, NativeSource):
        source_id = _callbacks.register_source(src, _callbacks.make_encoder(*config.encoding(0, served)))
        source_ids.append(source_id)
    op_ids: list[int | None] = []
    for i, st in enumerate(config.pipes):
        fid: int | None = None
        if isinstance(st, PipeConfig) and not isinstance(st.op, NativeOp):
            fid = _callbacks.register_stage(
                st.op, _callbacks.make_encoder(*config.encoding(i + 1, served)), st.executor
            )
            function_ids.append(fid)
        op_ids.append(fid)
    pipeline = Pipeline(
        config.to_spec(source_id, op_ids, settings.to_spec()),
        source_ids,
        function_ids,
        settings.report_interval,
        continuous=config.src.continuous,
    )
    if settings.task_hook_factory is not None:
        try:
            _hooks.attach(pipeline, settings.task_hook_factory, op_ids)
        except BaseException:
            pipeline.close()
            raise
    return pipeline


def build_pipeline(
    pipeline_cfg: PipelineConfig,
    /,
    *,
    num_threads: int | None = None,
    max_failures: int | Fraction = -1,
    report_stats_interval: float | None = -1,
    queue_size: int | None = None,
    cpu_budget: int | None = None,
    report_interval: float | None = None,
    task_hook_factory: TaskHookFactory | None = None,
) -> Pipeline:
    """Builds the pipeline ``pipeline_cfg`` describes (it starts on first
    iteration or ``start()``).

    Args:
        pipeline_cfg: The source, stages and sink (see
            ``spdl_go.pipeline.defs``).
        num_threads: At most this many ops run at once over all stages;
            None sets no cap beyond each stage's concurrency. Async ops and
            ops given an executor only wait, and do not count.
        max_failures: The limit of every stage without one of its own
            (``Pipe(max_failures=)``), counted over the whole pipeline:
            how many items may fail (a negative int: no limit), or a
            ``fractions.Fraction`` in (0, 1], the rate of failed calls over
            all stages, checked once 100 calls were made.
        report_stats_interval: If > 0, log ``stats().format()`` (logger
            "spdl_go", level INFO) every this many seconds while an epoch
            runs; <= 0 or None (the default is -1) means no reports.
        queue_size: Capacity of the queue between two stages (spdl-go's own).
        cpu_budget: The most threads all ``concurrency="auto"`` stages may
            use together; None means ``os.cpu_count()`` (spdl-go's own).
        report_interval: An alias of ``report_stats_interval`` (give one of
            them); None means no reports.
        task_hook_factory: Called with each stage's ``StageInfo`` (those of
            the pipelines ``Merge`` and ``PathVariants`` build too), it
            returns the stage's ``TaskHook`` objects (see
            ``spdl_go.pipeline.TaskHook``). None (the default) means no
            hooks, and no cost per call: unlike SPDL, whose default is a
            ``TaskStatsHook`` per stage, spdl-go measures every stage in
            ``Pipeline.stats()`` already.

    Raises:
        ValueError: a setting is out of range (the message names it).
        TypeError: ``pipeline_cfg`` is not a ``PipelineConfig``, both
            report intervals were given, or ``task_hook_factory`` is not
            callable or returned something other than ``TaskHook`` objects.
    """
    if not isinstance(pipeline_cfg, PipelineConfig):
        raise TypeError(f"build_pipeline: expected a PipelineConfig, got {type(pipeline_cfg).__name__}")
    settings = _settings(
        report_stats_interval,
        report_interval,
        num_threads=num_threads,
        max_failures=max_failures,
        queue_size=queue_size,
        cpu_budget=cpu_budget,
        task_hook_factory=task_hook_factory,
    )
    return _build(pipeline_cfg, settings)


def build_served(
    pipeline_cfg: PipelineConfig,
    /,
    *,
    report_stats_interval: float | None = -1,
    report_interval: float | None = None,
    **engine: Any,
) -> Pipeline:
    """``build_pipeline`` in a worker process whose server reads the sink
    (see ``_launch``); the same keyword arguments."""
    return _build(pipeline_cfg, _settings(report_stats_interval, report_interval, **engine), served=True)


def _settings(report_stats_interval: float | None, report_interval: float | None, **engine: Any) -> BuildConfig:
    """The settings of ``build_pipeline``'s arguments: one report interval
    of its two names, and the rest as given."""
    if report_stats_interval is not None and report_stats_interval != -1:
        if report_interval is not None:
            raise TypeError("build: give report_stats_interval or its alias report_interval, not both")
        report_interval = report_stats_interval if report_stats_interval > 0 else None
    return BuildConfig(report_interval=report_interval, **engine)


def _build(config: PipelineConfig, settings: BuildConfig, served: bool = False) -> Pipeline:
    """``build_pipeline`` once the settings are checked. A ``Merge`` source
    and a ``PathVariants`` stage are pipelines of their own, built first
    with the same settings (without reports) and read through Python."""
    sub = dataclasses.replace(settings, report_interval=None)
    if any(isinstance(p, PlacementConfig) for p in config.pipes):
        return _build_region(config, settings, sub, served)
    built: list[Pipeline] = []  # closed if a later part fails to build
    try:
        src = config.src
        if isinstance(src, MergeConfig):
            merged = [_build(c, sub) for c in src.pipeline_configs]
            built += merged
            src = SourceConfig(_MergedSource(merged), continuous=_continuous(src))
        k = next((i for i, p in enumerate(config.pipes) if isinstance(p, PathVariantsConfig)), None)
        if k is None:
            return _launch(dataclasses.replace(config, src=src), settings, served)
        pv = config.pipes[k]
        assert isinstance(pv, PathVariantsConfig)
        upstream = _build(PipelineConfig(src, config.pipes[:k], SinkConfig(2)), sub)
        built.append(upstream)
        path_sources = [_PathSource() for _ in pv.paths]
        for ps, path in zip(path_sources, pv.paths, strict=True):
            built.append(_build(PipelineConfig(SourceConfig(ps), path, SinkConfig(2)), sub))
        variants = _VariantsSource(pv, upstream, path_sources, built[-len(pv.paths) :])
        outer = SourceConfig(variants, continuous=_continuous(src))
        return _build(PipelineConfig(outer, config.pipes[k + 1 :], config.sink), settings, served)
    except BaseException:
        _close_all(built)
        raise


def _build_region(config: PipelineConfig, settings: BuildConfig, sub: BuildConfig, served: bool) -> Pipeline:
    """A pipeline with execution regions (``PipelineBuilder.to``): the
    first region is built, and the rest of the pipeline after it, in turn."""
    from . import _region

    _check_regions(config.pipes)
    pipes = list(config.pipes)
    k = next(i for i, p in enumerate(pipes) if isinstance(p, PlacementConfig))
    opener = pipes[k]
    assert isinstance(opener, PlacementConfig)
    if isinstance(opener.target, _MainProcess):  # a marker that opens nothing
        return _build(dataclasses.replace(config, pipes=pipes[:k] + pipes[k + 1 :]), settings, served)
    j = next(i for i in range(k + 1, len(pipes)) if isinstance(pipes[i], PlacementConfig))
    closer = pipes[j]
    assert isinstance(closer, PlacementConfig)
    stages: list[StageConfig] = [p for p in pipes[k + 1 : j] if not isinstance(p, PlacementConfig)]
    if isinstance(opener.target, InterpreterPoolExecutorConfig):
        inner, ex = _region.interpreter_stages(stages, opener.target)
        try:
            p = _build(dataclasses.replace(config, pipes=pipes[:k] + inner + pipes[j:]), settings, served)
        except BaseException:
            ex.shutdown(wait=False, cancel_futures=True)
            raise
        weakref.finalize(p, ex.shutdown, wait=False, cancel_futures=True)
        return p
    assert isinstance(opener.target, ProcessPoolExecutorConfig)
    name = _region.region_name(stages, opener.buffer_size, closer.buffer_size)
    worker_args = {
        "num_threads": None,
        "max_failures": settings.max_failures,
        "queue_size": settings.queue_size,
        "cpu_budget": settings.cpu_budget,
    }
    src = config.src
    upstream: Pipeline | Iterable[Any]
    if k == 0 and isinstance(src, SourceConfig) and _region.plain_iterable(src.source):
        upstream = cast(Iterable[Any], src.source)  # read by the region's feeder thread itself
    else:
        upstream = _build(PipelineConfig(src, pipes[:k], SinkConfig(2)), sub)
    try:
        pool = _region._Pool(name, stages, opener.target, worker_args, closer.buffer_size)
    except BaseException:
        if isinstance(upstream, Pipeline):
            upstream.close()
        raise
    source = _region._RegionSource(upstream, pool, opener.buffer_size)
    outer = SourceConfig(source, continuous=_continuous(config.src))
    # The closing marker stays when another region opens right there.
    rest = pipes[j + 1 :] if isinstance(closer.target, _MainProcess) else pipes[j:]
    p = _build(PipelineConfig(outer, rest, config.sink), settings, served)
    # stats(): the stages before and in this region first; a region in
    # the rest (built just now) reports its own after them. The source is
    # held weakly: closing the pipeline drops it, which stops the workers.
    later, ref = p._inner_stats, weakref.ref(source)

    def inner_stats() -> tuple[StageStats | None, list[StageStats]]:
        region = ref()
        src, stages = region.inner_stats() if region is not None else (None, [])
        if later is None:
            return src, stages
        _, rest_stages = later()
        return src, stages + rest_stages

    p._inner_stats = inner_stats
    return p


def _continuous(src: SourceConfig | MergeConfig) -> bool:
    """Whether a pipeline reading ``src`` runs epoch after epoch: its
    source is continuous, or one of the merged pipelines' is (as in SPDL)."""
    if isinstance(src, MergeConfig):
        return any(_continuous(c.src) for c in src.pipeline_configs)
    return src.continuous


_POLL_S = 0.05
_END = object()  # a path source's end of epoch


def _put(q: queue.Queue[Any], value: Any, stop: threading.Event) -> bool:
    """Puts ``value`` in ``q`` unless ``stop`` is set first (False)."""
    while not stop.is_set():
        try:
            q.put(value, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _read_epoch(p: Pipeline, stop: threading.Event, emit: Callable[[Any], object]) -> bool:
    """Runs one epoch of ``p``, handing each item to ``emit``: True once it
    ended, False if ``stop`` was set first. If ``stop`` was set or ``emit``
    raised, the epoch is stopped."""
    p.start()
    try:
        while not stop.is_set():
            try:
                item = p.get_item(timeout=_POLL_S)
            except TimeoutError:
                continue
            except EOFError:
                return True
            emit(item)
    except BaseException:
        with contextlib.suppress(PipelineFailure):
            p.stop()
        raise
    with contextlib.suppress(PipelineFailure):
        p.stop()  # the outer epoch ended first: end this one too
    return False


def _pump(i: int, p: Pipeline, out: queue.Queue[tuple[str, int, Any]], stop: threading.Event) -> None:
    """Reads one epoch of ``p`` into ``out`` as ("item", i, item), then
    ("done", i, None), or ("error", i, exception)."""
    try:
        if _read_epoch(p, stop, lambda item: _put(out, ("item", i, item), stop)):
            _put(out, ("done", i, None), stop)
    except BaseException as e:  # noqa: BLE001 - handed to the reader, which raises it
        _put(out, ("error", i, e), stop)


def _join(threads: list[threading.Thread]) -> None:
    # Called on an engine thread, Thread.join would register that thread
    # as a dummy Thread for good (it calls current_thread()): poll instead.
    me = threading.get_ident()
    for t in threads:
        while t.ident != me and t.is_alive():
            time.sleep(0.001)


def _close_all(pipelines: list[Pipeline]) -> None:
    for p in pipelines:
        p.close()


class _Owner:
    """Owns pipelines built for a Python source: they are closed when it
    goes (the outer pipeline unregisters its source when it is closed)."""

    def __init__(self, pipelines: list[Pipeline]) -> None:
        self.pipelines = pipelines
        weakref.finalize(self, _close_all, pipelines)


class _MergedSource(_Owner):
    """The Python source of a pipeline whose ``src`` is a ``Merge``: each
    iteration is one epoch of every merged pipeline, each read on a thread
    of its own; items go on in the order they arrive."""

    def __iter__(self) -> Iterator[Any]:
        out: queue.Queue[tuple[str, int, Any]] = queue.Queue(maxsize=max(1, len(self.pipelines)))
        stop = threading.Event()
        threads = [
            threading.Thread(target=_pump, args=(i, p, out, stop), name="spdl_go-merge", daemon=True)
            for i, p in enumerate(self.pipelines)
        ]
        for t in threads:
            t.start()
        try:
            left = len(threads)
            while left:
                kind, _, value = out.get()
                if kind == "item":
                    yield value
                elif kind == "done":
                    left -= 1
                else:
                    raise value
        finally:
            stop.set()
            _join(threads)


class _PathSource:
    """A path pipeline's source: what the router sent it this epoch."""

    def __init__(self) -> None:
        self.queue: queue.Queue[Any] = queue.Queue()

    def __iter__(self) -> Iterator[Any]:
        q = self.queue
        while (item := q.get()) is not _END:
            yield item


class _VariantsSource(_Owner):
    """The Python source of the stages after a ``PathVariants``: each
    iteration runs one epoch of the stages before it (``upstream``) on a
    router thread, which sends each item (or each batch's parts) to its
    path's pipeline, and one epoch of each path, whose items go on in the
    order they arrive (batched: one list of every path, concatenated)."""

    def __init__(
        self, pv: PathVariantsConfig, upstream: Pipeline, sources: list[_PathSource], paths: list[Pipeline]
    ) -> None:
        super().__init__([upstream, *paths])
        self.pv, self.upstream, self.sources, self.paths = pv, upstream, sources, paths

    def __iter__(self) -> Iterator[Any]:
        n = len(self.paths)
        stop = threading.Event()
        failure: list[BaseException] = []
        ins: list[queue.Queue[Any]] = [queue.Queue(maxsize=2) for _ in range(n)]
        for src, q in zip(self.sources, ins, strict=True):
            src.queue = q
        out: queue.Queue[tuple[str, int, Any]] = queue.Queue(maxsize=2 * n)
        threads = [threading.Thread(target=self._route, args=(ins, stop, failure), name="spdl_go-route", daemon=True)]
        threads += [
            threading.Thread(target=_pump, args=(i, p, out, stop), name="spdl_go-path", daemon=True)
            for i, p in enumerate(self.paths)
        ]
        for t in threads:
            t.start()
        try:
            pending: list[list[Any]] = [[] for _ in range(n)]
            left = n
            while left:
                kind, i, value = out.get()
                if kind == "error":
                    raise value
                if kind == "done":
                    left -= 1
                elif not self.pv.batched:
                    yield value
                else:
                    pending[i].append(value)
                    if all(pending):
                        batch = [x for part in pending for x in part.pop(0)]
                        if batch:
                            yield batch
            if failure:
                raise failure[0]
        finally:
            stop.set()
            for q in ins:  # a path source waiting for items ends its epoch
                while True:
                    with contextlib.suppress(queue.Empty):
                        while True:
                            q.get_nowait()
                    with contextlib.suppress(queue.Full):
                        q.put_nowait(_END)
                        break
            _join(threads)

    def _route(self, ins: list[queue.Queue[Any]], stop: threading.Event, failure: list[BaseException]) -> None:
        """Runs one upstream epoch, sending each item to its path; then ends
        every path's epoch. A failure is kept for the reader to raise once
        the paths have passed on what they got."""
        n = len(ins)
        name = self.pv.name
        loop: asyncio.AbstractEventLoop | None = None

        def route(item: Any) -> Any:
            nonlocal loop
            res = self.pv.router(item)
            if inspect.isawaitable(res):
                if loop is None:
                    loop = asyncio.new_event_loop()
                res = loop.run_until_complete(res)
            return res

        def check(idx: Any) -> int:
            if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < n:
                raise IndexError(
                    f"PathVariants {name!r}: the router returned {idx!r}, but there are {n} paths "
                    f"(valid range: [0, {n}))"
                )
            return idx

        def send(item: Any) -> None:
            if not self.pv.batched:
                _put(ins[check(route(item))], item, stop)
                return
            indices = list(route(item))
            if len(indices) != len(item):
                raise ValueError(
                    f"PathVariants {name!r}: the batched router returned {len(indices)} indices "
                    f"for a batch of {len(item)} items; it must return one per item"
                )
            parts: list[list[Any]] = [[] for _ in range(n)]
            for x, idx in zip(item, indices, strict=True):
                parts[check(idx)].append(x)
            for q, part in zip(ins, parts, strict=True):
                _put(q, part, stop)

        try:
            _read_epoch(self.upstream, stop, send)
        except BaseException as e:  # noqa: BLE001 - raised by the reader
            failure.append(e)
        finally:
            if loop is not None:
                loop.close()
            for q in ins:
                _put(q, _END, stop)
