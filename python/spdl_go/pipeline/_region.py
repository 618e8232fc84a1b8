"""Execution regions (``PipelineBuilder.to``): the stages between
``.to(ProcessPoolExecutorConfig(...))`` and ``.to(MAIN_PROCESS)`` run in
a pool of worker processes, each running them as one pipeline of its own.

``build_pipeline`` splits the pipeline at the region: the stages before it
are a pipeline (``upstream``), and the stages after it read a Python
source, ``_RegionSource``, whose each epoch runs one epoch of upstream on a
feeder thread, sends its items in messages of up to ``buffer_size`` to the
worker with the most room, and yields the results as the workers send
them. The workers start at build time and serve every epoch.

Each worker talks over its own socket pair (``_subprocess._Worker``): the
parent sends item messages, then the epoch's end (or an abort); the worker
answers each item message it takes with a credit, so at most
``_CREDITS`` wait per worker, sends results in messages of up to the
closing marker's ``buffer_size`` (tensors and large arrays lent through
its shared memory, as ``run_pipeline_in_subprocess`` does), and ends each
epoch with its pipeline's stats and one "done" (it sends the stats at
most once a second while results flow, too: the outer ``stats()`` shows
them). A pipeline failure in a worker is sent before its
"done" and fails the outer pipeline.

A subinterpreter region (``InterpreterPoolExecutorConfig``) stays in this
pipeline: its Python ops get one ``InterpreterPoolExecutor`` as their
executor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import os
import pickle
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor
from typing import Any

from .. import _lib
from .._buffers import ArrowArray, Tensor
from ..stats import StageStats
from ._pipeline import Pipeline
from ._subprocess import (
    _ABORT as _QUIT,
)
from ._subprocess import (
    _DEFAULT_SHM_BYTES,
    _Borrower,
    _dumps,
    _exit_text,
    _failure_payload,
    _remote_error,
    _watch_parent,
    _Worker,
)
from .defs import (
    InterpreterPoolExecutorConfig,
    PathVariantsConfig,
    PipeConfig,
    ProcessPoolExecutorConfig,
    StageConfig,
)

# Parent -> worker: a message of items, the epoch's end, the epoch abandoned.
# _QUIT (from _subprocess) ends the worker.
_ITEMS, _END, _DROP = b"I", b"E", b"A"
# Worker -> parent.
_READY, _INIT_FAILED, _TOOK, _RESULTS, _FAILED, _DONE = b"R", b"X", b"T", b"D", b"F", b"N"
# Worker -> parent: its pipeline's stats (the engine's JSON), at most every
# _STATS_S while results flow, and once more at the end of each epoch.
_STATS = b"S"
_STATS_S = 1.0

# Item messages that may wait in a worker's socket: enough to keep its
# pipeline fed while the next is pickled, few enough that a stop is quick.
_CREDITS = 4
_POLL_S = 0.05

# How a stage's counters combine over the workers (the engine's JSON keys).
_SUMMED = (
    "concurrency",
    "items_in",
    "items_out",
    "failures",
    "busy_ns",
    "active",
    "queue_len",
    "queue_cap",
    "items_per_s",
    "abandoned",
    "max_concurrency",
)
_AVERAGED = ("queue_mean_occupancy", "busy_fraction")
_WORST = ("latency_p50_ns", "latency_p90_ns", "latency_p99_ns")


def region_name(stages: Sequence[StageConfig], in_buf: int, out_buf: int) -> str:
    """SPDL's name for a fused region: the stages' names, and the
    boundaries' buffer sizes where not 1."""
    name = "subprocess_pipeline(" + "+".join(str(getattr(s, "name", type(s).__name__)) for s in stages) + ")"
    sizes = [f"{k}={v}" for k, v in (("in", in_buf), ("out", out_buf)) if v != 1]
    return name + (f"[buffer_size {' '.join(sizes)}]" if sizes else "")


def _strip_executors(st: StageConfig) -> StageConfig:
    """A stage for a worker: a live executor does not cross processes (the
    worker's engine runs the op), as in SPDL."""
    if isinstance(st, PipeConfig) and st.executor is not None:
        return dataclasses.replace(st, executor=None)
    if isinstance(st, PathVariantsConfig):
        return dataclasses.replace(st, paths=tuple(tuple(_strip_executors(s) for s in p) for p in st.paths))
    return st


