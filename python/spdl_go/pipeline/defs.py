"""Declarative pipelines: the stage configs and the factories that make them.

A pipeline is a ``SourceConfig``, a sequence of stage configs and a
``SinkConfig``, gathered in a ``PipelineConfig`` that
``spdl_go.pipeline.build_pipeline`` turns into a ``Pipeline``.
``PipelineBuilder`` makes the same objects, one per call, and its
``get_config()`` returns them.

``Pipe``, ``Aggregate`` and ``Disaggregate`` make the stage configs with
the same arguments as the builder's ``pipe``, ``aggregate`` and
``disaggregate``. The engine checks the values (``spdl_spec_check``, with
the code that reads them for the build) when a config is constructed, so
a bad argument fails where it is given; Python checks only what Go cannot
see (callables, iterables, executors).

A config made only of native ops (``spdl_go.ops``), native sources
(``spdl_go.sources``) and region markers without an initializer can be
saved as JSON (``PipelineConfig.to_json``) and read back
(``PipelineConfig.from_json``).

Example:
    >>> from spdl_go import ops, sources
    >>> from spdl_go.pipeline import build_pipeline
    >>> from spdl_go.pipeline.defs import Aggregate, Pipe, PipelineConfig, SinkConfig, SourceConfig
    >>> config = PipelineConfig(
    ...     src=SourceConfig(sources.arange(6)),
    ...     pipes=[Pipe(ops.identity(), concurrency=2, output_order="input"), Aggregate(4)],
    ...     sink=SinkConfig(buffer_size=2),
    ... )
    >>> [list(b) for b in build_pipeline(config, num_threads=2)]
    [[0, 1, 2, 3], [4, 5]]
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import sys
from collections.abc import AsyncIterable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from .. import _callbacks, _lib
from ..aggregator import Aggregator, AggregatorOp
from ..ops import NativeOp
from ..sources import NativeSource

__all__ = [
    "Aggregate",
    "AggregateConfig",
    "Aggregator",
    "Disaggregate",
    "DisaggregateConfig",
    "ExecutorConfig",
    "InterpreterPoolExecutorConfig",
    "MAIN_PROCESS",
    "Merge",
    "MergeConfig",
    "OutputOrder",
    "PathVariants",
    "PathVariantsConfig",
    "Pipe",
    "PipeConfig",
    "PipelineConfig",
    "PlacementConfig",
    "ProcessPoolExecutorConfig",
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
    starts first) or a native source from ``spdl_go.sources``.

    ``continuous`` (SPDL's flag) chooses what iterating the pipeline
    again means. False: the pipeline makes one pass over the source, and
    every iterator reads on from where the previous one left off. True:
    the source is iterated anew epoch after epoch (a native source
    reshuffles), and each iterator reads one epoch (see
    ``PipelineBuilder.add_source``)."""

    source: Iterable[Any] | AsyncIterable[Any] | NativeSource
    continuous: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.source, (NativeSource, Iterable, AsyncIterable)):
            raise TypeError(
                f"add_source: expected an iterable, an async iterable or a native source, got {type(self.source).__name__}"
            )
        if not isinstance(self.continuous, bool):
            raise TypeError(f"add_source: continuous must be a bool, got {type(self.continuous).__name__}")

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
            object.__setattr__(self, "name", _op_name(op))
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
            if getattr(self.op, "flushes", False) is True:  # an Aggregator (aggregator.AggregatorOp)
                op["flush"] = True
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


def _op_name(op: Callable[[Any], Any] | NativeOp) -> str:
    """A stage's default name: a native op's name, a Python callable's
    ``__name__`` (that of the function a ``functools.partial`` wraps), or
    else its type's name."""
    if isinstance(op, NativeOp):
        return op.name
    while isinstance(op, functools.partial):
        op = op.func
    return str(getattr(op, "__name__", type(op).__name__))


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


