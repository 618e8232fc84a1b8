"""Running a built pipeline: ``Pipeline`` and the errors it raises.

A pipeline is a source, then stages, then a sink that prefetches. Stages
run on Go threads: native ops without the GIL, Python callables with the
GIL held only while Python code runs. Iterating a pipeline is one epoch;
iterate again for the next one. ``PipelineBuilder`` (``spdl_go.builder``)
makes one; this module owns it from then on: its epochs, its items, its
stats, a periodic stats reporter, and closing it (at interpreter exit
too, before the callbacks its threads run are torn down).

Example:
    >>> from spdl_go import PipelineBuilder
    >>> pipeline = PipelineBuilder().add_source(range(10)).pipe(lambda x: x * x).build()
    >>> with pipeline.auto_stop():
    ...     for item in pipeline:
    ...         print(item)
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import logging
import os
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from . import _callbacks, _codec, _lib
from .stats import Bottleneck, PipelineStats, StageStats

# The stats types live in spdl_go.stats; they are imported here too so that
# ``from spdl_go.pipeline import PipelineStats`` goes on working.
__all__ = ["Bottleneck", "Pipeline", "PipelineError", "PipelineStats", "StageStats"]


class PipelineError(RuntimeError):
    """The pipeline failed: a source raised, or a stage exceeded its
    ``max_failures``. The message names the stage and the item."""


_logger = logging.getLogger("spdl_go")
_live: weakref.WeakSet[Pipeline] = weakref.WeakSet()
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
                src = _callbacks.sources[i]
                src.iterator = iter(src.iterable)
            _lib.call(_lib.LIB.spdl_pipeline_start, h)
            self._running = True
            if self._report_interval and self._reporter is None:
                self._reporter = threading.Thread(
                    target=self._report,
                    args=(weakref.ref(self), self._report_interval, self._closed),
                    name="spdl_go-stats",
                    daemon=True,
                )
                self._reporter.start()

    def stop(self) -> None:
        """Stops the running epoch and waits for its threads. Safe to call
        more than once, and before ``start``."""
        if not self._handle:
            return
        h = self._h()
        try:
            _lib.call(_lib.LIB.spdl_pipeline_stop, h)
        finally:
            self._running = False

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
    def auto_stop(self) -> Iterator[Pipeline]:
        """Starts the pipeline and stops it when the block exits, whatever happens."""
        self.start()
        try:
            yield self
        finally:
            self.stop()

    def stats(self) -> PipelineStats:
        """A snapshot of per-stage counters; cheap, safe while running."""
        return PipelineStats._from(_lib.call_json(_lib.LIB.spdl_pipeline_stats, self._h()))

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

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def __getattr__(name: str) -> Any:
    # PipelineBuilder lived here before spdl_go.builder; builder imports this
    # module, so the old name is resolved on first use.
    if name == "PipelineBuilder":
        from .builder import PipelineBuilder

        return PipelineBuilder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
