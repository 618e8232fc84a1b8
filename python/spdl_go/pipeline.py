"""Building and running pipelines.

A pipeline is a source, then stages, then a sink that prefetches. Stages
run on Go threads: native ops without the GIL, Python callables with the
GIL held only while Python code runs. Iterating a pipeline is one epoch;
iterate again for the next one.

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

import asyncio
import atexit
import contextlib
import ctypes
import inspect
import json
import logging
import os
import reprlib
import threading
import traceback
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from . import _codec, _lib
from .ops import NativeOp
from .sources import NativeSource

__all__ = ["Bottleneck", "Pipeline", "PipelineBuilder", "PipelineError", "PipelineStats", "StageStats"]


class PipelineError(RuntimeError):
    """The pipeline failed: a source raised, or a stage exceeded its
    ``max_failures``. The message names the stage and the item."""


# ---- callbacks from Go -------------------------------------------------------
# Registries from ids (sent to Go in the spec) to Python objects. Entries
# are added when a pipeline is built and removed when it is closed.
_NO_ITEM = object()
_functions: dict[int, "_PyStage"] = {}
_sources: dict[int, "_PySource"] = {}
_ids = iter(range(1, 1 << 62))
_ids_lock = threading.Lock()


def _new_id() -> int:
    with _ids_lock:
        return next(_ids)


_item_repr = reprlib.Repr()
_item_repr.maxstring = 120
_item_repr.maxother = 120


def _error_bytes(exc: BaseException, item: Any = _NO_ITEM) -> bytes:
    summary = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    head = ""
    if item is not _NO_ITEM:
        # Only now, on failure, is the item rendered: the engine holds a
        # Python object only as a reference and cannot name it itself.
        head = "item: " + _item_repr.repr(item).replace("\n", " ") + "\n"
    return f"{head}{summary}\n\n{tb}".encode("utf-8", "replace")


def _on_call(fn_id: int, in_ptr: int, in_len: int, out: int) -> int:
    # Never let an exception escape: ctypes would print it and return 0.
    arg = _NO_ITEM
    try:
        stage = _functions[fn_id]
        arg = _codec.decode(ctypes.string_at(in_ptr, in_len))
        data = stage.encode(stage.call(arg))
        rc = 0
    except BaseException as e:  # noqa: BLE001 - every failure becomes the item's error
        data, rc = _error_bytes(e, arg), -1
    _lib.LIB.spdl_buf_set(out, data, len(data))
    return rc


def _on_next(src_id: int, out: int) -> int:
    try:
        src = _sources[src_id]
        it = src.iterator
        if it is None:
            raise RuntimeError("source iterated before the epoch started")
        try:
            item = next(it)
        except StopIteration:
            return 1
        data = src.encode(item)
        rc = 0
    except BaseException as e:  # noqa: BLE001
        data, rc = _error_bytes(e), -1
    _lib.LIB.spdl_buf_set(out, data, len(data))
    return rc


def _on_release(obj_id: int) -> None:
    _codec.release_object(obj_id)


# ctypes keeps a callback callable only while its CFUNCTYPE object lives;
# these module globals live as long as the process.
_CALL = _lib.CALL_FN(_on_call)
_NEXT = _lib.NEXT_FN(_on_next)
_RELEASE = _lib.RELEASE_FN(_on_release)


def _init() -> None:
    err = ctypes.c_void_p()
    if _lib.LIB.spdl_init(_CALL, _NEXT, _RELEASE, ctypes.byref(err)) != _lib.SPDL_OK:
        raise ImportError(_lib.take_string(err.value))


_init()


# Python stages that are coroutine functions run on one event loop per Go
# thread (Go threads are long-lived, so the loops are reused).
_loops: dict[int, asyncio.AbstractEventLoop] = {}


def _run_coroutine(coro: Any) -> Any:
    tid = threading.get_ident()
    loop = _loops.get(tid)
    if loop is None:
        loop = _loops[tid] = asyncio.new_event_loop()
    return loop.run_until_complete(coro)


@dataclass
class _PyStage:
    fn: Callable[[Any], Any]
    encode: Callable[[Any], bytes]
    is_async: bool

    def call(self, arg: Any) -> Any:
        if self.is_async:
            return _run_coroutine(self.fn(arg))
        return self.fn(arg)


@dataclass
class _PySource:
    iterable: Iterable[Any]
    encode: Callable[[Any], bytes]
    iterator: Iterator[Any] | None = None


def _make_encoder(split_levels: int, native: bool) -> Callable[[Any], bytes]:
    """How a stage's output must travel: structured when a native op reads
    it, opaque (exactly as returned) when Python does; lists that a
    disaggregate will split are sent as lists around their elements."""
    leaf = _codec.encode if native else _codec.encode_opaque
    if split_levels == 0:
        return leaf
    inner = _make_encoder(split_levels - 1, native)

    def encode_list(obj: Any) -> bytes:
        if type(obj) not in (list, tuple):
            return leaf(obj)  # disaggregate will report that it is not a list
        return b"l" + len(obj).to_bytes(8, "little") + b"".join(inner(e) for e in obj)

    return encode_list


def _consumer(stages: list[dict[str, Any]], start: int) -> tuple[int, bool]:
    """For output emitted before stage `start`: how many disaggregates will
    split it before a consumer sees it, and whether that consumer is native."""
    depth = 0
    splits = 0
    for st in stages[start:]:
        if st["kind"] == "aggregate":
            depth += 1
        elif st["kind"] == "disaggregate":
            if depth:
                depth -= 1
            else:
                splits += 1
        else:
            return splits, st["op"]["kind"] == "native"
    return splits, False  # the sink: the user's Python code


# ---- statistics --------------------------------------------------------------
@dataclass(frozen=True)
class StageStats:
    """Counters of one stage, read from the engine's atomics."""

    name: str
    kind: str
    concurrency: int
    items_in: int
    items_out: int
    failures: int
    busy_s: float
    """Summed wall time the stage's op ran, over all its threads."""
    active: int
    queue_len: int
    queue_cap: int
    queue_mean_occupancy: float
    latency_p50_s: float = 0.0
    """Median time of one op call (pipe stages; within 12.5%)."""
    latency_p90_s: float = 0.0
    latency_p99_s: float = 0.0
    items_per_s: float = 0.0
    """Items out per second of the epoch's elapsed time."""
    busy_fraction: float = 0.0
    """Busy time over elapsed time times concurrency, in [0, 1]."""
    abandoned: int = 0
    """Calls given up after ``timeout`` (also counted in ``failures``)."""
    auto: bool = False
    """The stage was built with ``concurrency="auto"``; ``concurrency`` is the tuner's current choice."""
    max_concurrency: int = 0
    tuning: str = ""
    """The tuner's state in words, e.g. "settled at 2 (812 items/s, workers 97% busy)"."""
    op_stats: dict[str, int] = field(default_factory=dict)
    """The op's own counters, e.g. ``read_file``'s cache: cache_memory_hits,
    cache_disk_hits, cache_misses, cache_memory_bytes, cache_disk_bytes,
    cache_evictions (cumulative over epochs)."""

    @classmethod
    def _from(cls, d: dict[str, Any]) -> "StageStats":
        return cls(
            name=d.get("name", ""),
            kind=d.get("kind", ""),
            concurrency=int(d.get("concurrency", 0)),
            items_in=int(d.get("items_in", 0)),
            items_out=int(d.get("items_out", 0)),
            failures=int(d.get("failures", 0)),
            busy_s=int(d.get("busy_ns", 0)) / 1e9,
            active=int(d.get("active", 0)),
            queue_len=int(d.get("queue_len", 0)),
            queue_cap=int(d.get("queue_cap", 0)),
            queue_mean_occupancy=float(d.get("queue_mean_occupancy", 0.0)),
            latency_p50_s=int(d.get("latency_p50_ns", 0)) / 1e9,
            latency_p90_s=int(d.get("latency_p90_ns", 0)) / 1e9,
            latency_p99_s=int(d.get("latency_p99_ns", 0)) / 1e9,
            items_per_s=float(d.get("items_per_s", 0.0)),
            busy_fraction=float(d.get("busy_fraction", 0.0)),
            abandoned=int(d.get("abandoned", 0)),
            auto=bool(d.get("auto", False)),
            max_concurrency=int(d.get("max_concurrency", 0)),
            tuning=d.get("tuning", "") or "",
            op_stats={k: int(v) for k, v in (d.get("op_stats") or {}).items()},
        )


