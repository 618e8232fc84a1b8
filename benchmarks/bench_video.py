"""spdl-go's video pipeline against SPDL and PyTorch DataLoader, in one run.

Same files (benchmarks/datasets.py video_like: 2-4 s H.264 .mp4 clips, 25
or 30 fps, 320x240 to 640x360, GOP 30), same work for every configuration:
from each clip of n frames take 8 frames evenly spaced over the clip (frame
round(i*(n-1)/7), i = 0..7, halves up: first and last frame included),
resize each to 112x112 (bilinear, aspect not kept), RGB uint8, and batch 4
clips into a uint8 tensor (4, 8, 112, 112, 3) plus int64 labels (4,), as
torch tensors. Every decoder runs with one thread per video.

Configurations:

* spdl-go: ops.decode_video(num_frames=8, size=(112, 112)) (decodes
  only what the kept frames need: non-reference frames no kept frame shows
  are skipped, keyframes are jumped to; converts only the kept frames with
  libswscale straight into the output), concurrency = cores ->
  aggregate(4) -> ops.collate -> torch.from_dlpack; "spdl-go auto" is the
  same with concurrency="auto";
* SPDL 0.8 (``pip install spdl``): spdl.io.demux_video +
  spdl.io.sample_decode_video(packets, indices) with
  get_video_filter_desc(scale_width=112, scale_height=112,
  scale_algo="bilinear", scale_mode=None, pix_fmt="rgb24") (it decodes each
  GOP only up to the last frame it needs from it, and skips GOPs it does
  not need) -> convert_frames -> to_torch, in spdl.pipeline.PipelineBuilder
  with concurrency = cores -> aggregate(4) -> torch.stack;
* torch DataLoader over a PyAV (``pip install av``, wheels bundle their own
  FFmpeg) map-style Dataset, num_workers 0 and 2: decode forward with
  PyAV's default threading (slice threads, which an x264 stream of one
  slice per frame cannot use), convert the kept frames with
  ``frame.to_ndarray(width=112, height=112, format="rgb24",
  interpolation="BILINEAR")``, stop after the last kept frame.

Two cases, each run over every configuration: "short" (the clips above)
and "long" (benchmarks/datasets.py video_long: 60 s clips, 320x240 to
480x270, a keyframe every 2 s; the same 8 frames at 112x112). For
spdl-go the table is followed by the share of the clips' frames its
decoder decoded (the decode_video op's counters: it skips non-reference
frames no sample shows and jumps over keyframes to the next frame a
sample needs), and each case prints its ratios against SPDL and the best
DataLoader.

A configuration whose library cannot be imported is skipped, with the
reason printed and recorded in the JSON. Each run happens in a fresh
subprocess (benchmarks/harness.py): clips/s, CPU-seconds per 1,000 clips,
peak RSS/PSS of the process tree, memory added by the loader, and time to
the first batch; median of --repeat runs, interleaved.

    python benchmarks/bench_video.py [--case short|long|both] [--clips 80]
        [--long-clips 40] [--repeat 3] [--json benchmarks/results/video.json]
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

from harness import (  # noqa: E402
    ItemsDataset,
    anchor_ratios,
    markdown_table,
    measure_batches,
    median_rows,
    print_anchor_ratios,
    run_all,
    same_batches,
    torch_dataloader,
    warm_page_cache,
)

CORES = os.cpu_count() or 1
BATCH = 4
FRAMES = 8
SIZE = 112
DL_WORKERS = (0, 2)
OURS = ("spdl-go", "spdl-go auto")
ANCHORS = {"SPDL 0.8": "SPDL", "DataLoader": "DataLoader"}  # group name -> row-name prefix


def frame_indices(n: int, k: int = FRAMES) -> list[int]:
    """k frames evenly spaced over n: round(i*(n-1)/(k-1)), halves up
    (the rule spdl-go's num_frames documents)."""
    if k == 1:
        return [0]
    return [(2 * i * (n - 1) + (k - 1)) // (2 * (k - 1)) for i in range(k)]


# --------------------------------------------------------------------------
# Loaders: each yields (clips, labels) torch tensors
# --------------------------------------------------------------------------


# The decode stage's counters from the last spdl-go run (for the share of
# frames decoded), set when the loader finishes.
LAST_OP_STATS: dict[str, int] = {}


def spdl_go_loader(items, concurrency):
    from torch import from_dlpack

    from spdl_go import PipelineBuilder, ops

    auto = concurrency == "auto"
    p = (
        PipelineBuilder()
        .add_source(items)
        .pipe(
            ops.decode_video(num_frames=FRAMES, size=(SIZE, SIZE)),
            concurrency="auto" if auto else int(concurrency),
            name="decode",
        )
        .aggregate(BATCH)
        .pipe(ops.collate(numbers="tensor"), name="collate")
        .add_sink(buffer_size=4)
        .build(num_threads=None if auto else int(concurrency) + 1)
    )
    try:
        for clips, labels in p:
            yield from_dlpack(clips), from_dlpack(labels)
        for st in p.stats().stages:
            if st.name == "decode":
                LAST_OP_STATS.update(st.op_stats)
    finally:
        p.close()


def spdl_loader(items, threads):
    import spdl.io
    import torch
    from spdl.pipeline import PipelineBuilder

    filter_desc = spdl.io.get_video_filter_desc(
        scale_width=SIZE, scale_height=SIZE, scale_algo="bilinear", scale_mode=None, pix_fmt="rgb24"
    )

    def decode(item):
        path, label = item
        packets = spdl.io.demux_video(path)
        frames = spdl.io.sample_decode_video(packets, frame_indices(len(packets)), filter_desc=filter_desc)
        return spdl.io.to_torch(spdl.io.convert_frames(frames)), label

    def collate(batch):
        return torch.stack([c for c, _ in batch]), torch.tensor([label for _, label in batch], dtype=torch.int64)

    p = (
        PipelineBuilder()
        .add_source(items)
        .pipe(decode, concurrency=int(threads), name="decode")
        .aggregate(BATCH)
        .pipe(collate, name="collate")
        .add_sink(buffer_size=4)
        .build(num_threads=int(threads))
    )
    with p.auto_stop():
        yield from p.get_iterator(timeout=300)


class PyAVDataset(ItemsDataset):
    """Map-style dataset: PyAV decodes forward, keeps 8 evenly spaced
    frames resized to 112x112 RGB; returns ((8, 112, 112, 3) uint8, label)."""

    def __getitem__(self, i):
        import av
        import numpy as np
        import torch

        path, label = self.items[i]
        out = np.empty((FRAMES, SIZE, SIZE, 3), np.uint8)
        with av.open(path) as c:
            s = c.streams.video[0]
            ks = frame_indices(s.frames)
            slots: dict[int, list[int]] = {}
            for slot, k in enumerate(ks):
                slots.setdefault(k, []).append(slot)
            filled, last = 0, ks[-1]
            for j, frame in enumerate(c.decode(s)):
                if j in slots:
                    a = frame.to_ndarray(width=SIZE, height=SIZE, format="rgb24", interpolation="BILINEAR")
                    for slot in slots[j]:
                        out[slot] = a
                        filled += 1
                if j >= last:
                    break
        if filled == 0:
            raise RuntimeError(f"{path}: no frames decoded")
        out[filled:] = out[filled - 1]  # a clip shorter than its count: repeat the last frame
        return torch.from_numpy(out), label


def dataloader_loader(items, workers):
    return torch_dataloader(PyAVDataset(items), BATCH, workers)


LOADERS = {"spdl-go": spdl_go_loader, "spdl": spdl_loader, "dataloader": dataloader_loader}


def import_error(kind: str) -> str | None:
    """Why a configuration's library cannot be imported, or None."""
    kind = kind.split(":")[0]
    mods = {
        "spdl-go": ("spdl_go",),
        "spdl": ("spdl", "spdl.io", "spdl.pipeline"),
        "dataloader": ("torch", "av"),
    }[kind]
    for m in mods:
        try:
            __import__(m)
        except Exception as e:  # noqa: BLE001
            return f"import {m} failed: {type(e).__name__}: {e}"
    return None


CASES = {"short": "video_like", "long": "video_long"}


def configs(threads: int, case: str = "short") -> list[tuple[str, str, str]]:
    """(name, kind, param); the kind carries the case ("spdl-go:long") to
    the worker process."""
    k = {"spdl-go": "spdl-go", "spdl": "spdl", "dataloader": "dataloader"}
    if case != "short":
        k = {n: f"{n}:{case}" for n in k}
    cs = [("spdl-go", k["spdl-go"], str(threads)), ("spdl-go auto", k["spdl-go"], "auto")]
    cs += [("SPDL 0.8", k["spdl"], str(threads))]
    cs += [(f"DataLoader+PyAV w={w}", k["dataloader"], str(w)) for w in DL_WORKERS]
    return cs


def dataset(case: str, n: int) -> list:
    import datasets

    return getattr(datasets, CASES[case])(n)


# --------------------------------------------------------------------------
# One measured run (executed in a fresh subprocess)
# --------------------------------------------------------------------------


def worker(kind: str, param: str, n_clips: int) -> dict:
    import torch

    kind, _, case = kind.partition(":")
    items = dataset(case or "short", n_clips)
    r = measure_batches(LOADERS[kind](items, param), torch.uint8, (FRAMES, SIZE, SIZE, 3), len(items))
    if LAST_OP_STATS:
        r["op_stats"] = dict(LAST_OP_STATS)
    return r


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


HEADERS = {
    "short": "H.264 clips (2-4 s, 320x240-640x360, GOP 30)",
    "long": "H.264 clips (60 s, 320x240-480x270, a keyframe every 2 s)",
}


def decoded_share(runs: list[dict]) -> str:
    """The share of the clips' frames spdl-go's decoder decoded, per run."""
    shares = []
    for r in runs:
        st = r.get("op_stats") or {}
        if st.get("video_frames"):
            shares.append(st["decoded_frames"] / st["video_frames"])
    if not shares:
        return "n/a"
    return f"{statistics.median(shares):.1%} (median of {len(shares)} runs)"


def run_case(case: str, n: int, args, script: str) -> dict:
    items = dataset(case, n)  # generate/cache before any timing
    warm_page_cache(p for p, *_ in items)
    skipped: dict[str, str] = {}
    cfgs = configs(args.threads, case)
    for name, kind, _ in cfgs:
        if err := import_error(kind):
            skipped[name] = err
            print(f"skipping {name}: {err}", file=sys.stderr)
    runs = run_all(script, cfgs, [str(n)], args.repeat, args.timeout, skipped)
    rows = median_rows(runs)
    cores = os.cpu_count() or 1
    print(
        f"\n## {case}: {n} {HEADERS[case]} -> {FRAMES} frames at {SIZE}x{SIZE} RGB; batch {BATCH}; "
        f"{args.threads} threads, {cores} cores; median of {args.repeat} run(s), configurations interleaved\n"
    )
    print(markdown_table(rows, "clips", skipped))
    print("\nclips/s: " + ", ".join(f"{name} {r['items_per_s']:.1f}" for name, r in rows.items()))
    shares = {name: decoded_share(runs[name]) for name in OURS if name in runs}
    for name, sh in shares.items():
        print(f"{name}: frames decoded / frames in the clips: {sh}")
    samples, same = same_batches(runs)
    rat = anchor_ratios(rows, OURS, ANCHORS)
    print_anchor_ratios(rat, "clip")
    return {
        "clips": n,
        "rows": rows,
        "runs": runs,
        "skipped": skipped,
        "ratios": rat,
        "decoded_share": shares,
        "same_batches": same,
        "batches": samples,
    }


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--_worker":
        print(json.dumps(worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
        return
    cores = os.cpu_count() or 1
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", choices=("short", "long", "both"), default="both")
    ap.add_argument("--clips", type=int, default=80, help="short clips")
    ap.add_argument("--long-clips", type=int, default=40, help="60 s clips")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=cores)
    ap.add_argument("--json", default=str(HERE / "results" / "video.json"))
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run")
    args = ap.parse_args()
    cases = ("short", "long") if args.case == "both" else (args.case,)
    out = {}
    for case in cases:
        out[case] = run_case(case, args.clips if case == "short" else args.long_clips, args, __file__)
    print("\n## ratios (throughput, median clips/s of interleaved runs)")
    for case, r in out.items():
        for k, v in r["ratios"].items():
            print(f"{case}: {k} (best: {v['best']}): x{v['throughput']:.2f}")
    meta = {"repeat": args.repeat, "threads": args.threads, "cores": cores, "batch": BATCH, "cases": out}
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta, indent=2))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
