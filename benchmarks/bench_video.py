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
  forward, converting only the kept frames with libswscale straight into
  the output), concurrency = cores -> aggregate(4) -> ops.collate ->
  torch.from_dlpack; "spdl-go auto" is the same with concurrency="auto";
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

A configuration whose library cannot be imported is skipped, with the
reason printed and recorded in the JSON. Each run happens in a fresh
subprocess (benchmarks/harness.py): clips/s, CPU-seconds per 1,000 clips,
peak RSS/PSS of the process tree, memory added by the loader, and time to
the first batch; median of --repeat runs, interleaved.

    python benchmarks/bench_video.py [--clips 80] [--repeat 3]
        [--json benchmarks/results/video.json]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import ItemsDataset, clips_main, measure_batches  # noqa: E402

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
    import torch

    dl = torch.utils.data.DataLoader(
        PyAVDataset(items), batch_size=BATCH, num_workers=int(workers), persistent_workers=False
    )
    it = iter(dl)
    try:
        yield from it
    finally:
        del it  # shuts down (and reaps) the workers


LOADERS = {"spdl-go": spdl_go_loader, "spdl": spdl_loader, "dataloader": dataloader_loader}


def import_error(kind: str) -> str | None:
    """Why a configuration's library cannot be imported, or None."""
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


def configs(threads: int) -> list[tuple[str, str, str]]:
    cs = [("spdl-go", "spdl-go", str(threads)), ("spdl-go auto", "spdl-go", "auto")]
    cs += [("SPDL 0.8", "spdl", str(threads))]
    cs += [(f"DataLoader+PyAV w={w}", "dataloader", str(w)) for w in DL_WORKERS]
    return cs


# --------------------------------------------------------------------------
# One measured run (executed in a fresh subprocess)
# --------------------------------------------------------------------------


def worker(kind: str, param: str, n_clips: int) -> dict:
    import torch
    from datasets import video_like

    items = video_like(n_clips)
    return measure_batches(LOADERS[kind](items, param), torch.uint8, (FRAMES, SIZE, SIZE, 3), len(items))


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


def header(args) -> str:
    return f"{args.clips} H.264 clips (2-4 s, 320x240-640x360) -> {FRAMES} frames at {SIZE}x{SIZE} RGB; batch {BATCH}"


def main() -> None:
    from datasets import video_like

    clips_main(
        __file__,
        doc=__doc__,
        default_clips=80,
        json_default=HERE / "results" / "video.json",
        dataset=video_like,
        configs=configs,
        import_error=import_error,
        worker=worker,
        header=header,
        title=f"video: {FRAMES} frames evenly spaced, {SIZE}x{SIZE} RGB, batch {BATCH}",
        batch=BATCH,
        ours=OURS,
        anchors=ANCHORS,
    )


if __name__ == "__main__":
    main()
