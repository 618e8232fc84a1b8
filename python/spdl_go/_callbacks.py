"""Python code that Go calls: the registries of Python stages and sources,
the trampolines Go reaches them through, and the encoders of their output.

A built pipeline sends Go ids, never Python objects: each Python stage and
source is registered here under a fresh id when the pipeline is built and
removed when it is closed. Go calls ``_on_call`` (a stage's op on one item)
and ``_on_next`` (a source's next item) with those ids, on its own threads;
``_on_release`` drops an object that travelled opaquely through Go.

The library learns the trampolines once, when this module is imported.
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import reprlib
import threading
import traceback
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from concurrent.futures import Executor
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from . import _codec, _lib
from .aggregator import AggregatorOp

__all__ = [
    "PySource",
    "PyStage",
    "make_encoder",
    "register_source",
    "register_stage",
    "sources",
    "stages",
    "take_exception",
    "unregister",
]

Encoder = Callable[[Any], bytes]

# Python stages that are coroutine functions run on one event loop per Go
# thread (Go threads are long-lived, so the loops are reused).
_loops: dict[int, asyncio.AbstractEventLoop] = {}


def _run_coroutine(coro: Coroutine[Any, Any, Any]) -> Any:
    tid = threading.get_ident()
    loop = _loops.get(tid)
    if loop is None:
        loop = _loops[tid] = asyncio.new_event_loop()
    return loop.run_until_complete(coro)


def is_async_op(fn: Any) -> bool:
    """Whether ``fn`` (or its ``__call__``) is a coroutine function."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


def is_async_gen_op(fn: Any) -> bool:
    """Whether ``fn`` (or its ``__call__``) is an async generator function."""
    return inspect.isasyncgenfunction(fn) or inspect.isasyncgenfunction(getattr(fn, "__call__", None))  # noqa: B004


def is_gen_op(fn: Any) -> bool:
    """Whether ``fn`` (or its ``__call__``) is a generator function."""
    return inspect.isgeneratorfunction(fn) or inspect.isgeneratorfunction(getattr(fn, "__call__", None))  # noqa: B004


@dataclass
class PyStage:
    """A Python op of a pipe stage, and how its output travels.

    ``streams``: the op is a (sync or async) generator function, whose
    yielded values go on one by one. ``executor``: a sync op runs there,
    the calling thread waiting on the future (which frees the GIL)."""

    fn: Callable[[Any], Any]
    encode: Encoder
    is_async: bool
    streams: bool = False
    executor: Executor | None = None
    flush: Callable[[], Any] | None = None  # an Aggregator's: Go calls it with an empty argument
    hooks: list[Any] | None = None  # task hooks (spdl_go.pipeline.TaskHook), set by build_pipeline

    def call(self, arg: Any) -> Any:
        """The op's result for ``arg``; with hooks, ``_DROPPED`` when a hook
        swallowed the op's exception. A streaming op's call only makes its
        generator: the hooks wrap each value it yields (``_Stream``)."""
        if self.hooks and not self.streams:
            return self._call_hooked(arg)
        if self.is_async:
            return _run_coroutine(self.fn(arg))
        if self.executor is not None:
            return self.executor.submit(self.fn, arg).result()
        return self.fn(arg)

    def _call_hooked(self, arg: Any) -> Any:
        hooks = self.hooks or []
        if self.is_async:
            return _run_coroutine(_hooked_async(hooks, arg, lambda: self.fn(arg)))
        if self.executor is not None:
            executor = self.executor
            return _hooked_sync(hooks, arg, lambda: executor.submit(self.fn, arg).result())
        return _hooked_sync(hooks, arg, lambda: self.fn(arg))


# ---- task hooks ------------------------------------------------------------------
# A Python stage's hooks (spdl_go.pipeline.TaskHook) wrap each op call as
# SPDL's do: each hook's task_hook(item), an async context manager, is
# entered in order on this thread's event loop before the call and left in
# reverse order after it, seeing the call's exception. A sync op runs
# outside the loop (so it may run an event loop of its own).
_DROPPED = object()  # a hook swallowed the call's exception: the item is dropped