@dataclass(frozen=True)
class Bottleneck:
    """The stage that limits throughput, as the engine judges it."""

    stage: str
    """``"consumer"`` (the loop reading the pipeline), ``"source"``, a stage name, or ``""`` if unclear."""
    reason: str
    advice: str

    @classmethod
    def _from(cls, d: dict[str, Any]) -> "Bottleneck":
        return cls(stage=d.get("stage", ""), reason=d.get("reason", ""), advice=d.get("advice", ""))


@dataclass(frozen=True)
class PipelineStats:
    """A snapshot of a pipeline's counters (``Pipeline.stats()``)."""

    state: str
    epoch: int
    elapsed_s: float
    source: StageStats
    stages: list[StageStats]
    sink_len: int
    sink_cap: int
    delivered: int
    failures: int
    error: str
    recent_errors: list[str] = field(default_factory=list)
    bottleneck: Bottleneck = field(default_factory=lambda: Bottleneck("", "", ""))
    sink_mean_occupancy: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def _from(cls, d: dict[str, Any]) -> "PipelineStats":
        sink = d.get("sink") or {}
        return cls(
            state=d.get("state", ""),
            epoch=int(d.get("epoch", 0)),
            elapsed_s=int(d.get("elapsed_ns", 0)) / 1e9,
            source=StageStats._from(d.get("source") or {}),
            stages=[StageStats._from(s) for s in d.get("stages") or []],
            sink_len=int(sink.get("len", 0)),
            sink_cap=int(sink.get("cap", 0)),
            delivered=int(sink.get("delivered", 0)),
            failures=int(d.get("failures", 0)),
            error=d.get("error", "") or "",
            recent_errors=list(d.get("recent_errors") or []),
            bottleneck=Bottleneck._from(d.get("bottleneck") or {}),
            sink_mean_occupancy=float(sink.get("mean_occupancy", 0.0)),
            raw=d,
        )

    def format(self) -> str:
        """A human-readable table of the per-stage counters."""
        rate = lambda n: n / self.elapsed_s if self.elapsed_s > 0 else 0.0  # noqa: E731
        lines = [
            f"epoch {self.epoch} ({self.state}): {self.delivered} items delivered in {self.elapsed_s:.3f}s "
            f"({rate(self.delivered):,.0f}/s), {self.failures} failures",
            f"  {'stage':<24}{'conc':>5}{'in':>10}{'out':>10}{'fail':>6}{'busy s':>9}{'busy':>6}{'queue':>7}"
            f"{'p50 ms':>9}{'p99 ms':>9}",
        ]
        for s in [self.source, *self.stages]:
            lines.append(
                f"  {s.name:<24}{s.concurrency:>5}{s.items_in:>10}{s.items_out:>10}{s.failures:>6}"
                f"{s.busy_s:>9.3f}{s.busy_fraction:>6.0%}{s.queue_mean_occupancy:>7.0%}"
                f"{s.latency_p50_s * 1e3:>9.2f}{s.latency_p99_s * 1e3:>9.2f}"
            )
        for s in [self.source, *self.stages]:
            if s.auto:
                lines.append(f"  {s.name}: concurrency auto (max {s.max_concurrency}): {s.tuning}")
            if s.op_stats:
                lines.append(f"  {s.name}: " + ", ".join(f"{k} {v:,}" for k, v in sorted(s.op_stats.items())))
        lines.append(f"  sink buffer {self.sink_len}/{self.sink_cap} (mean {self.sink_mean_occupancy:.0%} full)")
        b = self.bottleneck
        if b.stage:
            lines.append(f"  bottleneck: {b.stage}: {b.reason}; {b.advice}")
        elif b.reason:
            lines.append(f"  bottleneck: {b.reason}")
        return "\n".join(lines)


