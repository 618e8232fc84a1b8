"""Loads libspdl.so and declares every C signature, once, at import.

Nothing here is mutated after import, so the module is safe to use from
many threads on free-threaded CPython too.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
from collections.abc import Callable
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char_p,
    c_int,
    c_int64,
    c_size_t,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Any

__all__ = [
    "LIB",
    "SPDL_END",
    "SPDL_ERROR",
    "SPDL_MESSAGE",
    "SPDL_OK",
    "SPDL_PEER",
    "SPDL_TIMEOUT",
    "SpdlBuf",
    "call",
    "call_json",
    "check_fork",
    "take_string",
]

SPDL_OK = 0
SPDL_END = 1
SPDL_TIMEOUT = 2
SPDL_MESSAGE = 3
SPDL_PEER = 4
SPDL_ERROR = -1


class SpdlBuf(Structure):
    """``spdl_buf``: a malloc'd byte buffer handed out by the library."""

    _fields_ = [("data", c_void_p), ("len", c_size_t)]


CALL_FN = CFUNCTYPE(c_int, c_uint64, c_void_p, c_size_t, c_void_p)
NEXT_FN = CFUNCTYPE(c_int, c_uint64, c_void_p)
RELEASE_FN = CFUNCTYPE(None, c_uint64)


def _find_library() -> Path:
    override = os.environ.get("SPDL_GO_LIBRARY")
    if override:
        return Path(override)
    return Path(__file__).with_name("libspdl.so")


