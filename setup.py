"""Builds libspdl.so with the Go toolchain and ships it inside the wheel.

The wheel holds no CPython extension, only a shared library loaded with
ctypes, so it is tagged py3-none-<platform>: one wheel serves every
CPython 3.10+, free-threaded builds included. Built from source (an sdist,
`pip install .`), it links the system's FFmpeg 5.1 and libjpeg-turbo; the
published manylinux wheel (.ci/wheel) bundles its own.
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


def _which(var: str, default: str, missing: str) -> str:
    """The program $var (or default) on PATH, or a SystemExit saying what is missing."""
    path = shutil.which(os.environ.get(var, default))
    if path is None:
        raise SystemExit(f"spdl-go: {missing}.{BINARY_HINT}")
    return path


def _require_toolchain() -> str:
    go = _which(
        "GO",
        "go",
        "building from source needs the Go toolchain (>= 1.26) on PATH: https://go.dev/doc/install "
        "(or set GO=/path/to/go)",
    )
    out = subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"go(\d+)\.(\d+)", out)
    if m is None or (int(m.group(1)), int(m.group(2))) < MIN_GO:
        raise SystemExit(f"spdl-go: Go >= {MIN_GO[0]}.{MIN_GO[1]} is needed, found: {out.strip()}.{BINARY_HINT}")
    cc = os.environ.get("CC", "gcc")
    _which("CC", "gcc", f"cgo needs a C compiler; '{cc}' is not on PATH (apt-get install gcc)")
    _require_media_libraries()
    return go


# What core/media and go-astiav v0.16.0 link, through pkg-config.
MEDIA_MODULES = {
    "libavcodec": "libavcodec-dev",
    "libavformat": "libavformat-dev",
    "libavutil": "libavutil-dev",
    "libswscale": "libswscale-dev",
    "libswresample": "libswresample-dev",
    "libavfilter": "libavfilter-dev",
    "libavdevice": "libavdevice-dev",
    "libturbojpeg": "libturbojpeg0-dev",
    "libjpeg": "libjpeg62-turbo-dev",
}
# go-astiav v0.16.0 binds FFmpeg 5.1, whose libavcodec is major version 59.
FFMPEG_LIBAVCODEC_MAJOR = 59
BINARY_HINT = (
    " Or install the binary wheel, which bundles FFmpeg and libjpeg-turbo and needs none of this: "
    "pip install --only-binary=spdl-go spdl-go"
)


def _require_media_libraries() -> None:
    pkg_config = _which(
        "PKG_CONFIG",
        "pkg-config",
        "building from source needs pkg-config to find FFmpeg and libjpeg-turbo (apt-get install pkg-config)",
    )
    missing = [m for m in MEDIA_MODULES if subprocess.run([pkg_config, "--exists", m]).returncode != 0]
    if missing:
        raise SystemExit(
            f"spdl-go: building from source links FFmpeg 5.1 and libjpeg-turbo; pkg-config finds no {', '.join(missing)}"
            f" (PKG_CONFIG_PATH={os.environ.get('PKG_CONFIG_PATH', '')!r}). On Debian 12 or Ubuntu: apt-get install "
            f"{' '.join(MEDIA_MODULES[m] for m in missing)}; elsewhere point PKG_CONFIG_PATH at an FFmpeg 5.1 build."
            f"{BINARY_HINT}"
        )
    version = subprocess.run(
        [pkg_config, "--modversion", "libavcodec"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not version.startswith(f"{FFMPEG_LIBAVCODEC_MAJOR}."):
        raise SystemExit(
            f"spdl-go: building from source needs FFmpeg 5.1 (libavcodec {FFMPEG_LIBAVCODEC_MAJOR}.x, what go-astiav "
            f"v0.16.0 binds); pkg-config found libavcodec {version}. Point PKG_CONFIG_PATH at an FFmpeg 5.1 build."
            f"{BINARY_HINT}"
        )


class BuildGoLibrary(build_py):
    """Runs `go build -buildmode=c-shared` into the package directory.

    With SPDL_GO_PREBUILT=DIR it takes DIR/libspdl.so instead (and
    DIR/licenses/, the bundled libraries' licenses): .ci/wheel builds the
    library in an older Debian root against the bundled FFmpeg, for the
    manylinux wheel.
    """

    def run(self) -> None:
        # setuptools reuses build/ between builds, so a module deleted from
        # the source would still be packed from an earlier build's copy.
        shutil.rmtree(Path(self.build_lib) / "spdl_go", ignore_errors=True)
        super().run()
        out = Path(self.build_lib) / "spdl_go" / "libspdl.so"
        out.parent.mkdir(parents=True, exist_ok=True)
        prebuilt = os.environ.get("SPDL_GO_PREBUILT")
        if prebuilt:
            self._copy_prebuilt(Path(prebuilt), out)
        else:
            self._build(out)
        # spdl.h, which the library is compiled against, is the header users
        # get (not cgo's generated one); it includes dlpack.h.
        out.with_suffix(".h").unlink(missing_ok=True)
        shutil.copy(ROOT / "capi" / "spdl.h", out.parent / "spdl.h")
        shutil.copy(ROOT / "core" / "tensor" / "dlpack.h", out.parent / "dlpack.h")

    def _copy_prebuilt(self, src: Path, out: Path) -> None:
        lib = src / "libspdl.so"
        if not lib.is_file():
            raise SystemExit(f"spdl-go: SPDL_GO_PREBUILT={src} holds no libspdl.so")
        shutil.copy(lib, out)
        licenses = out.parent / "licenses"
        shutil.rmtree(licenses, ignore_errors=True)
        if (src / "licenses").is_dir():
            shutil.copytree(src / "licenses", licenses)

    def _build(self, out: Path) -> None:
        go = _require_toolchain()
        env = dict(os.environ, CGO_ENABLED="1")
        # The version script exports only what spdl.h declares (as Makefile's LIB_LDFLAGS).
        ldflags = f"-s -w -extldflags=-Wl,--version-script={ROOT / 'capi' / 'libspdl.map'}"
        cmd = [go, "build", "-buildmode=c-shared", "-trimpath", f"-ldflags={ldflags}", "-o", str(out), "./capi"]
        self.announce(" ".join(cmd), level=2)
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)


class BinaryDistribution(Distribution):
    """Holds a compiled library, so files go to platlib, not purelib."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self) -> tuple[str, str, str]:
        plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        return "py3", "none", plat


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildGoLibrary, "bdist_wheel": PlatformWheel})
