"""A libspdl.so that cannot load (a dependency missing, the file damaged)
fails `import spdl_go` with an ImportError that names the library and where
its dependencies were searched for, on a wheel with bundled libraries and on a
source build alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import spdl_go
from spdl_go import _lib

GLIBC = ("libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so", "ld-linux")


def _installed_copy(tmp_path: Path) -> Path:
    """A copy of the library spdl_go loaded, placed so that a RUNPATH of
    $ORIGIN/../spdl_go.libs (auditwheel's) still finds the bundled libraries."""
    src = Path(os.environ.get("SPDL_GO_LIBRARY") or Path(spdl_go.__file__).with_name("libspdl.so"))
    pkg = tmp_path / "spdl_go"
    pkg.mkdir()
    libs = src.resolve().parent.parent / "spdl_go.libs"
    if libs.is_dir():
        (tmp_path / "spdl_go.libs").symlink_to(libs)
    dst = pkg / "libspdl.so"
    dst.write_bytes(src.read_bytes())
    return dst


def _import_error(lib: Path) -> str:
    env = dict(os.environ, SPDL_GO_LIBRARY=str(lib))
    r = subprocess.run([sys.executable, "-c", "import spdl_go"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, "import spdl_go succeeded with a broken library"
    assert "ImportError" in r.stderr, r.stderr
    return r.stderr


def test_missing_dependency_is_named_with_the_paths_searched(tmp_path: Path) -> None:
    lib = _installed_copy(tmp_path)
    needed, runpath = _lib._elf_dynamic(lib)
    dep = next(n for n in needed if not n.startswith(GLIBC))
    # The same length, so the ELF string table keeps its layout: the loader
    # now needs a library that exists nowhere.
    gone = "X" + dep[1:]
    data = lib.read_bytes()
    assert data.count(dep.encode() + b"\0") >= 1
    lib.write_bytes(data.replace(dep.encode() + b"\0", gone.encode() + b"\0", 1))
    err = _import_error(lib)
    assert str(lib) in err and gone in err, err
    assert "searched for in" in err and "LD_LIBRARY_PATH" in err, err
    for d in runpath:
        assert d in err, err


def test_damaged_library_is_named(tmp_path: Path) -> None:
    # Truncated: dlopen itself would die of SIGBUS mapping past the end.
    lib = _installed_copy(tmp_path)
    lib.write_bytes(lib.read_bytes()[:4096])
    err = _import_error(lib)
    assert str(lib) in err and "damaged" in err, err


def test_damaged_bundled_library_is_named(tmp_path: Path) -> None:
    lib = _installed_copy(tmp_path)
    needed, runpath = _lib._elf_dynamic(lib)
    bundled = [Path(d) / n for n in needed for d in runpath if (Path(d) / n).exists()]
    if not bundled:
        pytest.skip("this libspdl.so bundles no libraries (a source build against the system's)")
    # A private copy of the bundled directory, one library truncated in it.
    real = bundled[0].parent.resolve()
    libs = tmp_path / "spdl_go.libs"
    libs.unlink()
    libs.mkdir()
    for f in real.iterdir():
        (libs / f.name).write_bytes(f.read_bytes())
    victim = libs / bundled[0].name
    victim.write_bytes(victim.read_bytes()[:4096])
    err = _import_error(lib)
    assert bundled[0].name in err and str(libs) in err and "damaged" in err, err


@pytest.mark.parametrize("data", [b"", b"\x7fELF", b"not an ELF file at all" * 10])
def test_elf_reader_refuses_what_is_not_an_elf_library(tmp_path: Path, data: bytes) -> None:
    f = tmp_path / "x.so"
    f.write_bytes(data)
    err = _lib._load_error(f, OSError("bad"))
    assert str(f) in str(err) and "ELF header could not be read" in str(err)
    with pytest.raises(ImportError, match="damaged"):
        _lib._check_loadable(f)
