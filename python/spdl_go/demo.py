"""Train a small image classifier on JPEGs fed by spdl-go, and compare with torch's DataLoader.

Run it with ``python -m spdl_go.demo`` (``make demo`` from a checkout);
``--quick`` for a short run, ``--help`` for the sizes. It needs torch and
Pillow (torchvision is used for the DataLoader's transforms if installed).

1. It generates an ImageNet-style folder (``<cache>/<class>/<file>.jpg``:
   10 classes, 2,000 JPEGs of 320-800 pixels a side with colour fields,
   textures, shapes and sensor noise, where each class has its own palette
   and object) plus four broken files of the kinds real scrapes contain: a
   truncated JPEG, a zero-byte file, an HTML error page saved as ``.jpg``
   and a JPEG header followed by garbage. The folder is reused by later runs.
2. It trains a small CNN (three conv layers) with Adam for 5 epochs, fed
   by one spdl-go pipeline: ``sources.image_folder`` (shuffled each epoch)
   -> native ``decode_image`` with torchvision's RandomResizedCrop fused
   into the JPEG decode (only the crop window is decoded, at a reduced DCT
   scale when it is much larger than the output) -> ``random_hflip`` ->
   batches -> ``collate`` (one uint8 tensor and one int64 label tensor,
   handed to torch without a copy). The decode stage may fail up to 5% of
   its items: each broken file fails alone, is counted and named, and
   training goes on.
3. Alongside, the same training loop trains its own copy of the model fed
   by ``torch.utils.data.DataLoader`` (2 worker processes, Pillow
   decoding, the same random resized crop and flip; broken files set aside
   by the dataset). The two loaders' epochs alternate, so that other work
   on the machine slows both alike.
4. It prints images/s, loss and accuracy per epoch, the pipeline's
   per-stage stats with the engine's bottleneck judgement, each loader's
   failed files, and both loaders' images/s with their ratio: in the
   training loop, and for the loaders alone (3 more epochs each, no model).

On a 2-core machine the model and the loader share the cores, so the
training-loop numbers depend on both; the loader-alone numbers isolate the
data path. On the first run, generating the images takes about half a
minute; the whole run stays well under 5 minutes.
"""

from __future__ import annotations

import argparse
import colorsys
import importlib
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

CLASSES = 10
SCALE = (0.25, 1.0)  # RandomResizedCrop's area range; torchvision's 0.08 is harsh for 64-pixel crops
RATIO = (3 / 4, 4 / 3)
MAX_DECODE_FAILURES = Fraction(1, 20)  # more than 5% broken files means a wrong folder, not a few bad files
DATASET_VERSION = "v2"  # bump when the generator changes, so stale caches are not reused
_DONE = ".complete"  # written last: a folder without it was interrupted and is regenerated


# --------------------------------------------------------------------------
# The dataset
# --------------------------------------------------------------------------


def _rgb(h: float, s: float, v: float) -> np.ndarray:
    return np.array(colorsys.hsv_to_rgb(h % 1.0, s, v), np.float32) * 255


