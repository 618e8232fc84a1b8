"""Describing a pipeline step by step: ``PipelineBuilder``, as in SPDL.

Each call appends one frozen config from ``spdl_go.pipeline.defs``
(``SourceConfig``, ``PipeConfig``, ``AggregateConfig``,
``DisaggregateConfig``, ``SinkConfig``); a bad argument fails at the call
that gives it. ``get_config()`` gathers them in a ``PipelineConfig``, and
``build()`` is ``spdl_go.pipeline.build_pipeline(get_config(), ...)``.

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

from collections.abc import AsyncIterable, Callable, Iterable
from concurrent.futures import Executor
from fractions import Fraction
from typing import Any, Literal

from .aggregator import Aggregator
from .ops import NativeOp
from .pipeline._build import BuildConfig, build_pipeline
from .pipeline._hooks import TaskHookFactory
from .pipeline._pipeline import Pipeline
from .pipeline.defs import (
    Aggregate,
    AggregateConfig,
    DisaggregateConfig,
    InterpreterPoolExecutorConfig,
    OutputOrder,
    Pipe,
    PipeConfig,
    PipelineConfig,
    PlacementConfig,
    ProcessPoolExecutorConfig,
    SinkConfig,
    SourceConfig,
    StageConfig,
    _check_regions,
    _MainProcess,
)
from .sources import NativeSource

# The configs live in spdl_go.pipeline.defs (and BuildConfig in
# spdl_go.pipeline); the names stay importable from here.
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
        self._stages: list[StageConfig | PlacementConfig] = []
        self._sink: SinkConfig | None = None

    def add_source(
        self, source: Iterable[Any] | AsyncIterable[Any] | NativeSource, *, continuous: bool = False
    ) -> PipelineBuilder:
        """Sets the source: any Python iterable (``iter()`` is called once per
        epoch), an async iterable (a fresh ``aiter()`` per epoch, iterated on
        an event loop and ``aclose()``-d when it ends, fails, or is left
        unfinished when the next epoch starts) or a native source from
        ``spdl_go.sources``.

        Args:
            source: The iterable, async iterable or native source.
            continuous: False (SPDL's default): the pipeline makes one pass
                over the source. A new iterator (``iter()``,
                ``get_iterator()``) reads on where the previous one
                stopped, so nothing already pulled or prefetched is lost,
                and leaving a loop early does not stop the pipeline; once
                the pass is over, new iterators end at once. True: the
                source is iterated anew epoch after epoch (a native source
                reshuffles for each, as its epoch number grows); each
                iterator reads one epoch and ends at its boundary, and one
                left mid-epoch leaves the rest of that epoch to the next.

        Example:
            >>> p = PipelineBuilder().add_source(range(3), continuous=True).add_sink(2).build()
            >>> list(p), list(p)
            ([0, 1, 2], [0, 1, 2])
        """
        if self._source is not None:
            raise ValueError("add_source was already called; a pipeline has one source")
        self._source = SourceConfig(source, continuous=continuous)
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
                ``build(cpu_budget=)`` (a Python callable at one thread),
                jumps to fill idle cores once its first item shows a
                CPU-bound op, measures its throughput while it
                runs, adds a thread while each one raises it by 5% or more
                (up to ``max_concurrency``, within the budget; past it, up
                to twice the budget, only while the process already uses
                every core of a machine no bigger than the budget, where
                more threads cannot use more CPU) and removes
                one while that costs less than 5% or the threads idle; it
                keeps the choice across epochs and re-checks it now and then. ``stats()`` shows the current
                choice and the tuner's state. Meant for native ops; a Python
                stage on a GIL build gains nothing from more threads, and
                the tuner will find that out.
            max_concurrency: With ``concurrency="auto"``, the most threads the
                stage may use; None means twice the CPU budget.
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
            Pipe(
                op,
                concurrency=concurrency,
                executor=executor,
                name=name,
                output_order=output_order,
                max_failures=max_failures,
                max_concurrency=max_concurrency,
                timeout=timeout,
            )
        )
        return self

    def aggregate(self, num_items: int | Aggregator, /, *, drop_last: bool = False) -> PipelineBuilder:
        """Groups ``num_items`` consecutive items into a list; the last,
        shorter group is dropped if ``drop_last``. Given an ``Aggregator``,
        its ``accumulate`` and ``flush`` decide what goes on (see
        ``spdl_go.pipeline.defs.Aggregate``)."""
        self._stages.append(Aggregate(num_items, drop_last=bool(drop_last)))
        return self

    def disaggregate(self) -> PipelineBuilder:
        """Splits each list item into its elements."""
        self._stages.append(DisaggregateConfig())
        return self

    def to(
        self,
        target: ProcessPoolExecutorConfig | InterpreterPoolExecutorConfig | _MainProcess,
        /,
        *,
        buffer_size: int = 1,
    ) -> PipelineBuilder:
        """Says where the stages added after this call run, until the next
        ``to()``: SPDL's execution regions.

        ``to(ProcessPoolExecutorConfig(max_workers=N))`` opens a region
        whose stages (pipes, native ops, aggregates, disaggregates) run in
        N worker processes; each worker runs them as one pipeline of its
        own, the engine included, so values pass from stage to stage inside
        the worker and need not pickle. ``to(MAIN_PROCESS)`` closes it.
        Items enter the workers pickled, whole messages going to the
        worker with the least waiting; results come back in the order they
        finish (so no stage in a region may use ``output_order="input"``),
        tensors and large numpy arrays through shared memory without a
        copy, as with ``run_pipeline_in_subprocess``. Each stage's
        ``concurrency`` applies in each worker, and ``build(max_failures=)``
        applies in each worker's pipeline. The workers start when the
        pipeline is built (a stage that does not pickle, or a module a
        worker cannot import, fails the build, naming it), serve every
        epoch, and stop when the pipeline is closed.

        ``to(InterpreterPoolExecutorConfig(max_workers=N))`` (Python 3.14+)
        runs the region's Python ops in N subinterpreters of this process,
        each with its own GIL (``concurrent.futures.InterpreterPoolExecutor``);
        native ops and aggregates stay in the engine.

        Args:
            target: ``ProcessPoolExecutorConfig``,
                ``InterpreterPoolExecutorConfig`` or ``MAIN_PROCESS`` (from
                ``spdl_go.pipeline.defs``).
            buffer_size: At most this many items cross this boundary in one
                message: the marker that opens a region sizes what goes in,
                the one that closes it what comes back. A partial message is
                sent at the end of each epoch; stages still see single
                items.

        Raises:
            TypeError: ``target`` is not one of those (a live
                ``concurrent.futures.Executor`` belongs in
                ``pipe(executor=)``).
            ValueError: ``buffer_size`` is not a positive int.
        """
        self._stages.append(PlacementConfig(target, buffer_size=buffer_size))
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

    def get_config(self) -> PipelineConfig:
        """The pipeline described so far, as the ``PipelineConfig``
        ``spdl_go.pipeline.build_pipeline`` takes.

        Raises:
            RuntimeError: the source or the sink is not set, or a
                subinterpreter region needs Python 3.14.
            ValueError: a region (``to()``) is empty, holds an
                ``output_order="input"`` stage, or is not closed with
                ``to(MAIN_PROCESS)``.
        """
        if self._source is None:
            raise RuntimeError("Source is not set. Did you call `add_source`?")
        if self._sink is None:
            raise RuntimeError("Sink is not set. Did you call `add_sink`?")
        _check_regions(self._stages)
        return PipelineConfig(self._source, tuple(self._stages), self._sink)

    def build(
        self,
        *,
        num_threads: int | None = None,
        max_failures: int | Fraction = -1,
        queue_size: int | None = None,
        report_interval: float | None = None,
        cpu_budget: int | None = None,
        report_stats_interval: float | None = None,
        task_hook_factory: TaskHookFactory | None = None,
    ) -> Pipeline:
        """Builds the pipeline (it starts on first iteration or ``start()``):
        ``build_pipeline(self.get_config(), ...)`` with these arguments.

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
                may use together (exceeded only while the process uses
                every core of a machine no bigger than the budget: see
                ``concurrency``); None means ``os.cpu_count()``.
            task_hook_factory: Makes each stage's ``TaskHook`` objects from
                its ``StageInfo``; None (the default) means no hooks (see
                ``build_pipeline``).
        """
        return build_pipeline(
            self.get_config(),
            num_threads=num_threads,
            max_failures=max_failures,
            report_stats_interval=report_stats_interval,
            queue_size=queue_size,
            cpu_budget=cpu_budget,
            report_interval=report_interval,
            task_hook_factory=task_hook_factory,
        )
