"""SPDL's custom aggregation: ``aggregate(Aggregator, drop_last=)``."""

from __future__ import annotations

from typing import Any

import pytest

from spdl_go import PipelineBuilder
from spdl_go.aggregator import Aggregator


class Groups(Aggregator):
    """Lists of ``n`` items; ``flush`` passes on what is left, or None."""

    def __init__(self, n: int, fail_at: Any = None, fail_flush: bool = False) -> None:
        self.n = n
        self.held: list[Any] = []
        self.fail_at = fail_at
        self.fail_flush = fail_flush
        self.flushes = 0

    def accumulate(self, item: Any) -> list[Any] | None:
        if item == self.fail_at:
            raise ValueError(f"accumulate broke at {item}")
        self.held.append(item)
        if len(self.held) < self.n:
            return None
        out, self.held = self.held, []
        return out

    def flush(self) -> list[Any] | None:
        self.flushes += 1
        if self.fail_flush:
            raise KeyError("flush broke")
        out, self.held = self.held, []
        return out or None


def _run(agg: Aggregator, n: int, **kw: Any) -> list[Any]:
    p = PipelineBuilder().add_source(range(n)).aggregate(agg, **kw).add_sink(2).build()
    with p:
        return list(p)


@pytest.mark.parametrize(
    ("n", "drop_last", "want", "flushes"),
    [
        (7, False, [[0, 1, 2], [3, 4, 5], [6]], 1),
        (7, True, [[0, 1, 2], [3, 4, 5]], 0),
        (6, False, [[0, 1, 2], [3, 4, 5]], 1),  # flush returns None: nothing more
        (0, False, [], 1),
        (2, False, [[0, 1]], 1),
    ],
)
def test_aggregator(n: int, drop_last: bool, want: list[Any], flushes: int) -> None:
    agg = Groups(3)
    assert _run(agg, n, drop_last=drop_last) == want
    assert agg.flushes == flushes


def test_aggregator_none_skips_and_objects_pass_opaquely() -> None:
    class Evens(Aggregator):
        def accumulate(self, item: int) -> object | None:
            return {"v": item, "obj": object} if item % 2 == 0 else None

        def flush(self) -> object | None:
            return object

    out = _run(Evens(), 5)
    assert out == [{"v": 0, "obj": object}, {"v": 2, "obj": object}, {"v": 4, "obj": object}, object]


def test_aggregator_then_disaggregate() -> None:
    p = PipelineBuilder().add_source(range(5)).aggregate(Groups(2)).disaggregate().add_sink().build()
    with p:
        assert list(p) == [0, 1, 2, 3, 4]


def test_aggregator_stage_name() -> None:
    agg = Groups(2)
    p = PipelineBuilder().add_source(range(3)).aggregate(agg, drop_last=True).add_sink().build()
    with p:
        list(p)
        assert p.stats().stages[0].name == f"aggregate(op={agg!r}, drop_last=True)"


@pytest.mark.parametrize(
    ("agg", "exc", "want_prefix"),
    [
        (Groups(2, fail_at=3), ValueError, [[0, 1]]),
        (Groups(2, fail_flush=True), KeyError, [[0, 1], [2, 3]]),
    ],
)
def test_aggregator_errors_fail_the_pipeline(agg: Groups, exc: type[BaseException], want_prefix: list[Any]) -> None:
    p = PipelineBuilder().add_source(range(5)).aggregate(agg).add_sink().build(max_failures=-1)
    got: list[Any] = []
    with p, pytest.raises(Exception) as ei:  # noqa: PT011 - PipelineFailure or its fallback
        for item in p:
            got.append(item)
    assert got == want_prefix
    errors = getattr(ei.value, "exceptions", ())
    assert any(isinstance(e, exc) for e in errors) or exc.__name__ in str(ei.value)


def test_aggregate_int_unchanged() -> None:
    p = PipelineBuilder().add_source(range(5)).aggregate(2, drop_last=True).add_sink().build()
    with p:
        assert list(p) == [[0, 1], [2, 3]]
