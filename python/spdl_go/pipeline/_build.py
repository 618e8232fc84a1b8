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

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .. import _callbacks
from ..ops import NativeOp
from ..sources import NativeSource
from ._pipeline import Pipeline
from .defs import PipeConfig, PipelineConfig, _arg, _check, _limit

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
    return _launch(pipeline_cfg, settings)
