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

Then, on mixed usual photo sizes (``photos_mixed``: 375x500 to 800x600,
quality 90, about 120 KB each), it compares with libjpeg-turbo's own cost:
a loop of TurboJPEG's ``tjDecompress2`` (flags 0: accurate DCT, fancy
upsampling; called through ctypes with the GIL released, into one reused
buffer per thread, the files already in memory). It prints CPU ms per image
of decode_image (no resize, one decode thread, from bytes and from paths)
over the anchor's (target <= 1.05), and the pipeline's images/s with 2
threads over the 2-thread anchor's (target >= 0.90), each run interleaved
with its anchor, median of --repeat.

    python benchmarks/bench_image.py [--images 1000] [--repeat 3] [--json out.json]
    python benchmarks/bench_image.py --only photos [--photos 300]
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
from datasets import imagenet_like, photos_mixed  # noqa: E402

from spdl_go import PipelineBuilder, ops, sources  # noqa: E402

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


class TurboJPEG:
    """TurboJPEG's C API through ctypes: the decode-cost anchor. ctypes
    releases the GIL for each call, so threads decode in parallel."""

    def __init__(self) -> None:
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("turbojpeg")
        if name is None:
            raise OSError("libturbojpeg not found")
        lib = ctypes.CDLL(name)
        lib.tjInitDecompress.restype = ctypes.c_void_p
        lib.tjDestroy.argtypes = [ctypes.c_void_p]
        int_p = ctypes.POINTER(ctypes.c_int)
        lib.tjDecompressHeader3.argtypes = (
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_ulong,
            int_p,
            int_p,
            int_p,
            int_p,
        )
        lib.tjDecompress2.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p) + (
            ctypes.c_int,
        ) * 5
        lib.tjGetErrorStr2.argtypes = [ctypes.c_void_p]
        lib.tjGetErrorStr2.restype = ctypes.c_char_p
        self.lib, self.ctypes = lib, ctypes

    def decode_all(self, datas: list[bytes]) -> int:
        """Decodes each to full-size RGB (TJPF_RGB, flags 0) into one reused
        buffer, with one handle; returns how many."""
        ct, lib = self.ctypes, self.lib
        h = lib.tjInitDecompress()
        w, hh, ss, cs = ct.c_int(), ct.c_int(), ct.c_int(), ct.c_int()
        buf = np.empty(1, np.uint8)
        try:
            for d in datas:
                if lib.tjDecompressHeader3(h, d, len(d), ct.byref(w), ct.byref(hh), ct.byref(ss), ct.byref(cs)):
                    raise RuntimeError(lib.tjGetErrorStr2(h).decode())
                if buf.size < w.value * hh.value * 3:
                    buf = np.ones(w.value * hh.value * 3, np.uint8)  # touched: no page faults in the loop
                if lib.tjDecompress2(h, d, len(d), buf.ctypes.data, w.value, 0, hh.value, 0, 0):
                    raise RuntimeError(lib.tjGetErrorStr2(h).decode())
        finally:
            lib.tjDestroy(h)
        return len(datas)

    def runner(self, datas: list[bytes], threads: int):
        """Decodes datas split over threads."""
        parts = [datas[i::threads] for i in range(threads)]

        def run() -> int:
            if threads == 1:
                return self.decode_all(datas)
            with ThreadPoolExecutor(threads) as ex:
                return sum(ex.map(self.decode_all, parts))

        return run


def spdl_go_decode_one_thread(src):
    """decode_image, no resize, one decode thread."""

    def run() -> int:
        p = PipelineBuilder().add_source(src).pipe(ops.decode_image(), concurrency=1).add_sink(buffer_size=8).build()
        n = sum(1 for _ in p)
        p.close()
        return n

    return run


