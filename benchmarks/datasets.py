"""Deterministic generated datasets for the benchmarks, cached on disk.

ImageNet-like JPEGs: sizes around 500x375 (both orientations, some other
aspect ratios), with detail at every scale (smooth colour fields, oriented
textures, hard-edged shapes, sensor-like noise), encoded at quality 90 with
4:2:0 chroma subsampling, so that decoders do realistic work (about 60 KB
a file; ImageNet's average about 110 KB).

Audio-like clips (``audio_like``): 3-10 s, 44.1 or 48 kHz stereo, mixtures
of harmonic tones with vibrato, chirps, filtered noise bursts and
envelopes; about 70% FLAC, 30% 16-bit WAV.

Video-like clips (``video_like``): 2-4 s, 25 or 30 fps, 320x240 to 640x360,
H.264 (libx264, veryfast, GOP 30, yuv420p) in .mp4, from moving synthetic
FFmpeg sources with added noise.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

CACHE = Path(os.environ.get("SPDL_GO_BENCH_DATA", Path.home() / ".cache" / "spdl-go-bench"))


def _cached(kind: str, version: str, n: int, seed: int, *key_extra) -> tuple[Path, list[tuple[str, int]] | None]:
    """The cache folder of a generated set, and its (path, label) items if
    it was generated before."""
    key = hashlib.sha1(json.dumps([version, n, seed, *key_extra]).encode()).hexdigest()[:12]
    root = CACHE / f"{kind}-{n}-{seed}-{key}"
    manifest = root / "manifest.json"
    if manifest.exists():
        return root, [(str(root / p), label) for p, label in json.loads(manifest.read_text())]
    return root, None


def _save(root: Path, items: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Writes the manifest last, so that an interrupted run regenerates."""
    (root / "manifest.json").write_text(json.dumps(items))
    return [(str(root / p), label) for p, label in items]


