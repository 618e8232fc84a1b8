"""Deterministic generated datasets for the benchmarks, cached on disk.

ImageNet-like JPEGs: sizes around 500x375 (both orientations, some other
aspect ratios), with detail at every scale (smooth colour fields, oriented
textures, hard-edged shapes, sensor-like noise), encoded at quality 90 with
4:2:0 chroma subsampling, so that decoders do realistic work (about 60 KB
a file; ImageNet's average about 110 KB).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

CACHE = Path(os.environ.get("SPDL_GO_BENCH_DATA", Path.home() / ".cache" / "spdl-go-bench"))


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
    key = hashlib.sha1(json.dumps(["imagenet-like-v1", n, seed, classes]).encode()).hexdigest()[:12]
    root = CACHE / f"images-{n}-{seed}-{key}"
    manifest = root / "manifest.json"
    if manifest.exists():
        return [(str(root / p), l) for p, l in json.loads(manifest.read_text())]
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
    manifest.write_text(json.dumps(items))
    return [(str(root / p), l) for p, l in items]


if __name__ == "__main__":
    import sys
    import time

    t0 = time.perf_counter()
    items = imagenet_like(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
    sizes = [os.path.getsize(p) for p, _ in items]
    print(f"{len(items)} images, mean {np.mean(sizes) / 1024:.0f} KiB, in {time.perf_counter() - t0:.1f}s")