def photos_section(n_photos: int, repeat: int) -> dict:
    """decode_image and the pipeline on mixed photo sizes against the
    TurboJPEG anchor, each interleaved with it, run by run."""
    items = photos_mixed(n_photos)
    paths = [p for p, _ in items]
    datas = [Path(p).read_bytes() for p in paths]
    n = len(items)
    kb = sum(len(d) for d in datas) / n / 1000
    tj = TurboJPEG()
    configs = {
        "tjDecompress2, 1 thread": tj.runner(datas, 1),
        "spdl-go decode_image, 1 thread, bytes": spdl_go_decode_one_thread(datas),
        "spdl-go decode_image, 1 thread, paths": spdl_go_decode_one_thread(paths),
        "tjDecompress2, 2 threads": tj.runner(datas, 2),
        "spdl-go pipeline (resize+crop+batch), 2 threads": spdl_go_pipeline(items, 2),
        "  the same from sources.image_folder": spdl_go_pipeline(sources.image_folder(Path(paths[0]).parents[1]), 2),
    }
    for run in configs.values():  # warm up: pools, handles, page cache
        run()
    per_run: dict[str, list[dict]] = {k: [] for k in configs}
    for _ in range(repeat):
        for k, run in configs.items():
            per_run[k].append(measure(run, n, 1))
    rows = {
        k: {
            "images_per_s": statistics.median(r["images_per_s"] for r in v),
            "cpu_s_per_1000": statistics.median(r["cpu_s_per_1000"] for r in v),
        }
        for k, v in per_run.items()
    }

    def ratios(key: str, anchor: str, field: str) -> float:
        return statistics.median(a[field] / b[field] for a, b in zip(per_run[key], per_run[anchor], strict=True))

    out = {
        "photos": n,
        "mean_kb": kb,
        "rows": rows,
        "cpu_vs_tj_bytes": ratios("spdl-go decode_image, 1 thread, bytes", "tjDecompress2, 1 thread", "cpu_s_per_1000"),
        "cpu_vs_tj_paths": ratios("spdl-go decode_image, 1 thread, paths", "tjDecompress2, 1 thread", "cpu_s_per_1000"),
        "pipeline_vs_tj_2threads": ratios(
            "spdl-go pipeline (resize+crop+batch), 2 threads", "tjDecompress2, 2 threads", "images_per_s"
        ),
        "pipeline_image_folder_vs_tj_2threads": ratios(
            "  the same from sources.image_folder", "tjDecompress2, 2 threads", "images_per_s"
        ),
    }
    print(f"\n{n} mixed photos (375x500 to 800x600, q90, {kb:.0f} KB mean), median of {repeat} interleaved runs\n")
    print(f"| {'configuration':<52} | {'images/s':>9} | {'CPU-ms / img':>12} |")
    print(f"|{'-' * 54}|{'-' * 11}|{'-' * 14}|")
    for name, r in rows.items():
        print(f"| {name:<52} | {r['images_per_s']:>9.0f} | {r['cpu_s_per_1000']:>12.3f} |")
    print(
        f"\ndecode_image CPU / tjDecompress2 CPU: bytes {out['cpu_vs_tj_bytes']:.3f}, paths {out['cpu_vs_tj_paths']:.3f}"
    )
    print("  (target <= 1.05)")
    print(
        f"pipeline / 2-thread tjDecompress2 rate = {out['pipeline_vs_tj_2threads']:.2f} from a Python list, "
        f"{out['pipeline_image_folder_vs_tj_2threads']:.2f} from sources.image_folder (target >= 0.90)"
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=CORES)
    ap.add_argument("--json", default=None)
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run of the auto-vs-hand-tuned comparison")
    ap.add_argument("--photos", type=int, default=300, help="mixed-size photos for the libjpeg-turbo comparison")
    ap.add_argument("--only", choices=["photos"], default=None, help="run only this section")
    args = ap.parse_args()
    if args.only == "photos":
        photos = photos_section(args.photos, args.repeat)
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps({"photos": photos}, indent=2))
        return

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
    photos = photos_section(args.photos, args.repeat)
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
                    "photos": photos,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
