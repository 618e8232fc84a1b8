"""Describing a pipeline: the builder and the typed stage configs it keeps.

``PipelineBuilder`` appends one frozen config per call (``SourceConfig``,
``PipeConfig``, ``AggregateConfig``, ``DisaggregateConfig``, ``SinkConfig``,
``BuildConfig``); each config has one ``to_spec()`` that returns the JSON
the engine takes. The engine checks the values (``spdl_spec_check``, with
the code that reads them for the build) when a config is constructed, so
a bad argument fails at the call that gives it; Python checks only what
Go cannot see (callables, iterables, the reporter's interval). ``build()``
gathers them in a ``PipelineConfig``, registers the Python callables with
the callback registry, and hands the spec to ``Pipeline``.

Example:
    >>> from spdl_go import PipelineBuilder
    >>> pipeline = (
    ...     PipelineBuilder()
    ...     .add_source(range(10))
    ...     .pipe(lambda x: x * x, concurrency=4, output_order="input")
    ...     .aggregate(4)
    ...     .add_sink(buffer_size=2)
    ...     .build(num_threads=4)
    ... )
    >>> list(pipeline)
    [[0, 1, 4, 9], [16, 25, 36, 49], [64, 81]]
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import AsyncIterable, Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from . import _callbacks, _lib
from .ops import NativeOp
from .pipeline import Pipeline
from .sources import NativeSource

__all__ = [
    "AggregateConfig",
    "BuildConfig",
    "DisaggregateConfig",
    "OutputOrder",
    "PipeConfig",
    "PipelineBuilder",
    "PipelineConfig",
    "SinkConfig",
    "SourceConfig",
    "StageConfig",
]

OutputOrder = Literal["completion", "input"]


def _arg(v: object) -> object:
    """An argument as the user gave it, for the spec: JSON's scalars pass
    as they are, anything else as its repr (Go names it when it refuses)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float) and math.isfinite(v):
        return v
    return repr(v)


def _limit(v: object) -> object:
    """A max_failures for the spec: a Fraction (a failure rate) travels as
    {"fraction": [num, den]}; anything else as ``_arg`` shapes it."""
    if isinstance(v, Fraction):
        return {"fraction": [v.numerator, v.denominator]}
    return _arg(v)


def _check(part: str, spec: dict[str, Any]) -> None:
    """Asks Go to check a part of the spec ("stage", "pipeline"); raises
    ValueError with its message."""
    raw = json.dumps(spec).encode()
    _lib.call(_lib.LIB.spdl_spec_check, part.encode(), raw, len(raw), error=ValueError)


# ---- the configs -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SourceConfig:
    """Where items come from: a Python iterable (``iter()`` is called once
    per epoch), an async iterable (a fresh ``aiter()`` each epoch, run on
    an event loop; ``aclose()`` when it ends, fails or the next epoch
    starts first) or a native source from ``spdl_go.sources``."""

    source: Iterable[Any] | AsyncIterable[Any] | NativeSource

    def __post_init__(self) -> None:
        if not isinstance(self.source, (NativeSource, Iterable, AsyncIterable)):
            raise TypeError(
                f"add_source: expected an iterable, an async iterable or a native source, got {type(self.source).__name__}"
            )

    def to_spec(self, source_id: int | None = None) -> dict[str, Any]:
        """The source's spec; a Python source names its registry id."""
        if isinstance(self.source, NativeSource):
            return self.source.spec()
        return {"kind": "python", "id": source_id}