def _photo(rng: np.random.Generator, label: int, h: int, w: int) -> np.ndarray:
    """A photo-like uint8 (h, w, 3) image whose palette and main object
    depend on the class, with detail at every scale so decoders and
    resamplers do realistic work."""
    from PIL import Image, ImageDraw

    hue = label / CLASSES
    # A quarter of the images are shot "elsewhere": their background says
    # nothing about the class, and only the object (shape and colour) does.
    scene = hue if rng.random() < 0.75 else rng.uniform(0, 1)
    yy = np.arange(h, dtype=np.float32)[:, None]
    xx = np.arange(w, dtype=np.float32)[None, :]
    # a background gradient and smooth colour fields in the class's hues
    top, bottom = _rgb(scene + rng.uniform(-0.06, 0.06), 0.5, 0.9), _rgb(scene + 0.5, 0.3, 0.4)
    t = (yy / h)[..., None]
    img = (1 - t) * top + t * bottom + np.zeros((1, w, 1), np.float32)
    for _ in range(3):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        s = rng.uniform(0.15, 0.4) * max(h, w)
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
        color = _rgb(scene + rng.uniform(-0.1, 0.1), rng.uniform(0.4, 1), rng.uniform(0.5, 1))
        img += blob[..., None] * (color - img) * 0.8
    # oriented textures at a few frequencies
    for _ in range(2):
        theta, f, phase = rng.uniform(0, np.pi), rng.uniform(0.02, 0.25), rng.uniform(0, 2 * np.pi)
        g = np.sin(2 * np.pi * f * (xx * np.cos(theta) + yy * np.sin(theta)) + phase)
        img += g[..., None] * rng.uniform(4, 16)
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(im)
    # distractors in any colour, then the class's object: its shape and colour
    for _ in range(int(rng.integers(2, 6))):
        x0, y0 = rng.uniform(0, w), rng.uniform(0, h)
        box = [x0, y0, x0 + rng.uniform(8, w / 4), y0 + rng.uniform(8, h / 4)]
        fill = tuple(int(c) for c in rng.integers(0, 256, size=3))
        (draw.rectangle if rng.random() < 0.5 else draw.ellipse)(box, fill=fill)
    size = rng.uniform(0.3, 0.6) * min(h, w)
    cx, cy = rng.uniform(size / 2, w - size / 2), rng.uniform(size / 2, h - size / 2)
    fill = tuple(int(c) for c in _rgb(hue + 0.5 + rng.uniform(-0.04, 0.04), 0.9, rng.uniform(0.6, 1)))
    shape = label % 3
    if shape == 0:
        draw.ellipse([cx - size / 2, cy - size / 2, cx + size / 2, cy + size / 2], fill=fill)
    elif shape == 1:
        draw.rectangle([cx - size / 2, cy - size / 3, cx + size / 2, cy + size / 3], fill=fill)
    else:
        draw.polygon([(cx, cy - size / 2), (cx - size / 2, cy + size / 2), (cx + size / 2, cy + size / 2)], fill=fill)
    arr = np.asarray(im).astype(np.float32)
    arr += rng.standard_normal(arr.shape, dtype=np.float32) * 5  # sensor noise
    return np.clip(arr, 0, 255).astype(np.uint8)


def _size(rng: np.random.Generator) -> tuple[int, int]:
    """(h, w): 320-800 pixels on the long side, the usual photo aspects."""
    long = int(rng.integers(320, 801))
    aspect = float(rng.choice([4 / 3, 3 / 2, 16 / 9, 5 / 4, 1.0]))
    short = int(long / aspect)
    return (short, long) if rng.random() < 0.7 else (long, short)


def _write_image(root: Path, seed: int, i: int) -> None:
    from PIL import Image

    rng = np.random.default_rng([seed, i])  # per image: the same files whatever the thread count
    label = i % CLASSES
    h, w = _size(rng)
    path = root / f"class{label:02d}" / f"img{i:05d}.jpg"
    Image.fromarray(_photo(rng, label, h, w)).save(path, quality=int(rng.integers(80, 96)), subsampling=2)


