"""Builds libspdl.so with the Go toolchain and ships it inside the wheel.

The wheel holds no CPython extension, only a shared library loaded with
ctypes, so it is tagged py3-none-<platform>: one wheel serves every
CPython 3.10+ (and free-threaded 3.13t) on that platform.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel

ROOT = Path(__file__).resolve().parent
MIN_GO = (1, 26)


def _require_toolchain() -> str:
    go = shutil.which(os.environ.get("GO", "go"))
    if go is None:
        raise SystemExit(
            "spdl-go: building needs the Go toolchain (>= 1.26) on PATH: https://go.dev/doc/install "
            "(or set GO=/path/to/go)."
        )
    out = subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"go(\d+)\.(\d+)", out)
    if m is None or (int(m.group(1)), int(m.group(2))) < MIN_GO:
        raise SystemExit(f"spdl-go: Go >= {MIN_GO[0]}.{MIN_GO[1]} is needed, found: {out.strip()}")
    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        raise SystemExit(f"spdl-go: cgo needs a C compiler; '{cc}' is not on PATH (apt-get install gcc).")
    return go


class BuildGoLibrary(build_py):
    """Runs `go build -buildmode=c-shared` into the package directory."""

    def run(self) -> None:
        super().run()
        go = _require_toolchain()
        out = Path(self.build_lib) / "spdl_go" / "libspdl.so"
        out.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, CGO_ENABLED="1")
        # The version script exports only what spdl.h declares (as Makefile's LIB_LDFLAGS).
        ldflags = f"-extldflags=-Wl,--version-script={ROOT / 'capi' / 'libspdl.map'}"
        cmd = [go, "build", "-buildmode=c-shared", "-trimpath", f"-ldflags={ldflags}", "-o", str(out), "./capi"]
        self.announce(" ".join(cmd), level=2)
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
        # spdl.h, which the library is compiled against, is the header users
        # get (not cgo's generated one); it includes dlpack.h.
        out.with_suffix(".h").unlink(missing_ok=True)
        shutil.copy(ROOT / "capi" / "spdl.h", out.parent / "spdl.h")
        shutil.copy(ROOT / "core" / "tensor" / "dlpack.h", out.parent / "dlpack.h")


class BinaryDistribution(Distribution):
    """Holds a compiled library, so files go to platlib, not purelib."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self) -> tuple[str, str, str]:
        plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        return "py3", "none", plat


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildGoLibrary, "bdist_wheel": PlatformWheel})
