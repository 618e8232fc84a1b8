"""Pipelines in a worker subprocess: SPDL's ``iterate_in_subprocess`` and
``run_pipeline_in_subprocess``, with tensors crossing without a copy.

The parent makes a memfd (anonymous shared memory: it has no name to leak,
and is gone once both processes have closed and unmapped it) and hands it to
the child, whose engine then allocates its tensor buffers there
(``spdl_shm_arena``). A tensor in an item is pickled as a descriptor of its
buffer (``spdl_shm_lend_desc``: offsets, dtype, shape, strides), and the
parent makes a tensor over the same pages (``spdl_shm_tensor_desc``); its
last reference, dropped on any thread, gives the buffer back to the child
through a counter in the shared memory. numpy arrays and Arrow buffers of
4 KiB or more are copied once into arena tensors and cross the same way,
but for the engine's own Arrow buffers, which its allocator carves from the
arena already (``spdl_shm_lend_buffer`` lends them as they are).
Everything else in an item is pickled as usual; an item that is one tensor
or array is not pickled at all. A worker running a pipeline
(``run_pipeline_in_subprocess``) sends those from Go
(``spdl_pipeline_serve``, which keeps the credits too), so its Python
wakes only for the other items and for the parent's commands.

Messages go over a socket pair, a tag byte and a payload each way. The child
keeps at most ``buffer_size`` items ahead of the parent: the parent sends
credits back as it hands items out.
"""

from __future__ import annotations

import ctypes
import io
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.reduction
import multiprocessing.util
import os
import pickle
import random
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from ctypes import c_int64, string_at
from fractions import Fraction
from typing import Any, TypeVar

from .. import _lib
from .._buffers import ArrowArray, Tensor

__all__ = ["iterate_in_subprocess", "run_pipeline_in_subprocess"]

T = TypeVar("T")

_logger = logging.getLogger("spdl_go")

# 4 GiB of address space: a memfd uses memory only for pages written, and
# the pool reuses buffers, so this bounds the batches in flight, not a cost.
_DEFAULT_SHM_BYTES = 4 << 30

# Parent -> child commands.
_START, _STOP, _ABORT, _CREDIT = b"start", b"stop", b"abort", b"c"
# A question about the worker's iterable: b"q" + the name of its method
# (``_stats``, ``_running``, ``_source_state``); the answer is pickled.
_QUERY = b"q"
_QUERIES = (b"stats", b"running", b"source_state")
# Child -> parent tags (first byte).
_READY, _INIT_FAILED, _STARTED, _ITEM, _FINISHED, _FAILED, _UNEXPECTED, _ANSWER = (
    b"R",
    b"I",
    b"S",
    b"D",
    b"F",
    b"E",
    b"U",
    b"T",
)
_GRACE = 1.0  # seconds to read a dead child's last messages


# ---- child ------------------------------------------------------------------


class _Lender(pickle.Pickler):
    """Pickles an item, lending the buffers of its arena tensors to the
    parent; tensors outside the arena (it was full) are copied."""

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is Tensor:
            if not obj._ptr:
                raise ValueError("spdl_go: an item holds a released Tensor")
            if obj._view().device.device_type != 1:  # kDLCPU
                raise ValueError(
                    f"spdl_go: an item holds a tensor on {obj.device}; only CPU tensors cross to the parent process "
                    "(move data to the GPU in the parent)"
                )
            desc = _lend(obj._ptr)
            if desc is not None:
                return ("t", desc)
            import numpy

            return ("n", numpy.ascontiguousarray(numpy.from_dlpack(obj)))
        np = sys.modules.get("numpy")
        if np is not None and type(obj) is np.ndarray and obj.nbytes >= _OFFLOAD_BYTES:
            desc = _offload(np, obj)
            return None if desc is None else ("np", desc)
        pa = sys.modules.get("pyarrow")
        if pa is not None and isinstance(obj, pa.Buffer) and obj.size >= _OFFLOAD_BYTES and obj.is_cpu:
            # The engine's Arrow buffers are in the arena already: lent as
            # they are. Others (pyarrow's own) are copied there once.
            desc = _lend_buffer(obj) or _offload_buffer(obj)
            return None if desc is None else ("ab", desc)
        return None

    def reducer_override(self, obj: Any) -> Any:
        # An engine Arrow column is pickled as the pyarrow array over it
        # (no copy); pyarrow's own reduction then hands each of its buffers
        # to persistent_id, so nested types and offsets need nothing here.
        if type(obj) is ArrowArray:
            import pyarrow

            return (_itself, (pyarrow.array(obj),))
        return NotImplemented


def _itself(x: Any) -> Any:
    return x