def _elf_dynamic(path: Path) -> tuple[list[str], list[str]]:
    """The DT_NEEDED names and the RUNPATH/RPATH directories of a 64-bit
    little-endian ELF library: what the dynamic loader will look for, and
    where. Raises ValueError for a file the loader would fault on (a segment
    past the end of a truncated file makes dlopen die of SIGBUS, not fail).
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size

        def read(off: int, n: int) -> bytes:
            f.seek(off)
            b = f.read(n)
            if len(b) != n:
                raise ValueError(f"truncated: needs bytes {off}..{off + n}, the file has {size}")
            return b

        head = read(0, 64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            raise ValueError("not a 64-bit little-endian ELF file")
        (phoff,) = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        phdrs = read(phoff, phentsize * phnum)
        loads, dynamic = [], None
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", phdrs, i * phentsize)
            if p_type == 1:  # PT_LOAD
                if p_offset + p_filesz > size:
                    raise ValueError(f"truncated: a segment ends at byte {p_offset + p_filesz}, the file has {size}")
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == 2:  # PT_DYNAMIC
                dynamic = (p_offset, p_filesz)
        if dynamic is None:
            return [], []
        dyn = read(*dynamic)
        entries = []
        for off in range(0, len(dyn) - 15, 16):
            tag, val = struct.unpack_from("<qQ", dyn, off)
            if tag == 0:
                break
            entries.append((tag, val))
        tags = dict(entries)
        strtab, strsz = tags.get(5), tags.get(10)  # DT_STRTAB (an address), DT_STRSZ
        if strtab is None or strsz is None:
            raise ValueError("no dynamic string table")
        base = next((o + strtab - a for a, o, n in loads if a <= strtab < a + n), None)
        if base is None:
            raise ValueError("the dynamic string table is outside every segment")
        table = read(base, strsz)

    def string(at: int) -> str:
        return table[at : table.index(b"\0", at)].decode()

    needed = [string(v) for t, v in entries if t == 1]
    paths = [p for t, v in entries if t in (15, 29) for p in string(v).split(":") if p]
    origin = str(path.resolve().parent)
    return needed, [os.path.normpath(p.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)) for p in paths]


def _check_loadable(path: Path) -> None:
    """Refuses, with an ImportError naming the file, a libspdl.so or a bundled
    library that dlopen would crash on (truncated), before loading anything."""
    try:
        needed, runpath = _elf_dynamic(path)
    except (OSError, ValueError, UnicodeDecodeError, struct.error) as e:
        raise ImportError(f"spdl_go: {path} is damaged ({e}): reinstall spdl-go") from None
    for name in needed:
        for d in runpath:
            dep = Path(d) / name
            if dep.exists():
                try:
                    _elf_dynamic(dep)
                except (OSError, ValueError, UnicodeDecodeError, struct.error) as e:
                    raise ImportError(
                        f"spdl_go: the bundled library {name} at {dep} (needed by {path}, searched for in "
                        f"{', '.join(runpath)}) is damaged ({e}): reinstall spdl-go "
                        "(pip install --force-reinstall spdl-go)"
                    ) from None
                break


def _load_error(path: Path, err: OSError) -> ImportError:
    """An ImportError that names what could not load and where it was looked for."""
    msg = f"spdl_go: cannot load {path}: {err}"
    try:
        needed, runpath = _elf_dynamic(path)
    except (OSError, ValueError, UnicodeDecodeError, struct.error) as e:
        return ImportError(f"{msg} (and its ELF header could not be read: {e})")
    ld_path = os.environ.get("LD_LIBRARY_PATH")
    searched = [
        *runpath,
        f"LD_LIBRARY_PATH={ld_path}" if ld_path else "LD_LIBRARY_PATH (unset)",
        "the system's (ldconfig)",
    ]
    msg += f". Its libraries are searched for in: {'; '.join(searched)}."
    for name in needed:
        if name in str(err) and runpath:
            where = [str(Path(d) / name) for d in runpath if (Path(d) / name).exists()]
            msg += f" {name}: " + (f"found at {', '.join(where)}." if where else f"not in {', '.join(runpath)}.")
    if runpath:
        msg += " The wheel's bundled libraries are missing or damaged: reinstall spdl-go (pip install --force-reinstall spdl-go)."
    else:
        msg += " This build links the system's FFmpeg and libjpeg-turbo: install them, or rebuild it (pip install .)."
    return ImportError(msg)


def _load() -> ctypes.CDLL:
    path = _find_library()
    if not path.exists():
        raise ImportError(
            f"spdl_go: {path} is missing. Build it with `make build` (needs Go >= 1.26) "
            "or reinstall with `pip install .` from the spdl-go checkout."
        )
    # CDLL (not PyDLL): ctypes releases the GIL around every call, so Go
    # works while Python runs.
    _check_loadable(path)
    try:
        return ctypes.CDLL(str(path))
    except OSError as e:
        raise _load_error(path, e) from e


LIB = _load()
# The process that loaded the library (and so started the Go runtime). A
# process forked after that has a copy of the runtime without its threads,
# which hangs at the first call into Go; pipelines in a subprocess check it.
LOADED_PID = os.getpid()

_ERR = POINTER(c_void_p)
_SIGNATURES: dict[str, tuple[list, object]] = {
    "spdl_init": ([CALL_FN, NEXT_FN, RELEASE_FN, _ERR], c_int),
    "spdl_buf_set": ([c_void_p, c_char_p, c_size_t], None),
    "spdl_free": ([c_void_p], None),
    "spdl_version": ([], c_char_p),
    "spdl_ops": ([POINTER(c_void_p), _ERR], c_int),
    "spdl_probe": ([c_char_p, c_void_p, c_size_t, POINTER(c_void_p), _ERR], c_int),
    "spdl_io_apply": ([c_char_p, c_size_t, c_char_p, c_size_t, POINTER(SpdlBuf), _ERR], c_int),
    "spdl_io_load": ([c_char_p, c_char_p, c_size_t, c_void_p, c_size_t, POINTER(SpdlBuf), _ERR], c_int),
    "spdl_io_encode_image": ([c_char_p, c_size_t, c_char_p, c_size_t, POINTER(SpdlBuf), _ERR], c_int),
    "spdl_sampler_call": ([c_char_p, c_size_t, POINTER(c_void_p), _ERR], c_int),
    "spdl_spec_check": ([c_char_p, c_char_p, c_size_t, _ERR], c_int),
    "spdl_cuda_status": ([c_char_p, POINTER(c_void_p), _ERR], c_int),
    "spdl_pipeline_new": ([c_char_p, c_size_t, POINTER(c_uint64), _ERR], c_int),
    "spdl_pipeline_start": ([c_uint64, _ERR], c_int),
    "spdl_pipeline_next": ([c_uint64, c_int64, POINTER(SpdlBuf), _ERR], c_int),
    "spdl_pipeline_stop": ([c_uint64, _ERR], c_int),
    "spdl_pipeline_stats": ([c_uint64, POINTER(c_void_p), _ERR], c_int),
    "spdl_pipeline_failure": ([c_uint64, POINTER(c_void_p), _ERR], c_int),
    "spdl_pipeline_source_state": ([c_uint64, POINTER(c_void_p), _ERR], c_int),
    "spdl_pipeline_serve": ([c_uint64, c_int, c_int64, c_void_p, POINTER(SpdlBuf), _ERR], c_int),
    "spdl_pipeline_free": ([c_uint64, c_int64, _ERR], c_int),
    "spdl_pipeline_trace_start": ([c_uint64, c_int64, _ERR], c_int),
    "spdl_pipeline_trace_write": ([c_uint64, c_char_p, _ERR], c_int),
    "spdl_tensor_alloc": ([ctypes.c_int32, c_void_p, ctypes.c_uint8, ctypes.c_uint8, ctypes.c_uint16], c_void_p),
    "spdl_tensor_incref": ([c_void_p], None),
    "spdl_tensor_decref": ([c_void_p], None),
    "spdl_tensor_dltensor": ([c_void_p], c_void_p),
    "spdl_tensor_to_dlpack_versioned": ([c_void_p], c_void_p),
    "spdl_tensor_to_dlpack_legacy": ([c_void_p], c_void_p),
    "spdl_mem_stats": ([POINTER(c_void_p), _ERR], c_int),
    "spdl_mem_set_pool_limit": ([c_int64], None),
    "spdl_mem_trim": ([], None),
    "spdl_shm_arena": ([c_int, c_int64], c_int),
    "spdl_shm_lend": ([c_void_p, c_void_p], c_int),
    "spdl_shm_lend_desc": ([c_void_p, c_void_p, ctypes.c_int32], ctypes.c_int32),
    "spdl_shm_tensor_desc": ([c_void_p, c_void_p, ctypes.c_int32], c_void_p),
    "spdl_shm_lend_buffer": ([c_void_p, c_int64, c_void_p, ctypes.c_int32], ctypes.c_int32),
    "spdl_shm_stats": ([c_void_p], None),
    "spdl_shm_map": ([c_int, c_int64, c_void_p], c_void_p),
    "spdl_shm_unmap": ([c_void_p], None),
    "spdl_shm_tensor": (
        [
            c_void_p,
            c_int64,
            c_int64,
            ctypes.c_int32,
            c_void_p,
            c_void_p,
            ctypes.c_uint8,
            ctypes.c_uint8,
            ctypes.c_uint16,
        ],
        c_void_p,
    ),
    "spdl_tensor_note_stream": ([c_void_p, ctypes.c_ssize_t], None),
    "spdl_cuda_mem_stats": ([POINTER(c_void_p), _ERR], c_int),
    "spdl_cuda_mem_trim": ([], None),
    "spdl_arrow_allocated_bytes": ([], c_int64),
    "spdl_set_python_api": ([c_void_p, c_void_p], None),
    "spdl_set_python_thread_api": ([c_void_p, c_void_p, c_void_p, c_void_p], None),
    "spdl_arrow_free": ([c_void_p, c_void_p], None),
    "spdl_dlpack_capsule_destructor": ([c_void_p], None),
    "spdl_arrow_schema_capsule_destructor": ([c_void_p], None),
    "spdl_arrow_array_capsule_destructor": ([c_void_p], None),
}
for _name, (_args, _res) in _SIGNATURES.items():
    _fn = getattr(LIB, _name)
    _fn.argtypes = _args
    _fn.restype = _res

# The capsule destructors are C functions; PyCapsule_New takes their address.
DLPACK_CAPSULE_DESTRUCTOR = ctypes.cast(LIB.spdl_dlpack_capsule_destructor, c_void_p).value
ARROW_SCHEMA_CAPSULE_DESTRUCTOR = ctypes.cast(LIB.spdl_arrow_schema_capsule_destructor, c_void_p).value
ARROW_ARRAY_CAPSULE_DESTRUCTOR = ctypes.cast(LIB.spdl_arrow_array_capsule_destructor, c_void_p).value

# The library reads capsules through the running interpreter's own API.
LIB.spdl_set_python_api(
    ctypes.cast(ctypes.pythonapi.PyCapsule_IsValid, c_void_p),
    ctypes.cast(ctypes.pythonapi.PyCapsule_GetPointer, c_void_p),
)

# Go threads that run Python stages keep one Python thread state each.
LIB.spdl_set_python_thread_api(
    ctypes.cast(ctypes.pythonapi.PyGILState_Ensure, c_void_p),
    ctypes.cast(ctypes.pythonapi.PyGILState_Release, c_void_p),
    ctypes.cast(ctypes.pythonapi.PyEval_SaveThread, c_void_p),
    ctypes.cast(ctypes.pythonapi.PyEval_RestoreThread, c_void_p),
)

_PID = os.getpid()


def check_fork() -> None:
    """Raises if this process is a fork of the one that loaded the library.

    The Go runtime's threads do not survive ``fork()``; using the library in
    the child would hang. This is what happens inside a torch DataLoader
    worker started with the default "fork" method.
    """
    if os.getpid() != _PID:
        raise RuntimeError(
            "spdl_go was loaded before os.fork(); its Go threads do not exist in this child "
            f"process (pid {os.getpid()}, loaded in {_PID}). Build pipelines in the parent and "
            "iterate them there (spdl_go needs no worker processes), or start workers with the "
            "'spawn' or 'forkserver' method."
        )


def take_string(ptr: int | None) -> str:
    """Copies and frees a malloc'd C string handed out by the library."""
    if not ptr:
        return ""
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        LIB.spdl_free(ptr)


# ---- calling the library -------------------------------------------------------
# Most exports end in (…, char **out, char **err) or (…, char **err) and
# return SPDL_OK or an error code. These two helpers are that pattern,
# written once: the strings the library hands out are copied and freed here.


def call(fn: Callable[..., int], *args: Any, error: type[Exception] = RuntimeError) -> None:
    """Calls ``fn(*args, &err)``; raises ``error`` with the library's message
    (the error string is freed) if it does not return ``SPDL_OK``."""
    err = c_void_p()
    if fn(*args, ctypes.byref(err)) != SPDL_OK:
        raise error(take_string(err.value))


def call_json(fn: Callable[..., int], *args: Any, error: type[Exception] = RuntimeError) -> Any:
    """Calls ``fn(*args, &out, &err)`` and returns ``out`` parsed as JSON;
    raises ``error`` with the library's message otherwise. Both strings
    are freed."""
    out = c_void_p()
    err = c_void_p()
    if fn(*args, ctypes.byref(out), ctypes.byref(err)) != SPDL_OK:
        raise error(take_string(err.value))
    return json.loads(take_string(out.value))