@dataclass(frozen=True, slots=True)
class PipeConfig:
    """A stage that applies ``op`` to each item (see ``PipelineBuilder.pipe``).

    ``name`` None means the op's name. A container ``op`` (one with
    ``__getitem__`` that is not callable: a dict, list, tuple) is kept as
    its ``__getitem__``, so the stage is named ``"__getitem__"``.
    """

    op: Callable[[Any], Any] | NativeOp
    name: str | None = None
    concurrency: int | Literal["auto"] = 1
    max_concurrency: int | None = None
    output_order: OutputOrder = "completion"
    max_failures: int | Fraction | None = None
    timeout: float | None = None
    executor: Executor | None = None

    def __post_init__(self) -> None:
        op = self.op
        if not isinstance(op, NativeOp) and not callable(op):
            if not hasattr(op, "__getitem__"):
                raise TypeError(
                    f"pipe: op must be callable, a container (dict, list, tuple) or a spdl_go.ops op, got {type(op).__name__}"
                )
            op = op.__getitem__
            object.__setattr__(self, "op", op)
        if not isinstance(op, NativeOp):
            _check_python_op(op, self.executor)
        elif self.executor is not None:
            raise ValueError("pipe: executor applies only to a Python op, not to a native op")
        if self.name is None:
            name = op.name if isinstance(op, NativeOp) else getattr(op, "__name__", type(op).__name__)
            object.__setattr__(self, "name", name)
        _check("stage", self.to_spec())

    @property
    def native(self) -> bool:
        """Whether the op runs in Go (a ``spdl_go.ops`` op)."""
        return isinstance(self.op, NativeOp)

    @property
    def waits(self) -> bool:
        """Whether the Python op's calls only wait (an async op on an event
        loop, a sync op run in ``executor``): they do not count against
        ``build(num_threads=)``."""
        op = self.op
        if isinstance(op, NativeOp):
            return False
        return self.executor is not None or _callbacks.is_async_op(op) or _callbacks.is_async_gen_op(op)

    def to_spec(self, op_id: int | None = None) -> dict[str, Any]:
        """The stage's spec; a Python op names its registry id."""
        if isinstance(self.op, NativeOp):
            op = self.op.spec()
        else:
            op = {"kind": "python", "id": op_id}
            if self.waits:
                op["io_bound"] = True
        return {
            "kind": "pipe",
            "name": _arg(self.name),
            "concurrency": _arg(self.concurrency),
            "max_concurrency": _arg(self.max_concurrency),
            "timeout_s": _arg(self.timeout),
            "output_order": _arg(self.output_order),
            "max_failures": _limit(self.max_failures),
            "op": op,
        }


def _check_python_op(op: Callable[[Any], Any], executor: Executor | None) -> None:
    """What only Python can see about a Python op: an async op cannot take
    an executor, and an op must accept one positional argument."""
    is_async = _callbacks.is_async_op(op) or _callbacks.is_async_gen_op(op)
    if executor is not None:
        if is_async:
            raise ValueError("pipe: executor cannot be given with an async op (it already runs on an event loop)")
        if not isinstance(executor, Executor):
            raise TypeError(f"pipe: executor must be a concurrent.futures.Executor, got {type(executor).__name__}")
    try:
        sig = inspect.signature(op)
    except (TypeError, ValueError):
        return  # some builtins have no signature: they will tell at the first call
    try:
        sig.bind(None)
    except TypeError as e:
        raise TypeError(
            f"pipe: op {getattr(op, '__name__', op)!r} must accept one positional argument (the item): {e}"
        ) from None


@dataclass(frozen=True, slots=True)
class AggregateConfig:
    """Groups ``size`` consecutive items into a list; the last, shorter
    group is dropped if ``drop_last``."""

    size: int
    drop_last: bool = False

    def __post_init__(self) -> None:
        _check("stage", self.to_spec())

    def to_spec(self) -> dict[str, Any]:
        return {"kind": "aggregate", "num_items": _arg(self.size), "drop_last": bool(self.drop_last)}


@dataclass(frozen=True, slots=True)
class DisaggregateConfig:
    """Splits each list item into its elements."""

    def to_spec(self) -> dict[str, Any]:
        return {"kind": "disaggregate"}


StageConfig = PipeConfig | AggregateConfig | DisaggregateConfig
"""One stage of a pipeline, in the order the builder added it."""