def plain_iterable(source: Any) -> bool:
    """A Python iterable (not a native or async source): a region that
    comes first can read it without a pipeline."""
    from ..sources import NativeSource

    return isinstance(source, Iterable) and not isinstance(source, NativeSource)


# ---- worker -------------------------------------------------------------------


class _Inbox:
    """A worker pipeline's source: the items the parent sends this epoch."""

    def __init__(self, conn: multiprocessing.connection.Connection, reply: Any, first: bytes) -> None:
        self.conn, self.reply = conn, reply
        self.first: bytes | None = first
        self.ended = False  # the epoch's end (or abort, or quit) was read
        self.quit = False

    def _next(self) -> bytes:
        msg, self.first = (self.first, None) if self.first is not None else (self.conn.recv_bytes(), None)
        if msg[:1] == _ITEMS:
            self.reply(_TOOK)
        elif msg in (_END, _DROP, _QUIT):
            self.ended = True
            self.quit = msg == _QUIT
        else:
            raise RuntimeError(f"[INTERNAL ERROR] spdl_go: a region worker got {msg[:64]!r}")
        return msg

    def __iter__(self) -> Iterator[Any]:
        while not self.ended:
            msg = self._next()
            if msg[:1] == _ITEMS:
                items = _Borrower(msg[1:], None).load()
                del msg
                while items:
                    yield items.pop(0)

    def drain(self) -> None:
        """Reads to the epoch's end (the pipeline stopped reading)."""
        while not self.ended:
            self._next()


def _worker_main(
    parent_pid: int,
    conn: multiprocessing.connection.Connection,
    shm: Any,
    shm_bytes: int,
    payload: bytes,
) -> None:
    _watch_parent(parent_pid)
    lock = threading.Lock()

    def reply(msg: bytes) -> None:  # the pipeline's source thread sends credits too
        with lock:
            conn.send_bytes(msg)

    what = "starting"
    try:
        if _lib.LOADED_PID != os.getpid():
            raise RuntimeError(
                "spdl-go's library was loaded before this process was forked: the fork server imported spdl_go; "
                "use mp_context='spawn'"
            )
        if shm is not None:
            fd = shm.detach()
            rc = _lib.LIB.spdl_shm_arena(fd, shm_bytes)
            os.close(fd)
            if rc:
                raise OSError(rc, f"mapping the shared memory for batches: {os.strerror(rc)}")
        what = "loading the region's stages"
        stages, build_args, out_buf, initializer, initargs = pickle.loads(payload)
        if initializer is not None:
            what = "running the initializer"
            initializer(*initargs)
    except Exception as e:  # noqa: BLE001  (reported to the parent)
        reply(_INIT_FAILED + f"{what}: {type(e).__name__}: {e}".encode())
        return
    reply(_READY)
    with contextlib.suppress(EOFError, BrokenPipeError, ConnectionResetError):
        _serve(conn, reply, stages, build_args, out_buf)


def _serve(
    conn: multiprocessing.connection.Connection,
    reply: Any,
    stages: Sequence[StageConfig],
    build_args: dict[str, Any],
    out_buf: int,
) -> None:
    """One epoch after another: a fresh pipeline reads each epoch's items."""
    from ._build import build_pipeline
    from .defs import PipelineConfig, SinkConfig, SourceConfig

    while True:
        first = conn.recv_bytes()
        if first == _QUIT:
            return
        inbox = _Inbox(conn, reply, first)
        if first[:1] == _ITEMS:
            p = None
            try:
                p = build_pipeline(PipelineConfig(SourceConfig(inbox), stages, SinkConfig(3)), **build_args)
                with p.auto_stop():
                    _stream(p, reply, out_buf)
            except Exception as e:  # noqa: BLE001  (the parent fails the epoch)
                reply(_FAILED + _failure_payload(e, ""))
            if p is not None:
                _send_stats(p, reply)
        inbox.drain()
        reply(_DONE)
        if inbox.quit:
            return


def _send_stats(p: Pipeline, reply: Any) -> None:
    with contextlib.suppress(Exception):  # a pipeline that never started has none
        reply(_STATS + json.dumps(p.stats().raw).encode())


