"""Custom aggregation: ``PipelineBuilder.aggregate`` given an ``Aggregator``.

An aggregator stage runs in one worker. Each item goes to ``accumulate``,
whose result goes on unless it is None; when the stage's input ends,
``flush`` passes on what is still held (None: nothing), unless the stage
was built with ``drop_last=True``, in which case ``flush`` is not called
and the held items are dropped. An exception from either method fails the
pipeline (the stage tolerates no failure), as in SPDL.

Example:
    >>> from spdl_go import PipelineBuilder
    >>> from spdl_go.aggregator import Aggregator
    >>> class Pairs(Aggregator):
    ...     def __init__(self) -> None:
    ...         self.held: list[int] = []
    ...     def accumulate(self, item: int) -> list[int] | None:
    ...         self.held.append(item)
    ...         if len(self.held) < 2:
    ...             return None
    ...         out, self.held = self.held, []
    ...         return out
    ...     def flush(self) -> list[int] | None:
    ...         out, self.held = self.held, []
    ...         return out or None
    >>> p = PipelineBuilder().add_source(range(5)).aggregate(Pairs()).add_sink().build()
    >>> list(p)
    [[0, 1], [2, 3], [4]]
"""

from __future__ import annotations

import abc
from typing import Any

__all__ = ["Aggregator"]


class Aggregator(abc.ABC):
    """What an aggregate stage does with its items (see the module doc)."""

    @abc.abstractmethod
    def accumulate(self, item: Any) -> Any | None:
        """Takes one item; returns what to pass on now, or None for nothing."""

    @abc.abstractmethod
    def flush(self) -> Any | None:
        """Called once when the input ends (not with ``drop_last=True``);
        returns what to pass on, or None for nothing."""


class AggregatorOp:
    """The op a stage runs for an ``Aggregator``: calls go to
    ``accumulate``; ``flushes`` says whether Go asks for ``flush`` at the
    end of the input (``drop_last`` False)."""

    __slots__ = ("agg", "flushes")

    def __init__(self, agg: Aggregator, *, flushes: bool) -> None:
        self.agg = agg
        self.flushes = flushes

    def __call__(self, item: Any) -> Any:
        return self.agg.accumulate(item)

    def flush(self) -> Any:
        return self.agg.flush()