# numpy arrays this large (SPDL's threshold) are copied once into the
# shared memory, and reach the parent as arrays over it.
_OFFLOAD_BYTES = 4096
_DL_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}

# The worker pickles on one thread: one buffer serves every lend. A
# descriptor (spdl_shm_lend_desc) is 24 bytes and 16 per dimension.
_DESC = ctypes.create_string_buffer(24 + 16 * 64)


def _lend(ptr: int) -> bytes | None:
    """Lends an arena tensor to the parent: its descriptor, or None when
    its buffer is not in the arena (nothing is lent then)."""
    n = _lib.LIB.spdl_shm_lend_desc(ptr, _DESC, len(_DESC))
    return string_at(_DESC, n) if n > 0 else None


def _lend_buffer(buf: Any) -> bytes | None:
    """Lends an Arrow buffer the engine made in the arena (its descriptor),
    or None when it is not one (nothing is lent then)."""
    n = _lib.LIB.spdl_shm_lend_buffer(buf.address, buf.size, _DESC, len(_DESC))
    return string_at(_DESC, n) if n > 0 else None


def _arena_copy(ndim: int, shape: Any, code: int, bits: int, fill: Callable[[Tensor], object]) -> bytes | None:
    """A new arena tensor, filled by ``fill`` and lent: its descriptor;
    None (pickle the value instead) when the arena is full."""
    ptr = _lib.LIB.spdl_tensor_alloc(ndim, shape, code, bits, 1)
    if not ptr:
        return None
    t = Tensor._adopt(ptr)
    desc = _lend(ptr)
    if desc is None:
        return None  # from malloc: the arena is full
    fill(t)
    return desc


def _offload(np: Any, a: Any) -> bytes | None:
    """A numpy array copied into an arena tensor and lent (its descriptor);
    None (pickle it) when its dtype has no DLPack code or the arena is
    full."""
    dt = a.dtype
    code = _DL_CODES.get(dt.kind)
    if code is None or not dt.isnative or dt.fields is not None or dt.subdtype is not None:
        return None
    return _arena_copy(
        a.ndim,
        (c_int64 * a.ndim)(*a.shape),
        code,
        dt.itemsize * 8,
        lambda t: np.copyto(np.from_dlpack(t), a, casting="no"),
    )


def _offload_buffer(buf: Any) -> bytes | None:
    """An Arrow buffer copied once into an arena tensor (uint8) and lent
    (its descriptor); None (pickle it) when the arena is full."""
    return _arena_copy(
        1, (c_int64 * 1)(buf.size), 1, 8, lambda t: ctypes.memmove(t._view().data, buf.address, buf.size)
    )


def _dumps(item: Any) -> bytes:
    # An item that is one tensor or array (a collated batch) skips pickle:
    # a tag byte (a pickle starts with 0x80), then its descriptor.
    if type(item) is Tensor and item._ptr:
        desc = _lend(item._ptr)
        if desc is not None:
            return _FAST_TENSOR + desc
    else:
        np = sys.modules.get("numpy")
        if np is not None and type(item) is np.ndarray and item.nbytes >= _OFFLOAD_BYTES:
            desc = _offload(np, item)
            if desc is not None:
                return _FAST_ARRAY + desc
    f = io.BytesIO()
    _Lender(f, pickle.HIGHEST_PROTOCOL).dump(item)
    return f.getvalue()


_FAST_TENSOR, _FAST_ARRAY = b"\x01", b"\x02"


def _failure_payload(e: BaseException, prefix: str) -> bytes:
    """The child's error for the parent: its message, and the exceptions
    themselves where they pickle (a PipelineFailure's stage errors, each
    with its stage)."""
    from ._pipeline import PipelineFailure

    errors: list[tuple[str, BaseException]] = []
    if isinstance(e, PipelineFailure):
        for exc in e.exceptions:
            notes = list(getattr(exc, "__notes__", []))
            stage = next((n[len("Pipeline stage: ") :] for n in notes if n.startswith("Pipeline stage: ")), "")
            errors.append((stage, exc))
    else:
        errors.append(("", e))
    sent: list[tuple[str, Any, str]] = []
    for stage, err in errors:
        if stage and hasattr(err, "__notes__"):
            err.__notes__ = [n for n in err.__notes__ if n != f"Pipeline stage: {stage}"]
        try:
            blob = pickle.dumps(err, pickle.HIGHEST_PROTOCOL)
            pickle.loads(blob)
        except Exception:  # noqa: BLE001  (an exception that does not pickle crosses as its text)
            blob = None
        sent.append((stage, blob, f"{type(err).__name__}: {err}"))
    return pickle.dumps((f"{prefix}{e}", isinstance(e, PipelineFailure), sent))