def _stream(p: Pipeline, reply: Any, out_buf: int) -> None:
    """Sends the epoch's results, up to ``out_buf`` a message: it waits for
    the first, and takes the rest only if they are ready (a region that
    batches would otherwise hold whole batches back)."""
    last = time.monotonic()
    while True:
        if time.monotonic() - last >= _STATS_S:
            _send_stats(p, reply)
            last = time.monotonic()
        chunk: list[Any] = []
        ended = False
        try:
            chunk.append(p.get_item())
        except EOFError:
            return
        try:
            while len(chunk) < out_buf:
                try:
                    chunk.append(p.get_item(timeout=0))
                except TimeoutError:
                    break
                except EOFError:
                    ended = True
                    break
        finally:
            reply(_RESULTS + _dumps(chunk))
        del chunk
        if ended:
            return


# ---- parent -------------------------------------------------------------------


class _InputPickler(pickle.Pickler):
    """Pickles items for a worker. Tensors and Arrow arrays cross as numpy
    and pyarrow copies (the parent's buffers are not the worker's to
    borrow)."""

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is Tensor:
            import numpy

            return ("n", numpy.array(numpy.from_dlpack(obj)))
        if type(obj) is ArrowArray:
            import pyarrow

            return ("a", pyarrow.array(obj))
        return None


def _dumps_input(items: list[Any]) -> bytes:
    f = io.BytesIO()
    f.write(_ITEMS)
    _InputPickler(f, pickle.HIGHEST_PROTOCOL).dump(items)
    return f.getvalue()


class _Pool:
    """The region's worker processes, started and ready."""

    def __init__(
        self,
        name: str,
        stages: Sequence[StageConfig],
        target: ProcessPoolExecutorConfig,
        build_args: dict[str, Any],
        out_buf: int,
    ) -> None:
        self.name = name
        stages = [_strip_executors(s) for s in stages]
        try:
            payload = pickle.dumps((stages, build_args, out_buf, target.initializer, target.initargs))
        except Exception as whole:  # noqa: BLE001  (name the part that does not pickle)
            for st in stages:
                try:
                    pickle.dumps(st)
                except Exception as e:  # noqa: BLE001
                    raise ValueError(
                        f"to: stage {getattr(st, 'name', type(st).__name__)!r} of the region {name} cannot be sent "
                        f"to its worker processes (it is pickled): {e}. Use importable functions (not lambdas or "
                        "closures)."
                    ) from e
            raise ValueError(
                f"to: the initializer or initargs of the region {name} cannot be sent to its worker processes: {whole}"
            ) from whole
        self.workers: list[_Worker] = []
        self.open: list[bool] = []  # a worker's epoch has not sent its "done" yet
        self.stats: list[dict[str, Any] | None] = []  # each worker pipeline's last stats
        try:
            for _ in range(target.workers()):
                self.workers.append(
                    _Worker(
                        _worker_main,
                        (payload,),
                        target.mp_context or "spawn",
                        float("inf"),
                        False,
                        _DEFAULT_SHM_BYTES,
                        name="spdl-go-region",
                    )
                )
                self.open.append(False)
                self.stats.append(None)
            for i, w in enumerate(self.workers):
                msg = w.recv("start")
                if msg[:1] != _READY:
                    text = msg[1:].decode(errors="replace") if msg[:1] == _INIT_FAILED else repr(msg[:64])
                    raise RuntimeError(f"to: worker {i} of the region {name} failed {text}")
        except BaseException:
            self.shutdown()
            raise
        self._finalizer = multiprocessing.util.Finalize(self, _shutdown, (self.workers,), exitpriority=10)

    def shutdown(self) -> None:
        _shutdown(self.workers)

    def failed(self, i: int, w: _Worker) -> RuntimeError:
        """The error for worker ``i``, which died."""
        w.proc.join(1.0)
        return RuntimeError(
            f"{self.name}: worker process {i} (pid {w.proc.pid}) exited unexpectedly ({_exit_text(w.proc.exitcode)})"
        )

    def took_stats(self, i: int, body: bytes) -> None:
        with contextlib.suppress(ValueError):
            self.stats[i] = json.loads(body)

    def stage_stats(self) -> list[StageStats]:
        """The region's stages, each summed over the workers (as they last
        reported: at most ``_STATS_S`` old while an epoch runs)."""
        got = [s for s in self.stats if s]
        if not got:
            return []
        out = []
        for j, first in enumerate(got[0].get("stages") or []):
            per = [s["stages"][j] for s in got if len(s.get("stages") or []) > j]
            merged = dict(first)
            for k in _SUMMED:
                merged[k] = sum(d.get(k, 0) for d in per)
            for k in _AVERAGED:
                merged[k] = sum(d.get(k, 0.0) for d in per) / len(per)
            for k in _WORST:
                merged[k] = max(d.get(k, 0) for d in per)
            n = len(self.workers)
            merged["name"] = f"{first.get('name', '')} [{n} process{'es' if n != 1 else ''}]"
            out.append(StageStats._from(merged))
        return out

    def settle(self) -> None:
        """Reads the rest of an epoch the workers still finish (the last
        one was left early), dropping its results."""
        for i, w in enumerate(self.workers):
            while self.open[i]:
                msg = w.recv("finish the last epoch")
                tag = msg[:1]
                if tag == _RESULTS:
                    w.item(msg[1:])  # unpickled and dropped: lent buffers go back
                elif tag == _DONE:
                    self.open[i] = False
                elif tag == _STATS:
                    self.took_stats(i, msg[1:])
                elif tag not in (_TOOK, _FAILED):
                    raise RuntimeError(f"[INTERNAL ERROR] {self.name}: worker {i} sent {msg[:64]!r}")


