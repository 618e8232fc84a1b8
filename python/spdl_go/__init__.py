"""spdl-go: a GIL-free data loader whose engine is written in Go.

Pipelines run on Go threads; batches reach Python zero-copy as DLPack
tensors and Arrow arrays.

Example:
    >>> import spdl_go
    >>> p = spdl_go.PipelineBuilder().add_source(range(4)).pipe(str).add_sink().build()
    >>> list(p)
    ['0', '1', '2', '3']
"""

from . import io, media, ops, sources
from ._buffers import ArrowArray, Tensor
from ._lib import LIB as _LIB
from .checkpoint import ResumableSource
from .loader import DataLoader
from .pipeline import Pipeline, PipelineBuilder, PipelineError, PipelineFailure
from .stats import Bottleneck, PipelineStats, StageStats

__version__ = _LIB.spdl_version().decode()

__all__ = [
    "ArrowArray",
    "Bottleneck",
    "DataLoader",
    "Pipeline",
    "PipelineBuilder",
    "PipelineError",
    "PipelineFailure",
    "PipelineStats",
    "ResumableSource",
    "StageStats",
    "Tensor",
    "__version__",
    "arrow_allocated_bytes",
    "io",
    "media",
    "memory_stats",
    "ops",
    "sources",
]


def memory_stats() -> dict[str, int]:
    """Counters of the engine's C tensor memory (for leak checks and tuning).

    Returns:
        live_tensors, live_bytes (in use), pooled_bytes (cached for reuse),
        allocations (made since start).
    """
    from ._lib import call_json

    stats: dict[str, int] = call_json(_LIB.spdl_mem_stats)
    return stats


def arrow_allocated_bytes() -> int:
    """Bytes of Arrow column buffers alive in C memory (for leak checks)."""
    return int(_LIB.spdl_arrow_allocated_bytes())