def _watch_parent(pid: int) -> None:
    """Ends this worker when the parent process ends, even by SIGKILL,
    rather than at its next message. A pidfd follows the parent itself
    (PR_SET_PDEATHSIG would follow the thread that started the worker, and
    under forkserver the parent is the server)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(1)
    except (OSError, AttributeError):  # no pidfd (Linux < 5.3): poll
        start = os.getppid()

        def poll() -> None:
            while os.getppid() == start:
                time.sleep(0.2)
            os._exit(1)

        threading.Thread(target=poll, daemon=True, name="spdl-go-parent-watch").start()
        return

    def wait() -> None:
        select.select([fd], [], [])
        os._exit(1)

    threading.Thread(target=wait, daemon=True, name="spdl-go-parent-watch").start()


def _child_main(
    parent_pid: int,
    conn: multiprocessing.connection.Connection,
    shm: Any,
    shm_bytes: int,
    fn: Callable[[], Iterable[Any]],
    initializers: Sequence[Callable[[], None]],
    buffer_size: int,
) -> None:
    _watch_parent(parent_pid)
    try:
        if _lib.LOADED_PID != os.getpid():
            raise RuntimeError(
                "spdl-go's library was loaded before this process was forked (the Go runtime does not survive "
                "fork): with mp_context='forkserver', the fork server imported spdl_go (it preloads __main__); "
                "use mp_context='spawn', or multiprocessing.set_forkserver_preload([]) before the first process"
            )
        if shm is not None:
            fd = shm.detach()
            rc = _lib.LIB.spdl_shm_arena(fd, shm_bytes)
            os.close(fd)  # the mapping keeps the memory
            if rc:
                raise OSError(rc, f"spdl_go: mapping the shared memory for batches: {os.strerror(rc)}")
        for init in initializers:
            init()
    except Exception as e:  # noqa: BLE001  (reported to the parent)
        conn.send_bytes(_INIT_FAILED + f"Initializer failed: {type(e).__name__}: {e}".encode())
        return
    try:
        iterable = fn()
    except Exception as e:  # noqa: BLE001
        conn.send_bytes(_INIT_FAILED + f"Failed to create the iterable: {type(e).__name__}: {e}".encode())
        return
    conn.send_bytes(_READY)
    try:
        _serve(conn, iterable, buffer_size)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the parent is gone


def _answer(conn: multiprocessing.connection.Connection, iterable: Any, cmd: bytes) -> None:
    name = cmd[len(_QUERY) :]
    get = getattr(iterable, "_" + name.decode(), None) if name in _QUERIES else None
    try:
        answer = get() if get is not None else None
    except Exception:  # noqa: BLE001  (a closed pipeline: nothing to tell)
        answer = None
    conn.send_bytes(_ANSWER + pickle.dumps(answer))


def _serve(conn: multiprocessing.connection.Connection, iterable: Iterable[Any], buffer_size: int) -> None:
    while True:  # stand-by: wait for an epoch
        cmd = conn.recv_bytes()
        if cmd == _STOP or cmd[:1] == _CREDIT:
            continue  # credits for the last epoch's items; a stop with none running
        if cmd == _ABORT:
            return
        if cmd[:1] == _QUERY:
            _answer(conn, iterable, cmd)
            continue
        if cmd != _START:
            conn.send_bytes(_UNEXPECTED + cmd)
            return
        conn.send_bytes(_STARTED)
        try:
            it = iter(iterable)
        except Exception as e:  # noqa: BLE001
            conn.send_bytes(_FAILED + _failure_payload(e, "Failed to create the iterator: "))
            return
        try:
            if not _serve_epoch(conn, iterable, it, buffer_size):
                return
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()  # a stop, a failure, a parent gone: the epoch's pipeline stops


def _serve_epoch(
    conn: multiprocessing.connection.Connection, iterable: Any, it: Iterator[Any], buffer_size: int
) -> bool:
    """Sends one epoch's items; False when the worker should quit."""
    served = getattr(it, "serve", None)
    credits = buffer_size
    while True:
        # Commands are read when the credits run out: a parent that sends
        # one (a stop, a stats request) stops taking items, so that happens
        # within buffer_size items, and a fast parent costs no poll per item.
        cmd = b""
        if served is not None:
            # A pipeline's tensors go out from Go; what comes back is an
            # item to pickle, the parent's message, or nothing yet.
            try:
                rc, got, credits = served(conn.fileno(), credits)
            except (StopIteration, EOFError):
                conn.send_bytes(_FINISHED)
                return True
            except BrokenPipeError:
                raise
            except Exception as e:  # noqa: BLE001
                conn.send_bytes(_FAILED + _failure_payload(e, "Failed to fetch the next item: "))
                return False
            if rc == _lib.SPDL_TIMEOUT:
                continue
            if rc == _lib.SPDL_MESSAGE:
                cmd = got
        while credits == 0 or cmd:
            if not cmd:
                cmd = conn.recv_bytes()
            if cmd[:1] == _CREDIT:
                credits += int(cmd[1:])
            elif cmd[:1] == _QUERY:
                _answer(conn, iterable, cmd)
            elif cmd == _STOP:
                break
            elif cmd == _ABORT:
                return False
            else:
                conn.send_bytes(_UNEXPECTED + cmd)
                return False
            cmd = b""
        if cmd == _STOP:
            conn.send_bytes(_FINISHED)
            return True
        if served is not None:
            if rc != _lib.SPDL_OK:
                continue  # the message is handled; serve on
            item = got
        else:
            try:
                item = next(it)
            except StopIteration:
                conn.send_bytes(_FINISHED)
                return True
            except Exception as e:  # noqa: BLE001
                conn.send_bytes(_FAILED + _failure_payload(e, "Failed to fetch the next item: "))
                return False
        try:
            payload = _dumps(item)
        except Exception as e:  # noqa: BLE001
            conn.send_bytes(_FAILED + _failure_payload(e, "Failed to send the next item to the parent: "))
            return False
        del item
        conn.send_bytes(_ITEM + payload)
        credits -= 1


