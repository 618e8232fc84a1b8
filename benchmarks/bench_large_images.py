"""Big, mixed images: spdl-go against Pillow in a torch DataLoader and DALI CPU, per format.

Files: benchmarks/datasets.py ``large_images`` (3-8 megapixels, photo-like):
JPEG RGB (quality 90, 4:2:0) and gray; 8-bit PNG RGB, RGBA and gray (Pillow,
zlib level 6, adaptive filters); 16-bit PNG RGB and gray (Paeth rows, zlib
level 6). Same transform everywhere: decode to 8-bit RGB (alpha dropped,
16-bit rounded to 8) -> resize short side 256 (antialiased bilinear) ->
center crop 224 -> batches of 8 uint8 (8, 224, 224, 3) torch tensors.

Configurations, each run on one format at a time (its files repeated
--passes times) and on all formats mixed ("mixed", shuffled once):

* spdl-go: decode_image(short_side=256, crop="center", crop_size=224),
  concurrency = cores -> aggregate(8) -> collate -> torch.from_dlpack;
* torch DataLoader over a Pillow map-style Dataset (Image.open -> RGB ->
  resize(BILINEAR, antialiased) -> crop), num_workers 0 and 2. Pillow reads
  16-bit gray as I;16 and cannot make RGB of it directly: it is scaled to
  8 bits with numpy first (16-bit RGB Pillow reads as 8-bit RGB itself);
* NVIDIA DALI's CPU-only pipeline (``@pipeline_def(device_id=None)``):
  fn.readers.file -> fn.decoders.image(device="cpu", RGB) ->
  fn.resize(resize_shorter=256, linear, antialias=True: the same filter as
  the others) -> fn.crop(224), num_threads = cores, read into torch by
  DALIGenericIterator. DALI decodes every kind here to RGB (RGBA and
  16-bit too); its uint16 or RGBA outputs are not what is compared.
  Skipped, with the reason printed, if DALI cannot be imported.

Figures (benchmarks/harness.py): each run in a fresh subprocess that imports
torch first; images/s and megapixels/s of source decoded per second, median
of --repeat runs, repeats interleaved. Ratios: spdl-go against the best
DataLoader and DALI row of the same format, from the same run.

    python benchmarks/bench_large_images.py [--per-kind 6] [--passes 4] [--repeat 3]
        [--only png-rgb,mixed] [--json benchmarks/results/large_images.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402

CORES = os.cpu_count() or 1
BATCH = 8
DL_WORKERS = (0, 2)


def items_for(fmt: str, per_kind: int, passes: int) -> list[tuple[str, int]]:
    """The (path, label) items of one format (or all, "mixed"), repeated."""
    import random

    from datasets import LARGE_KINDS, large_images

    kinds = [k for k, _ in LARGE_KINDS]
    every = large_images(per_kind)
    chosen = [(p, kinds.index(k)) for p, k in every if fmt in ("mixed", k)]
    out = chosen * passes
    if fmt == "mixed":
        random.Random(0).shuffle(out)
    return out


# --------------------------------------------------------------------------
# Loaders: each returns an iterator of (images, labels) torch tensors
# --------------------------------------------------------------------------


def spdl_go_loader(items, threads: int):
    import torch

    from spdl_go import PipelineBuilder, ops

    p = (
        PipelineBuilder()
        .add_source(items)
        .pipe(ops.decode_image(short_side=256, crop="center", crop_size=(224, 224)), concurrency=threads, name="decode")
        .aggregate(BATCH)
        .pipe(ops.collate(numbers="tensor"), name="collate")
        .add_sink(buffer_size=2)
        .build(num_threads=threads + 1)
    )
    try:
        for images, labels in p:
            yield torch.from_dlpack(images), torch.from_dlpack(labels)
    finally:
        p.close()


class PILDataset(harness.ItemsDataset):
    """Map-style dataset: Image.open -> RGB -> short side 256 -> center crop 224."""

    def __getitem__(self, i):
        import numpy as np
        import torch
        from PIL import Image

        path, label = self.items[i]
        with Image.open(path) as im:
            if im.mode.startswith("I"):  # 16-bit gray: round to 8 bits as spdl-go does
                a = np.asarray(im).astype(np.uint32)
                im = Image.fromarray(((a * 255 + 32767) // 65535).astype(np.uint8))
            im = im.convert("RGB")
            w, h = im.size
            s = 256 / min(w, h)
            nw, nh = max(256, int(w * s)), max(256, int(h * s))
            im = im.resize((nw, nh), Image.BILINEAR)
            left, top = (nw - 224) // 2, (nh - 224) // 2
            im = im.crop((left, top, left + 224, top + 224))
            return torch.from_numpy(np.asarray(im).copy()), label


def dataloader_loader(items, workers):
    return harness.torch_dataloader(PILDataset(items), BATCH, workers)


def dali_loader(items, threads: int):
    return harness.dali_resize_crop(items, BATCH, threads, antialias=True)


LOADERS = {
    "spdl-go": lambda items, p: spdl_go_loader(items, int(p)),
    "dataloader": lambda items, p: dataloader_loader(items, int(p)),
    "dali": lambda items, p: dali_loader(items, int(p)),
}


def worker(kind: str, param: str, per_kind: int, passes: int) -> dict:
    import torch  # imported for every kind: the same baseline

    p, fmt = param.split("@")
    items = items_for(fmt, per_kind, passes)

    def count(batch) -> int:
        images, labels = batch
        shp = tuple(images.shape)
        assert images.dtype == torch.uint8 and shp[1:] == (224, 224, 3), shp
        assert shp[0] == labels.shape[0]
        return shp[0]

    return harness.measure(LOADERS[kind](items, p), count, len(items))


def loader_configs() -> list[tuple[str, str, str]]:
    """(label, loader kind, parameter) of every loader."""
    cs = [(f"spdl-go c={CORES}", "spdl-go", str(CORES))]
    cs += [(f"DataLoader+PIL w={w}", "dataloader", str(w)) for w in DL_WORKERS]
    cs += [(f"DALI CPU t={CORES}", "dali", str(CORES))]
    return cs


def megapixels(path: str) -> float:
    from PIL import Image

    with Image.open(path) as im:  # reads the header only
        return im.size[0] * im.size[1] / 1e6


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--_worker":  # harness passes kind, param, *extra
        print(json.dumps(worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))))
        return

    from datasets import LARGE_KINDS, large_images

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-kind", type=int, default=6, help="files of each format")
    ap.add_argument("--passes", type=int, default=4, help="times each run reads its files")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated formats (e.g. png-rgb,mixed)")
    ap.add_argument("--loaders", default="", help="comma-separated loader name prefixes (e.g. spdl-go,DALI)")
    ap.add_argument("--json", default=str(HERE / "results" / "large_images.json"))
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run")
    args = ap.parse_args()

    every = large_images(args.per_kind)  # generate/cache before any timing
    harness.warm_page_cache(p for p, _ in every)
    formats = [k for k, _ in LARGE_KINDS] + ["mixed"]
    if args.only:
        formats = [f for f in formats if f in args.only.split(",")]
    loaders = loader_configs()
    if args.loaders:
        loaders = [c for c in loaders if any(c[0].startswith(s) for s in args.loaders.split(","))]

    skipped: dict[str, str] = {}
    dali_err = None
    if any(c[1] == "dali" for c in loaders):
        try:
            import nvidia.dali  # noqa: F401
            import nvidia.dali.plugin.pytorch  # noqa: F401
        except Exception as e:  # noqa: BLE001
            dali_err = f"import failed: {type(e).__name__}: {e}"
            print(f"skipping DALI: {dali_err}", file=sys.stderr)
    cfgs = []
    for fmt in formats:
        for label, kind, p in loaders:
            name = f"{fmt} | {label}"
            if kind == "dali" and dali_err:
                skipped[name] = dali_err
                continue
            cfgs.append((name, kind, f"{p}@{fmt}"))

    runs = harness.run_all(__file__, cfgs, [str(args.per_kind), str(args.passes)], args.repeat, args.timeout, skipped)
    rows = harness.median_rows(runs)

    mp = {f: statistics.mean(megapixels(p) for p, _ in items_for(f, args.per_kind, 1)) for f in formats}
    print(
        f"\n{args.per_kind} files per format, each read {args.passes} times; decode + resize 256 + center crop 224, "
        f"batch {BATCH}, {CORES} cores, median of {args.repeat} run(s)\n"
    )
    labels = [c[0] for c in loaders]
    print(
        "| format | MP/image | "
        + " | ".join(f"{lb} img/s (MP/s)" for lb in labels)
        + " | vs best DataLoader | vs DALI |"
    )
    print("|" + " --- |" * (len(labels) + 4))
    ratios: dict[str, dict] = {}
    for f in formats:
        cells = []
        for lb in labels:
            r = rows.get(f"{f} | {lb}")
            why = skipped.get(f"{f} | {lb}")
            cells.append(f"{r['items_per_s']:.2f} ({r['items_per_s'] * mp[f]:.1f})" if r else f"n/a ({why})")
        go = rows.get(f"{f} | {labels[0]}") if labels and labels[0].startswith("spdl-go") else None
        dl = [rows[f"{f} | {lb}"] for lb in labels if lb.startswith("DataLoader") and f"{f} | {lb}" in rows]
        dali = [rows[f"{f} | {lb}"] for lb in labels if lb.startswith("DALI") and f"{f} | {lb}" in rows]
        rat = {}
        if go and dl:
            rat["vs_dataloader_best"] = go["items_per_s"] / max(r["items_per_s"] for r in dl)
        if go and dali:
            rat["vs_dali"] = go["items_per_s"] / dali[0]["items_per_s"]
        ratios[f] = rat
        fmt_r = [f"x{rat[k]:.2f}" if k in rat else "n/a" for k in ("vs_dataloader_best", "vs_dali")]
        print(f"| {f} | {mp[f]:.1f} | " + " | ".join(cells) + " | " + " | ".join(fmt_r) + " |")
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")

    meta = {
        "benchmark": "large_images",
        "per_kind": args.per_kind,
        "passes": args.passes,
        "repeat": args.repeat,
        "cores": CORES,
        "batch": BATCH,
        "megapixels_per_image": mp,
        "ratios": ratios,
    }
    harness.write_results(
        args.json, meta, rows, runs, skipped, "large images: decode + resize 256 + center crop 224 + batch 8", "images"
    )


if __name__ == "__main__":
    main()
