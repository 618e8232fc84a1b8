"""Smoke suite for an installed spdl-go wheel, run by .ci/bare-root-test in a
bare Debian root (no compiler, no Go, no FFmpeg): it proves that the wheel
alone decodes media and hands batches to numpy and pyarrow.

It uses only the standard library, numpy, pyarrow when it imports, and the
installed spdl_go (never the checkout). The media it checks are made outside
the root by the same file, so what is made and what is expected are written
in one place:

    python3 .ci/wheel_smoke.py --make-media DIR     # on the host: ffmpeg CLI
    VENV/bin/python wheel_smoke.py DIR              # in the root: the checks
    VENV/bin/python wheel_smoke.py --damaged-library

Prints one line per check and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

# What --make-media makes, and so what the checks expect.
JPEG_SIZE = (48, 64)  # (h, w): left half LEFT, right half RIGHT
JPEG_LEFT, JPEG_RIGHT = (200, 30, 90), (20, 180, 40)
PNG_SIZE = (30, 40)  # pixel (y, x) = (6x, 8y, 128), exactly (PNG is lossless)
TONE_HZ, TONE_RATE, TONE_SECONDS = 440, 16000, 1  # mono sine, ffmpeg's amplitude 1/8
VIDEO_SIZE, VIDEO_FPS, VIDEO_FRAMES = (48, 64), 8, 24  # frame k has luma 16 + 8k (limited range)

# Libraries the wheel must bring itself: if one of these is mapped into the
# process from anywhere but the package, the wheel leans on the system.
MEDIA_LIBS = ("libav", "libsw", "libpostproc", "libjpeg", "libturbojpeg", "libdav1d", "libx26", "libvpx", "libaom")


def lavfi(source: str, out: Path, *opts: str) -> None:
    """Renders an ffmpeg lavfi source into a file with the ffmpeg CLI."""
    cmd = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i", source]
    subprocess.run([*cmd, *opts, str(out)], check=True)


def make_media(out: Path) -> None:
    """Writes image.jpg, image.png, tone.flac and clip.mp4."""
    out.mkdir(parents=True, exist_ok=True)
    h, w = JPEG_SIZE
    (lr, lg, lb), (rr, rg, rb) = JPEG_LEFT, JPEG_RIGHT
    x = w // 2
    split = f"r='if(lt(X,{x}),{lr},{rr})':g='if(lt(X,{x}),{lg},{rg})':b='if(lt(X,{x}),{lb},{rb})'"
    # 4:4:4 so the colours are not smeared by chroma subsampling.
    frame = ("-frames:v", "1")
    lavfi(f"color=c=black:size={w}x{h},format=rgb24,geq={split}", out / "image.jpg", *frame, "-pix_fmt", "yuvj444p")
    h, w = PNG_SIZE
    png = f"color=c=black:size={w}x{h},format=rgb24,geq=r='6*X':g='8*Y':b='128'"
    lavfi(png, out / "image.png", *frame, "-pix_fmt", "rgb24")
    lavfi(f"sine=frequency={TONE_HZ}:sample_rate={TONE_RATE}:duration={TONE_SECONDS}", out / "tone.flac")
    h, w = VIDEO_SIZE
    seconds = VIDEO_FRAMES // VIDEO_FPS
    counter = ("-vf", "geq=lum='16+8*N':cb=128:cr=128")
    h264 = ("-c:v", "libx264", "-g", "4", "-pix_fmt", "yuv420p")
    lavfi(f"color=c=black:size={w}x{h}:rate={VIDEO_FPS}:duration={seconds}", out / "clip.mp4", *counter, *h264)
    for f in sorted(out.iterdir()):
        print(f"made {f} ({f.stat().st_size} bytes)")


class Checks:
    def __init__(self) -> None:
        self.failed: list[str] = []
        self.passed = 0

    def run(self, name: str, fn: Callable[[], str | None]) -> None:
        try:
            detail = fn()
        except Exception as e:  # noqa: BLE001 - every failure is reported, then the next check runs
            self.failed.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            if not isinstance(e, AssertionError):  # an unexpected error: where it came from
                traceback.print_exc(limit=4, file=sys.stdout)
        else:
            self.passed += 1
            print(f"ok   {name}" + (f": {detail}" if detail else ""))
        sys.stdout.flush()


def expect(cond: bool, msg: str) -> None:
    if not cond:
        raise AssertionError(msg)


def run_pipeline(builder) -> list:
    p = builder.add_sink(2).build(num_threads=2)
    try:
        out = list(p)
        errors = p.stats().recent_errors
    finally:
        p.close()
    expect(not errors, f"pipeline errors: {errors}")
    return out


def dominant_hz(x, rate: int) -> float:
    import numpy as np

    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * rate / len(x))


def smoke(media: Path) -> Checks:
    import numpy as np

    c = Checks()
    state: dict = {}

    def installed() -> str:
        import spdl_go

        state["spdl_go"] = spdl_go
        pkg = Path(spdl_go.__file__).resolve().parent
        site = Path(sysconfig.get_path("purelib")).resolve()
        expect(pkg.parent == site, f"spdl_go imported from {pkg}, not from this environment's {site}")
        expect(not os.environ.get("SPDL_GO_LIBRARY"), "SPDL_GO_LIBRARY is set: the wheel's library is not the one used")
        expect(
            any(p == str(pkg / "libspdl.so") for p in mapped_libraries()), "libspdl.so is not mapped from the package"
        )
        return f"spdl_go {spdl_go.__version__} from {pkg}"

    c.run("import the installed wheel", installed)
    if "spdl_go" not in state:
        return c
    spdl_go = state["spdl_go"]
    from spdl_go import PipelineBuilder, ops, sources

    def probe() -> str:
        v = spdl_go.media.probe(media / "clip.mp4").first("video")
        got = (v.codec, v.height, v.width, v.frames, v.frame_rate)
        expect(got == ("h264", *VIDEO_SIZE, VIDEO_FRAMES, float(VIDEO_FPS)), f"clip.mp4: {got}")
        a = spdl_go.media.probe(media / "tone.flac").first("audio")
        expect((a.codec, a.sample_rate, a.channels) == ("flac", TONE_RATE, 1), f"tone.flac: {a}")
        return f"h264 {v.width}x{v.height} {v.frames} frames; flac {a.sample_rate} Hz"

    c.run("probe mp4 and flac", probe)

    def jpeg() -> str:
        # A native source and read_file, then libjpeg-turbo.
        src = sources.files(str(media), extensions=[".jpg"])
        (img,) = run_pipeline(PipelineBuilder().add_source(src).pipe(ops.read_file()).pipe(ops.decode_image()))
        x = np.from_dlpack(img)
        expect(x.shape == (*JPEG_SIZE, 3) and x.dtype == np.uint8, f"shape {x.shape} dtype {x.dtype}")
        h, w = JPEG_SIZE
        # Away from the edge, where JPEG rings.
        left = x[4 : h - 4, 4 : w // 2 - 4].reshape(-1, 3).mean(axis=0)
        right = x[4 : h - 4, w // 2 + 4 : w - 4].reshape(-1, 3).mean(axis=0)
        for got, want in ((left, JPEG_LEFT), (right, JPEG_RIGHT)):
            expect(np.allclose(got, want, atol=6), f"mean colour {got.round(1)} != {want}")
        return f"{x.shape}, left {left.round(1).tolist()} right {right.round(1).tolist()}"

    c.run("decode JPEG (libjpeg-turbo)", jpeg)

    def png() -> str:
        (img,) = run_pipeline(PipelineBuilder().add_source([str(media / "image.png")]).pipe(ops.decode_image()))
        x = np.from_dlpack(img)
        h, w = PNG_SIZE
        yy, xx = np.mgrid[0:h, 0:w]
        want = np.stack([6 * xx, 8 * yy, np.full_like(xx, 128)], axis=-1).astype(np.uint8)
        expect(x.shape == want.shape, f"shape {x.shape}, want {want.shape}")
        bad = int((x != want).any(axis=-1).sum())
        expect(bad == 0, f"{bad} pixels differ from the gradient")
        return f"{x.shape}, every pixel exact"

    c.run("decode PNG (FFmpeg)", png)

    def flac() -> str:
        (a,) = run_pipeline(PipelineBuilder().add_source([str(media / "tone.flac")]).pipe(ops.decode_audio()))
        x = np.from_dlpack(a)
        n = TONE_RATE * TONE_SECONDS
        expect(x.shape == (1, n) and x.dtype == np.float32, f"shape {x.shape} dtype {x.dtype}")
        hz = dominant_hz(x[0], TONE_RATE)
        peak = float(np.abs(x).max())
        expect(abs(hz - TONE_HZ) < 2, f"dominant frequency {hz} Hz")
        expect(abs(peak - 0.125) < 0.01, f"peak {peak}, want 1/8")
        # Resampled: swresample.
        (r,) = run_pipeline(
            PipelineBuilder().add_source([str(media / "tone.flac")]).pipe(ops.decode_audio(sample_rate=8000))
        )
        y = np.from_dlpack(r)
        expect(y.shape == (1, 8000 * TONE_SECONDS), f"resampled shape {y.shape}")
        hz8 = dominant_hz(y[0], 8000)
        expect(abs(hz8 - TONE_HZ) < 2, f"resampled dominant frequency {hz8} Hz")
        return f"{x.shape} float32, {hz:.1f} Hz, peak {peak:.4f}; resampled to 8 kHz: {y.shape}, {hz8:.1f} Hz"

    c.run("decode FLAC", flac)

    def mp4() -> str:
        (v,) = run_pipeline(PipelineBuilder().add_source([str(media / "clip.mp4")]).pipe(ops.decode_video(mode="gray")))
        x = np.from_dlpack(v)
        expect(x.shape == (VIDEO_FRAMES, *VIDEO_SIZE, 1) and x.dtype == np.uint8, f"shape {x.shape} dtype {x.dtype}")
        levels = x.reshape(VIDEO_FRAMES, -1).mean(axis=1)
        # "gray" is full range: limited-range luma 16 + 8k becomes 8k * 255 / 219.
        want = np.arange(VIDEO_FRAMES) * 8 * 255 / 219
        worst = float(np.abs(levels - want).max())
        expect(worst < 4, f"frame levels {levels.round(1).tolist()} want {want.round(1).tolist()}")
        # Selected frames, scaled and converted to RGB: swscale.
        (s,) = run_pipeline(
            PipelineBuilder()
            .add_source([str(media / "clip.mp4")])
            .pipe(ops.decode_video(indices=[2, 20], size=(24, 32)))
        )
        y = np.from_dlpack(s)
        expect(y.shape == (2, 24, 32, 3), f"selected frames' shape {y.shape}")
        got = y.reshape(2, -1).mean(axis=1)
        expect(np.allclose(got, want[[2, 20]], atol=4), f"selected frames' levels {got} want {want[[2, 20]]}")
        return f"{x.shape}, levels within {worst:.2f} of 8k*255/219; frames [2, 20] at 24x32 RGB"

    c.run("decode MP4 (H.264)", mp4)

    def python_stage_dlpack_arrow() -> str:
        seen = []

        def label(path: str) -> dict:
            # A Python stage: runs on a Go thread, takes the GIL for this call.
            seen.append(path)
            name = os.path.basename(path)
            return {"image": path, "label": 10 if name.endswith(".jpg") else 20, "name": name}

        src = sources.files(str(media), extensions=[".jpg", ".png"])
        builder = (
            PipelineBuilder()
            .add_source(src)
            .pipe(label)
            .pipe(ops.decode_image(size=(16, 16)), output_order="input")
            .aggregate(2)
            .pipe(ops.collate())
        )
        (batch,) = run_pipeline(builder)
        expect(len(seen) == 2, f"the Python stage saw {seen}")
        images = np.from_dlpack(batch["image"])
        expect(images.shape == (2, 16, 16, 3) and images.dtype == np.uint8, f"images {images.shape} {images.dtype}")
        expect(images.ctypes.data == batch["image"].data_ptr, "np.from_dlpack copied the batch")
        expect(
            np.allclose(images[0].reshape(-1, 3).mean(axis=0), np.mean([JPEG_LEFT, JPEG_RIGHT], axis=0), atol=8),
            f"jpeg batch row mean {images[0].reshape(-1, 3).mean(axis=0)}",
        )
        labels, names = batch["label"], batch["name"]
        expect((len(labels), labels.format, len(names)) == (2, "l", 2), f"Arrow columns: {labels!r} {names!r}")
        try:
            import pyarrow as pa
        except ImportError:
            return f"images {images.shape} zero-copy; Arrow columns {labels!r} (pyarrow not installed: not imported)"
        got_labels, got_names = labels.to_pyarrow(), pa.array(names)
        expect(got_labels.type == pa.int64() and got_labels.to_pylist() == [10, 20], f"labels {got_labels}")
        expect(got_names.to_pylist() == ["image.jpg", "image.png"], f"names {got_names}")
        return f"images {images.shape} zero-copy; labels {got_labels.to_pylist()} ({got_labels.type}), names {got_names.type}"

    c.run("Python stage, DLPack into numpy, Arrow into pyarrow", python_stage_dlpack_arrow)

    def media_libs_from_wheel() -> str:
        pkg = Path(spdl_go.__file__).resolve().parent
        allowed = (str(pkg) + "/", str(pkg.parent / "spdl_go.libs") + "/")
        media_maps = [p for p in mapped_libraries() if os.path.basename(p).startswith(MEDIA_LIBS)]
        outside = [p for p in media_maps if not p.startswith(allowed)]
        expect(not outside, f"media libraries mapped from outside the wheel: {outside}")
        names = sorted(os.path.basename(p) for p in media_maps)
        return f"{len(names)} mapped, all from the wheel: {', '.join(names) or '(none: linked statically)'}"

    c.run("media libraries in the process come from the wheel", media_libs_from_wheel)
    return c


def mapped_libraries() -> list[str]:
    """The shared objects mapped into this process, by path."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and ".so" in parts[5]:
                libs.add(parts[5].strip())
    return sorted(libs)