@dataclass(frozen=True, slots=True)
class PathVariantsConfig:
    """A stage that sends each item down one of several paths and merges
    what the paths produce (see ``PathVariants``)."""

    name: str
    router: Callable[[Any], Any]
    paths: Sequence[Sequence[StageConfig]]
    """The paths, each a sequence of stage configs; kept as tuples."""
    batched: bool = False

    def __post_init__(self) -> None:
        if not callable(self.router):
            raise ValueError(f"PathVariants: router must be callable, got {type(self.router).__name__}")
        if not isinstance(self.name, str):
            raise TypeError(f"PathVariants: name must be a str, got {type(self.name).__name__}")
        paths = self.paths
        if isinstance(paths, (str, bytes)) or not isinstance(paths, Iterable):
            raise TypeError(f"PathVariants: paths must be a sequence of paths, got {type(paths).__name__}")
        paths = tuple(tuple(p) if isinstance(p, Iterable) else p for p in paths)
        if not paths:
            raise ValueError("PathVariants: paths must hold at least 1 path")
        for i, path in enumerate(paths):
            if not isinstance(path, tuple):
                raise TypeError(
                    f"PathVariants: paths[{i}] must be a sequence of stage configs, got {type(path).__name__}"
                )
            if not path:
                raise ValueError(f"PathVariants: paths[{i}] is empty; a path needs at least one stage config")
            for j, cfg in enumerate(path):
                if not isinstance(cfg, _STAGE_TYPES):
                    raise ValueError(
                        f"PathVariants: paths[{i}][{j}] must be a PipeConfig, AggregateConfig, DisaggregateConfig "
                        f"or PathVariantsConfig, got {type(cfg).__name__}"
                    )
        object.__setattr__(self, "paths", paths)
        object.__setattr__(self, "batched", bool(self.batched))


StageConfig = PipeConfig | AggregateConfig | DisaggregateConfig | PathVariantsConfig
"""One stage of a pipeline, in the order the builder added it."""

_STAGE_TYPES = (PipeConfig, AggregateConfig, DisaggregateConfig, PathVariantsConfig)


# ---- execution regions (PipelineBuilder.to) ------------------------------------
@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    """A pool of workers for an execution region (SPDL's base class):
    ``ProcessPoolExecutorConfig`` or ``InterpreterPoolExecutorConfig``
    given to ``PipelineBuilder.to``."""

    max_workers: int | None = None
    """Workers in the pool; None: ``os.cpu_count()``."""
    initializer: Callable[..., object] | None = None
    """Called once in each worker, with ``initargs``, before any item."""
    initargs: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        name = type(self).__name__
        n = self.max_workers
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"{name}: max_workers must be a positive int or None, got {n!r}")
        if self.initializer is not None and not callable(self.initializer):
            raise TypeError(f"{name}: initializer must be callable or None, got {type(self.initializer).__name__}")
        if not isinstance(self.initargs, tuple):
            raise TypeError(f"{name}: initargs must be a tuple, got {type(self.initargs).__name__}")

    def workers(self) -> int:
        """How many workers the pool has."""
        import os

        return self.max_workers or os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class ProcessPoolExecutorConfig(ExecutorConfig):
    """The stages after ``.to(ProcessPoolExecutorConfig(...))``, up to
    ``.to(MAIN_PROCESS)``, run in a pool of worker processes: each worker
    runs them as one pipeline of its own, so the values between them stay
    in the worker and need not pickle; only what enters and leaves the
    region crosses (see ``PipelineBuilder.to``).

    ``mp_context`` is the start method: "spawn" (None, the default) or
    "forkserver". "fork" is refused: the Go runtime does not survive it.
    """

    mp_context: str | None = None

    def __post_init__(self) -> None:
        ExecutorConfig.__post_init__(self)
        if self.mp_context not in (None, "spawn", "forkserver"):
            raise ValueError(
                f"ProcessPoolExecutorConfig: mp_context must be 'spawn', 'forkserver' or None, got "
                f"{self.mp_context!r} (a forked process has lost the Go runtime's threads)"
            )


@dataclass(frozen=True, slots=True)
class InterpreterPoolExecutorConfig(ExecutorConfig):
    """The Python stages after ``.to(InterpreterPoolExecutorConfig(...))``,
    up to ``.to(MAIN_PROCESS)``, run in subinterpreters of this process
    (``concurrent.futures.InterpreterPoolExecutor``, Python 3.14+), each
    with its own GIL. Their modules must load in a subinterpreter
    (numpy and torch do not), which ``build_pipeline`` checks."""


