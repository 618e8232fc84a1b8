"""spdl-go's image pipeline against PyTorch DataLoader and SPDL, in one run.

Same files (benchmarks/datasets.py imagenet_like), same transform: decode
JPEG -> resize short side 256 (bilinear) -> center crop 224 -> batches of 32
uint8 images (32, 224, 224, 3) plus int64 labels, as torch tensors.

Configurations:

* spdl-go: the pipeline of bench_image.py (decode_image fused resize+crop,
  concurrency = cores -> aggregate(32) -> collate -> torch.from_dlpack);
* torch DataLoader over a PIL map-style Dataset, num_workers 0, 1, 2, 4;
* SPDL 0.8 (``pip install spdl``): spdl.pipeline.PipelineBuilder with
  spdl.io.demux_image + decode_packets (FFmpeg filter scale+crop, rgb24),
  concurrency = cores -> aggregate(32) -> convert_frames -> spdl.io.to_torch.
  Skipped, with the reason printed, if spdl cannot be imported.

Each run happens in a fresh subprocess, so that memory and CPU figures are
not polluted by earlier runs. Per run: images/s, CPU-seconds per 1,000 images
(self + reaped children, from getrusage), peak RSS and peak PSS summed over
the process tree (sampled every 50 ms from /proc), and time to first batch.
Median of --repeat runs.

    PYTHONPATH=python python benchmarks/bench_compare.py [--images 1000] [--repeat 3]
        [--json benchmarks/results/compare.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CORES = os.cpu_count() or 1
BATCH = 32
DL_WORKERS = (0, 1, 2, 4)


# --------------------------------------------------------------------------
# Process-tree memory sampling
# --------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out.extend(int(c) for c in f.read().split())
            except OSError:
                pass
    except OSError:
        pass
    return out


def _tree(pid: int) -> list[int]:
    pids, stack = [], [pid]
    while stack:
        p = stack.pop()
        pids.append(p)
        stack.extend(_children(p))
    return pids


def _mem_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in KiB of one process; (0, 0) if it is gone."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


class MemSampler:
    def __init__(self, pid: int | None = None, interval: float = 0.05):
        self.pid = pid or os.getpid()
        self.interval = interval
        self.peak_rss = self.peak_pss = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        rss = pss = 0
        for p in _tree(self.pid):
            r, s = _mem_kib(p)
            rss += r
            pss += s
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_pss = max(self.peak_pss, pss)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.sample()


def cpu_seconds() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


# --------------------------------------------------------------------------
# Loaders: each returns an iterator of (images, labels) torch tensors
# --------------------------------------------------------------------------


def spdl_go_loader(items, threads: int):
    from bench_image import image_pipeline, to_array

    p = image_pipeline(items, threads, batch=BATCH)
    try:
        for images, labels in p:
            yield to_array(images), to_array(labels)
    finally:
        p.close()


class PILDataset:
    """Map-style dataset: Image.open -> RGB -> short side 256 -> center crop 224."""

    def __init__(self, items):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):
        import numpy as np
        import torch
        from PIL import Image

        path, label = self.items[i]
        with Image.open(path) as im:
            im = im.convert("RGB")
            w, h = im.size
            s = 256 / min(w, h)
            nw, nh = max(256, round(w * s)), max(256, round(h * s))
            im = im.resize((nw, nh), Image.BILINEAR)
            left, top = (nw - 224) // 2, (nh - 224) // 2
            im = im.crop((left, top, left + 224, top + 224))
            return torch.from_numpy(np.asarray(im).copy()), label


def dataloader_loader(items, workers: int):
    import torch

    dl = torch.utils.data.DataLoader(
        PILDataset(items), batch_size=BATCH, num_workers=workers, persistent_workers=False
    )
    it = iter(dl)
    try:
        yield from it
    finally:
        del it  # shuts down (and reaps) the workers


def spdl_loader(items, threads: int):
    import spdl.io
    import torch
    from spdl.pipeline import PipelineBuilder

    filter_desc = spdl.io.get_video_filter_desc(
        scale_width=256,
        scale_height=256,
        scale_algo="bilinear",
        scale_mode="crop",  # force_original_aspect_ratio=increase -> short side 256
        crop_width=224,
        crop_height=224,
        pix_fmt="rgb24",
    )

    def decode(item):
        path, label = item
        packets = spdl.io.demux_image(path)
        return spdl.io.decode_packets(packets, filter_desc=filter_desc), label

    def collate(batch):
        frames = [f for f, _ in batch]
        buffer = spdl.io.convert_frames(frames)
        labels = torch.tensor([l for _, l in batch], dtype=torch.int64)
        return spdl.io.to_torch(buffer), labels

    p = (
        PipelineBuilder()
        .add_source(items)
        .pipe(decode, concurrency=threads, name="decode")
        .aggregate(BATCH)
        .pipe(collate, name="collate")
        .add_sink(buffer_size=4)
        .build(num_threads=threads)
    )
    with p.auto_stop():
        yield from p.get_iterator(timeout=120)


def spdl_import_error() -> str | None:
    try:
        import spdl  # noqa: F401
        import spdl.io  # noqa: F401
        import spdl.pipeline  # noqa: F401

        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


def configs(threads: int) -> list[tuple[str, str, int]]:
    cs = [("spdl-go", "spdl-go", threads)]
    cs += [(f"DataLoader+PIL w={w}", "dataloader", w) for w in DL_WORKERS]
    cs += [("SPDL 0.8", "spdl", threads)]
    return cs


LOADERS = {"spdl-go": spdl_go_loader, "dataloader": dataloader_loader, "spdl": spdl_loader}


# --------------------------------------------------------------------------
# One measured run (executed in a fresh subprocess)
# --------------------------------------------------------------------------


def worker(kind: str, param: int, n_images: int) -> dict:
    import torch  # noqa: F401  (imported for every kind: same baseline)

    from datasets import imagenet_like

    items = imagenet_like(n_images)
    with MemSampler() as mem:
        base_rss, base_pss = mem.peak_rss, mem.peak_pss
        c0, t0 = cpu_seconds(), time.perf_counter()
        first = None
        n = 0
        for images, labels in LOADERS[kind](items, param):
            if first is None:
                first = time.perf_counter() - t0
            shp = tuple(images.shape)
            assert images.dtype == torch.uint8 and shp[1:] in ((224, 224, 3), (3, 224, 224)), shp
            assert shp[0] == labels.shape[0]
            n += shp[0]
        dt = time.perf_counter() - t0
        dc = cpu_seconds() - c0
    assert n == len(items), f"{kind}: got {n} of {len(items)} images"
    return {
        "images": n,
        "images_per_s": n / dt,
        "cpu_s_per_1000": dc / n * 1000,
        "peak_rss_mib": mem.peak_rss / 1024,
        "peak_pss_mib": mem.peak_pss / 1024,
        "start_rss_mib": base_rss / 1024,
        "start_pss_mib": base_pss / 1024,
        "first_batch_s": first,
        "wall_s": dt,
    }


def run_in_subprocess(kind: str, param: int, n_images: int, timeout: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_worker", kind, str(param), str(n_images)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------

KEYS = ("images_per_s", "cpu_s_per_1000", "peak_rss_mib", "peak_pss_mib", "first_batch_s")


def median_row(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in KEYS}


def print_table(rows: dict, skipped: dict, args) -> dict:
    print(
        f"\n{args.images} ImageNet-like JPEGs, batch {BATCH}, {args.threads} threads, "
        f"{CORES} cores, median of {args.repeat} run(s)\n"
    )
    hdr = ("configuration", "images/s", "CPU-s/1000 img", "peak PSS MiB", "peak RSS MiB", "1st batch s")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(hdr) - 1)) + "|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['images_per_s']:.0f} | {r['cpu_s_per_1000']:.2f} | {r['peak_pss_mib']:.0f} "
            f"| {r['peak_rss_mib']:.0f} | {r['first_batch_s']:.2f} |"
        )
    for name, why in skipped.items():
        print(f"| {name} | skipped: {why[:120]} | | | | |")

    ratios = {}
    go = rows.get("spdl-go")
    if go:
        print()
        dls = {k: v for k, v in rows.items() if k.startswith("DataLoader")}
        if dls:
            best = max(dls, key=lambda k: dls[k]["images_per_s"])
            ratios["throughput_vs_dataloader_best"] = go["images_per_s"] / dls[best]["images_per_s"]
            ratios["pss_vs_dataloader_best"] = go["peak_pss_mib"] / dls[best]["peak_pss_mib"]
            ratios["rss_vs_dataloader_best"] = go["peak_rss_mib"] / dls[best]["peak_rss_mib"]
            ratios["dataloader_best"] = best
            print(
                f"spdl-go vs best DataLoader ({best}): throughput x{ratios['throughput_vs_dataloader_best']:.2f}, "
                f"peak PSS x{ratios['pss_vs_dataloader_best']:.2f}, peak RSS x{ratios['rss_vs_dataloader_best']:.2f}"
            )
        if "SPDL 0.8" in rows:
            s = rows["SPDL 0.8"]
            ratios["throughput_vs_spdl"] = go["images_per_s"] / s["images_per_s"]
            ratios["pss_vs_spdl"] = go["peak_pss_mib"] / s["peak_pss_mib"]
            print(
                f"spdl-go vs SPDL 0.8: throughput x{ratios['throughput_vs_spdl']:.2f}, "
                f"peak PSS x{ratios['pss_vs_spdl']:.2f}"
            )
    return ratios


def plot(rows: dict, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        return f"matplotlib unavailable: {e}"
    names = list(rows)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = ["tab:green" if n == "spdl-go" else "tab:blue" if n.startswith("SPDL") else "tab:gray" for n in names]
    a1.barh(names, [rows[n]["images_per_s"] for n in names], color=colors)
    a1.set_xlabel("images/s (higher is better)")
    a2.barh(names, [rows[n]["peak_pss_mib"] for n in names], color=colors, label="PSS")
    a2.barh(names, [rows[n]["peak_rss_mib"] for n in names], color="none", edgecolor="black", label="RSS")
    a2.set_xlabel("peak memory, MiB, process tree (lower is better)")
    a2.legend()
    for a in (a1, a2):
        a.invert_yaxis()
    a2.set_yticklabels([])
    fig.suptitle("decode + resize 256 + center crop 224 + batch 32")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--_worker":
        print(json.dumps(worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=CORES)
    ap.add_argument("--json", default=str(HERE / "results" / "compare.json"))
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run")
    args = ap.parse_args()

    from datasets import imagenet_like

    items = imagenet_like(args.images)  # generate/cache before any timing
    for p, _ in items:  # warm the page cache
        Path(p).read_bytes()

    skipped: dict[str, str] = {}
    cfgs = configs(args.threads)
    err = spdl_import_error()
    if err:
        skipped["SPDL 0.8"] = f"import failed: {err}"
        print(f"skipping SPDL 0.8: import failed: {err}", file=sys.stderr)
        cfgs = [c for c in cfgs if c[1] != "spdl"]

    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    jobs = [(c, r) for r in range(args.repeat) for c in cfgs]  # interleave repeats
    bar = tqdm(total=len(jobs), unit="run") if tqdm else None
    runs: dict[str, list[dict]] = {c[0]: [] for c in cfgs}
    for (name, kind, param), _ in jobs:
        if name in skipped:
            if bar:
                bar.update()
            continue
        if bar:
            bar.set_description(name)
        try:
            runs[name].append(run_in_subprocess(kind, param, args.images, args.timeout))
        except Exception as e:  # noqa: BLE001
            skipped[name] = f"run failed: {e}"
            print(f"\n{name}: run failed: {e}", file=sys.stderr)
        if bar:
            bar.update()
    if bar:
        bar.close()

    rows = {n: median_row(r) for n, r in runs.items() if r and n not in skipped}
    ratios = print_table(rows, skipped, args)

    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_suffix(".png")
    why = plot(rows, png) if rows else "no rows"
    out.write_text(
        json.dumps(
            {
                "images": args.images,
                "repeat": args.repeat,
                "threads": args.threads,
                "cores": CORES,
                "batch": BATCH,
                "rows": rows,
                "runs": runs,
                "skipped": skipped,
                "ratios": ratios,
                "chart": None if why else str(png),
            },
            indent=2,
        )
    )
    print(f"\nwrote {out}" + (f" and {png}" if not why else f" (no chart: {why})"))


if __name__ == "__main__":
    main()