def _photo_like(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    # smooth colour fields
    for _ in range(4):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        s = rng.uniform(0.2, 0.6) * max(h, w)
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
        img += blob[..., None] * rng.uniform(40, 160, size=3)
    # oriented textures at a few frequencies
    for _ in range(3):
        theta = rng.uniform(0, np.pi)
        f = rng.uniform(0.02, 0.25)
        phase = rng.uniform(0, 2 * np.pi)
        g = np.sin(2 * np.pi * f * (xx * np.cos(theta) + yy * np.sin(theta)) + phase)
        img += g[..., None] * rng.uniform(5, 25, size=3)
    img = np.clip(img, 0, 255)
    from PIL import Image, ImageDraw

    im = Image.fromarray(img.astype(np.uint8))
    draw = ImageDraw.Draw(im)
    for _ in range(int(rng.integers(3, 9))):
        x0, y0 = rng.uniform(0, w), rng.uniform(0, h)
        x1, y1 = x0 + rng.uniform(10, w / 2), y0 + rng.uniform(10, h / 2)
        color = tuple(int(c) for c in rng.integers(0, 256, size=3))
        if rng.random() < 0.5:
            draw.rectangle([x0, y0, x1, y1], fill=color)
        else:
            draw.ellipse([x0, y0, x1, y1], fill=color)
    arr = np.asarray(im).astype(np.float32)
    arr += rng.normal(0, 6, size=arr.shape)  # sensor noise
    return np.clip(arr, 0, 255).astype(np.uint8)


def _size(rng: np.random.Generator) -> tuple[int, int]:
    r = rng.random()
    if r < 0.6:
        w, h = 500, 375
    elif r < 0.8:
        w, h = 375, 500
    elif r < 0.9:
        w, h = 500, 333
    else:
        w, h = 400, 400
    jitter = rng.uniform(0.85, 1.15)
    return max(64, int(h * jitter)), max(64, int(w * jitter))


def imagenet_like(n: int = 1000, seed: int = 0, classes: int = 10) -> list[tuple[str, int]]:
    """n JPEG files in class folders; returns (path, label) pairs."""
    root, done = _cached("images", "imagenet-like-v1", n, seed, classes)
    if done is not None:
        return done
    from PIL import Image

    rng = np.random.default_rng(seed)
    items = []
    for i in range(n):
        label = int(rng.integers(classes))
        h, w = _size(rng)
        rel = f"class{label:03d}/img{i:06d}.jpg"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(_photo_like(rng, h, w)).save(path, quality=90, subsampling=2)
        items.append((rel, label))
    return _save(root, items)


def _power_law_noise(rng: np.random.Generator, h: int, w: int, beta: float) -> np.ndarray:
    """(h, w) float32 noise of unit variance whose amplitude spectrum falls
    as 1/f**beta, the statistics of natural images (beta about 1)."""
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.rfftfreq(w)[None, :]
    f = np.sqrt(fy * fy + fx * fx)
    f[0, 0] = 1
    amp = f**-beta
    amp[0, 0] = 0
    shape = (h, w // 2 + 1)
    spec = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) * amp
    x = np.fft.irfft2(spec, s=(h, w))
    return (x / x.std()).astype(np.float32)


def _camera_photo_like(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """(h, w, 3) uint8 with a photo's spectrum: 1/f texture in luminance and
    (smoother) in chroma, a few hard-edged objects, faint sensor noise.
    At quality 90, 4:2:0 it takes about 2.5-3 bits per pixel, as camera
    photos do."""
    lum = _power_law_noise(rng, h, w, 1.2)
    base = rng.uniform(70, 170, size=3)
    mix = rng.uniform(0.7, 1.3, size=3)
    img = np.empty((h, w, 3), np.float32)
    for c in range(3):
        img[..., c] = base[c] + 45 * mix[c] * lum + 15 * _power_law_noise(rng, h, w, 1.4)
    from PIL import Image, ImageDraw

    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(im)
    for _ in range(int(rng.integers(3, 9))):
        x0, y0 = rng.uniform(0, w), rng.uniform(0, h)
        x1, y1 = x0 + rng.uniform(10, w / 3), y0 + rng.uniform(10, h / 3)
        color = tuple(int(c) for c in rng.integers(0, 256, size=3))
        if rng.random() < 0.5:
            draw.rectangle([x0, y0, x1, y1], fill=color)
        else:
            draw.ellipse([x0, y0, x1, y1], fill=color)
    arr = np.asarray(im).astype(np.float32) + rng.normal(0, 2, size=(h, w, 3))
    return np.clip(arr, 0, 255).astype(np.uint8)


# Usual photo sizes (height, width), both orientations, 375x500 to 800x600.
_PHOTO_SIZES = [(375, 500), (500, 375), (333, 500), (480, 640), (640, 480), (427, 640), (600, 800), (800, 600)]


def photos_mixed(n: int = 300, seed: int = 0, classes: int = 10) -> list[tuple[str, int]]:
    """n photo-like JPEGs of mixed usual sizes (375x500 to 800x600, both
    orientations) at quality 90, 4:2:0, about 120 KB on average, in class
    folders; returns (path, label) pairs. Deterministic for (n, seed)."""
    root, done = _cached("photos", "photos-mixed-v1", n, seed, classes)
    if done is not None:
        return done
    from PIL import Image

    rng = np.random.default_rng(seed)
    items = []
    for i in range(n):
        label = int(rng.integers(classes))
        h, w = _PHOTO_SIZES[int(rng.integers(len(_PHOTO_SIZES)))]
        rel = f"class{label:03d}/photo{i:06d}.jpg"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(_camera_photo_like(rng, h, w)).save(path, quality=90, subsampling=2)
        items.append((rel, label))
    return _save(root, items)


def _png_write(path: Path, a: np.ndarray) -> None:
    """Writes a (h, w) or (h, w, c) uint8 or uint16 array as a PNG (gray,
    gray+alpha, RGB or RGBA at its bit depth), every row Paeth-filtered as
    photo PNGs mostly are, deflated at zlib's default level. Pillow writes
    no 16-bit colour PNGs; this writes any of them."""
    import struct
    import zlib

    if a.ndim == 2:
        a = a[..., None]
    h, w, c = a.shape
    depth = 16 if a.dtype == np.uint16 else 8
    raw = a.astype(">u2").view(np.uint8).reshape(h, -1) if depth == 16 else a.reshape(h, -1)
    bpp = c * depth // 8
    x = raw.astype(np.int16)
    left = np.zeros_like(x)
    left[:, bpp:] = x[:, :-bpp]
    up = np.zeros_like(x)
    up[1:] = x[:-1]
    ul = np.zeros_like(x)
    ul[1:, bpp:] = x[:-1, :-bpp]
    p = left + up - ul
    pa, pb, pc = np.abs(p - left), np.abs(p - up), np.abs(p - ul)
    pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, ul))
    rows = np.empty((h, 1 + raw.shape[1]), np.uint8)
    rows[:, 0] = 4  # Paeth
    rows[:, 1:] = ((x - pred) & 0xFF).astype(np.uint8)
    color = {1: 0, 2: 4, 3: 2, 4: 6}[c]

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0)
    body = chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + chunk(b"IEND", b"")
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + body)