@dataclass(frozen=True, slots=True)
class _MainProcess:
    """The type of ``MAIN_PROCESS``."""

    def __repr__(self) -> str:
        return "MAIN_PROCESS"


MAIN_PROCESS = _MainProcess()
"""``.to(MAIN_PROCESS)`` closes an execution region: the stages after it
run in the main process again."""


@dataclass(frozen=True, slots=True)
class PlacementConfig:
    """Where the stages after it run, until the next one (what
    ``PipelineBuilder.to`` appends). ``buffer_size``: at most this many
    items cross this boundary in one message (the stages on either side
    still see single items)."""

    target: ProcessPoolExecutorConfig | InterpreterPoolExecutorConfig | _MainProcess
    name: str = "placement"
    buffer_size: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.target, (ProcessPoolExecutorConfig, InterpreterPoolExecutorConfig, _MainProcess)):
            if isinstance(self.target, Executor):
                raise TypeError(
                    "to: takes a ProcessPoolExecutorConfig, InterpreterPoolExecutorConfig or MAIN_PROCESS, not a "
                    f"live executor ({type(self.target).__name__}); to run one stage in an executor, use "
                    "pipe(executor=...)"
                )
            raise TypeError(
                "to: the target must be a ProcessPoolExecutorConfig, InterpreterPoolExecutorConfig or MAIN_PROCESS, "
                f"got {type(self.target).__name__}"
            )
        b = self.buffer_size
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise ValueError(f"to: buffer_size must be a positive int, got {b!r}")

    def __repr__(self) -> str:
        extra = f", buffer_size={self.buffer_size}" if self.buffer_size != 1 else ""
        return f"{self.name}({self.target!r}{extra})"


def _has_ordered(st: Any) -> bool:
    if isinstance(st, PipeConfig):
        return st.output_order == "input"
    if isinstance(st, PathVariantsConfig):
        return any(_has_ordered(s) for path in st.paths for s in path)
    return False


def _check_regions(pipes: Sequence[Any]) -> None:
    """The rules of execution regions, checked by ``get_config()`` and
    ``build_pipeline``: a region holds at least one stage, keeps no
    ``output_order="input"`` stage (its workers finish items in any order),
    is closed by ``.to(MAIN_PROCESS)`` before the sink, and a
    subinterpreter region needs Python 3.14."""
    open_at: int | None = None
    stages = 0
    for i, p in enumerate(pipes):
        if isinstance(p, PlacementConfig):
            if open_at is not None and stages == 0:
                raise ValueError(
                    f"to: the region opened at pipes[{open_at}] has no stages; add stages before pipes[{i}] "
                    "or remove the marker"
                )
            if isinstance(p.target, InterpreterPoolExecutorConfig) and sys.version_info < (3, 14):
                raise RuntimeError(
                    "to: a subinterpreter region (InterpreterPoolExecutorConfig) needs Python 3.14 or later; "
                    f"this is {sys.version_info.major}.{sys.version_info.minor}"
                )
            open_at = None if isinstance(p.target, _MainProcess) else i
            stages = 0
        elif open_at is not None:
            stages += 1
            if _has_ordered(p):
                raise ValueError(
                    f"to: stage {getattr(p, 'name', type(p).__name__)!r} (pipes[{i}]) has output_order='input', "
                    "which a region cannot keep: its workers finish items in any order"
                )
    if open_at is not None:
        if stages == 0:
            raise ValueError(f"to: the region opened at pipes[{open_at}] has no stages")
        raise ValueError(
            f"to: the region opened at pipes[{open_at}] is not closed; call .to(MAIN_PROCESS) before add_sink "
            "(the sink is in the main process)"
        )


@dataclass(frozen=True, slots=True)
class SinkConfig:
    """How many finished items are prefetched ahead of the consumer."""

    buffer_size: int = 3

    def __post_init__(self) -> None:
        _check("pipeline", self.to_spec())

    def to_spec(self) -> dict[str, Any]:
        return {"buffer_size": _arg(self.buffer_size)}


