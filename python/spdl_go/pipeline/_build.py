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

import contextlib
import dataclasses
import queue
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .. import _callbacks
from ..ops import NativeOp
from ..sources import NativeSource
from ._pipeline import Pipeline, PipelineFailure
from .defs import MergeConfig, PipeConfig, PipelineConfig, SourceConfig, _arg, _check, _limit

__all__ = ["BuildConfig", "build_pipeline"]


@dataclass(frozen=True, slots=True)
class BuildConfig:
    """Settings of the whole pipeline (see ``PipelineBuilder.build``)."""

    num_threads: int | None = None
    max_failures: int | Fraction = -1
    queue_size: int | None = None
    report_interval: float | None = None
    cpu_budget: int | None = None

    def __post_init__(self) -> None:
        # report_interval is Python's own (the reporter thread); the rest is the engine's.
        if self.report_interval is not None and not self.report_interval > 0:
            raise ValueError(f"build: report_interval must be > 0 seconds or None, got {self.report_interval!r}")
        _check("pipeline", self.to_spec())

    def to_spec(self) -> dict[str, Any]:
        """The engine's settings; ``report_interval`` is Python's own."""
        return {
            "max_failures": _limit(self.max_failures),
            "num_threads": _arg(self.num_threads),
            "cpu_budget": _arg(self.cpu_budget),
            "queue_size": _arg(self.queue_size),
        }


def _launch(config: PipelineConfig, settings: BuildConfig) -> Pipeline:
    """Registers the config's Python callables and builds the pipeline;
    ``Pipeline`` unregisters them when it fails or is closed."""
    source_ids: list[int] = []
    function_ids: list[int] = []
    source_id: int | None = None
    assert isinstance(config.src, SourceConfig)  # _build replaced a MergeConfig
    src = config.src.source
    if not isinstance(src, NativeSource):
        source_id = _callbacks.register_source(src, _callbacks.make_encoder(*config.encoding(0)))
        source_ids.append(source_id)
    op_ids: list[int | None] = []
    for i, st in enumerate(config.pipes):
        fid: int | None = None
        if isinstance(st, PipeConfig) and not isinstance(st.op, NativeOp):
            fid = _callbacks.register_stage(st.op, _callbacks.make_encoder(*config.encoding(i + 1)), st.executor)
            function_ids.append(fid)
        op_ids.append(fid)
    return Pipeline(
        config.to_spec(source_id, op_ids, settings.to_spec()), source_ids, function_ids, settings.report_interval
    )


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

    Raises:
        ValueError: a setting is out of range (the message names it).
        TypeError: ``pipeline_cfg`` is not a ``PipelineConfig``, or both
            report intervals were given.
    """
    if not isinstance(pipeline_cfg, PipelineConfig):
        raise TypeError(f"build_pipeline: expected a PipelineConfig, got {type(pipeline_cfg).__name__}")
    if report_stats_interval is not None and report_stats_interval != -1:
        if report_interval is not None:
            raise TypeError("build: give report_stats_interval or its alias report_interval, not both")
        report_interval = report_stats_interval if report_stats_interval > 0 else None
    settings = BuildConfig(
        num_threads=num_threads,
        max_failures=max_failures,
        queue_size=queue_size,
        report_interval=report_interval,
        cpu_budget=cpu_budget,
    )
    return _build(pipeline_cfg, settings)


def _build(config: PipelineConfig, settings: BuildConfig) -> Pipeline:
    """``build_pipeline`` once the settings are checked: a merged source's
    pipelines are built first (with the same settings, without reports)."""
    if not isinstance(config.src, MergeConfig):
        return _launch(config, settings)
    merged = _MergedSource([])
    try:
        for sub in config.src.pipeline_configs:
            merged.pipelines.append(_build(sub, dataclasses.replace(settings, report_interval=None)))
        return _launch(dataclasses.replace(config, src=SourceConfig(merged)), settings)
    except BaseException:
        merged.close()
        raise


class _MergedSource:
    """The Python source of a pipeline whose ``src`` is a ``Merge``: each
    iteration is one epoch of every merged pipeline, each read on a thread
    of its own; items go on in the order they arrive. The merged pipelines
    are closed when this object goes (the outer pipeline unregisters it
    when it is closed) or at ``close()``."""

    _POLL_S = 0.05

    def __init__(self, pipelines: list[Pipeline]) -> None:
        self.pipelines = pipelines
        weakref.finalize(self, _close_all, pipelines)

    def close(self) -> None:
        _close_all(self.pipelines)

    def __iter__(self) -> Iterator[Any]:
        out: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=max(1, len(self.pipelines)))
        stop = threading.Event()
        threads = [
            threading.Thread(target=self._pump, args=(p, out, stop), name="spdl_go-merge", daemon=True)
            for p in self.pipelines
        ]
        for t in threads:
            t.start()
        try:
            left = len(threads)
            while left:
                kind, value = out.get()
                if kind == "item":
                    yield value
                elif kind == "done":
                    left -= 1
                else:
                    raise value
        finally:
            stop.set()
            for t in threads:
                if t is not threading.current_thread():
                    t.join()

    @classmethod
    def _pump(cls, p: Pipeline, out: queue.Queue[tuple[str, Any]], stop: threading.Event) -> None:
        """Reads one epoch of ``p`` into ``out`` until it ends or ``stop``."""

        def put(kind: str, value: Any) -> None:
            while not stop.is_set():
                try:
                    out.put((kind, value), timeout=cls._POLL_S)
                    return
                except queue.Full:
                    continue

        try:
            p.start()
            while not stop.is_set():
                try:
                    item = p.get_item(timeout=cls._POLL_S)
                except TimeoutError:
                    continue
                except EOFError:
                    put("done", None)
                    return
                put("item", item)
            with contextlib.suppress(PipelineFailure):
                p.stop()  # the outer epoch ended first: end this one too
        except BaseException as e:  # noqa: BLE001 - handed to the reader, which raises it
            put("error", e)


def _close_all(pipelines: list[Pipeline]) -> None:
    for p in pipelines:
        p.close()