async def _enter_hooks(hooks: Sequence[Any], item: Any) -> AsyncExitStack | None:
    """The entered hooks; None if one raised and an earlier one swallowed it."""
    stack = AsyncExitStack()
    try:
        for h in hooks:
            cm = h.task_hook(item)
            if not hasattr(cm, "__aenter__") or not hasattr(cm, "__aexit__"):
                raise TypeError(
                    f"{type(h).__name__}.task_hook() must return an async context manager "
                    "(decorate it with contextlib.asynccontextmanager)"
                )
            await stack.enter_async_context(cm)
    except BaseException as e:
        if await stack.__aexit__(type(e), e, e.__traceback__):
            return None
        raise
    return stack


def _hooked_sync(hooks: Sequence[Any], item: Any, call: Callable[[], Any]) -> Any:
    """``call()`` inside the hooks. A generator's StopIteration reaches the
    hooks as StopAsyncIteration (as SPDL's async view of it) and ends it
    whatever they do."""
    stack = _run_coroutine(_enter_hooks(hooks, item))
    if stack is None:
        return _DROPPED
    try:
        res = call()
    except StopIteration:
        stop = StopAsyncIteration()
        _run_coroutine(stack.__aexit__(StopAsyncIteration, stop, None))
        raise
    except BaseException as e:
        if _run_coroutine(stack.__aexit__(type(e), e, e.__traceback__)):
            return _DROPPED
        raise
    _run_coroutine(stack.__aexit__(None, None, None))
    return res


async def _hooked_async(hooks: Sequence[Any], item: Any, call: Callable[[], Awaitable[Any]]) -> Any:
    """``await call()`` inside the hooks. StopAsyncIteration (an async
    generator's end) is raised again whatever the hooks do."""
    stack = await _enter_hooks(hooks, item)
    if stack is None:
        return _DROPPED
    try:
        res = await call()
    except StopAsyncIteration as e:
        await stack.__aexit__(type(e), e, e.__traceback__)
        raise
    except BaseException as e:
        if await stack.__aexit__(type(e), e, e.__traceback__):
            return _DROPPED
        raise
    await stack.__aexit__(None, None, None)
    return res