@dataclass(frozen=True, slots=True)
class MergeConfig:
    """A source that merges the outputs of several pipelines (see ``Merge``)."""

    pipeline_configs: Sequence[PipelineConfig]
    """The pipelines to merge; kept as a tuple."""

    def __post_init__(self) -> None:
        configs = self.pipeline_configs
        if isinstance(configs, (str, bytes)) or not isinstance(configs, Iterable):
            raise TypeError(
                f"Merge: pipeline_configs must be a sequence of PipelineConfig, got {type(configs).__name__}"
            )
        configs = tuple(configs)
        if not configs:
            raise ValueError("Merge: pipeline_configs must hold at least one PipelineConfig")
        for i, c in enumerate(configs):
            if not isinstance(c, PipelineConfig):
                raise TypeError(f"Merge: pipeline_configs[{i}] must be a PipelineConfig, got {type(c).__name__}")
        object.__setattr__(self, "pipeline_configs", configs)


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """A whole pipeline: its source, its stages in order, and its sink.

    ``spdl_go.pipeline.build_pipeline`` builds it; the settings of the run
    (threads, failure limit, queue size) are that function's arguments.
    ``pipes`` may be any sequence; it is kept as a tuple.
    """

    src: SourceConfig | MergeConfig
    pipes: Sequence[StageConfig | PlacementConfig]
    sink: SinkConfig

    def __post_init__(self) -> None:
        if not isinstance(self.src, (SourceConfig, MergeConfig)):
            raise TypeError(
                f"PipelineConfig: src must be a SourceConfig or a MergeConfig, got {type(self.src).__name__}"
            )
        if isinstance(self.pipes, (str, bytes)) or not isinstance(self.pipes, Iterable):
            raise TypeError(
                f"PipelineConfig: pipes must be a sequence of stage configs, got {type(self.pipes).__name__}"
            )
        pipes = tuple(self.pipes)
        for i, p in enumerate(pipes):
            if not isinstance(p, (*_STAGE_TYPES, PlacementConfig)):
                raise TypeError(
                    f"PipelineConfig: pipes[{i}] must be a PipeConfig, AggregateConfig, DisaggregateConfig, "
                    "PathVariantsConfig or PlacementConfig (see Pipe, Aggregate, Disaggregate, PathVariants, "
                    f"PipelineBuilder.to), got {type(p).__name__}"
                )
        object.__setattr__(self, "pipes", pipes)
        if not isinstance(self.sink, SinkConfig):
            raise TypeError(f"PipelineConfig: sink must be a SinkConfig, got {type(self.sink).__name__}")

    def to_spec(
        self,
        source_id: int | None = None,
        op_ids: Sequence[int | None] = (),
        settings: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The spec ``spdl_pipeline_new`` takes. ``source_id`` is the Python
        source's registry id; ``op_ids[i]`` that of stage i's Python op;
        ``settings`` the build's settings (``BuildConfig.to_spec()``)."""
        if isinstance(self.src, MergeConfig):
            raise TypeError("PipelineConfig.to_spec: a MergeConfig source is built by build_pipeline")
        if any(isinstance(p, (PathVariantsConfig, PlacementConfig)) for p in self.pipes):
            raise TypeError(
                "PipelineConfig.to_spec: a PathVariantsConfig stage or a region (PlacementConfig) is built by "
                "build_pipeline"
            )
        ids = list(op_ids) + [None] * (len(self.pipes) - len(op_ids))
        stages = [
            s.to_spec(i) if isinstance(s, PipeConfig) else s.to_spec()  # type: ignore[union-attr]
            for s, i in zip(self.pipes, ids, strict=True)
        ]
        return {
            "stages": stages,
            **self.sink.to_spec(),
            **(settings or {}),
            "source": self.src.to_spec(source_id),
        }

    def encoding(self, start: int, served: bool = False) -> tuple[int, bool | None]:
        """For output emitted before stage ``start``: how many disaggregates
        will split it before a consumer sees it, and whether that consumer
        is native (the sink is the user's Python code; with ``served``, a
        worker process's server, None)."""
        depth = 0
        splits = 0
        for st in self.pipes[start:]:
            if isinstance(st, AggregateConfig):
                depth += 1
            elif isinstance(st, DisaggregateConfig):
                if depth:
                    depth -= 1
                else:
                    splits += 1
            elif isinstance(st, (PathVariantsConfig, PlacementConfig)):
                return splits, False  # its router is Python code; a region's input crosses through Python
            else:
                return splits, st.native
        return splits, None if served else False

    # ---- JSON ----------------------------------------------------------------
    def to_json(self, **kwargs: Any) -> str:
        """The config as JSON, for a config made only of native ops and a
        native source; ``kwargs`` go to ``json.dumps`` (e.g. ``indent=2``).
        ``PipelineConfig.from_json`` reads it back. Options are written as
        given, storage credentials included: treat the text as a secret
        if they are in it.

        Raises:
            TypeError: the source or a stage holds Python code (an
                iterable, a callable, an executor); the message names it.
        """
        return json.dumps(self.to_dict(), **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form ``to_json`` writes (see there)."""
        return self._to_dict("PipelineConfig.to_json:")

    def _to_dict(self, where: str) -> dict[str, Any]:
        if isinstance(self.src, MergeConfig):
            src_dict: dict[str, Any] = {
                "merge": [c._to_dict(f"{where} src.merge[{i}]:") for i, c in enumerate(self.src.pipeline_configs)]
            }
        else:
            src = self.src.source
            if not isinstance(src, NativeSource):
                raise TypeError(
                    f"{where} the source is Python code ({type(src).__name__}); "
                    "only a native source (spdl_go.sources) can be serialised"
                )
            src_dict = {
                "kind": src.kind,
                "options": src.options,
                "resumes": src.resumes,
                "continuous": self.src.continuous,
            }
        pipes: list[dict[str, Any]] = []
        for i, st in enumerate(self.pipes):
            if isinstance(st, PipeConfig):
                if not isinstance(st.op, NativeOp):
                    raise TypeError(
                        f"{where} stage {i} ({st.name!r}) runs a Python callable; "
                        "only native ops (spdl_go.ops) can be serialised"
                    )
                pipes.append(
                    {
                        "type": "pipe",
                        "op": {"name": st.op.name, "options": st.op.options},
                        "name": st.name,
                        "concurrency": st.concurrency,
                        "max_concurrency": st.max_concurrency,
                        "output_order": st.output_order,
                        "max_failures": _limit(st.max_failures),
                        "timeout": st.timeout,
                    }
                )
            elif isinstance(st, AggregateConfig):
                if not isinstance(st.size, int):
                    raise TypeError(
                        f"{where} stage {i} (aggregate) uses Python code "
                        f"({type(st.size).__name__}); only aggregate(num_items) can be serialised"
                    )
                pipes.append({"type": "aggregate", "num_items": st.size, "drop_last": st.drop_last})
            elif isinstance(st, PathVariantsConfig):
                raise TypeError(
                    f"{where} stage {i} ({st.name!r}) routes items with a Python callable; "
                    "a PathVariants stage cannot be serialised"
                )
            elif isinstance(st, PlacementConfig):
                pipes.append(_placement_dict(st, f"{where} pipes[{i}] ({st!r})"))
            else:
                pipes.append({"type": "disaggregate"})
        return {
            "format": _JSON_FORMAT,
            "src": src_dict,
            "pipes": pipes,
            "sink": {"buffer_size": self.sink.buffer_size},
        }

    @classmethod
    def from_json(cls, data: str | bytes) -> PipelineConfig:
        """Reads a config ``to_json`` wrote.

        Raises:
            ValueError: ``data`` is not such a config; the message says
                which part is wrong. Values are checked as when the
                configs are made directly.
        """
        try:
            obj = json.loads(data)
        except json.JSONDecodeError as e:
            raise ValueError(f"PipelineConfig.from_json: not JSON: {e}") from None
        return cls.from_dict(obj)

    @classmethod
    def from_dict(cls, obj: Any) -> PipelineConfig:
        """Reads the form ``to_dict`` returns (see ``from_json``)."""
        where = "PipelineConfig.from_json"
        _expect(obj, dict, where)
        if obj.get("format") != _JSON_FORMAT:
            raise ValueError(f"{where}: format must be {_JSON_FORMAT!r}, got {obj.get('format')!r}")
        src = _expect(obj.get("src"), dict, f"{where}: src")
        source: SourceConfig | MergeConfig
        if "merge" in src:
            subs = _expect(src["merge"], list, f"{where}: src.merge")
            source = MergeConfig(tuple(cls.from_dict(c) for c in subs))
        else:
            source = SourceConfig(
                NativeSource(
                    _expect(src.get("kind"), str, f"{where}: src.kind"),
                    _expect(src.get("options"), dict, f"{where}: src.options"),
                    src.get("resumes"),
                ),
                continuous=_expect(src.get("continuous", False), bool, f"{where}: src.continuous"),
            )
        pipes: list[StageConfig | PlacementConfig] = []
        for i, p in enumerate(_expect(obj.get("pipes"), list, f"{where}: pipes")):
            at = f"{where}: pipes[{i}]"
            _expect(p, dict, at)
            kind = p.get("type")
            if kind == "pipe":
                op = _expect(p.get("op"), dict, f"{at}.op")
                pipes.append(
                    PipeConfig(
                        NativeOp(
                            _expect(op.get("name"), str, f"{at}.op.name"),
                            _expect(op.get("options", {}), dict, f"{at}.op.options"),
                        ),
                        name=p.get("name"),
                        concurrency=p.get("concurrency", 1),
                        max_concurrency=p.get("max_concurrency"),
                        output_order=p.get("output_order", "completion"),
                        max_failures=_unlimit(p.get("max_failures")),
                        timeout=p.get("timeout"),
                    )
                )
            elif kind == "aggregate":
                pipes.append(AggregateConfig(p.get("num_items"), drop_last=p.get("drop_last", False)))
            elif kind == "disaggregate":
                pipes.append(DisaggregateConfig())
            elif kind == "to":
                pipes.append(_placement_from(p, at))
            else:
                raise ValueError(f"{at}.type must be 'pipe', 'aggregate', 'disaggregate' or 'to', got {kind!r}")
        sink = _expect(obj.get("sink"), dict, f"{where}: sink")
        return cls(source, pipes, SinkConfig(sink.get("buffer_size", 3)))


_JSON_FORMAT = "spdl_go.pipeline/1"


def _placement_dict(st: PlacementConfig, where: str) -> dict[str, Any]:
    """A region marker as JSON: its target's kind and settings."""
    t = st.target
    out: dict[str, Any] = {"type": "to", "buffer_size": st.buffer_size}
    if isinstance(t, _MainProcess):
        return {**out, "target": "main_process"}
    if t.initializer is not None:
        raise TypeError(f"{where} has an initializer (Python code); it cannot be serialised")
    out["max_workers"] = t.max_workers
    if isinstance(t, ProcessPoolExecutorConfig):
        return {**out, "target": "process_pool", "mp_context": t.mp_context}
    return {**out, "target": "interpreter_pool"}


def _placement_from(p: dict[str, Any], at: str) -> PlacementConfig:
    kind = p.get("target")
    workers = p.get("max_workers")
    target: ProcessPoolExecutorConfig | InterpreterPoolExecutorConfig | _MainProcess
    if kind == "main_process":
        target = MAIN_PROCESS
    elif kind == "process_pool":
        target = ProcessPoolExecutorConfig(max_workers=workers, mp_context=p.get("mp_context"))
    elif kind == "interpreter_pool":
        target = InterpreterPoolExecutorConfig(max_workers=workers)
    else:
        raise ValueError(f"{at}.target must be 'process_pool', 'interpreter_pool' or 'main_process', got {kind!r}")
    return PlacementConfig(target, buffer_size=p.get("buffer_size", 1))


def _expect(v: Any, t: type, what: str) -> Any:
    if not isinstance(v, t):
        raise ValueError(f"{what} must be a JSON {_JSON_NAMES[t]}, got {v!r}")
    return v


_JSON_NAMES: dict[type, str] = {dict: "object", list: "array", str: "string", bool: "boolean"}


def _unlimit(v: Any) -> Any:
    """Undoes ``_limit``: {"fraction": [num, den]} is a Fraction again."""
    if isinstance(v, dict) and set(v) == {"fraction"}:
        num, den = v["fraction"]
        return Fraction(num, den)
    return v


# ---- the factories, as SPDL names them -----------------------------------------
def Pipe(  # noqa: N802 - SPDL's name
    op: Callable[[Any], Any] | NativeOp | Any,
    /,
    *,
    concurrency: int | Literal["auto"] = 1,
    executor: Executor | None = None,
    name: str | None = None,
    output_order: OutputOrder = "completion",
    max_failures: int | Fraction | None = None,
    max_concurrency: int | None = None,
    timeout: float | None = None,
) -> PipeConfig:
    """A stage that applies ``op`` to each item: the config
    ``PipelineBuilder.pipe`` adds, with the same arguments (see there).
    ``max_concurrency`` and ``timeout`` are spdl-go's own."""
    return PipeConfig(
        op,
        name=name,
        concurrency=concurrency,
        max_concurrency=max_concurrency,
        output_order=output_order,
        max_failures=max_failures,
        timeout=timeout,
        executor=executor,
    )


def Aggregate(  # noqa: N802 - SPDL's name
    num_items: int | Aggregator, /, *, drop_last: bool = False
) -> AggregateConfig | PipeConfig:
    """A stage that groups ``num_items`` consecutive items into a list;
    the last, shorter group is dropped if ``drop_last`` (as
    ``PipelineBuilder.aggregate``).

    Given an ``Aggregator`` instead, the stage (one worker, named
    ``aggregate(op=..., drop_last=...)``) passes on what its
    ``accumulate`` returns for each item unless None, and at the end of
    the input what its ``flush`` returns unless None; with ``drop_last``
    ``flush`` is not called. An exception from either fails the pipeline.
    """
    if isinstance(num_items, Aggregator):
        return PipeConfig(
            AggregatorOp(num_items, flushes=not drop_last),
            name=f"aggregate(op={num_items!r}, drop_last={bool(drop_last)})",
            max_failures=0,
        )
    return AggregateConfig(num_items, drop_last=drop_last)


def Disaggregate() -> DisaggregateConfig:  # noqa: N802 - SPDL's name
    """A stage that splits each list item into its elements (as
    ``PipelineBuilder.disaggregate``)."""
    return DisaggregateConfig()


def Merge(pipeline_configs: Sequence[PipelineConfig]) -> MergeConfig:  # noqa: N802 - SPDL's name
    """A source that merges several pipelines: use it as a
    ``PipelineConfig``'s ``src``. Each epoch runs one epoch of every
    merged pipeline; their items go on in the order they are ready.

    ``build_pipeline`` builds each merged pipeline with the same settings
    (so each has its own ``num_threads``) and closes them with the outer
    one. Their items reach the outer pipeline through Python (its source
    is a Python iterable), and their stats are their own, not shown in
    the outer pipeline's ``stats()``. A merged pipeline's failure fails
    the outer pipeline's source. SPDL's custom merge ``op`` is not
    supported.
    """
    return MergeConfig(pipeline_configs)


def PathVariants(  # noqa: N802 - SPDL's name
    router: Callable[[Any], Any],
    paths: Sequence[Sequence[StageConfig]],
    name: str | None = None,
    batched: bool = False,
) -> PathVariantsConfig:
    """A stage that sends each item down one of several paths, chosen by
    ``router``, and passes on what every path produces, in the order it
    is ready.

    Args:
        router: Called with each item, returns the index of its path (an
            int in ``[0, len(paths))``); it may be an async function. With
            ``batched``, it is called with each batch (a list) and returns
            one index per element.
        paths: Each path is a sequence of stage configs (``Pipe``,
            ``Aggregate``, ``Disaggregate``, or a nested ``PathVariants``).
        name: The stage's name (default ``"path_variants"``).
        batched: Route whole batches: each batch is split into one
            sub-batch (a list, possibly empty) per path, each path's ops
            take and return a list, and the paths' lists for one batch are
            concatenated back into one batch (an empty result is dropped).
            Each path must then produce exactly one list per list it gets.

    A router that raises or returns a bad index fails the pipeline, after
    the items already routed went through. ``build_pipeline`` runs the
    stages before the ``PathVariants``, each path and the stages after it
    as pipelines of their own, with the same settings, connected through
    Python; their stats are their own, not shown in the outer pipeline's
    ``stats()``.
    """
    return PathVariantsConfig(
        name=name or "path_variants",
        router=router,
        paths=paths,
        batched=batched,
    )