def _shutdown(workers: list[_Worker]) -> None:
    for w in workers:
        w.terminate()


class _RegionSource:
    """The source of the stages after a region: each epoch runs one epoch
    of ``upstream`` through the pool."""

    def __init__(self, upstream: Pipeline | Iterable[Any], pool: _Pool, in_buf: int) -> None:
        # ``upstream`` is the pipeline of the stages before the region, or,
        # when the region comes first, a Python source itself: the feeder
        # then iterates it directly, with no engine round trip per item (in
        # the training process, every Python call competes for the GIL).
        self.upstream, self.pool, self.in_buf = upstream, pool, in_buf
        # The outer pipeline closes its source when it closes; then the
        # upstream pipeline and the workers go too.
        self._finalizer = multiprocessing.util.Finalize(self, _close, (upstream, pool), exitpriority=10)

    def __iter__(self) -> Iterator[Any]:
        from ._build import _join

        pool = self.pool
        pool.settle()
        n = len(pool.workers)
        credits = [_CREDITS] * n
        cond = threading.Condition()
        stop = threading.Event()
        failure: list[BaseException] = []
        for i in range(n):
            pool.open[i] = True
        feeder = threading.Thread(
            target=self._feed, args=(credits, cond, stop, failure), name="spdl_go-region-feed", daemon=True
        )
        feeder.start()
        try:
            yield from self._collect(credits, cond, failure)
        finally:
            stop.set()
            with cond:
                cond.notify_all()
            _join([feeder])

    def _collect(self, credits: list[int], cond: threading.Condition, failure: list[BaseException]) -> Iterator[Any]:
        pool = self.pool
        workers = pool.workers
        by_fd: dict[Any, int] = {}
        for i, w in enumerate(workers):
            by_fd[w.conn] = i
            by_fd[w.proc.sentinel] = i
        while any(pool.open):
            if failure:
                raise failure[0]
            ready = multiprocessing.connection.wait(
                [w.conn for i, w in enumerate(workers) if pool.open[i]]
                + [w.proc.sentinel for i, w in enumerate(workers) if pool.open[i]],
                timeout=_POLL_S,
            )
            for r in ready:
                i = by_fd[r]
                w = workers[i]
                if r is w.proc.sentinel:
                    # Its last messages (a failure, say) come first.
                    with contextlib.suppress(EOFError, OSError):
                        while pool.open[i] and w.conn.poll(0):
                            msg = w.conn.recv_bytes()
                            if msg[:1] == _FAILED:
                                raise _remote_error(msg[1:], f"{pool.name}: Fused subprocess pipeline failed: ")
                    pool.open[i] = False
                    raise pool.failed(i, w)
                try:
                    msg = w.conn.recv_bytes()
                except (EOFError, OSError):
                    pool.open[i] = False
                    raise pool.failed(i, w) from None
                tag = msg[:1]
                if tag == _TOOK:
                    with cond:
                        credits[i] += 1
                        cond.notify_all()
                elif tag == _RESULTS:
                    items = w.item(msg[1:])
                    del msg
                    while items:
                        yield items.pop(0)
                elif tag == _DONE:
                    pool.open[i] = False
                elif tag == _STATS:
                    pool.took_stats(i, msg[1:])
                elif tag == _FAILED:
                    raise _remote_error(msg[1:], f"{pool.name}: Fused subprocess pipeline failed: ")
                else:
                    raise RuntimeError(f"[INTERNAL ERROR] {pool.name}: worker {i} sent {msg[:64]!r}")
        if failure:
            raise failure[0]

    def _feed(
        self, credits: list[int], cond: threading.Condition, stop: threading.Event, failure: list[BaseException]
    ) -> None:
        """Runs one upstream epoch into the workers; then ends each worker's
        epoch (or drops it, if the reader stopped or upstream failed)."""
        from ._build import _read_epoch

        workers = self.pool.workers
        n = len(workers)
        chunk: list[Any] = []
        turn = 0

        def send() -> None:
            nonlocal turn
            try:
                msg = _dumps_input(chunk)
            except Exception as e:  # noqa: BLE001
                raise ValueError(
                    f"{self.pool.name}: an item cannot be sent to the region's worker processes (it is pickled): {e}"
                ) from e
            chunk.clear()
            with cond:
                while True:
                    if stop.is_set():
                        return
                    # The worker with the most room; ties go round.
                    best = max(range(n), key=lambda k: (credits[(turn + k) % n], -k))
                    i = (turn + best) % n
                    if credits[i] > 0:
                        credits[i] -= 1
                        break
                    cond.wait(_POLL_S)
            turn = (i + 1) % n
            workers[i].send(msg)

        def emit(item: Any) -> None:
            chunk.append(item)
            if len(chunk) >= self.in_buf:
                send()

        def read_source(src: Iterable[Any]) -> bool:
            for item in src:
                if stop.is_set():
                    return False
                emit(item)
            return True

        end = _DROP
        try:
            up = self.upstream
            if read_source(up) if not isinstance(up, Pipeline) else _read_epoch(up, stop, emit):
                if chunk:
                    send()
                end = _DROP if stop.is_set() else _END
        except BaseException as e:  # noqa: BLE001 - raised by the reader
            failure.append(e)
        for w in workers:
            w.send(end)

    def inner_stats(self) -> tuple[StageStats | None, list[StageStats]]:
        """For the outer pipeline's ``stats()``: the real source and the
        stages before and in the region (the upstream pipeline's, then the
        workers', summed)."""
        src, stages = None, []
        if isinstance(self.upstream, Pipeline):
            up = self.upstream.stats()
            src, stages = up.source, list(up.stages)
        return src, stages + self.pool.stage_stats()


