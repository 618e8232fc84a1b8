"""Good media and table files (made with pillow, pyarrow and the ffmpeg
CLI) and the seeded ways the probes damage them."""

from __future__ import annotations

import io
import os
import random
import struct
import subprocess
import tarfile
from pathlib import Path

import numpy as np

IMAGE_FORMATS = {"jpeg": "JPEG", "png": "PNG", "webp": "WEBP", "gif": "GIF", "bmp": "BMP", "tiff": "TIFF"}
IMAGE_EXT = {"jpeg": ".jpg", "png": ".png", "webp": ".webp", "gif": ".gif", "bmp": ".bmp", "tiff": ".tif"}
# name: (extension, ffmpeg arguments after the input)
AUDIO_FORMATS = {
    "wav": (".wav", []),
    "flac": (".flac", []),
    "mp3": (".mp3", ["-c:a", "libmp3lame"]),
    "opus": (".opus", ["-c:a", "libopus"]),
    "aac": (".m4a", ["-c:a", "aac"]),
}
VIDEO_FORMATS = {
    "mp4": (".mp4", ["-c:v", "libx264", "-pix_fmt", "yuv420p"]),
    "webm": (".webm", ["-c:v", "libvpx"]),
}
MUTATIONS = ("truncate", "flip", "zero", "magic", "dup")


def image_array(rng: np.random.Generator, h: int = 48, w: int = 64) -> np.ndarray:
    """A gradient with noise: compresses like a photo, not like a flat fill."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // w, y * 255 // h, (x + y) * 255 // (w + h)], axis=-1)
    noise = rng.integers(0, 40, size=(h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def write_image(path: Path, fmt: str, rng: np.random.Generator, h: int = 48, w: int = 64) -> None:
    from PIL import Image

    img = Image.fromarray(image_array(rng, h, w))
    if fmt == "gif":
        img = img.convert("P")
    img.save(path, IMAGE_FORMATS[fmt])


def ffmpeg(args: list[str]) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True, stdin=subprocess.DEVNULL)


def write_audio(path: Path, fmt: str, seconds: float = 1.0) -> None:
    src = f"sine=frequency=440:duration={seconds}"
    ffmpeg(["-f", "lavfi", "-i", src, "-ar", "48000" if fmt == "opus" else "16000", *AUDIO_FORMATS[fmt][1], str(path)])


def write_video(path: Path, fmt: str) -> None:
    src = "testsrc=size=64x48:rate=10:duration=1"
    ffmpeg(["-f", "lavfi", "-i", src, *VIDEO_FORMATS[fmt][1], str(path)])


def mutate(data: bytes, kind: str, rng: random.Random, lo: int = 0, hi: int | None = None) -> bytes:
    """``data`` damaged one way; flips, zeroed ranges and duplicated chunks
    fall in ``[lo, hi)`` (a file's data region, say)."""
    hi = len(data) if hi is None else hi
    b = bytearray(data)
    if kind == "truncate":
        return bytes(b[: rng.randrange(0, len(b))])
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(lo, hi)
            b[i] ^= rng.randint(1, 255)
        return bytes(b)
    if kind == "zero":
        i = rng.randrange(lo, hi)
        n = rng.randint(1, min(256, hi - i))
        b[i : i + n] = bytes(n)
        return bytes(b)
    if kind == "magic":
        n = min(4, len(b))
        b[:n] = bytes(rng.randint(0, 255) for _ in range(n))
        if bytes(b[:n]) == data[:n]:
            b[0] ^= 0xFF
        return bytes(b)
    if kind == "dup":
        i = rng.randrange(lo, hi)
        n = rng.randint(1, min(512, hi - i))
        at = rng.randrange(lo, hi)
        return bytes(b[:at] + b[i : i + n] + b[at:])
    raise ValueError(kind)


def wav_header(sample_rate: int, channels: int, num_samples: int) -> bytes:
    """A 16-bit PCM WAV header declaring these figures."""
    data_len = num_samples * channels * 2
    return (
        b"RIFF"
        + struct.pack("<I", 36 + data_len)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * channels * 2, channels * 2, 16)
        + b"data"
        + struct.pack("<I", data_len)
    )


def write_shard(path: Path, samples: list[tuple[str, dict[str, bytes]]]) -> None:
    """A WebDataset tar: members ``key.ext`` in order."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for key, fields in samples:
            for ext, data in fields.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                info.mtime = 0
                tar.addfile(info, io.BytesIO(data))


def table_rows(first_id: int, n: int, rng: random.Random) -> dict[str, list[object]]:
    return {
        "id": list(range(first_id, first_id + n)),
        "payload": [bytes(rng.randrange(256) for _ in range(rng.randint(8, 96))) for _ in range(n)],
        "text": [f"row {first_id + i} " + "x" * rng.randint(0, 40) for i in range(n)],
    }


def write_table(path: Path, fmt: str, rows: dict[str, list[object]], row_group: int = 16) -> None:
    """fmt: "parquet", "parquet_crc" (page checksums written) or "arrow" (IPC file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.table({"id": pa.array(rows["id"], pa.int64()), "payload": pa.array(rows["payload"], pa.binary()),
                  "text": pa.array(rows["text"], pa.string())})  # fmt: skip
    if fmt == "arrow":
        with pa.OSFile(os.fspath(path), "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
            for batch in t.to_batches(max_chunksize=row_group):
                w.write_batch(batch)
    else:
        pq.write_table(
            t,
            path,
            row_group_size=row_group,
            compression="none" if fmt == "parquet_crc" else "snappy",
            write_page_checksum=fmt == "parquet_crc",
        )


def value_spans(data: bytes, values: list[bytes]) -> list[tuple[int, int]]:
    """Where each value's bytes lie in ``data`` (a Parquet file written
    uncompressed and plain: inside pages, which page checksums cover)."""
    spans = []
    for v in values:
        i = data.find(v)
        if i >= 0 and data.find(v, i + 1) < 0:
            spans.append((i, i + len(v)))
    return spans
