"""Bounded decoders and verified cache entries, through the ops: outputs over
max_samples / max_output_bytes and truncated GIFs fail their item with an
error naming the file; a damaged disk cache entry is read again from the
origin and counted."""

from __future__ import annotations

import http.server
import shutil
import subprocess
import threading
import wave
from pathlib import Path

import numpy as np
import pytest

from spdl_go import PipelineBuilder, ops
from spdl_go.ops import NativeOp

needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make test media")


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", *args], check=True)


def run(items: list, op: NativeOp) -> tuple[list, list[str]]:
    """The outputs of op over items, and the errors of the items that failed."""
    p = PipelineBuilder().add_source(items).pipe(op, name="op", output_order="input").add_sink().build(max_failures=-1)
    with p.auto_stop():
        out = list(p)
        errors = list(p.stats().recent_errors)
    return out, errors


def write_wav(path: Path, rate: int, n: int) -> str:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.sin(np.arange(n) * 0.1) * 10000).astype("<i2").tobytes())
    return str(path)


def test_audio_max_samples_names_the_file(tmp_path):
    slow = write_wav(tmp_path / "slow.wav", 1, 2000)  # 2000 s: 32M samples at 16 kHz
    ok = write_wav(tmp_path / "ok.wav", 8000, 8000)  # 1 s: 16000 samples at 16 kHz
    out, errors = run([slow, ok], ops.decode_audio(sample_rate=16000, max_samples=1_000_000))
    assert [np.from_dlpack(x).shape for x in out] == [(1, 16000)]
    (err,) = errors
    assert "slow.wav" in err and "32000000 samples is over max_samples (1000000)" in err


def test_audio_default_limit_refuses_a_1hz_file(tmp_path):
    # 30000 samples at 1 Hz resampled to 16 kHz: 480M samples, 1.9 GB.
    bomb = write_wav(tmp_path / "bomb.wav", 1, 30000)
    out, errors = run([bomb], ops.decode_audio(sample_rate=16000))
    assert out == []
    (err,) = errors
    assert "bomb.wav" in err and "over max_samples (400000000)" in err


def test_audio_num_samples_over_the_limit(tmp_path):
    ok = write_wav(tmp_path / "ok.wav", 8000, 8000)
    out, errors = run([ok], ops.decode_audio(num_samples=5000, max_samples=4000))
    assert out == [] and "ok.wav" in errors[0] and "over max_samples (4000)" in errors[0]
    with pytest.raises(ValueError, match="max_samples"):
        PipelineBuilder().add_source([1]).pipe(ops.decode_audio(max_samples=0)).add_sink().build()


@needs_ffmpeg
def test_video_max_output_bytes_names_the_file(tmp_path):
    clip = tmp_path / "clip.mp4"
    ffmpeg(
        "-f", "lavfi", "-i", "testsrc=size=64x48:rate=8:duration=3", "-c:v", "libx264", "-pix_fmt", "yuv420p", str(clip)
    )
    frame = 64 * 48 * 3
    out, errors = run([str(clip)], ops.decode_video(max_output_bytes=24 * frame - 1))
    assert out == []
    (err,) = errors
    assert "clip.mp4" in err and "24 frames of 64x48x3 = 221184 bytes is over max_output_bytes (221183)" in err
    out, errors = run([str(clip)], ops.decode_video(max_output_bytes=24 * frame))
    assert errors == [] and np.from_dlpack(out[0]).shape == (24, 48, 64, 3)
    out, errors = run([str(clip)], ops.decode_video(indices=[0, 1], size=(100, 100), max_output_bytes=59_999))
    assert out == [] and "clip.mp4" in errors[0] and "2 frames of 100x100x3" in errors[0]
    with pytest.raises(ValueError, match="max_output_bytes"):
        PipelineBuilder().add_source([1]).pipe(ops.decode_video(max_output_bytes=0)).add_sink().build()


@needs_ffmpeg
def test_truncated_gif_fails(tmp_path):
    good = tmp_path / "good.gif"
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x48", "-frames:v", "1", str(good))
    data = good.read_bytes()
    cut = tmp_path / "cut.gif"
    cut.write_bytes(data[: len(data) // 2])
    out, errors = run([str(good), str(cut)], ops.decode_image())
    assert [np.from_dlpack(x).shape for x in out] == [(48, 64, 3)]
    (err,) = errors
    assert "cut.gif" in err and "truncated image data" in err and "GIF ends inside" in err


class _Origin:
    """A loopback HTTP server for dir that counts the GETs it answers."""

    def __init__(self, root: Path) -> None:
        origin = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=str(root), **kw)

            def do_GET(self):
                origin.gets += 1
                super().do_GET()

            def log_message(self, *a):
                pass

        self.gets = 0
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()
        self.thread.join()


@pytest.mark.parametrize("damage", ["flip", "truncate", "old_format"])
def test_damaged_cache_entries_are_read_again(tmp_path, damage):
    root = tmp_path / "origin"
    root.mkdir()
    blobs = {f"obj{i}.bin": bytes((i * 7 + j) % 251 for j in range(1000 + i)) for i in range(5)}
    for name, b in blobs.items():
        (root / name).write_bytes(b)
    cache = tmp_path / "cache"
    origin = _Origin(root)
    try:
        urls = [f"{origin.url}/{name}" for name in blobs]

        def read() -> tuple[list[bytes], dict[str, int]]:
            op = ops.read_file(retries=0, cache_dir=str(cache), cache_disk_bytes=1 << 20)
            p = PipelineBuilder().add_source(urls).pipe(op, name="read", output_order="input").add_sink().build()
            with p.auto_stop():
                out = [bytes(b) for b in p]
                return out, p.stats().stages[0].op_stats

        first, s = read()
        assert first == list(blobs.values()) and origin.gets == 5 and s.get("cache_corrupt_entries", 0) == 0
        entries = [p for p in cache.rglob("*") if p.is_file() and p.parent.name != "tmp"]
        assert len(entries) == 5
        for p in entries:
            f = bytearray(p.read_bytes())
            if damage == "flip":
                f[-7] ^= 0x01
            elif damage == "truncate":
                del f[-1:]
            else:  # an entry of the old format: the bare object bytes
                f = bytearray(f[24:])
            p.write_bytes(bytes(f))
        second, s = read()
        assert second == first, "a damaged cache entry was served"
        assert s["cache_corrupt_entries"] == 5 and s["cache_disk_hits"] == 0 and s["cache_misses"] == 5
        assert origin.gets == 10  # each damaged entry was read again from the origin
        third, s = read()
        assert third == first and s["cache_disk_hits"] == 5 and s["cache_corrupt_entries"] == 0
        assert origin.gets == 10
    finally:
        origin.close()