# ---- parent -----------------------------------------------------------------


class _Borrower(pickle.Unpickler):
    """Unpickles an item, making tensors over the buffers the child lent."""

    def __init__(self, data: bytes, shm_map: int | None) -> None:
        super().__init__(io.BytesIO(data))
        self._map = shm_map

    @staticmethod
    def tensor(shm_map: int | None, kind: str, desc: bytes) -> Any:
        """The tensor (or numpy array, kind "np") over a lent buffer."""
        ptr = _lib.LIB.spdl_shm_tensor_desc(shm_map, desc, len(desc)) if type(desc) is bytes else None
        if not ptr:
            raise RuntimeError(
                f"spdl_go: a tensor from the worker subprocess is malformed or lies outside its shared memory: {desc!r:.200}"
            )
        t = Tensor._adopt(ptr)
        if kind == "np":
            import numpy

            return numpy.from_dlpack(t)  # the array holds the buffer until it is gone
        return t

    def persistent_load(self, pid: Any) -> Any:
        kind = pid[0]
        if kind in ("t", "np") and len(pid) == 2:
            return self.tensor(self._map, kind, pid[1])
        if kind == "ab" and len(pid) == 2:
            import pyarrow

            t = self.tensor(self._map, "t", pid[1])
            v = t._view()
            # The buffer holds the tensor, which holds the lent pages.
            return pyarrow.foreign_buffer(v.data, v.shape[0], base=t)
        if kind in ("n", "a"):
            return pid[1]
        raise pickle.UnpicklingError(f"spdl_go: unknown persistent id {kind!r}")


def _exit_text(code: int | None) -> str:
    if code is None:
        return "it did not exit"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _remote_error(payload: bytes, prefix: str = "The worker subprocess quit. ") -> BaseException:
    from ._pipeline import PipelineFailure

    message, is_failure, sent = pickle.loads(payload)
    excs: list[tuple[str, BaseException]] = []
    for stage, blob, text in sent:
        exc: BaseException | None = None
        if blob is not None:
            try:
                exc = pickle.loads(blob)
            except Exception:  # noqa: BLE001  (e.g. a class only the child can import)
                exc = None
        excs.append((stage, exc if exc is not None else RuntimeError(text)))
    err = RuntimeError(f"{prefix}{message}")
    if is_failure and excs and all(isinstance(e, Exception) for _, e in excs):
        err.__cause__ = PipelineFailure([(s, e) for s, e in excs])  # type: ignore[misc]
    elif excs:
        err.__cause__ = excs[0][1]
    return err