# ---- pipeline ----------------------------------------------------------------
_logger = logging.getLogger("spdl_go")
_live: "weakref.WeakSet[Pipeline]" = weakref.WeakSet()
_tls = threading.local()  # per-thread out-arguments for spdl_pipeline_next


# How long interpreter exit waits for a pipeline's threads: a Python call
# stuck forever (with no stage timeout) must not hang the process.
_EXIT_WAIT_MS = 2000


@atexit.register
def _close_all() -> None:
    # Stop Go threads before the interpreter tears down what their
    # callbacks would touch.
    for p in list(_live):
        with contextlib.suppress(Exception):
            p._close(wait_ms=_EXIT_WAIT_MS)


class Pipeline:
    """A built pipeline. Iterate it for one epoch; iterate again for the next.

    Example:
        >>> with pipeline.auto_stop():
        ...     for batch in pipeline:
        ...         train_step(batch)

    ``get_item``, ``stats`` and ``stop`` may be called from any thread.
    """

    # How long one blocking call into Go may last, so Ctrl-C is noticed.
    _POLL_S = 0.1

    def __init__(
        self,
        spec: dict[str, Any],
        sources: list[int],
        functions: list[int],
        report_interval: float | None = None,
    ) -> None:
        self._source_ids = sources
        self._function_ids = functions
        self._handle = 0
        self._lock = threading.Lock()
        self._running = False
        self._report_interval = report_interval
        self._reporter: threading.Thread | None = None
        self._closed = threading.Event()
        _lib.check_fork()
        data = json.dumps(spec).encode()
        handle = ctypes.c_uint64()
        err = ctypes.c_void_p()
        if _lib.LIB.spdl_pipeline_new(data, len(data), ctypes.byref(handle), ctypes.byref(err)) != _lib.SPDL_OK:
            self._unregister()
            raise ValueError(_lib.take_string(err.value))
        self._handle = handle.value
        _live.add(self)

    def _unregister(self) -> None:
        for i in self._source_ids:
            _sources.pop(i, None)
        for i in self._function_ids:
            _functions.pop(i, None)

    def _h(self) -> int:
        _lib.check_fork()
        if not self._handle:
            raise RuntimeError("the pipeline was closed")
        return self._handle

    def start(self) -> None:
        """Starts an epoch: the source is iterated anew from its beginning.

        Raises:
            RuntimeError: if an epoch is already running.
        """
        h = self._h()
        with self._lock:
            if self._running:
                raise RuntimeError("the pipeline is already running; stop() it or finish the epoch first")
            for i in self._source_ids:
                src = _sources[i]
                src.iterator = iter(src.iterable)
            err = ctypes.c_void_p()
            if _lib.LIB.spdl_pipeline_start(h, ctypes.byref(err)) != _lib.SPDL_OK:
                raise RuntimeError(_lib.take_string(err.value))
            self._running = True
            if self._report_interval and self._reporter is None:
                self._reporter = threading.Thread(
                    target=self._report, args=(weakref.ref(self), self._report_interval, self._closed),
                    name="spdl_go-stats", daemon=True,
                )
                self._reporter.start()

    def stop(self) -> None:
        """Stops the running epoch and waits for its threads. Safe to call
        more than once, and before ``start``."""
        if not self._handle:
            return
        err = ctypes.c_void_p()
        rc = _lib.LIB.spdl_pipeline_stop(self._h(), ctypes.byref(err))
        self._running = False
        if rc != _lib.SPDL_OK:
            raise RuntimeError(_lib.take_string(err.value))

    def get_item(self, *, timeout: float | None = None) -> Any:
        """Returns the next item of the running epoch.

        Args:
            timeout: Seconds to wait; None waits as long as it takes.

        Raises:
            EOFError: the epoch has ended.
            TimeoutError: nothing arrived within ``timeout``.
            PipelineError: the pipeline failed.
        """
        h = self._h()
        try:
            out, err, out_ref, err_ref = _tls.next_args
        except AttributeError:
            # Allocated once per thread: fewer objects per batch means fewer
            # garbage collections in the training loop.
            out, err = _lib.SpdlBuf(), ctypes.c_void_p()
            _tls.next_args = out, err, ctypes.byref(out), ctypes.byref(err)
            out, err, out_ref, err_ref = _tls.next_args
        next_item = _lib.LIB.spdl_pipeline_next
        remaining = timeout
        while True:
            wait = self._POLL_S if remaining is None else min(self._POLL_S, max(remaining, 0.0))
            rc = next_item(h, int(wait * 1e6), out_ref, err_ref)
            if rc == 0:  # SPDL_OK
                try:
                    return _codec.decode(ctypes.string_at(out.data, out.len))
                finally:
                    _lib.LIB.spdl_free(out.data)
            if rc == _lib.SPDL_TIMEOUT:
                if remaining is not None:
                    remaining -= wait
                    if remaining <= 0:
                        raise TimeoutError(f"no item within {timeout} s")
                continue  # a pending KeyboardInterrupt is raised here, between calls
            self._running = False
            if rc == _lib.SPDL_END:
                raise EOFError("the epoch has ended")
            raise PipelineError(_lib.take_string(err.value))

    def get_iterator(self, *, timeout: float | None = None) -> Iterator[Any]:
        """Iterates the running epoch (starting one if none is running).

        Stopping early (``break``, an exception) stops the pipeline.
        """
        if not self._running:
            self.start()
        finished = False
        try:
            while True:
                try:
                    item = self.get_item(timeout=timeout)
                except EOFError:
                    finished = True
                    return
                yield item
        finally:
            if not finished:
                self.stop()

    def __iter__(self) -> Iterator[Any]:
        return self.get_iterator()

    @contextlib.contextmanager
    def auto_stop(self) -> Iterator["Pipeline"]:
        """Starts the pipeline and stops it when the block exits, whatever happens."""
        self.start()
        try:
            yield self
        finally:
            self.stop()

    def stats(self) -> PipelineStats:
        """A snapshot of per-stage counters; cheap, safe while running."""
        out = ctypes.c_void_p()
        err = ctypes.c_void_p()
        if _lib.LIB.spdl_pipeline_stats(self._h(), ctypes.byref(out), ctypes.byref(err)) != _lib.SPDL_OK:
            raise RuntimeError(_lib.take_string(err.value))
        return PipelineStats._from(json.loads(_lib.take_string(out.value)))

    def _source_state(self) -> Any:
        """What the source knows that a checkpoint needs (see
        ``spdl_pipeline_source_state``): None, or for streaming sources
        ``{"sizes": {unit: samples}}``."""
        out = ctypes.c_void_p()
        err = ctypes.c_void_p()
        if _lib.LIB.spdl_pipeline_source_state(self._h(), ctypes.byref(out), ctypes.byref(err)) != _lib.SPDL_OK:
            raise RuntimeError(_lib.take_string(err.value))
        return json.loads(_lib.take_string(out.value))

    def start_trace(self, max_spans: int = 100_000) -> None:
        """Records the next ``max_spans`` op calls of every stage (start,
        duration, worker, failure) for ``write_trace``. Cheap enough to
        leave on for a window of a real run.
        """
        err = ctypes.c_void_p()
        if _lib.LIB.spdl_pipeline_trace_start(self._h(), int(max_spans), ctypes.byref(err)) != _lib.SPDL_OK:
            raise ValueError(_lib.take_string(err.value))

    def write_trace(self, path: str | os.PathLike[str]) -> None:
        """Stops recording and writes the trace as Chrome/Perfetto JSON:
        open it in https://ui.perfetto.dev to see each stage's workers on
        a timeline.

        Example:
            >>> pipeline.start_trace()
            >>> for batch in pipeline: ...
            >>> pipeline.write_trace("loader.trace.json")
        """
        err = ctypes.c_void_p()
        if _lib.LIB.spdl_pipeline_trace_write(self._h(), os.fsencode(path), ctypes.byref(err)) != _lib.SPDL_OK:
            raise OSError(_lib.take_string(err.value))

    @staticmethod
    def _report(ref: "weakref.ref[Pipeline]", interval: float, closed: threading.Event) -> None:
        # Holds the pipeline only weakly, so it can still be collected.
        while not closed.wait(interval):
            p = ref()
            if p is None:
                return
            if p._running:
                with contextlib.suppress(Exception):
                    _logger.info("%s", p.stats().format())
            del p

    def close(self) -> None:
        """Stops the pipeline, waits for its threads, and frees it; the
        object is unusable afterwards."""
        self._close(wait_ms=-1)

    def _close(self, *, wait_ms: int) -> None:
        self._closed.set()
        h, self._handle = self._handle, 0
        if h:
            _live.discard(self)
            err = ctypes.c_void_p()
            rc = _lib.LIB.spdl_pipeline_free(h, wait_ms, ctypes.byref(err))
            if err.value:
                _lib.LIB.spdl_free(err.value)
            if rc == _lib.SPDL_TIMEOUT:
                # Interpreter exit: leave the stuck call to the OS.
                os.write(2, b"spdl_go: at exit, a pipeline stage call had not returned after 2 s; leaving it\n")
            else:
                self._unregister()
        self._running = False

    def __del__(self) -> None:
        # Finalisers can run on one of this pipeline's own callback threads,
        # so do not wait for them here. At interpreter exit module globals
        # may already be gone: a closed pipeline touches none of them.
        if getattr(self, "_handle", 0):
            try:
                self._close(wait_ms=0)
            except Exception:  # noqa: BLE001 - nothing to report to in a finaliser
                pass

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- builder -----------------------------------------------------------------
OutputOrder = Literal["completion", "input"]


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
        self._source: Iterable[Any] | NativeSource | None = None
        self._stages: list[dict[str, Any]] = []
        self._fns: list[Callable[[Any], Any] | None] = []
        self._buffer_size: int | None = None

    def add_source(self, source: Iterable[Any] | NativeSource) -> "PipelineBuilder":
        """Sets the source: any Python iterable (``iter()`` is called once per
        epoch) or a native source from ``spdl_go.sources``."""
        if self._source is not None:
            raise ValueError("add_source was already called; a pipeline has one source")
        if not isinstance(source, NativeSource) and not isinstance(source, Iterable):
            raise TypeError(f"add_source: expected an iterable or a native source, got {type(source).__name__}")
        self._source = source
        return self

    def pipe(
        self,
        op: Callable[[Any], Any] | NativeOp,
        *,
        concurrency: int | Literal["auto"] = 1,
        max_concurrency: int | None = None,
        name: str | None = None,
        output_order: OutputOrder = "completion",
        max_failures: int = -1,
        timeout: float | None = None,
    ) -> "PipelineBuilder":
        """Adds a stage that applies ``op`` to each item.

        Args:
            op: A Python callable (sync or async) or a native op from ``spdl_go.ops``.
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
            max_failures: Items this stage may fail before the pipeline
                fails; -1 means no limit. A failed item is dropped and its
                error is kept in ``stats().recent_errors``.
            timeout: Seconds one call of ``op`` may take; a call that runs
                longer fails its item ("timed out"). Python code cannot be
                interrupted, so a Python call past its timeout is abandoned:
                the stage goes on with a fresh thread, ``stop()`` does not
                wait for it, and its result, if it ever returns, is dropped
                (``stats()`` counts these as ``abandoned``). None: no limit.
        """
        if not isinstance(op, NativeOp) and not callable(op):
            raise TypeError(f"pipe: op must be callable or a spdl_go.ops op, got {type(op).__name__}")
        auto = concurrency == "auto"
        if not auto and (not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1):
            raise ValueError(f"pipe: concurrency must be an int >= 1 or 'auto', got {concurrency!r}")
        if max_concurrency is not None:
            if not auto:
                raise ValueError("pipe: max_concurrency only applies with concurrency='auto'")
            if not isinstance(max_concurrency, int) or isinstance(max_concurrency, bool) or max_concurrency < 1:
                raise ValueError(f"pipe: max_concurrency must be an int >= 1 or None, got {max_concurrency!r}")
        if output_order not in ("completion", "input"):
            raise ValueError(f"pipe: output_order must be 'completion' or 'input', got {output_order!r}")
        if not isinstance(max_failures, int) or max_failures < -1:
            raise ValueError(f"pipe: max_failures must be an int >= -1, got {max_failures!r}")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf")
        ):
            raise ValueError(f"pipe: timeout must be a number of seconds > 0 or None, got {timeout!r}")
        if name is None:
            name = op.name if isinstance(op, NativeOp) else getattr(op, "__name__", type(op).__name__)
        self._stages.append(
            {
                "kind": "pipe",
                "name": name,
                "concurrency": 1 if auto else concurrency,
                "auto": auto,
                "max_concurrency": max_concurrency or 0,
                "timeout_s": float(timeout or 0),
                "output_order": output_order,
                "max_failures": max_failures,
                "op": op.spec() if isinstance(op, NativeOp) else {"kind": "python"},
            }
        )
        self._fns.append(None if isinstance(op, NativeOp) else op)
        return self

    def aggregate(self, num_items: int, /, *, drop_last: bool = False) -> "PipelineBuilder":
        """Groups ``num_items`` consecutive items into a list; the last,
        shorter group is dropped if ``drop_last``."""
        if not isinstance(num_items, int) or isinstance(num_items, bool) or num_items < 1:
            raise ValueError(f"aggregate: num_items must be an int >= 1, got {num_items!r}")
        self._stages.append({"kind": "aggregate", "size": num_items, "drop_last": bool(drop_last)})
        self._fns.append(None)
        return self

    def disaggregate(self) -> "PipelineBuilder":
        """Splits each list item into its elements."""
        self._stages.append({"kind": "disaggregate"})
        self._fns.append(None)
        return self

    def add_sink(self, buffer_size: int = 3) -> "PipelineBuilder":
        """Sets how many finished items are prefetched ahead of the consumer."""
        if not isinstance(buffer_size, int) or isinstance(buffer_size, bool) or buffer_size < 1:
            raise ValueError(f"add_sink: buffer_size must be an int >= 1, got {buffer_size!r}")
        self._buffer_size = buffer_size
        return self

    def build(
        self,
        *,
        num_threads: int | None = None,
        max_failures: int = -1,
        queue_size: int | None = None,
        report_interval: float | None = None,
        cpu_budget: int | None = None,
    ) -> Pipeline:
        """Builds the pipeline (it starts on first iteration or ``start()``).

        Args:
            num_threads: At most this many ops run at once over all stages;
                None sets no cap beyond each stage's concurrency.
            max_failures: Items the whole pipeline may fail before it fails;
                -1 means no limit.
            queue_size: Capacity of the queue between two stages.
            report_interval: If set, log ``stats().format()`` (logger
                "spdl_go", level INFO) every this many seconds while an
                epoch runs.
            cpu_budget: The most threads all ``concurrency="auto"`` stages
                may use together; None means ``os.cpu_count()``.
        """
        if self._source is None:
            raise ValueError("build: add_source was not called")
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise ValueError(f"build: num_threads must be an int >= 1 or None, got {num_threads!r}")
        if cpu_budget is not None and (not isinstance(cpu_budget, int) or isinstance(cpu_budget, bool) or cpu_budget < 1):
            raise ValueError(f"build: cpu_budget must be an int >= 1 or None, got {cpu_budget!r}")
        stages = [dict(s) for s in self._stages]
        for s in stages:
            if s["kind"] == "pipe":
                s["op"] = dict(s["op"])
        spec: dict[str, Any] = {
            "stages": stages,
            "buffer_size": self._buffer_size if self._buffer_size is not None else 3,
            "max_failures": max_failures,
            "num_threads": num_threads or 0,
            "cpu_budget": cpu_budget or 0,
        }
        if queue_size is not None:
            spec["queue_size"] = queue_size
        source_ids: list[int] = []
        function_ids: list[int] = []
        if isinstance(self._source, NativeSource):
            spec["source"] = self._source.spec()
        else:
            sid = _new_id()
            splits, native = _consumer(stages, 0)
            _sources[sid] = _PySource(self._source, _make_encoder(splits, native))
            source_ids.append(sid)
            spec["source"] = {"kind": "python", "id": sid}
        for i, (s, fn) in enumerate(zip(stages, self._fns)):
            if fn is None:
                continue
            fid = _new_id()
            splits, native = _consumer(stages, i + 1)
            is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))
            _functions[fid] = _PyStage(fn, _make_encoder(splits, native), is_async)
            function_ids.append(fid)
            s["op"]["id"] = fid
        if report_interval is not None and not report_interval > 0:
            raise ValueError(f"build: report_interval must be > 0 seconds or None, got {report_interval!r}")
        return Pipeline(spec, source_ids, function_ids, report_interval)
