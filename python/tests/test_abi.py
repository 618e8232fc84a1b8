"""The C ABI has one truth, capi/spdl.h; these tests hold the rest to it.

- libspdl.so exports exactly the functions spdl.h declares (``nm -D``), and
  capi/libspdl.map, the linker version script that makes it so, lists them.
- python/spdl_go/_lib.py declares a ctypes signature for every one of them,
  and each signature matches the header's prototype.
- A C program compiled against spdl.h with ``-Wall -Wextra -Werror`` links
  to the library and calls every function (capi/testdata/abi_check.c).

The header is the one shipped next to the library (the installed wheel), or
the checkout's when the library has none beside it (``make build``).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from ctypes import (
    POINTER,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_ssize_t,
    c_uint8,
    c_uint16,
    c_uint64,
    c_void_p,
)
from pathlib import Path

import pytest

from spdl_go import _lib

CHECKOUT = Path(__file__).resolve().parents[2]
LIBRARY = _lib._find_library()

# Declared in spdl.h, exported only by a build with -tags cudatest.
TEST_ONLY = {"spdl_cudatest_install", "spdl_cudatest_count"}

# The callback typedefs of spdl.h and the CFUNCTYPEs that _lib.py makes of them.
CALLBACKS = {"spdl_call_fn": _lib.CALL_FN, "spdl_next_fn": _lib.NEXT_FN, "spdl_release_fn": _lib.RELEASE_FN}

_SCALARS = {
    "int": c_int,
    "int32_t": c_int32,
    "int64_t": c_int64,
    "uint8_t": c_uint8,
    "uint16_t": c_uint16,
    "uint64_t": c_uint64,
    "size_t": c_size_t,
    "intptr_t": c_ssize_t,
}


def _header_dir() -> Path:
    """The directory of the spdl.h that goes with LIBRARY."""
    if (LIBRARY.parent / "spdl.h").exists():
        return LIBRARY.parent
    return CHECKOUT / "capi"


HEADER = _header_dir() / "spdl.h"


def _include_dirs() -> list[Path]:
    """spdl.h and the dlpack.h it includes (beside it when shipped)."""
    d = HEADER.parent
    return [d] if (d / "dlpack.h").exists() else [d, CHECKOUT / "core" / "tensor"]


def _declarations(text: str) -> tuple[dict[str, tuple[str, list[str]]], dict[str, tuple[str, list[str]]]]:
    """Parses a header's function prototypes and function-pointer typedefs.

    Returns (functions, callbacks), each name -> (return type, parameter
    types), types with names and extra spaces removed ("const char *").
    """
    text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)
    text = re.sub(r"^\s*#[^\n]*", " ", text, flags=re.M)
    funcs, callbacks = {}, {}
    for stmt in text.split(";"):
        stmt = " ".join(re.sub(r"([*(),])", r" \1 ", stmt).split())
        if m := re.fullmatch(r"typedef (?P<ret>[\w *]+?) \( \* (?P<name>\w+) \) \( (?P<params>[^()]*)\)", stmt):
            callbacks[m["name"]] = (m["ret"], _param_types(m["params"]))
        elif m := re.search(r"(?:^|[{}] )(?P<ret>[\w *]+?) (?P<name>spdl_\w+) \( (?P<params>[^()]*)\)$", stmt):
            funcs[m["name"]] = (m["ret"], _param_types(m["params"]))
    return funcs, callbacks


def _param_types(params: str) -> list[str]:
    params = params.strip()
    if params in ("", "void"):
        return []
    # Drop each parameter's name: "const char * path" -> "const char *".
    return [re.sub(r"\s*\b\w+$", "", p.strip()) for p in params.split(" , ")]


def _ctypes_for(ctype: str) -> set:
    """The ctypes types that may stand for a C type in _SIGNATURES."""
    if ctype == "void":
        return {None}
    if ctype in _SCALARS:
        return {_SCALARS[ctype]}
    if ctype in CALLBACKS:
        return {CALLBACKS[ctype]}
    assert ctype.endswith("*"), f"no ctypes mapping for C type {ctype!r}: extend test_abi.py"
    base = ctype[:-1].strip()
    if base == "char *":  # an owned string handed out: read as c_void_p, then freed
        return {POINTER(c_void_p)}
    if base == "uint64_t":
        return {POINTER(c_uint64)}
    if base == "spdl_buf":
        return {POINTER(_lib.SpdlBuf), c_void_p}
    if base in ("const char", "const void"):  # borrowed input: bytes or an address
        return {c_char_p, c_void_p}
    return {c_void_p}  # opaque structs and raw addresses


DECLARED, DECLARED_CALLBACKS = _declarations(HEADER.read_text())


def _exported(library: Path) -> list[str]:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout
    return sorted(line.split()[-1] for line in out.splitlines() if line.strip())


def test_header_parses():
    # A parser that silently found nothing would make the other tests vacuous.
    assert len(DECLARED) >= 35, sorted(DECLARED)
    assert DECLARED["spdl_pipeline_next"] == ("int", ["uint64_t", "int64_t", "spdl_buf *", "char * *"])
    assert DECLARED["spdl_version"] == ("const char *", [])
    assert set(DECLARED_CALLBACKS) == set(CALLBACKS)


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) is not installed")
def test_exports_are_the_header():
    # No allowed extras: the version script leaves nothing else global (not
    # even _init/_fini or cgo's _cgo_dummy_export with GNU ld).
    want = sorted(set(DECLARED) - TEST_ONLY)
    assert _exported(LIBRARY) == want, f"{LIBRARY} exports differ from {HEADER}"


@pytest.mark.skipif(
    shutil.which("nm") is None or not os.environ.get("SPDL_GO_CUDATEST_LIB"),
    reason="needs nm and a cudatest build (SPDL_GO_CUDATEST_LIB)",
)
def test_cudatest_exports_are_the_header():
    assert _exported(Path(os.environ["SPDL_GO_CUDATEST_LIB"])) == sorted(DECLARED)


@pytest.mark.skipif(not (CHECKOUT / "capi" / "libspdl.map").exists(), reason="no checkout")
def test_version_script_lists_the_header():
    text = re.sub(r"/\*.*?\*/", " ", (CHECKOUT / "capi" / "libspdl.map").read_text(), flags=re.S)
    m = re.search(r"global:(.*?)local:\s*\*;", text, flags=re.S)
    assert m, "libspdl.map: expected `global: ...; local: *;`"
    listed = [s.strip() for s in m.group(1).split(";") if s.strip()]
    assert sorted(listed) == sorted(DECLARED)


def test_shipped_header_is_the_checkout_header():
    checkout = CHECKOUT / "capi" / "spdl.h"
    if HEADER == checkout or not checkout.exists():
        pytest.skip("the header is the checkout's")
    assert HEADER.read_text() == checkout.read_text()
    assert (HEADER.parent / "dlpack.h").read_text() == (CHECKOUT / "core" / "tensor" / "dlpack.h").read_text()


def test_ctypes_signatures_are_the_header():
    assert set(_lib._SIGNATURES) == set(DECLARED) - TEST_ONLY
    for name, (args, res) in _lib._SIGNATURES.items():
        ret, params = DECLARED[name]
        assert res in _ctypes_for(ret), f"{name}: restype {res} for C {ret!r}"
        assert len(args) == len(params), f"{name}: {len(args)} argtypes for {params}"
        for i, (a, p) in enumerate(zip(args, params, strict=True)):
            assert a in _ctypes_for(p), f"{name}: argument {i} is {a} for C {p!r}"
        fn = getattr(_lib.LIB, name)
        assert fn.argtypes == tuple(args) or list(fn.argtypes) == list(args)
        assert fn.restype is res


def test_callback_types_are_the_header():
    for name, (ret, params) in DECLARED_CALLBACKS.items():
        cb = CALLBACKS[name]
        assert cb._restype_ in _ctypes_for(ret), name
        assert len(cb._argtypes_) == len(params), name
        for a, p in zip(cb._argtypes_, params, strict=True):
            assert a in _ctypes_for(p), f"{name}: {a} for C {p!r}"


def test_ctypes_structs_are_the_header():
    assert ctypes.sizeof(_lib.SpdlBuf) == 16 and [f[0] for f in _lib.SpdlBuf._fields_] == ["data", "len"]


@pytest.mark.skipif(shutil.which(os.environ.get("CC", "gcc")) is None, reason="no C compiler")
def test_c_program_calls_every_function(tmp_path):
    source = CHECKOUT / "capi" / "testdata" / "abi_check.c"
    if not source.exists():
        pytest.skip("no checkout")
    called = set(re.findall(r"\b(spdl_\w+)\s*\(", source.read_text()))
    assert set(DECLARED) - TEST_ONLY <= called, "abi_check.c misses some functions"
    exe = tmp_path / "abi_check"
    cc = os.environ.get("CC", "gcc")
    includes = [f"-I{d}" for d in _include_dirs()]
    lib_dir = LIBRARY.resolve().parent
    cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", *includes, str(source), "-o", str(exe)]
    cmd += [f"-L{lib_dir}", f"-l:{LIBRARY.name}", f"-Wl,-rpath,{lib_dir}"]
    subprocess.run(cmd, check=True)
    r = subprocess.run([str(exe), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