def _close(upstream: Pipeline | Iterable[Any], pool: _Pool) -> None:
    if isinstance(upstream, Pipeline):
        upstream.close()
    pool.shutdown()


# ---- subinterpreters ----------------------------------------------------------


def interpreter_stages(
    stages: Sequence[StageConfig], target: InterpreterPoolExecutorConfig
) -> tuple[list[StageConfig], Executor]:
    """The region's stages with their Python ops run in one
    ``InterpreterPoolExecutor``; each op is first loaded in a
    subinterpreter, so one whose module cannot load there fails here,
    named."""
    if sys.version_info < (3, 14):
        raise RuntimeError(
            "to: a subinterpreter region (InterpreterPoolExecutorConfig) needs Python 3.14 or later; "
            f"this is {sys.version_info.major}.{sys.version_info.minor}"
        )
    from concurrent.futures import InterpreterPoolExecutor  # type: ignore[attr-defined,unused-ignore]

    ex = InterpreterPoolExecutor(max_workers=target.workers(), initializer=target.initializer, initargs=target.initargs)
    try:
        out = [_with_executor(s, ex) for s in stages]
    except BaseException:
        ex.shutdown(wait=False, cancel_futures=True)
        raise
    return out, ex


def _with_executor(st: StageConfig, ex: Executor) -> StageConfig:
    if isinstance(st, PathVariantsConfig):
        return dataclasses.replace(st, paths=tuple(tuple(_with_executor(s, ex) for s in p) for p in st.paths))
    if not isinstance(st, PipeConfig) or st.native:
        return st
    from .. import _callbacks

    if _callbacks.is_async_op(st.op) or _callbacks.is_async_gen_op(st.op):
        raise ValueError(f"to: stage {st.name!r} is async; a subinterpreter region runs sync Python ops only")
    try:
        # id() is a builtin: the op alone is unpickled in the subinterpreter,
        # importing its module.
        ex.submit(id, st.op).result()
    except Exception as e:  # noqa: BLE001
        raise ValueError(
            f"to: stage {st.name!r} cannot run in a subinterpreter: {type(e).__name__}: {e}. A module it needs "
            "may not load in subinterpreters (numpy and torch do not); use ProcessPoolExecutorConfig"
        ) from e
    return dataclasses.replace(st, executor=ex)
