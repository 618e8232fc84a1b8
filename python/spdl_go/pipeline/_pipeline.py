"""Running a built pipeline: ``Pipeline`` and the errors it raises.

A pipeline is a source, then stages, then a sink that prefetches. Stages
run on Go threads: native ops without the GIL, Python callables with the
GIL held only while Python code runs. As in SPDL, a source added with
``continuous=False`` (the default) is read once, and each new iterator
goes on where the last stopped; with ``continuous=True`` each iterator
reads one epoch. ``PipelineBuilder`` or ``build_pipeline``
makes one; this module owns it from then on: its epochs, its items, its
stats, a periodic stats reporter, and closing it (at interpreter exit
too, before the callbacks its threads run are torn down).

Example:
    >>> from spdl_go import PipelineBuilder
    >>> pipeline = PipelineBuilder().add_source(range(10)).pipe(lambda x: x * x).add_sink().build()
    >>> with pipeline.auto_stop():
    ...     for item in pipeline:
    ...         print(item)
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import json
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from .. import _callbacks, _codec, _lib
from ..stats import Bottleneck, PipelineStats, StageStats

if TYPE_CHECKING:
    from ._hooks import PipelineHooks

# The stats types live in spdl_go.stats; spdl_go.pipeline re-exports them
# so that ``from spdl_go.pipeline import PipelineStats`` goes on working.
__all__ = ["Bottleneck", "Pipeline", "PipelineError", "PipelineFailure", "PipelineStats", "StageStats"]

_DEFAULT_MESSAGE = "pipeline stages failed"

if sys.version_info >= (3, 11):

    class PipelineFailure(ExceptionGroup[Exception]):  # noqa: F821 - 3.11+
        """The pipeline failed: a source raised, or a stage exceeded its
        ``max_failures``. It is raised after the items produced before the
        failure were delivered: by ``get_item`` (and so by iterating), and
        by ``stop()`` (leaving ``auto_stop()``) if no read raised it yet.

        An ``ExceptionGroup`` of the stage errors, the first first: the
        exception a Python stage or source raised, itself (so ``except*
        KeyError`` works), or a ``RuntimeError`` with the engine's message
        for a native op or a limit crossed without one. Each has a note
        naming its stage. ``str()`` starts with the first error's message,
        which names the stage, the item and the limit.
        """

        def __new__(cls, errors: Sequence[tuple[str, Exception]], message: str = _DEFAULT_MESSAGE) -> PipelineFailure:
            for stage, exc in errors:
                exc.add_note(f"Pipeline stage: {stage}")
            return super().__new__(cls, message, [exc for _, exc in errors])

        def __init__(self, errors: Sequence[tuple[str, Exception]], message: str = _DEFAULT_MESSAGE) -> None:
            pass  # __new__ did it all

        def derive(self, excs: Sequence[Exception]) -> PipelineFailure:  # type: ignore[override]
            # subgroup() and split() keep the type and the message.
            return super().__new__(type(self), self.message, excs)

else:

    class PipelineFailure(RuntimeError):
        """The pipeline failed: a source raised, or a stage exceeded its
        ``max_failures`` (see the Python 3.11+ docstring: there it is an
        ``ExceptionGroup``). ``exceptions`` holds the stage errors, the
        first first; ``str()`` is the first error's message."""

        def __init__(self, errors: Sequence[tuple[str, Exception]], message: str = _DEFAULT_MESSAGE) -> None:
            super().__init__(message)
            self.message = message
            self.exceptions: tuple[Exception, ...] = tuple(exc for _, exc in errors)


PipelineError = PipelineFailure
"""The name spdl-go used before ``PipelineFailure``; the same class."""


_logger = logging.getLogger("spdl_go")
_live: weakref.WeakSet[Pipeline] = weakref.WeakSet()
_tls = threading.local()  # per-thread out-arguments for spdl_pipeline_next


# How long interpreter exit waits for a pipeline's threads: a Python call
# stuck forever (with no stage timeout) must not hang the process.
_EXIT_WAIT_MS = 2000
# How long close() waits for the stages' stage_hook to be left.
_HOOKS_WAIT_S = 5.0