@dataclass(frozen=True, slots=True)
class SinkConfig:
    """How many finished items are prefetched ahead of the consumer."""

    buffer_size: int = 3

    def __post_init__(self) -> None:
        _check("pipeline", self.to_spec())

    def to_spec(self) -> dict[str, Any]:
        return {"buffer_size": _arg(self.buffer_size)}


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


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """A whole pipeline: what ``PipelineBuilder.build`` turns into a ``Pipeline``."""

    source: SourceConfig
    stages: tuple[StageConfig, ...] = ()
    sink: SinkConfig = SinkConfig()
    build: BuildConfig = BuildConfig()

    def to_spec(self, source_id: int | None = None, op_ids: Sequence[int | None] = ()) -> dict[str, Any]:
        """The spec ``spdl_pipeline_new`` takes. ``source_id`` is the Python
        source's registry id; ``op_ids[i]`` that of stage i's Python op."""
        ids = list(op_ids) + [None] * (len(self.stages) - len(op_ids))
        stages = [
            s.to_spec(i) if isinstance(s, PipeConfig) else s.to_spec() for s, i in zip(self.stages, ids, strict=True)
        ]
        return {
            "stages": stages,
            **self.sink.to_spec(),
            **self.build.to_spec(),
            "source": self.source.to_spec(source_id),
        }

    def encoding(self, start: int) -> tuple[int, bool]:
        """For output emitted before stage ``start``: how many disaggregates
        will split it before a consumer sees it, and whether that consumer
        is native (the sink is the user's Python code)."""
        depth = 0
        splits = 0
        for st in self.stages[start:]:
            if isinstance(st, AggregateConfig):
                depth += 1
            elif isinstance(st, DisaggregateConfig):
                if depth:
                    depth -= 1
                else:
                    splits += 1
            else:
                return splits, st.native
        return splits, False


def _launch(config: PipelineConfig) -> Pipeline:
    """Registers the config's Python callables and builds the pipeline;
    ``Pipeline`` unregisters them when it fails or is closed."""
    source_ids: list[int] = []
    function_ids: list[int] = []
    source_id: int | None = None
    src = config.source.source
    if not isinstance(src, NativeSource):
        source_id = _callbacks.register_source(src, _callbacks.make_encoder(*config.encoding(0)))
        source_ids.append(source_id)
    op_ids: list[int | None] = []
    for i, st in enumerate(config.stages):
        fid: int | None = None
        if isinstance(st, PipeConfig) and not isinstance(st.op, NativeOp):
            fid = _callbacks.register_stage(st.op, _callbacks.make_encoder(*config.encoding(i + 1)), st.executor)
            function_ids.append(fid)
        op_ids.append(fid)
    return Pipeline(config.to_spec(source_id, op_ids), source_ids, function_ids, config.build.report_interval)