class _Worker:
    """The parent's end: the child process, its socket and the mapping."""

    def __init__(
        self,
        target: Callable[..., None],
        args: tuple[Any, ...],
        mp_context: str | None,
        timeout: float,
        daemon: bool,
        shm_bytes: int,
        name: str = "spdl-go-worker",
    ) -> None:
        """Starts ``target(parent_pid, conn, shm, shm_bytes, *args)`` in a
        new process (``shm``: a DupFd of the memfd, None if shm_bytes is 0)."""
        self.timeout = timeout
        self.credit_step = 1  # see SubprocessIterable._epoch
        self.map: int | None = None
        self.closed = False
        self.lock = threading.Lock()
        self.pending: list[bytes] = []  # messages read while waiting for another kind
        ctx = multiprocessing.get_context(mp_context)
        parent, child = multiprocessing.Pipe(duplex=True)
        self.conn = parent
        fd = -1
        shm = None
        try:
            if shm_bytes > 0:
                fd = os.memfd_create("spdl-go-batches", os.MFD_CLOEXEC)
                os.ftruncate(fd, shm_bytes)
                err = ctypes.c_int()
                m = _lib.LIB.spdl_shm_map(fd, shm_bytes, ctypes.byref(err))
                if not m:
                    raise OSError(err.value, f"spdl_go: mapping shared memory for batches: {os.strerror(err.value)}")
                self.map = m
                shm = multiprocessing.reduction.DupFd(fd)
            self.proc = ctx.Process(  # type: ignore[attr-defined]
                target=target,
                args=(os.getpid(), child, shm, shm_bytes, *args),
                daemon=daemon,
                name=name,
            )
            try:
                self.proc.start()
            except (pickle.PicklingError, TypeError, AttributeError) as e:
                raise ValueError(
                    f"spdl_go: the worker subprocess needs the function and initializers pickled "
                    f"(mp_context={ctx.get_start_method()!r}): {e}"
                ) from e
        except BaseException:
            if self.map:
                _lib.LIB.spdl_shm_unmap(self.map)
                self.map = None
            parent.close()
            raise
        finally:
            child.close()
            if fd >= 0:
                os.close(fd)  # the child has its own; the mapping keeps ours

    def recv(self, what: str) -> bytes:
        """The next message; raises if none comes within the timeout or the
        child dies."""
        if self.pending:
            return self.pending.pop(0)
        if self.closed:
            raise RuntimeError("The worker process is shutdown.")
        if self.timeout == float("inf"):
            # No timeout: a plain blocking read (one call less per item); a
            # child that dies closes its end, so this ends with EOFError.
            try:
                return self.conn.recv_bytes()
            except (EOFError, OSError):
                self.proc.join(_GRACE)
                raise RuntimeError(
                    f"The worker subprocess exited unexpectedly ({_exit_text(self.proc.exitcode)})."
                ) from None
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                if self.conn.poll(min(0.1, max(0.0, deadline - time.monotonic()))):
                    return self.conn.recv_bytes()
            except (EOFError, OSError):
                break
            if not self.proc.is_alive():
                # Read what it wrote before it died.
                end = time.monotonic() + _GRACE
                try:
                    while time.monotonic() < end:
                        if self.conn.poll(0.05):
                            return self.conn.recv_bytes()
                        break
                except (EOFError, OSError):
                    pass
                break
            if time.monotonic() >= deadline:
                raise RuntimeError(f"The worker subprocess did not {what} for {self.timeout:.2f} seconds.")
        self.proc.join(_GRACE)
        raise RuntimeError(f"The worker subprocess exited unexpectedly ({_exit_text(self.proc.exitcode)}).")

    def send(self, cmd: bytes) -> None:
        try:
            self.conn.send_bytes(cmd)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # a dead child is reported by the next recv

    def item(self, payload: bytes) -> Any:
        tag = payload[:1]
        if tag == _FAST_TENSOR or tag == _FAST_ARRAY:
            return _Borrower.tensor(self.map, "t" if tag == _FAST_TENSOR else "np", payload[1:])
        return _Borrower(payload, self.map).load()

    def terminate(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.proc.is_alive():
            self.send(_ABORT)
            self.proc.join(3)
            if self.proc.is_alive():
                _logger.warning("spdl_go: terminating the worker subprocess")
                self.proc.terminate()
                self.proc.join(10)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(10)
        if not self.proc.is_alive():
            self.proc.close()  # its sentinel pipe
        # Items still in the socket hold lent buffers; the child is gone, so
        # nothing needs them back.
        self.conn.close()
        if self.map:
            _lib.LIB.spdl_shm_unmap(self.map)  # tensors the user holds keep the pages
            self.map = None


class SubprocessIterable(Iterable[T]):
    """What ``iterate_in_subprocess`` returns: each ``iter()`` runs one epoch
    in the same worker process (SPDL's semantics), and a ``for`` loop left
    early leaves it ready for the next. ``close()`` (or leaving a ``with``
    block, or garbage collection) stops the worker."""

    def __init__(self, worker: _Worker, keep_leftovers: bool = False) -> None:
        self._worker: _Worker | None = worker
        # A continuous pipeline's epoch left early goes on in the next
        # iterator: the items already sent are handed out first, not dropped.
        self._keep_leftovers = keep_leftovers
        self._finalizer = multiprocessing.util.Finalize(self, worker.terminate, exitpriority=10)

    def __iter__(self) -> Iterator[T]:
        w = self._worker
        if w is None:
            raise RuntimeError("The worker process is shutdown. Cannot iterate again.")
        return self._epoch(w)

    def _epoch(self, w: _Worker) -> Iterator[T]:
        with w.lock:
            leftovers = self._enter(w)
        # Credits go back in groups of credit_step (half of buffer_size):
        # fewer messages, and the worker, owed fewer than that, always has
        # one left to send the next item.
        owed = 0
        try:
            while leftovers:
                yield leftovers.pop(0)
            while True:
                with w.lock:
                    msg = w.recv("produce any data")
                    tag, body = msg[:1], msg[1:]
                    if tag == _ITEM:
                        item = w.item(body)
                        owed += 1
                        if owed >= w.credit_step:
                            w.send(_CREDIT + b"%d" % owed)
                            owed = 0
                    elif tag == _FINISHED:
                        return
                    elif tag == _FAILED:
                        raise _remote_error(body)
                    else:
                        raise RuntimeError(f"[INTERNAL ERROR] spdl_go: the worker subprocess sent {msg[:64]!r}")
                yield item
                del item
        except GeneratorExit:
            return  # left early: the next epoch stops this one
        except BaseException:
            self._shutdown()
            raise

    def _enter(self, w: _Worker) -> list[Any]:
        """Starts an epoch; returns the last one's items still on their way
        if they are kept (else they are dropped)."""
        w.send(_STOP)
        w.send(_START)
        kept: list[Any] = []
        while True:
            msg = w.recv("start an epoch")
            tag = msg[:1]
            if tag == _STARTED:
                return kept
            if tag == _ITEM:
                item = w.item(msg[1:])  # dropped, it gives back its buffers
                if self._keep_leftovers:
                    kept.append(item)
                del item
            elif tag in (_FINISHED, _ANSWER):
                continue
            elif tag == _FAILED:
                err = _remote_error(msg[1:])
                self._shutdown()
                raise err
            else:
                self._shutdown()
                raise RuntimeError(
                    "The worker subprocess was not in the stand-by mode. Please make sure that the previous "
                    f"iterator was exhausted before iterating again. ({msg[:64]!r})"
                )

    def stats(self) -> Any:
        """The worker's pipeline's ``PipelineStats`` (``run_pipeline_in_subprocess``;
        None before the first epoch, and for ``iterate_in_subprocess``)."""
        return self._query(b"stats")

    @property
    def _running(self) -> bool:
        """Whether the worker's continuous pipeline is in an epoch left
        early (``ResumableSource.track`` carries its progress on)."""
        return self._worker is not None and bool(self._query(b"running"))

    def _source_state(self) -> Any:
        """The worker pipeline's source state (what ``ResumableSource``
        learns of a streaming source's units)."""
        return self._query(b"source_state")

    def _query(self, name: bytes) -> Any:
        w = self._worker
        if w is None:
            raise RuntimeError("The worker process is shutdown.")
        with w.lock:
            w.send(_QUERY + name)
            held: list[bytes] = []
            while True:
                msg = w.recv("answer")
                if msg[:1] == _ANSWER:
                    w.pending = held + w.pending
                    return pickle.loads(msg[1:])
                held.append(msg)

    def _shutdown(self) -> None:
        w, self._worker = self._worker, None
        if w is not None:
            self._finalizer()

    def close(self) -> None:
        """Stops the worker process. Tensors already received stay valid."""
        self._shutdown()

    def __enter__(self) -> SubprocessIterable[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _initializers(initializer: Callable[[], None] | Sequence[Callable[[], None]] | None) -> list[Callable[[], None]]:
    if initializer is None:
        return []
    if callable(initializer):
        return [initializer]
    return list(initializer)


def iterate_in_subprocess(
    fn: Callable[[], Iterable[T]],
    *,
    buffer_size: int = 3,
    initializer: Callable[[], None] | Sequence[Callable[[], None]] | None = None,
    mp_context: str | None = None,
    timeout: float | None = None,
    daemon: bool = False,
    shm_bytes: int = _DEFAULT_SHM_BYTES,
) -> SubprocessIterable[T]:
    """Iterates over ``fn()`` in a worker process, as SPDL's function of the
    same name: the worker starts once (this call returns when ``fn()`` has
    returned there), and each ``iter()`` of the result runs one epoch of the
    same iterable, which must therefore be re-iterable (a generator gives
    one epoch, then none).

    spdl-go tensors in the items cross without a copy: the worker's engine
    allocates them in shared memory, and the parent's tensor reads the same
    pages; dropping it gives the buffer back. numpy arrays of 4 KiB or more
    are copied once into that memory in the worker and arrive as arrays
    over it, and so are the buffers of Arrow columns (as pyarrow arrays).
    The rest of an item is pickled.

    Args:
        fn: Called once in the worker, with no arguments, after the
            initializers; returns the iterable. Pickled to reach the worker
            (``functools.partial`` binds arguments).
        buffer_size: Items the worker may produce ahead of the parent.
        initializer: A callable, or several, run in the worker before ``fn``.
        mp_context: "spawn" (the default, None) or "forkserver". Not "fork":
            the Go runtime does not survive it.
        timeout: Seconds to wait for the worker to start, or between two
            items; None waits for ever.
        daemon: Make the worker a daemon process (for debugging).
        shm_bytes: Address space of the shared memory for tensors (memory is
            used only for pages written; 0: tensors are copied). spdl-go's
            own argument.

    Raises:
        ValueError: a bad argument, or ``fn`` does not pickle.
        RuntimeError: the worker failed to start ("The worker subprocess
            quit. ..."), or, while iterating, ``fn()``'s iterator raised
            (with the worker's exception, or the ``PipelineFailure`` of a
            pipeline, as its ``__cause__``), the worker died (naming its
            exit status) or was silent past ``timeout``.
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, not {type(fn).__name__}")
    if not isinstance(buffer_size, int) or buffer_size < 1:
        raise ValueError(f"buffer_size must be a positive integer, not {buffer_size!r}")
    if mp_context is None:
        mp_context = "spawn"
    if mp_context not in ("spawn", "forkserver"):
        raise ValueError(
            f"mp_context must be 'spawn' or 'forkserver', not {mp_context!r}: the Go runtime in a forked process "
            "has lost its threads"
        )
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be positive or None, not {timeout!r}")
    if not isinstance(shm_bytes, int) or shm_bytes < 0 or 0 < shm_bytes < (1 << 20):
        raise ValueError(f"shm_bytes must be 0 or at least 1 MiB, not {shm_bytes!r}")
    inits = _initializers(initializer)
    for i in inits:
        if not callable(i):
            raise ValueError(f"initializer must be callable, not {type(i).__name__}")
    worker = _Worker(
        _child_main,
        (fn, inits, buffer_size),
        mp_context,
        float("inf") if timeout is None else timeout,
        daemon,
        shm_bytes,
    )
    worker.credit_step = (buffer_size + 1) // 2
    try:
        msg = worker.recv("initialize")
    except BaseException:
        worker.terminate()
        raise
    if msg[:1] != _READY:
        worker.terminate()
        text = msg[1:].decode(errors="replace") if msg[:1] == _INIT_FAILED else repr(msg[:64])
        raise RuntimeError(f"The worker subprocess quit. {text}")
    return SubprocessIterable(worker)


# ---- run_pipeline_in_subprocess ---------------------------------------------


def _capture_rng() -> dict[str, Any]:
    """The parent's random states, as SPDL copies them: random's always,
    numpy's global and torch's CPU generator when already imported."""
    state: dict[str, Any] = {"random": random.getstate()}
    if "numpy" in sys.modules:
        import numpy

        state["numpy"] = numpy.random.get_state()
    if "torch" in sys.modules:
        import torch

        state["torch"] = torch.get_rng_state()
    return state


class _RestoreRNG:
    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def __call__(self) -> None:
        random.setstate(self.state["random"])
        if "numpy" in self.state:
            import numpy

            numpy.random.set_state(self.state["numpy"])
        if "torch" in self.state:
            import torch

            torch.set_rng_state(self.state["torch"])


class _Epoch:
    """One epoch of the worker's pipeline: an iterator, and ``serve`` for
    ``_serve`` (its tensors go to the parent from Go). An epoch of a fresh
    pipeline (``own``) stops it when it ends, fails or is closed."""

    def __init__(self, pipeline: Any, own: bool) -> None:
        self.pipeline, self.own = pipeline, own

    def __iter__(self) -> _Epoch:
        return self

    def __next__(self) -> Any:
        try:
            return self.pipeline.get_item()
        except EOFError:
            self.close()
            raise StopIteration from None
        except BaseException:
            self.close()
            raise

    def serve(self, fd: int, credits: int) -> tuple[int, Any, int]:
        try:
            return self.pipeline._serve(fd, credits)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.own:
            self.own = False
            self.pipeline.stop()


class _PipelineEpochs:
    """Built in the worker. As in SPDL: with a continuous source, one
    pipeline, started here and kept running, gives one epoch per iterator
    (so native sources reshuffle per epoch, and an epoch left early goes on
    in the next); otherwise each epoch is a fresh pipeline's one pass."""

    def __init__(self, config: Any, build_args: dict[str, Any]) -> None:
        from ._build import build_served

        self.config, self.build_args = config, build_args
        self.pipeline: Any = None
        if getattr(config.src, "continuous", False):
            self.pipeline = build_served(config, **build_args)
            self.pipeline.start()

    def __iter__(self) -> _Epoch:
        from ._build import build_served

        if getattr(self.config.src, "continuous", False):
            if not self.pipeline._running:
                self.pipeline.start()
            return _Epoch(self.pipeline, own=False)
        self.pipeline = build_served(self.config, **self.build_args)
        self.pipeline.start()
        return _Epoch(self.pipeline, own=True)

    def _stats(self) -> Any:
        return None if self.pipeline is None else self.pipeline.stats()

    def _running(self) -> bool:
        return bool(getattr(self.pipeline, "_running", False))

    def _source_state(self) -> Any:
        return None if self.pipeline is None else self.pipeline._source_state()


def run_pipeline_in_subprocess(
    config_or_builder: Any,
    /,
    *,
    num_threads: int,
    max_failures: int | Fraction = -1,
    report_stats_interval: float = -1,
    queue_size: int | None = None,
    cpu_budget: int | None = None,
    **kwargs: Any,
) -> SubprocessIterable[Any]:
    """Builds and runs the pipeline in a worker process, as SPDL's function
    of the same name: each ``iter()`` of the result runs one epoch, a fresh
    pipeline in the same worker; batches reach the parent through
    ``iterate_in_subprocess`` (tensors without a copy). The parent's
    ``random`` state (and numpy's and torch's, when imported) is copied to
    the worker once, before it starts. ``stats()`` of the result gives the
    worker pipeline's ``PipelineStats``.

    Args:
        config_or_builder: A ``PipelineConfig`` (``builder.get_config()``);
            a ``PipelineBuilder`` works too, with a deprecation warning, as
            in SPDL. Pickled to reach the worker: its Python callables must
            be importable functions or objects (not lambdas or closures).
        num_threads, max_failures, report_stats_interval, queue_size,
        cpu_budget: As for ``build_pipeline``, in the worker.
        kwargs: ``iterate_in_subprocess``'s arguments (``buffer_size``,
            ``initializer`` (run after the random states are restored),
            ``mp_context``, ``timeout``, ``daemon``, ``shm_bytes``).

    Raises:
        ValueError: the config does not pickle (naming the stage that does
            not), or a bad argument.
        RuntimeError: as ``iterate_in_subprocess``; a pipeline failure has
            the worker's ``PipelineFailure`` as its ``__cause__``.
    """
    from ..builder import PipelineBuilder

    config = config_or_builder
    if isinstance(config, PipelineBuilder):
        import warnings

        warnings.warn(
            "Passing a PipelineBuilder to run_pipeline_in_subprocess is deprecated. Please call `get_config()` "
            "and pass the PipelineConfig.",
            DeprecationWarning,
            stacklevel=2,
        )
        config = config.get_config()
    for key in ("queue_class", "task_hook_factory", "background_tasks", "use_thread_output_queue"):
        if kwargs.get(key) not in (None, False):
            raise ValueError(f"run_pipeline_in_subprocess: {key} is not supported by spdl-go")
        kwargs.pop(key, None)
    _check_pickles(config)
    build_args = {
        "num_threads": num_threads,
        "max_failures": max_failures,
        "report_stats_interval": report_stats_interval,
        "queue_size": queue_size,
        "cpu_budget": cpu_budget,
    }
    inits = [_RestoreRNG(_capture_rng())] + _initializers(kwargs.pop("initializer", None))
    import functools

    it = iterate_in_subprocess(functools.partial(_PipelineEpochs, config, build_args), initializer=inits, **kwargs)
    it._keep_leftovers = bool(getattr(config.src, "continuous", False))
    return it


def _check_pickles(config: Any) -> None:
    """A config that cannot reach the worker fails here, naming its part."""
    try:
        pickle.dumps(config)
        return
    except Exception as whole:  # noqa: BLE001
        parts = [("the source", getattr(config, "src", None))]
        for i, stage in enumerate(getattr(config, "pipes", ()) or ()):
            parts.append((f"stage {i} ({getattr(stage, 'name', type(stage).__name__)})", stage))
        for where, part in parts:
            try:
                pickle.dumps(part)
            except Exception as e:  # noqa: BLE001
                raise ValueError(
                    f"run_pipeline_in_subprocess: {where} cannot be sent to the worker process (it is pickled): {e}. "
                    "Use importable functions (not lambdas or closures)."
                ) from e
        raise ValueError(
            f"run_pipeline_in_subprocess: the pipeline cannot be sent to the worker process: {whole}"
        ) from whole