@atexit.register
def _close_all() -> None:
    # Stop Go threads before the interpreter tears down what their
    # callbacks would touch.
    for p in list(_live):
        with contextlib.suppress(Exception):
            # A stop that abandoned stuck calls already waited its grace.
            p._close(wait_ms=1 if p._abandoned else _EXIT_WAIT_MS)


class Pipeline:
    """A built pipeline.

    What iterating it again means follows the source's ``continuous`` flag
    (``add_source(src, continuous=...)``), as in SPDL:

    * ``continuous=False`` (the default): one pass over the source. Each
      iterator reads on from where the previous one left off; leaving a
      loop early loses nothing and does not stop the pipeline; once the
      pass is over, new iterators end at once.
    * ``continuous=True``: epoch after epoch. Each iterator reads one
      epoch (a native source reshuffles for each); one left mid-epoch
      leaves the rest of that epoch to the next iterator.

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
        continuous: bool = False,
    ) -> None:
        self._source_ids = sources
        self._continuous = continuous
        # The running epoch ended and a read saw its end (continuous: the
        # next read starts the next epoch).
        self._epoch_done = False
        # stop() was called: the epoch's end starts no next one (continuous).
        self._stopped = False
        self._abandoned = False  # a stop gave up on calls that did not return
        self._auto_lock = threading.Lock()  # one reader starts the next epoch
        self._function_ids = functions
        self._handle = 0
        self._lock = threading.Lock()
        self._running = False
        self._started = False  # get_item starts the pipeline until the first start
        self._failure: PipelineFailure | None = None  # the epoch's, once built
        self._failure_lock = threading.Lock()  # readers on several threads build it once
        self._failure_seen = False  # a read or a stop raised it
        self._report_interval = report_interval
        self._reporter: threading.Thread | None = None
        self._closed = threading.Event()
        # The stages' task hooks (build_pipeline(task_hook_factory=)): their
        # stage_hook is entered by start() and left when the epoch ends.
        self._hooks: PipelineHooks | None = None
        # With an execution region (build_pipeline sets it): the source and
        # stages before and in the region, which run in other pipelines.
        self._inner_stats: Callable[[], tuple[StageStats | None, list[StageStats]]] | None = None
        _lib.check_fork()
        data = json.dumps(spec).encode()
        handle = ctypes.c_uint64()
        try:
            _lib.call(_lib.LIB.spdl_pipeline_new, data, len(data), ctypes.byref(handle), error=ValueError)
        except ValueError:
            self._unregister()
            raise
        self._handle = handle.value
        _live.add(self)

    def _unregister(self) -> None:
        _callbacks.unregister(self._source_ids, self._function_ids)

    def _h(self) -> int:
        _lib.check_fork()
        if not self._handle:
            raise RuntimeError("the pipeline was closed")
        return self._handle

    def start(self, *, timeout: float | None = None) -> None:
        """Starts an epoch: the source is iterated anew from its beginning.

        Args:
            timeout: Seconds to wait for the start (opening the source);
                None waits as long as it takes.

        Raises:
            RuntimeError: if an epoch is already running.
            TimeoutError: the start did not finish within ``timeout``; the
                epoch begins when it does (``stop()`` ends it).
        """
        h = self._h()
        with self._lock:
            if self._running:
                raise RuntimeError("the pipeline is already running; stop() it or finish the epoch first")
            for i in self._source_ids:
                src = _callbacks.sources[i]
                src.iterator = iter(src.iterable)
            self._started, self._running = True, True
            self._failure, self._failure_seen = None, False
            self._epoch_done, self._stopped = False, False
            if self._hooks is not None:
                try:
                    self._hooks.begin()
                except BaseException:
                    self._running = False
                    raise
            try:
                _bounded(lambda: _lib.call(_lib.LIB.spdl_pipeline_start, h), timeout, "start")
            except TimeoutError:
                raise
            except BaseException as e:
                self._running = False
                self._end_hooks(e)
                raise
            if self._report_interval and self._reporter is None:
                self._reporter = threading.Thread(
                    target=self._report,
                    args=(weakref.ref(self), self._report_interval, self._closed),
                    name="spdl_go-stats",
                    daemon=True,
                )
                self._reporter.start()

    def stop(self, *, timeout: float | None = None) -> None:
        """Stops the running epoch and waits for its threads. Safe to call
        more than once, before ``start``, and from any thread (an iteration
        on another thread then ends). Items already produced stay for
        ``get_item``, which returns them and then raises ``EOFError``.

        A call that has not returned 2 s after the stop (a Python stage
        inside ``time.sleep(1000)`` or a hung network call) is abandoned,
        as a stage ``timeout`` abandons one: it runs on in its thread, its
        result is dropped, and a warning names its stage. So leaving a loop
        by an exception, ``sys.exit`` or Ctrl-C never hangs in ``stop``.

        Args:
            timeout: Seconds to wait for the threads; None waits until they
                have returned or were abandoned.

        Raises:
            PipelineFailure: the epoch failed and no ``get_item`` raised it
                yet (at most one ``stop`` raises it).
            TimeoutError: the threads did not finish within ``timeout``.
        """
        if not self._handle:
            return
        h = self._h()
        self._epoch_done, self._stopped = False, True  # stopped: reads end, they start nothing
        try:
            _bounded(lambda: self._stop_engine(h), timeout, "stop")
        finally:
            self._running = False
        failure = self._take_failure()
        self._end_hooks(failure)
        if failure is not None and not self._failure_seen:
            self._failure_seen = True
            raise failure

    def _stop_engine(self, h: int) -> None:
        """Halts the engine's epoch; calls stuck past the stop grace are
        abandoned, with a warning that names them."""
        err = ctypes.c_void_p()
        rc = _lib.LIB.spdl_pipeline_stop(h, ctypes.byref(err))
        if rc == _lib.SPDL_OK:
            return
        message = _lib.take_string(err.value)
        if rc != _lib.SPDL_TIMEOUT:
            raise RuntimeError(message)
        self._abandoned = True
        _logger.warning("spdl_go: %s", message)

    def _take_failure(self) -> PipelineFailure | None:
        """The epoch's PipelineFailure (built once per epoch), or None."""
        with self._failure_lock:
            if self._failure is None and self._handle:
                report = _lib.call_json(_lib.LIB.spdl_pipeline_failure, self._h())
                if report:
                    self._failure = _make_failure(report)
            return self._failure

    def get_item(self, *, timeout: float | None = None) -> Any:
        """Returns the next item, starting the pipeline if it never was.

        After the epoch is exhausted or stopped, it returns what is left in
        the sink, then raises ``EOFError``. With a continuous source, the
        read after an epoch's ``EOFError`` starts the next epoch (not after
        ``stop()``).

        Args:
            timeout: Seconds to wait; None waits as long as it takes.

        Raises:
            EOFError: the epoch has ended, or was stopped, and every item
                was returned.
            TimeoutError: nothing arrived within ``timeout``.
            PipelineFailure: the pipeline failed, once the items produced
                before the failure were returned; every later read raises
                it again (until the next epoch).
        """
        if not self._started or self._epoch_done:
            self._auto_start()
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
            self._epoch_over(rc, err)

    def _epoch_over(self, rc: int, err: ctypes.c_void_p) -> NoReturn:
        """A read returned SPDL_END (EOFError) or SPDL_ERROR (the failure)."""
        self._running = False
        if rc == _lib.SPDL_END:
            self._end_hooks()
            if self._continuous and self._started and not self._stopped:
                self._epoch_done = True
            raise EOFError("the epoch has ended")
        message = _lib.take_string(err.value)
        failure = self._take_failure()
        if failure is None:
            failure = PipelineFailure([("pipeline", RuntimeError(message))], message)
        self._failure_seen = True
        self._end_hooks(failure)
        raise failure

    def _serve(self, fd: int, credits: int) -> tuple[int, Any, int]:
        """In a worker process: sends the items that are one tensor in the
        shared arena to the parent from Go (``spdl_pipeline_serve``), one
        credit each, and returns for what the caller does:
        ``(SPDL_OK, item, credits)`` an item to send;
        ``(SPDL_MESSAGE, bytes, credits)`` a message from the parent;
        ``(SPDL_TIMEOUT, None, credits)`` nothing yet (call again).

        Raises:
            EOFError, PipelineFailure: as ``get_item``.
            BrokenPipeError: the parent is gone.
        """
        if not self._started or self._epoch_done:
            self._auto_start()
        out, err, c = _lib.SpdlBuf(), ctypes.c_void_p(), ctypes.c_int64(credits)
        rc = _lib.LIB.spdl_pipeline_serve(
            self._h(), fd, int(self._POLL_S * 1e6), ctypes.byref(c), ctypes.byref(out), ctypes.byref(err)
        )
        if rc == _lib.SPDL_OK or rc == _lib.SPDL_MESSAGE:
            try:
                data = ctypes.string_at(out.data, out.len)
            finally:
                _lib.LIB.spdl_free(out.data)
            return rc, (_codec.decode(data) if rc == _lib.SPDL_OK else data), c.value
        if rc == _lib.SPDL_TIMEOUT:
            return rc, None, c.value
        if rc == _lib.SPDL_PEER:
            raise BrokenPipeError(_lib.take_string(err.value))
        self._epoch_over(rc, err)

    def _auto_start(self) -> None:
        """Starts the first epoch, or with a continuous source the next one
        once a read saw the last one end; one reader does it."""
        with self._auto_lock:
            if not self._started or (self._epoch_done and not self._running):
                self.start()

    def _end_hooks(self, exc: BaseException | None = None) -> None:
        """The epoch ended (``exc``: how it failed): the stages' task hooks
        leave their ``stage_hook`` (once per epoch)."""
        if self._hooks is not None:
            self._hooks.end(exc)

    def get_iterator(self, *, timeout: float | None = None) -> Iterator[Any]:
        """Iterates the pipeline's output, starting it if it never was.

        With ``continuous=False`` it reads on from where the previous
        iterator left off and ends with the source's one pass (at once if
        the pass is over). With ``continuous=True`` it reads one epoch: the
        running one if an iterator left it unfinished, else the next one
        (started here). Leaving it early (``break``, an exception) keeps
        the pipeline running and loses nothing; ``stop()`` stops it.
        A failure is raised after the items produced before it.

        Args:
            timeout: Seconds each read may wait (see ``get_item``).
        """
        if self._continuous:
            if not self._running:
                self.start()
        elif not self._started:
            self._auto_start()
        while True:
            try:
                item = self.get_item(timeout=timeout)
            except EOFError:
                return
            yield item

    def __iter__(self) -> Iterator[Any]:
        return self.get_iterator()

    @contextlib.contextmanager
    def auto_stop(self, *, timeout: float | None = None) -> Iterator[Pipeline]:
        """Starts the pipeline and stops it when the block exits, whatever
        happens; ``timeout`` bounds the start and the stop (seconds)."""
        self.start(timeout=timeout)
        try:
            yield self
        finally:
            self.stop(timeout=timeout)

    def stats(self) -> PipelineStats:
        """A snapshot of per-stage counters; cheap, safe while running.

        With an execution region, the stages before the region and in it
        come first (those in worker processes summed over the workers, as
        they last reported, at most a second old), and the source is the
        pipeline's own."""
        st = PipelineStats._from(_lib.call_json(_lib.LIB.spdl_pipeline_stats, self._h()))
        if self._inner_stats is None:
            return st
        src, stages = self._inner_stats()
        return dataclasses.replace(st, source=src or st.source, stages=stages + st.stages)

    def _source_state(self) -> Any:
        """What the source knows that a checkpoint needs (see
        ``spdl_pipeline_source_state``): None, or for streaming sources
        ``{"sizes": {unit: samples}}``."""
        return _lib.call_json(_lib.LIB.spdl_pipeline_source_state, self._h())

    def start_trace(self, max_spans: int = 100_000) -> None:
        """Records the next ``max_spans`` op calls of every stage (start,
        duration, worker, failure) for ``write_trace``. Cheap enough to
        leave on for a window of a real run.
        """
        _lib.call(_lib.LIB.spdl_pipeline_trace_start, self._h(), int(max_spans), error=ValueError)

    def write_trace(self, path: str | os.PathLike[str]) -> None:
        """Stops recording and writes the trace as Chrome/Perfetto JSON:
        open it in https://ui.perfetto.dev to see each stage's workers on
        a timeline.

        Example:
            >>> pipeline.start_trace()
            >>> for batch in pipeline: ...
            >>> pipeline.write_trace("loader.trace.json")
        """
        _lib.call(_lib.LIB.spdl_pipeline_trace_write, self._h(), os.fsencode(path), error=OSError)

    @staticmethod
    def _report(ref: weakref.ref[Pipeline], interval: float, closed: threading.Event) -> None:
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
        """Stops the pipeline, waits for its threads (abandoning calls that
        do not return, as ``stop`` does), and frees it; the object is
        unusable afterwards."""
        self._close(wait_ms=-1)

    def _close(self, *, wait_ms: int) -> None:
        self._closed.set()
        h, self._handle = self._handle, 0
        if h:
            _live.discard(self)
            err = ctypes.c_void_p()
            rc = _lib.LIB.spdl_pipeline_free(h, wait_ms, ctypes.byref(err))
            message = _lib.take_string(err.value)
            if rc == _lib.SPDL_TIMEOUT:
                # A call stuck in Python was abandoned: its callbacks stay
                # registered for when it returns.
                if wait_ms > 0:  # interpreter exit: logging may be gone
                    os.write(2, b"spdl_go: at exit, a pipeline stage call had not returned after 2 s; leaving it\n")
                elif wait_ms < 0:
                    _logger.warning("spdl_go: close(): %s", message)
            else:
                self._unregister()
        self._running = False
        if self._hooks is not None:
            # In a finaliser (wait_ms 0) only schedule it: it may run on a callback thread.
            self._hooks.end(wait=wait_ms != 0, timeout=_HOOKS_WAIT_S)
            self._hooks.close()

    def __del__(self) -> None:
        # Finalisers can run on one of this pipeline's own callback threads,
        # so do not wait for them here. At interpreter exit module globals
        # may already be gone: a closed pipeline touches none of them.
        if getattr(self, "_handle", 0):
            try:
                self._close(wait_ms=0)
            except Exception:  # noqa: BLE001 - nothing to report to in a finaliser
                pass

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _bounded(fn: Callable[[], object], timeout: float | None, what: str) -> None:
    """Runs fn, waiting at most timeout seconds (None: as long as it takes);
    past that, raises TimeoutError and lets fn finish on its own thread."""
    if timeout is None:
        fn()
        return
    if not timeout >= 0:
        raise ValueError(f"{what}: timeout must be >= 0 seconds or None, got {timeout!r}")
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
            errors.append(e)

    t = threading.Thread(target=run, name=f"spdl_go-{what}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError(f"the pipeline's {what} did not finish within {timeout} s")
    if errors:
        raise errors[0]


def _make_failure(report: dict[str, Any]) -> PipelineFailure:
    """Builds the PipelineFailure of spdl_pipeline_failure's report: each
    error is the exception a Python stage or source raised, taken back from
    the registry, or a RuntimeError with the engine's message."""
    errors: list[tuple[str, Exception]] = []
    for e in report["errors"]:
        message = str(e["message"])
        exc = _callbacks.take_exception(int(e["exc"])) if e.get("exc") else None
        if isinstance(exc, Exception):
            if sys.version_info >= (3, 11):
                exc.add_note(message.split("\n", 1)[0])
        else:
            cause, exc = exc, RuntimeError(message)
            exc.__cause__ = cause  # a BaseException (KeyboardInterrupt) cannot be grouped
        errors.append((str(e.get("stage") or "pipeline"), exc))
    return PipelineFailure(errors, str(report["message"]))