def _write_broken(root: Path) -> list[Path]:
    """Broken files of the kinds real folders contain, in class folders."""
    good = sorted((root / "class00").glob("*.jpg"))[0].read_bytes()
    broken = {
        root / "class01" / "broken-truncated.jpg": good[: len(good) // 2],  # download cut short
        root / "class02" / "broken-empty.jpg": b"",  # zero bytes
        root / "class03" / "broken-not-a-jpeg.jpg": b"<html><body>404 Not Found</body></html>\n",
        root / "class04" / "broken-garbage.jpg": good[:4] + bytes(range(256)) * 8,  # a JPEG start, then junk
    }
    for path, data in broken.items():
        path.write_bytes(data)
    return sorted(broken)


def generate(cache: Path, n: int, seed: int = 0, threads: int | None = None) -> tuple[Path, list[Path]]:
    """Writes the dataset (n JPEGs in CLASSES class folders, plus broken
    files) under cache, unless a complete one is there; returns its root
    and the broken files."""
    root = cache / f"images-{DATASET_VERSION}-{n}-{seed}"
    if (root / _DONE).exists():
        return root, sorted(root.glob("*/broken-*.jpg"))
    if n < CLASSES:
        raise ValueError(f"--images must be at least {CLASSES} (one per class), not {n}")
    for c in range(CLASSES):
        (root / f"class{c:02d}").mkdir(parents=True, exist_ok=True)
    # numpy and Pillow release the GIL for whole-array work, so threads
    # share the cores without forking a process that has the Go runtime loaded.
    with ThreadPoolExecutor(threads or os.cpu_count() or 1) as pool:
        list(pool.map(lambda i: _write_image(root, seed, i), range(n)))
    broken = _write_broken(root)
    (root / _DONE).write_text("")
    return root, broken


# --------------------------------------------------------------------------
# The two loaders: each yields (images uint8 (N, H, W, 3), labels int64 (N,))
# as torch tensors, one epoch per call
# --------------------------------------------------------------------------


def spdl_go_pipeline(root: Path, crop: int, batch_size: int, threads: int, seed: int) -> Any:
    """The demo's pipeline over an image folder: each ``for`` over it is one
    shuffled epoch of ``(uint8 (N, crop, crop, 3), int64 (N,))`` batches."""
    from spdl_go import PipelineBuilder, ops, sources

    return (
        PipelineBuilder()
        .add_source(sources.image_folder(root, shuffle=True, seed=seed), continuous=True)  # one epoch per `for`
        .pipe(
            ops.decode_image(crop="random_resized", crop_size=crop, scale=SCALE, ratio=RATIO, seed=seed),
            concurrency=threads,
            name="decode+crop",
            max_failures=MAX_DECODE_FAILURES,
        )
        .pipe(ops.random_hflip(seed=seed), concurrency=threads, name="flip")
        .aggregate(batch_size)
        .pipe(ops.collate(numbers="tensor"), name="collate")
        .add_sink(buffer_size=4)
        .build(num_threads=threads + 1)
    )


def _spdl_go_epoch(pipeline: Any) -> Iterator[tuple[Any, Any]]:
    import torch

    for images, labels in pipeline:
        yield torch.from_dlpack(images), torch.from_dlpack(labels)  # zero-copy views of the engine's memory


def _rrc_params(rng: np.random.Generator, width: int, height: int) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params: (top, left, h, w)."""
    area = width * height
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    in_ratio = width / height
    if in_ratio < RATIO[0]:
        w, h = width, int(round(width / RATIO[0]))
    elif in_ratio > RATIO[1]:
        h, w = height, int(round(height * RATIO[1]))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class PillowDataset:
    """The same files and transforms for torch's DataLoader: Pillow decodes,
    then a random resized crop (antialiased bilinear) and a random flip,
    torchvision's transforms when it is installed. A file that fails to
    decode comes back as its error (str), which ``_collate`` sets aside, as
    a DataLoader has no failure budget of its own."""

    def __init__(self, items: list[tuple[str, int]], crop: int) -> None:
        self.items, self.crop = items, crop
        try:  # imported by name: torchvision is optional and untyped
            T = importlib.import_module("torchvision.transforms")
            self.tv: Any = T.Compose([T.RandomResizedCrop(crop, scale=SCALE, ratio=RATIO), T.RandomHorizontalFlip()])
        except ImportError:
            self.tv = None

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[Any, int] | str:
        import torch
        from PIL import Image

        path, label = self.items[i]
        try:
            with Image.open(path) as im:
                im = im.convert("RGB")
                if self.tv is not None:
                    out = self.tv(im)
                else:
                    rng = np.random.default_rng()  # fresh entropy, as torchvision's draws in workers
                    top, left, h, w = _rrc_params(rng, im.width, im.height)
                    out = im.resize(
                        (self.crop, self.crop), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h)
                    )
                    if rng.random() < 0.5:
                        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            return torch.from_numpy(np.asarray(out).copy()), label
        except Exception as e:  # noqa: BLE001 - any failure of one file fails that file only
            return f"{path}: {type(e).__name__}: {e}"


def _collate(batch: list[tuple[Any, int] | str]) -> tuple[Any, Any, list[str]]:
    import torch
    from torch.utils.data import default_collate

    good = [b for b in batch if not isinstance(b, str)]
    errors = [b for b in batch if isinstance(b, str)]
    if not good:
        return torch.empty(0), torch.empty(0, dtype=torch.int64), errors
    images, labels = default_collate(good)
    return images, labels, errors


def torch_dataloader(items: list[tuple[str, int]], crop: int, batch_size: int, workers: int, seed: int) -> Any:
    import torch

    return torch.utils.data.DataLoader(
        PillowDataset(items, crop),
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        collate_fn=_collate,
        persistent_workers=workers > 0,
        # Workers are forked from a fresh server process (with torch and
        # Pillow preloaded): this one has the Go runtime loaded, whose
        # threads a plain fork() would not copy.
        multiprocessing_context=_forkserver() if workers > 0 else None,
        generator=torch.Generator().manual_seed(seed),
    )


def _forkserver() -> Any:
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "PIL.Image", "numpy"])
    return ctx


def _dataloader_epoch(dl: Any, errors: list[str]) -> Iterator[tuple[Any, Any]]:
    for images, labels, bad in dl:
        errors.extend(bad)
        if len(labels):
            yield images, labels


# --------------------------------------------------------------------------
# The training loop, the same for both loaders
# --------------------------------------------------------------------------


def make_model(classes: int = CLASSES) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)  # both loaders train the same initial model
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, classes),
    )


@dataclass
class Epoch:
    images: int
    seconds: float
    loss: float
    accuracy: float

    @property
    def rate(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else 0.0


def train_epoch(batches: Iterable[tuple[Any, Any]], model: Any = None, opt: Any = None) -> Epoch:
    """One epoch: uint8 NHWC -> float NCHW in [0, 1] -> forward, backward,
    step. Without a model, only the conversion (the loader alone)."""
    import torch

    seen = correct = 0
    loss_sum = 0.0
    t0 = time.perf_counter()
    for images, labels in batches:
        x = images.permute(0, 3, 1, 2).float().div_(255)
        if model is not None:
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(labels)
            correct += int((logits.argmax(1) == labels).sum())
        seen += len(labels)
    dt = time.perf_counter() - t0
    return Epoch(seen, dt, loss_sum / max(seen, 1), correct / max(seen, 1))


@dataclass
class _Trainer:
    """One loader feeding its own copy of the model."""

    name: str
    epoch_batches: Callable[[], Iterable[tuple[Any, Any]]]
    model: Any
    opt: Any
    epochs: list[Epoch]

    @classmethod
    def new(cls, name: str, epoch_batches: Callable[[], Iterable[tuple[Any, Any]]], lr: float) -> _Trainer:
        import torch

        model = make_model()
        return cls(name, epoch_batches, model, torch.optim.Adam(model.parameters(), lr=lr), [])

    def epoch(self, total: int) -> None:
        ep = train_epoch(self.epoch_batches(), self.model, self.opt)
        self.epochs.append(ep)
        print(
            f"  {self.name + ' epoch':<16} {len(self.epochs)}/{total}: {ep.images} images in {ep.seconds:.2f}s "
            f"= {ep.rate:,.0f} images/s, loss {ep.loss:.3f}, accuracy {ep.accuracy:.1%}",
            flush=True,
        )


def _steady(xs: list[float]) -> float:
    """The median, leaving out the first epoch (start-up: the DataLoader's
    worker processes, the pipeline's first fills) when there are others."""
    return statistics.median(xs[1:] or xs)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", "--samples", type=int, default=2000, help="JPEGs to generate (default 2000)")
    ap.add_argument("--epochs", type=int, default=5, help="training epochs per loader (default 5)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--crop", type=int, default=64, help="random resized crop size (default 64)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (default 2)")
    ap.add_argument(
        "--threads", type=int, default=None, help="spdl-go decode threads (default: --workers, like for like)"
    )
    ap.add_argument(
        "--torch-threads",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="torch's intra-op threads for the model (default: half the cores; the loader needs the rest)",
    )
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-dataloader", action="store_true", help="skip the torch DataLoader comparison")
    ap.add_argument("--quick", action="store_true", help="a short run: 400 images, 2 epochs")
    ap.add_argument(
        "--data",
        type=Path,
        default=Path(os.environ.get("SPDL_GO_DATA", Path(tempfile.gettempdir()) / "spdl-go-demo")),
        help="cache folder for the generated images (env SPDL_GO_DATA)",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.images, args.epochs = min(args.images, 400), min(args.epochs, 2)
    if args.threads is None:
        args.threads = max(1, args.workers)
    if args.epochs < 1 or args.threads < 1:
        ap.error("--epochs and --threads must be at least 1")

    try:
        import torch
    except ImportError:
        sys.exit("the demo trains a torch model: pip install torch")
    import spdl_go
    from spdl_go import sources

    torch.set_num_threads(args.torch_threads)
    t_start = time.perf_counter()
    fresh = not (args.data / f"images-{DATASET_VERSION}-{args.images}-{args.seed}" / _DONE).exists()
    root, broken = generate(args.data, args.images, args.seed)
    listing = sources.image_folder(root)
    print(
        f"dataset: {len(listing)} files in {len(listing.classes)} class folders under {root} "
        f"({'generated' if fresh else 'reused'} in {time.perf_counter() - t_start:.1f}s), "
        f"{len(broken)} of them broken: {', '.join(p.name for p in broken)}"
    )
    print(
        f"training: {args.crop}x{args.crop} random resized crops + flips, batches of {args.batch_size}, "
        f"a 3-conv CNN, Adam lr {args.lr}, {args.epochs} epochs; torch on {args.torch_threads} thread(s), "
        f"{os.cpu_count()} cores"
    )
    print(f"spdl-go: image_folder -> decode_image(crop='random_resized') x{args.threads} -> random_hflip -> collate")
    pipeline = spdl_go_pipeline(root, args.crop, args.batch_size, args.threads, args.seed)
    trainers = [_Trainer.new("spdl-go", lambda: _spdl_go_epoch(pipeline), args.lr)]
    loader = None
    errors: list[str] = []  # the DataLoader's failed files
    if not args.no_dataloader:
        loader = torch_dataloader(listing_items(root), args.crop, args.batch_size, args.workers, args.seed)
        how = "torchvision transforms" if loader.dataset.tv is not None else "Pillow resize(box=) + numpy flip"
        print(f"torch DataLoader: {args.workers} worker processes, Pillow decode + {how}")
        trainers.append(_Trainer.new("DataLoader", lambda: _dataloader_epoch(loader, errors), args.lr))
        print(
            "\nEach loader trains its own copy of the same model; their epochs alternate, so that a busy "
            "machine slows both alike."
        )
    print()

    failed: set[str] = set()
    alone: dict[str, list[float]] = {t.name: [] for t in trainers}
    try:
        for _ in range(args.epochs):
            for t in trainers:
                t.epoch(args.epochs)
            failed.update(err.splitlines()[0] for err in pipeline.stats().recent_errors)
        stats = pipeline.stats()
        # The loaders alone (no model): the data path's own speed, 3 rounds.
        for _ in range(3):
            alone["spdl-go"].append(train_epoch(_spdl_go_epoch(pipeline)).rate)
            if loader is not None:
                alone["DataLoader"].append(train_epoch(_dataloader_epoch(loader, errors)).rate)
    finally:
        pipeline.close()
        loader = None  # the last reference: this stops the DataLoader's workers

    print("\nspdl-go pipeline stats, last training epoch:")
    print(stats.format())
    print(
        f"\nspdl-go failed items: {stats.failures} in that epoch, training went on (the decode stage may fail "
        f"up to {float(MAX_DECODE_FAILURES):.0%} of its items; more would fail the epoch):"
    )
    for line in sorted(failed):
        print("  " + line)
    if len(trainers) > 1:
        print(f"DataLoader failed items: {len(set(errors))}, set aside by the dataset's own try/except:")
        for e in sorted(set(errors)):
            print("  " + e.splitlines()[0])

    ours = trainers[0].epochs
    steady = "median epoch after the first" if args.epochs > 1 else "its one epoch"
    if len(trainers) == 1:
        print(
            f"\nspdl-go: {_steady([e.rate for e in ours]):,.0f} images/s training ({steady}), "
            f"{statistics.median(alone['spdl-go']):,.0f} images/s loader alone (median of 3 epochs)"
        )
    else:
        theirs = trainers[1].epochs
        rows: list[tuple[str, list[float], list[float], Callable[[list[float]], float], str]] = [
            ("training loop", [e.rate for e in ours], [e.rate for e in theirs], _steady, steady),
            ("loader alone, no model", alone["spdl-go"], alone["DataLoader"], statistics.median, "median of 3 epochs"),
        ]
        print("\nimages/s                         spdl-go   DataLoader   ratio")
        for label, a, b, pick, note in rows:
            # The ratio is the median of the epoch pairs' ratios: each pair ran side by side in time.
            ratio = pick([x / y for x, y in zip(a, b, strict=True)]) if all(b) else float("nan")
            print(f"  {label:<29}{pick(a):>9,.0f}   {pick(b):>10,.0f}   x{ratio:.2f}   ({note})")

    mem = spdl_go.memory_stats()
    print(
        f"\nengine memory after close: {mem['live_bytes']} bytes live, {mem['pooled_bytes']} bytes pooled; "
        f"total {time.perf_counter() - t_start:.0f}s"
    )


def listing_items(root: Path) -> list[tuple[str, int]]:
    """The folder's (path, label) items, as ``sources.image_folder`` lists
    them (and torchvision's ImageFolder numbers them), for the DataLoader."""
    from spdl_go import PipelineBuilder, sources

    p = PipelineBuilder().add_source(sources.image_folder(root)).add_sink(64).build()
    with p.auto_stop():
        return [(str(path), int(label)) for path, label in p]


if __name__ == "__main__":
    main()
