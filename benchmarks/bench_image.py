"""Image pipeline throughput against the decode-only limit of this machine.

On a generated ImageNet-like set (benchmarks/datasets.py), it runs:

* spdl-go: (path, label) -> decode JPEG, resize short side 256, center crop
  224 (fused, one op) -> batch 32 -> collate into (32, 224, 224, 3) uint8 and
  label tensors -> torch.from_dlpack (numpy if torch is absent);
* the decode-only limit: libjpeg-turbo decoding every file to full-size RGB
  with all cores, measured two ways: spdl-go's decode_image op alone, and
  Pillow (which bundles libjpeg-turbo) on a thread per core.

It prints images/s and CPU-seconds per 1,000 images for each (median of
--repeat runs), and the pipeline's throughput as a fraction of the best
decode-only figure (target: >= 0.8). Then it runs the pipeline for
--epochs epochs with the decode stage at concurrency 1, 2, 3, 4 and
"auto", and prints auto's throughput over the best of those (target:
>= 0.95): the tuner's choice carries over from epoch to epoch, as it does
in training.

    python benchmarks/bench_image.py [--images 1000] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from datasets import imagenet_like  # noqa: E402

from spdl_go import PipelineBuilder, ops  # noqa: E402

CORES = os.cpu_count() or 1


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(run, n: int, repeat: int) -> dict:
    rates, cpus = [], []
    for _ in range(repeat):
        c0, t0 = cpu_seconds(), time.perf_counter()
        got = run()
        dt, dc = time.perf_counter() - t0, cpu_seconds() - c0
        assert got == n, f"processed {got} of {n} images"
        rates.append(n / dt)
        cpus.append(dc / n * 1000)
    return {"images_per_s": statistics.median(rates), "cpu_s_per_1000": statistics.median(cpus)}


def to_array(t):
    try:
        import torch

        return torch.from_dlpack(t)
    except ImportError:
        return np.from_dlpack(t)


def image_pipeline(items, threads: int, batch: int = 32, concurrency=None, continuous: bool = False):
    """The benchmarked spdl-go pipeline: (path, label) -> decode JPEG with a
    fused resize (short side 256) and center crop 224 -> batch -> collate.
    The decode stage runs ``concurrency`` threads (default ``threads``), or
    tunes itself with ``"auto"`` within a budget of ``threads``.
    ``continuous``: one epoch per iteration (else one pass in all)."""
    if concurrency is None:
        concurrency = threads
    auto = concurrency == "auto"
    return (
        PipelineBuilder()
        .add_source(items, continuous=continuous)
        .pipe(
            ops.decode_image(short_side=256, crop="center", crop_size=(224, 224)),
            concurrency=concurrency,
            name="decode",
        )
        .aggregate(batch)
        .pipe(ops.collate(numbers="tensor"), name="collate")
        .add_sink(buffer_size=4)
        .build(num_threads=None if auto else concurrency + 1, cpu_budget=threads if auto else None)
    )


def spdl_go_pipeline(items, threads: int):
    def run() -> int:
        p = image_pipeline(items, threads)
        n = 0
        for images, labels in p:
            x, y = to_array(images), to_array(labels)
            assert tuple(x.shape[1:]) == (224, 224, 3) and x.shape[0] == y.shape[0]
            n += x.shape[0]
        p.close()
        return n

    return run


def tuned_epochs(items, threads: int, concurrency, epochs: int):
    """One pipeline run for several epochs, as in training: the tuner's
    choice carries over, so this is where concurrency="auto" is judged."""

    def run() -> int:
        p = image_pipeline(items, threads, concurrency=concurrency, continuous=True)
        n = 0
        for _ in range(epochs):
            for images, _labels in p:
                n += to_array(images).shape[0]
        p.close()
        return n

    return run


def spdl_go_decode_only(paths, threads: int):
    def run() -> int:
        p = (
            PipelineBuilder()
            .add_source(paths)
            .pipe(ops.decode_image(), concurrency=threads)
            .add_sink(buffer_size=8)
            .build()
        )
        n = sum(1 for _ in p)
        p.close()
        return n

    return run


def pillow_decode_only(paths, threads: int):
    from PIL import Image

    def decode(path: str) -> int:
        with Image.open(path) as im:
            return im.convert("RGB").size[0] > 0

    def run() -> int:
        with ThreadPoolExecutor(threads) as ex:
            return sum(ex.map(decode, paths, chunksize=16))

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=CORES)
    ap.add_argument("--json", default=None)
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run of the auto-vs-hand-tuned comparison")
    args = ap.parse_args()

    items = imagenet_like(args.images)
    paths = [p for p, _ in items]
    n = len(items)
    # Warm the page cache so every run reads from memory.
    for p in paths:
        Path(p).read_bytes()

    rows = {
        "spdl-go pipeline (decode+resize+crop+batch)": measure(spdl_go_pipeline(items, args.threads), n, args.repeat),
        "decode-only: spdl-go decode_image (libjpeg-turbo)": measure(
            spdl_go_decode_only(paths, args.threads), n, args.repeat
        ),
        "decode-only: Pillow threads (libjpeg-turbo)": measure(pillow_decode_only(paths, args.threads), n, args.repeat),
    }
    limit = max(v["images_per_s"] for k, v in rows.items() if k.startswith("decode-only"))
    pipe = rows["spdl-go pipeline (decode+resize+crop+batch)"]["images_per_s"]

    print(f"\n{n} ImageNet-like JPEGs, {args.threads} threads, {CORES} cores, median of {args.repeat} runs\n")
    print(f"| {'configuration':<52} | {'images/s':>9} | {'CPU-s / 1000 img':>16} |")
    print(f"|{'-' * 54}|{'-' * 11}|{'-' * 18}|")
    for name, r in rows.items():
        print(f"| {name:<52} | {r['images_per_s']:>9.0f} | {r['cpu_s_per_1000']:>16.2f} |")
    print(f"\npipeline / decode-only limit = {pipe / limit:.2f} (target >= 0.80)")

    # concurrency="auto" against decode concurrency 1-4 set by hand, over
    # several epochs of one pipeline (repeats interleaved).
    tuned = {f"c={c}": c for c in (1, 2, 3, 4)} | {"auto": "auto"}
    runs: dict[str, list[float]] = {k: [] for k in tuned}
    for _ in range(args.repeat):
        for k, c in tuned.items():
            runs[k].append(
                measure(tuned_epochs(items, args.threads, c, args.epochs), n * args.epochs, 1)["images_per_s"]
            )
    tuning = {k: statistics.median(v) for k, v in runs.items()}
    best = max((k for k in tuning if k != "auto"), key=tuning.get)
    auto_ratio = tuning["auto"] / tuning[best]
    print(f"\ndecode concurrency over {args.epochs} epochs of one pipeline (images/s, median of {args.repeat}):")
    print("  " + ", ".join(f"{k} {v:.0f}" for k, v in tuning.items()))
    print(f"auto / best hand-tuned ({best}) = {auto_ratio:.2f} (target >= 0.95)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps(
                {
                    "rows": rows,
                    "ratio_to_decode_limit": pipe / limit,
                    "tuning_epochs": args.epochs,
                    "tuning_images_per_s": tuning,
                    "tuning_runs": runs,
                    "auto_vs_best_hand_tuned": auto_ratio,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