class _Stream:
    """A generator (sync or async) an op returned, which Go pulls value by
    value through ``_on_next`` under its id until it ends, then releases."""

    __slots__ = ("done", "encode", "gen", "hooks", "is_async", "item")

    def __init__(self, gen: Any, item: Any, encode: Encoder, hooks: list[Any] | None = None) -> None:
        self.gen = gen
        self.item = item  # named when a pull fails
        self.encode = encode
        self.is_async = inspect.isasyncgen(gen)
        self.done = False
        self.hooks = hooks  # each pull runs inside them

    def next(self) -> Any:
        """The next value; StopIteration at the end (for both kinds)."""
        if self.hooks:
            return self._next_hooked(self.hooks)
        if not self.is_async:
            return next(self.gen)
        try:
            return _run_coroutine(self.gen.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def _next_hooked(self, hooks: list[Any]) -> Any:
        while True:  # a value whose failure a hook swallowed is skipped
            if self.is_async:
                try:
                    value = _run_coroutine(_hooked_async(hooks, self.item, self.gen.__anext__))
                except StopAsyncIteration:
                    raise StopIteration from None
            else:
                value = _hooked_sync(hooks, self.item, lambda: next(self.gen))
            if value is not _DROPPED:
                return value

    def close(self) -> None:
        if self.done:
            return
        self.done = True
        if self.is_async:
            _run_coroutine(self.gen.aclose())
        else:
            self.gen.close()


_streams: dict[int, _Stream] = {}
_STREAM_BIT = 1 << 63  # set in a release callback's id for a stream (capi/python.go)
_CALL_SKIP = 2  # the op returned None: nothing goes on
_CALL_STREAM = 3  # the op returned a generator: out holds its stream id


class _AsyncSource:
    """A sync view of an async iterable source: each ``iter()`` (each
    epoch) takes a fresh ``aiter()``, after closing the previous epoch's
    iterator if it did not finish."""

    def __init__(self, source: AsyncIterable[Any]) -> None:
        self.source = source
        self.current: _AsyncSourceIter | None = None

    def __iter__(self) -> Iterator[Any]:
        if self.current is not None:
            self.current.close()
        self.current = _AsyncSourceIter(aiter(self.source))
        return self.current


class _AsyncSourceIter:
    def __init__(self, it: AsyncIterator[Any]) -> None:
        self.it: AsyncIterator[Any] | None = it

    def __iter__(self) -> _AsyncSourceIter:
        return self

    def __next__(self) -> Any:
        it = self.it
        if it is None:
            raise StopIteration
        try:
            return _run_coroutine(it.__anext__())  # type: ignore[arg-type]
        except StopAsyncIteration:
            self.close()
            raise StopIteration from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """``aclose()`` the iterator once, if it has one."""
        it, self.it = self.it, None
        if it is not None and (aclose := getattr(it, "aclose", None)) is not None:
            _run_coroutine(aclose())


@dataclass
class PySource:
    """A Python iterable source; ``iterator`` is the running epoch's."""

    iterable: Iterable[Any]
    encode: Encoder
    iterator: Iterator[Any] | None = None


# Registries from ids (sent to Go in the spec) to Python objects.
stages: dict[int, PyStage] = {}
sources: dict[int, PySource] = {}
_ids = iter(range(1, 1 << 62))
_ids_lock = threading.Lock()


def _new_id() -> int:
    with _ids_lock:
        return next(_ids)


def register_source(iterable: Iterable[Any] | AsyncIterable[Any], encode: Encoder) -> int:
    """Registers a Python source; returns the id its spec names."""
    sid = _new_id()
    if not isinstance(iterable, Iterable) and isinstance(iterable, AsyncIterable):
        iterable = _AsyncSource(iterable)
    sources[sid] = PySource(iterable, encode)
    return sid


def register_stage(fn: Callable[[Any], Any], encode: Encoder, executor: Executor | None = None) -> int:
    """Registers a Python op (sync, or async: run on this thread's loop;
    a generator function's values go on one by one); returns the id its
    spec names."""
    fid = _new_id()
    if isinstance(fn, AggregatorOp):  # accumulate's result goes on as it is
        stages[fid] = PyStage(fn, encode, False, flush=fn.flush if fn.flushes else None)
        return fid
    streams = is_gen_op(fn) or is_async_gen_op(fn)
    stages[fid] = PyStage(fn, encode, is_async_op(fn), streams, executor)
    return fid


def unregister(source_ids: Sequence[int], stage_ids: Sequence[int]) -> None:
    """Forgets what ``register_*`` returned (ids already gone are fine)."""
    for i in source_ids:
        sources.pop(i, None)
    for i in stage_ids:
        stages.pop(i, None)


def make_encoder(split_levels: int, native: bool | None) -> Encoder:
    """How a stage's output must travel: structured when a native op reads
    it, opaque (exactly as returned) when Python does; for a worker
    process's server (``native`` None), opaque but for a ``Tensor``, which
    the server lends to the parent. Lists that a disaggregate will split
    are sent as lists around their elements."""
    leaf: Encoder = (
        _codec.encode if native else _codec.encode_opaque if native is False else _codec.encode_tensor_or_opaque
    )
    if split_levels == 0:
        return leaf
    inner = make_encoder(split_levels - 1, native)

    def encode_list(obj: Any) -> bytes:
        if type(obj) not in (list, tuple):
            return leaf(obj)  # disaggregate will report that it is not a list
        return b"l" + len(obj).to_bytes(8, "little") + b"".join(inner(e) for e in obj)

    return encode_list


# ---- the trampolines ---------------------------------------------------------
_NO_ITEM = object()

_item_repr = reprlib.Repr()
_item_repr.maxstring = 120
_item_repr.maxother = 120


def _error_bytes(exc: BaseException, item: Any = _NO_ITEM) -> bytes:
    summary = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    # The exception itself stays here under an id until Go drops it (the
    # release callback) or a pipeline failure takes it back to re-raise it
    # (take_exception).
    head = f"exc: {_codec._register(exc)}\n"
    if item is not _NO_ITEM:
        # Only now, on failure, is the item rendered: the engine holds a
        # Python object only as a reference and cannot name it itself.
        head += "item: " + _item_repr.repr(item).replace("\n", " ") + "\n"
    return f"{head}{summary}\n\n{tb}".encode("utf-8", "replace")


def take_exception(exc_id: int) -> BaseException | None:
    """Takes back the exception that a stage or source raised, kept under
    ``exc_id`` by ``_error_bytes``; None if it is gone."""
    obj = _codec._objects.pop(exc_id, None)
    return obj if isinstance(obj, BaseException) else None


def _on_call(fn_id: int, in_ptr: int, in_len: int, out: int) -> int:
    # Never let an exception escape: ctypes would print it and return 0.
    arg = _NO_ITEM
    try:
        if in_len:
            # Decoded first: the argument owns what it references (tensors
            # handed over by the engine), released when it is collected,
            # even when the stage is gone (a pipeline dropped mid-epoch).
            arg = _codec.decode(ctypes.string_at(in_ptr, in_len))
        stage = stages[fn_id]
        if in_len == 0 and stage.flush is not None:
            res = stage.flush()  # the aggregator's input ended
            if res is None:
                return _CALL_SKIP
            data = stage.encode(res)
            _lib.LIB.spdl_buf_set(out, data, len(data))
            return 0
        res = stage.call(arg)
        if res is None or res is _DROPPED:
            return _CALL_SKIP
        if stage.streams:
            sid = _new_id()
            _streams[sid] = _Stream(res, arg, stage.encode, stage.hooks)
            data, rc = sid.to_bytes(8, "little"), _CALL_STREAM
        else:
            data, rc = stage.encode(res), 0
    except BaseException as e:  # noqa: BLE001 - every failure becomes the item's error
        data, rc = _error_bytes(e, arg), -1
    _lib.LIB.spdl_buf_set(out, data, len(data))
    return rc


def _on_next_stream(st: _Stream, out: int) -> int:
    try:
        try:
            item = st.next()
        except StopIteration:
            st.done = True
            return 1
        data, rc = st.encode(item), 0
    except BaseException as e:  # noqa: BLE001
        data, rc = _error_bytes(e, st.item), -1
    _lib.LIB.spdl_buf_set(out, data, len(data))
    return rc


def _on_next(src_id: int, out: int) -> int:
    if (st := _streams.get(src_id)) is not None:
        return _on_next_stream(st, out)
    try:
        src = sources[src_id]
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
    if obj_id & _STREAM_BIT:
        st = _streams.pop(obj_id ^ _STREAM_BIT, None)
        if st is not None:
            try:
                st.close()  # runs the generator's finally blocks
            except BaseException:  # noqa: BLE001, S110 - nobody to tell: the stream is gone
                pass
        return
    _codec.release_object(obj_id)


# ctypes keeps a callback callable only while its CFUNCTYPE object lives;
# these module globals live as long as the process.
_CALL = _lib.CALL_FN(_on_call)
_NEXT = _lib.NEXT_FN(_on_next)
_RELEASE = _lib.RELEASE_FN(_on_release)


def _init() -> None:
    _lib.call(_lib.LIB.spdl_init, _CALL, _NEXT, _RELEASE, error=ImportError)


_init()
