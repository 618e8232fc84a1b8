"""Pipelines, as SPDL's ``spdl.pipeline`` names them.

``PipelineBuilder`` assembles a pipeline call by call; ``build_pipeline``
builds one from a ``PipelineConfig`` (``spdl_go.pipeline.defs``), the same
object ``PipelineBuilder.get_config()`` returns. Both give a ``Pipeline``,
which raises ``PipelineFailure`` when a source or a stage fails.
``TaskHook`` objects (``build_pipeline(task_hook_factory=)``) run around
each stage's epoch and op calls; ``TaskStatsHook`` measures them.

Example:
    >>> from spdl_go.pipeline import PipelineBuilder, build_pipeline
    >>> builder = PipelineBuilder().add_source(range(4)).pipe(str).add_sink(2)
    >>> list(build_pipeline(builder.get_config(), num_threads=2))
    ['0', '1', '2', '3']
"""

# spdl_go.builder imports this package's modules, not the package: the
# package must be imported first (spdl_go takes PipelineBuilder from here).
from ..builder import PipelineBuilder
from ..stats import Bottleneck, PipelineStats, StageStats
from . import defs
from ._build import build_pipeline
from ._hooks import StageInfo, TaskHook, TaskPerfStats, TaskStatsHook
from ._pipeline import Pipeline, PipelineError, PipelineFailure
from ._subprocess import SubprocessIterable, iterate_in_subprocess, run_pipeline_in_subprocess

__all__ = [
    "Bottleneck",
    "Pipeline",
    "PipelineBuilder",
    "PipelineError",
    "PipelineFailure",
    "PipelineStats",
    "StageInfo",
    "StageStats",
    "SubprocessIterable",
    "TaskHook",
    "TaskPerfStats",
    "TaskStatsHook",
    "build_pipeline",
    "defs",
    "iterate_in_subprocess",
    "run_pipeline_in_subprocess",
]