def damaged_library() -> Checks:
    """A copy of the installed package with one bundled library truncated (as
    by a broken download), or deleted, must fail `import spdl_go` with an
    ImportError naming that library and the directory it was searched in,
    not crash and not load one from elsewhere."""
    c = Checks()
    spec = importlib.util.find_spec("spdl_go")  # finds the package without importing it
    if spec is None or spec.origin is None:
        raise SystemExit("spdl_go is not installed")
    pkg = Path(spec.origin).parent
    libs = pkg.parent / "spdl_go.libs"
    env = {k: v for k, v in os.environ.items() if k not in ("SPDL_GO_LIBRARY", "LD_LIBRARY_PATH")}

    def import_copy(damage: Callable[[Path], None] | None) -> tuple[subprocess.CompletedProcess, Path, Path | None]:
        """Imports a fresh copy of the package, one bundled library damaged."""
        tmp = Path(tempfile.mkdtemp(prefix="spdl-damaged-"))
        try:
            shutil.copytree(pkg, tmp / "spdl_go")
            victim = None
            if damage is not None:
                expect(libs.is_dir(), f"the wheel bundles no libraries: {libs} does not exist")
                shutil.copytree(libs, tmp / "spdl_go.libs")
                # libavcodec: libspdl.so needs it directly.
                bundled = sorted((tmp / "spdl_go.libs").glob("libavcodec*")) or sorted(
                    (tmp / "spdl_go.libs").glob("*.so*")
                )
                expect(bool(bundled), f"{libs} holds no libraries")
                victim = bundled[0]
                damage(victim)
            elif libs.is_dir():
                shutil.copytree(libs, tmp / "spdl_go.libs")
            code = "import spdl_go; print(spdl_go.__file__)"
            r = subprocess.run(
                [sys.executable, "-c", code],
                env={**env, "PYTHONPATH": str(tmp)},
                capture_output=True,
                text=True,
                timeout=120,
            )
            return r, tmp, victim
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def intact() -> str:
        r, tmp, _ = import_copy(None)
        expect(r.returncode == 0, f"the intact copy does not import: {r.stderr[-2000:]}")
        expect(r.stdout.strip().startswith(str(tmp)), f"imported {r.stdout.strip()}, not the copy in {tmp}")
        return "a copy of the package, PYTHONPATH at it, imports"

    c.run("intact copy of the package imports", intact)

    def truncate(lib: Path) -> None:
        with open(lib, "r+b") as f:
            f.truncate(lib.stat().st_size // 2)

    for what, damage in (("truncated", truncate), ("deleted", Path.unlink)):

        def check(damage: Callable[[Path], None] = damage, what: str = what) -> str:
            r, _, victim = import_copy(damage)
            assert victim is not None
            err = r.stderr
            expect(r.returncode != 0, f"import succeeded with {victim.name} {what}")
            expect(r.returncode > 0, f"import crashed (signal {-r.returncode}) with {victim.name} {what}")
            expect("ImportError" in err, f"not an ImportError: {err[-2000:]}")
            last = err.strip().splitlines()[-1]
            expect(victim.name in err, f"the error does not name {victim.name}: {last}")
            # A RUNPATH of $ORIGIN/../spdl_go.libs shows as spdl_go/../spdl_go.libs: compare normalised paths.
            paths = {os.path.normpath(p.rstrip(".")) for p in re.findall(r"/[^\s:;,'\"()]+", err)}
            dirs = paths | {os.path.dirname(p) for p in paths}
            where = str(victim.parent)
            expect(where in dirs, f"the error does not name the directory searched, {where}: {last}")
            return f"{victim.name} {what} -> {last}"

        c.run(f"bundled library {what}: ImportError names it and where it was searched", check)
    return c


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("media", nargs="?", type=Path, help="the directory --make-media wrote")
    ap.add_argument("--make-media", type=Path, metavar="DIR", help="write the media into DIR (needs the ffmpeg CLI)")
    ap.add_argument("--damaged-library", action="store_true", help="check the ImportError of a damaged bundled library")
    args = ap.parse_args()
    if args.make_media:
        make_media(args.make_media)
        return 0
    if args.damaged_library:
        c = damaged_library()
    elif args.media:
        c = smoke(args.media)
    else:
        ap.error("give the media directory, --make-media DIR or --damaged-library")
    print(f"{c.passed} passed, {len(c.failed)} failed" + (f": {', '.join(c.failed)}" if c.failed else ""))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