# Large-image kinds: (name, extension). JPEGs at quality 90 (colour 4:2:0);
# 8-bit PNGs by Pillow (its default zlib level 6, adaptive filters); 16-bit
# PNGs by _png_write.
LARGE_KINDS = (
    ("jpeg-rgb", "jpg"),
    ("jpeg-gray", "jpg"),
    ("png-rgb", "png"),
    ("png-rgba", "png"),
    ("png-gray", "png"),
    ("png16-rgb", "png"),
    ("png16-gray", "png"),
)

# Large sizes (height, width): 3.1, 6 and 8 MP, both orientations.
_LARGE_SIZES = [(1536, 2048), (2048, 1536), (2000, 3000), (3000, 2000), (2448, 3264)]


def _alpha_like(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """(h, w) uint8 alpha of a cut-out: opaque soft-edged blobs on a
    transparent ground, with a gradient, as product shots and stickers."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    a = np.zeros((h, w), np.float32)
    for _ in range(3):
        cy, cx = rng.uniform(0.2, 0.8) * h, rng.uniform(0.2, 0.8) * w
        r = rng.uniform(0.15, 0.4) * min(h, w)
        d = np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2)
        a = np.maximum(a, np.clip((r - d) / (0.05 * r), 0, 1))
    a *= 0.75 + 0.25 * xx / w
    return (a * 255 + 0.5).astype(np.uint8)


def large_images(n_per_kind: int = 6, seed: int = 0) -> list[tuple[str, str]]:
    """Big mixed images (3-8 megapixels): n_per_kind of each LARGE_KINDS
    kind (JPEG RGB and gray; PNG RGB, RGBA, gray; 16-bit PNG RGB and gray),
    photo-like content, in a kind-major order; returns (path, kind) pairs.
    Deterministic for (n_per_kind, seed)."""
    root, done = _cached("large", "large-images-v1", n_per_kind, seed)
    if done is not None:
        return [(p, LARGE_KINDS[k][0]) for p, k in done]
    from PIL import Image

    rng = np.random.default_rng(seed)
    items: list[tuple[str, int]] = []
    for k, (kind, ext) in enumerate(LARGE_KINDS):
        for i in range(n_per_kind):
            h, w = _LARGE_SIZES[int(rng.integers(len(_LARGE_SIZES)))]
            rgb = _camera_photo_like(rng, h, w)
            rel = f"{kind}/img{i:04d}.{ext}"
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            gray = np.asarray(Image.fromarray(rgb).convert("L"))
            if kind == "jpeg-rgb":
                Image.fromarray(rgb).save(path, quality=90, subsampling=2)
            elif kind == "jpeg-gray":
                Image.fromarray(gray).save(path, quality=90)
            elif kind == "png-rgb":
                Image.fromarray(rgb).save(path)
            elif kind == "png-rgba":
                Image.fromarray(np.dstack([rgb, _alpha_like(rng, h, w)])).save(path)
            elif kind == "png-gray":
                Image.fromarray(gray).save(path)
            else:
                # 16-bit: the 8-bit picture with extra low-order detail.
                src = rgb if kind == "png16-rgb" else gray
                wide = src.astype(np.uint16) * 256 + rng.integers(0, 256, size=src.shape, dtype=np.uint16)
                _png_write(path, wide)
            items.append((rel, k))
    stored = _save(root, items)
    return [(p, LARGE_KINDS[k][0]) for p, k in stored]


# --------------------------------------------------------------------------
# Audio
# --------------------------------------------------------------------------


def _ffmpeg(*args: str) -> None:
    import subprocess

    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", *args], check=True)


def _envelope(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """An attack-decay-sustain-release envelope of n samples."""
    a = max(1, int(sr * rng.uniform(0.005, 0.2)))
    d = max(1, int(sr * rng.uniform(0.02, 0.3)))
    r = max(1, int(sr * rng.uniform(0.02, 0.5)))
    s_level = rng.uniform(0.3, 0.9)
    env = np.full(n, s_level, np.float64)
    a, d, r = min(a, n), min(d, max(0, n - a)), min(r, n)
    env[:a] = np.linspace(0, 1, a, endpoint=False)
    env[a : a + d] = np.linspace(1, s_level, d, endpoint=False)
    env[n - r :] *= np.linspace(1, 0, r)
    return env


def _sound_like(rng: np.random.Generator, sr: int, n: int) -> np.ndarray:
    """(n, 2) float64 stereo in about [-1, 1]: a mixture of events."""
    out = np.zeros((n, 2))
    t_all = np.arange(n) / sr
    for _ in range(int(rng.integers(4, 12))):
        start = int(rng.integers(0, max(1, n - sr // 10)))
        length = int(min(n - start, sr * rng.uniform(0.1, 3.0)))
        if length < 16:
            continue
        t = t_all[:length]
        kind = rng.random()
        if kind < 0.45:  # harmonic tone with vibrato
            f0 = rng.uniform(80, 1200)
            vib = 1 + rng.uniform(0, 0.01) * np.sin(2 * np.pi * rng.uniform(3, 7) * t)
            phase = 2 * np.pi * f0 * np.cumsum(vib) / sr
            x = sum(
                np.sin(k * phase + rng.uniform(0, 2 * np.pi)) / k ** rng.uniform(1, 2)
                for k in range(1, int(rng.integers(2, 8)))
            )
        elif kind < 0.7:  # chirp (exponential sweep)
            f1, f2 = rng.uniform(100, 4000), rng.uniform(100, 8000)
            dur = t[-1] + 1 / sr
            k = np.log(f2 / f1) / dur
            x = np.sin(2 * np.pi * f1 * (np.exp(k * t) - 1) / k)
        else:  # noise burst, low-passed by a moving average of random width
            x = rng.standard_normal(length)
            w = int(rng.integers(1, 24))
            if w > 1:
                x = np.convolve(x, np.ones(w) / w, mode="same") * np.sqrt(w)
            x *= 0.5
        x = x * _envelope(rng, length, sr) * rng.uniform(0.05, 0.35)
        pan = rng.uniform(0, 1)
        delay = int(rng.integers(0, 40))  # a few samples of inter-channel delay
        out[start : start + length, 0] += x * np.sqrt(1 - pan)
        seg = x[: max(0, min(length, n - start - delay))] * np.sqrt(pan)
        out[start + delay : start + delay + len(seg), 1] += seg
    out += rng.normal(0, 0.002, size=out.shape)  # background hiss
    peak = np.abs(out).max()
    if peak > 0.98:
        out *= 0.98 / peak
    return out


def _write_wav(path: Path, x: np.ndarray, sr: int) -> None:
    import wave

    pcm = np.clip(np.round(x * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(x.shape[1])
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes(pcm.tobytes())


def audio_like(n: int = 400, seed: int = 0, classes: int = 10) -> list[tuple[str, int]]:
    """n audio clips in class folders; returns (path, label) pairs.

    Each clip is 3-10 s of stereo at 44.1 or 48 kHz: a mixture of harmonic
    tones with vibrato, exponential chirps and low-passed noise bursts, each
    with an ADSR envelope and stereo panning, over faint hiss. About 70% are
    FLAC (16-bit, made with the ffmpeg CLI from a WAV), the rest 16-bit PCM
    WAV (stdlib ``wave``).
    """
    root, done = _cached("audio", "audio-like-v1", n, seed, classes)
    if done is not None:
        return done
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(seed)
    items, jobs = [], []
    for i in range(n):
        label = int(rng.integers(classes))
        sr = 44100 if rng.random() < 0.5 else 48000
        length = int(sr * rng.uniform(3.0, 10.0))
        flac = rng.random() < 0.7
        rel = f"class{label:03d}/clip{i:06d}." + ("flac" if flac else "wav")
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        x = _sound_like(rng, sr, length)
        if flac:
            tmp = path.with_suffix(".tmp.wav")
            _write_wav(tmp, x, sr)
            jobs.append((tmp, path))
        else:
            _write_wav(path, x, sr)
        items.append((rel, label))

    def encode(job: tuple[Path, Path]) -> None:
        tmp, path = job
        _ffmpeg("-i", str(tmp), "-c:a", "flac", str(path))
        tmp.unlink()

    with ThreadPoolExecutor(os.cpu_count() or 1) as ex:
        list(ex.map(encode, jobs))
    return _save(root, items)


# --------------------------------------------------------------------------
# Video
# --------------------------------------------------------------------------

_VIDEO_SIZES = ((320, 240), (384, 288), (426, 240), (480, 270), (480, 360), (512, 288), (640, 360))


def _video_codec() -> list[str]:
    import subprocess

    enc = subprocess.run(["ffmpeg", "-hide_banner", "-encoders"], capture_output=True, text=True).stdout
    if " libx264 " in enc:
        return ["-c:v", "libx264", "-preset", "veryfast"]
    return ["-c:v", "mpeg4", "-q:v", "5"]  # no libx264 in this FFmpeg build


def video_like(n: int = 40, seed: int = 0, classes: int = 10) -> list[tuple[str, int]]:
    """n short videos in class folders; returns (path, label) pairs.

    Each is 2-4 s at 25 or 30 fps, 320x240 to 640x360, made with the ffmpeg
    CLI from a moving synthetic source (``testsrc2``, ``mandelbrot`` zoom,
    blurred ``life``, or ``gradients``, with varied sizes and seeds) plus temporal
    noise (``noise`` filter), encoded as H.264 with libx264 ``-preset
    veryfast -g 30 -pix_fmt yuv420p`` in .mp4 (``+faststart``). If the
    FFmpeg build lacks libx264, MPEG-4 part 2 (``mpeg4``) is used instead;
    the cache key records which.
    """
    codec = _video_codec()
    root, done = _cached("video", "video-like-v1", n, seed, classes, codec)
    if done is not None:
        return done
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(seed)
    items, jobs = [], []
    for i in range(n):
        label = int(rng.integers(classes))
        w, h = _VIDEO_SIZES[int(rng.integers(len(_VIDEO_SIZES)))]
        fps = 25 if rng.random() < 0.5 else 30
        dur = round(float(rng.uniform(2.0, 4.0)), 2)
        s = int(rng.integers(1 << 30))
        kind = int(rng.integers(4))
        if kind == 0:
            src = f"testsrc2=size={w}x{h}:rate={fps}"
        elif kind == 1:
            src = f"mandelbrot=size={w}x{h}:rate={fps}:start_scale={rng.uniform(1, 3):.3f}"
        elif kind == 2:
            src = f"life=size={w}x{h}:rate={fps}:seed={s}:ratio=0.{int(rng.integers(1, 6))}:mold=10:life_color=#{int(rng.integers(1 << 24)):06x}:death_color=#{int(rng.integers(1 << 24)):06x}"
        else:
            src = f"gradients=size={w}x{h}:rate={fps}:seed={s}:speed={rng.uniform(0.01, 0.05):.3f}:nb_colors={int(rng.integers(2, 8))}"
        hue = f"hue=h={rng.uniform(0, 360):.1f}*t/{dur}"
        if kind == 2:  # soften the cells into blobs
            hue = f"gblur=sigma={rng.uniform(1.5, 4):.2f},{hue}"
        vf = f"{hue},noise=alls={int(rng.integers(4, 16))}:allf=t+u:all_seed={s % 100000},format=yuv420p"
        rel = f"class{label:03d}/vid{i:06d}.mp4"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        jobs.append(
            [
                "-f",
                "lavfi",
                "-i",
                src,
                "-t",
                str(dur),
                "-vf",
                vf,
                *codec,
                "-g",
                "30",
                "-pix_fmt",
                "yuv420p",
                "-movflags",
                "+faststart",
                "-an",
                str(root / rel),
            ]
        )
        items.append((rel, label))
    with ThreadPoolExecutor(os.cpu_count() or 1) as ex:
        list(ex.map(lambda a: _ffmpeg(*a), jobs))
    return _save(root, items)


def video_long(n: int = 12, seed: int = 0, classes: int = 10, seconds: float = 60.0) -> list[tuple[str, int]]:
    """n long videos (``seconds`` each, 60 by default) in class folders;
    returns (path, label) pairs.

    Like ``video_like`` (synthetic moving sources plus temporal noise,
    H.264 with libx264 ``-preset veryfast``, 25 or 30 fps, yuv420p, .mp4
    with ``+faststart``) but long, at 320x240 to 480x270, with a keyframe
    every 2 seconds (``-g`` twice the frame rate) as streaming encoders
    make them: the case where a sampler that needs a few frames per clip
    should decode only a small share of each.
    """
    codec = _video_codec()
    root, done = _cached("video-long", "video-long-v1", n, seed, classes, seconds, codec)
    if done is not None:
        return done
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(seed)
    items, jobs = [], []
    for i in range(n):
        label = int(rng.integers(classes))
        w, h = _VIDEO_SIZES[int(rng.integers(4))]
        fps = 25 if rng.random() < 0.5 else 30
        s = int(rng.integers(1 << 30))
        if rng.random() < 0.5:
            src = f"testsrc2=size={w}x{h}:rate={fps}"
        else:
            src = f"gradients=size={w}x{h}:rate={fps}:seed={s}:speed={rng.uniform(0.01, 0.05):.3f}"
        vf = f"hue=h={rng.uniform(0, 360):.1f}*t/{seconds},noise=alls={int(rng.integers(4, 16))}:allf=t+u:all_seed={s % 100000},format=yuv420p"
        rel = f"class{label:03d}/long{i:06d}.mp4"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        jobs.append(
            ["-f", "lavfi", "-i", src, "-t", str(seconds), "-vf", vf, *codec, "-g", str(2 * fps)]
            + ["-pix_fmt", "yuv420p", "-movflags", "+faststart", "-an", str(root / rel)]
        )
        items.append((rel, label))
    with ThreadPoolExecutor(os.cpu_count() or 1) as ex:
        list(ex.map(lambda a: _ffmpeg(*a), jobs))
    return _save(root, items)


if __name__ == "__main__":
    import sys
    import time

    kind = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].isdigit() else "images"
    rest = [a for a in sys.argv[1:] if a.isdigit()]
    make = {"images": (imagenet_like, 1000), "audio": (audio_like, 400), "video": (video_like, 40)}[kind]
    t0 = time.perf_counter()
    items = make[0](int(rest[0]) if rest else make[1])
    sizes = [os.path.getsize(p) for p, _ in items]
    print(f"{len(items)} {kind}, mean {np.mean(sizes) / 1024:.0f} KiB, in {time.perf_counter() - t0:.1f}s")