# ---- the builder -------------------------------------------------------------
class PipelineBuilder:
    """Assembles a pipeline step by step, like SPDL's builder.

    Example:
        >>> pipeline = (
        ...     PipelineBuilder()
        ...     .add_source(paths)
        ...     .pipe(load, concurrency=8)
        ...     .aggregate(32, drop_last=True)
        ...     .pipe(spdl_go.ops.collate())
        ...     .add_sink(buffer_size=3)
        ...     .build(num_threads=8)
        ... )
    """

    def __init__(self) -> None:
        self._source: SourceConfig | None = None
        self._stages: list[StageConfig] = []
        self._sink: SinkConfig | None = None

    def add_source(self, source: Iterable[Any] | AsyncIterable[Any] | NativeSource) -> PipelineBuilder:
        """Sets the source: any Python iterable (``iter()`` is called once per
        epoch), an async iterable (a fresh ``aiter()`` per epoch, iterated on
        an event loop and ``aclose()``-d when it ends, fails, or is left
        unfinished when the next epoch starts) or a native source from
        ``spdl_go.sources``."""
        if self._source is not None:
            raise ValueError("add_source was already called; a pipeline has one source")
        self._source = SourceConfig(source)
        return self

    def pipe(
        self,
        op: Callable[[Any], Any] | NativeOp | Any,
        *,
        concurrency: int | Literal["auto"] = 1,
        max_concurrency: int | None = None,
        name: str | None = None,
        output_order: OutputOrder = "completion",
        max_failures: int | Fraction | None = None,
        timeout: float | None = None,
        executor: Executor | None = None,
    ) -> PipelineBuilder:
        """Adds a stage that applies ``op`` to each item.

        Args:
            op: A Python callable taking one argument (a function, an async
                function, a generator or async generator function), a
                container (dict, list, tuple: the stage applies
                ``op[item]``, and a missing key fails the item), or a native
                op from ``spdl_go.ops``. A result of None passes nothing on
                for that item. Each value a generator yields goes on as its
                own item as soon as it is yielded (with
                ``output_order="input"``, those of one input stay together,
                in the input's place). Async ops run on an event loop per
                worker thread, ``concurrency`` at once, and do not count
                against ``build(num_threads=)``.
            concurrency: How many items the stage works on at once, or
                ``"auto"``: the engine starts the stage at its share of
                ``build(cpu_budget=)``, measures its throughput while it
                runs, adds a thread while each one raises it by 5% or more
                (up to ``max_concurrency``, within the budget) and removes
                one while that costs less than 5% or the threads idle; it
                keeps the choice across epochs and re-checks it now and then. ``stats()`` shows the current
                choice and the tuner's state. Meant for native ops; a Python
                stage on a GIL build gains nothing from more threads, and
                the tuner will find that out.
            max_concurrency: With ``concurrency="auto"``, the most threads the
                stage may use; None means the CPU budget.
            name: Shown in stats and errors; defaults to the op's name.
            output_order: "completion" emits items as they finish; "input"
                keeps the order they arrived in.
            max_failures: This stage's own limit, which replaces
                ``build(max_failures=)`` for it: an int is how many items it
                may fail (a negative one: no limit); a ``fractions.Fraction``
                in (0, 1] is the rate of failed calls it may reach, checked
                once it has made 100 calls (the stage fails when
                failures / calls > the fraction). None (the default): the
                stage is held to the pipeline's limit. A failed item is
                dropped and its error is kept in ``stats().recent_errors``.
            timeout: Seconds one call of ``op`` may take; a call that runs
                longer fails its item ("timed out"). Python code cannot be
                interrupted, so a Python call past its timeout is abandoned:
                the stage goes on with a fresh thread, ``stop()`` does not
                wait for it, and its result, if it ever returns, is dropped
                (``stats()`` counts these as ``abandoned``). None: no limit.
                A generator's values after its first call are not timed.
            executor: A ``concurrent.futures.Executor`` (thread or process
                pool) to run a sync ``op`` in: the stage's thread waits on
                the future without holding the GIL, and such calls do not
                count against ``build(num_threads=)``. Not allowed with an
                async op.
        """
        self._stages.append(
            PipeConfig(
                op,
                name=name,
                concurrency=concurrency,
                max_concurrency=max_concurrency,
                output_order=output_order,
                max_failures=max_failures,
                timeout=timeout,
                executor=executor,
            )
        )
        return self

    def aggregate(self, num_items: int, /, *, drop_last: bool = False) -> PipelineBuilder:
        """Groups ``num_items`` consecutive items into a list; the last,
        shorter group is dropped if ``drop_last``."""
        self._stages.append(AggregateConfig(num_items, drop_last=bool(drop_last)))
        return self

    def disaggregate(self) -> PipelineBuilder:
        """Splits each list item into its elements."""
        self._stages.append(DisaggregateConfig())
        return self

    def add_sink(self, buffer_size: int = 3) -> PipelineBuilder:
        """Sets how many finished items are prefetched ahead of the
        consumer; ``build()`` needs it, as in SPDL.

        Raises:
            ValueError: the sink was already set.
        """
        if self._sink is not None:
            raise ValueError("Sink is already set.")
        self._sink = SinkConfig(buffer_size)
        return self

    def build(
        self,
        *,
        num_threads: int | None = None,
        max_failures: int | Fraction = -1,
        queue_size: int | None = None,
        report_interval: float | None = None,
        cpu_budget: int | None = None,
        report_stats_interval: float | None = None,
    ) -> Pipeline:
        """Builds the pipeline (it starts on first iteration or ``start()``).

        Args:
            num_threads: At most this many ops run at once over all stages;
                None sets no cap beyond each stage's concurrency.
            max_failures: The limit of every stage without one of its own
                (``pipe(max_failures=)``), counted over the whole pipeline:
                how many items may fail (a negative int: no limit), or a
                ``fractions.Fraction`` in (0, 1], the rate of failed calls
                over all stages, checked once 100 calls were made.
            queue_size: Capacity of the queue between two stages.
            report_interval: If set, log ``stats().format()`` (logger
                "spdl_go", level INFO) every this many seconds while an
                epoch runs. An alias of ``report_stats_interval``.
            report_stats_interval: SPDL's name for ``report_interval``
                (give one of them); a value <= 0 (SPDL's default -1)
                means no reports.
            cpu_budget: The most threads all ``concurrency="auto"`` stages
                may use together; None means ``os.cpu_count()``.
        """
        if self._source is None:
            raise ValueError("build: add_source was not called")
        if self._sink is None:
            raise RuntimeError("Sink is not set. Did you call `add_sink`?")
        if report_stats_interval is not None:
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
        return _launch(PipelineConfig(self._source, tuple(self._stages), self._sink, settings))
