"""spdl-go's image pipeline against PyTorch DataLoader, SPDL and DALI, in one run.

Same files (benchmarks/datasets.py imagenet_like), same transform: decode
JPEG -> resize short side 256 (bilinear) -> center crop 224 -> batches of 32
uint8 images (32, 224, 224, 3) plus int64 labels, as torch tensors.

Configurations:

* spdl-go: the pipeline of bench_image.py (decode_image fused resize+crop
  -> aggregate(32) -> collate -> torch.from_dlpack), with the decode stage
  hand-tuned at concurrency 1-4 ("spdl-go c=N"; c = cores is the default
  that the ratios quote) and with ``concurrency="auto"`` ("spdl-go auto",
  compared with the best hand-tuned one);
* torch DataLoader over a PIL map-style Dataset, num_workers 0, 1, 2, 4;
* the same PIL Dataset through spdl_go.DataLoader with 2 and 4 threads
  (Python's GIL is held only while Pillow is not decoding);
* SPDL 0.8 (``pip install spdl``): spdl.pipeline.PipelineBuilder with
  spdl.io.demux_image + decode_packets (FFmpeg filter scale+crop, rgb24),
  concurrency = cores -> aggregate(32) -> convert_frames -> spdl.io.to_torch;
  once as recommended and once with FFmpeg's decoder limited to one thread
  (its default starts several per image, which costs CPU on 2 cores).
  Skipped, with the reason printed, if spdl cannot be imported.
* NVIDIA DALI's CPU-only pipeline (``pip install nvidia-dali-cuda120``,
  runs without a GPU): ``@pipeline_def(device_id=None)``, fn.readers.file ->
  fn.decoders.image (cpu, RGB) -> fn.resize(resize_shorter=256, linear)
  -> fn.crop(224, centre), num_threads = cores, read into torch by DALI's
  own DALIGenericIterator (the last batch partial). Skipped, with the
  reason printed, if DALI cannot be imported.

Measurement (benchmarks/harness.py): each run in a fresh subprocess that
imports torch first (the same baseline for all); images/s, CPU-seconds per
1,000 images (self + reaped children), peak RSS and PSS summed over the
process tree, the same minus the figure after imports ("loader" memory),
and time to first batch. Median of --repeat runs, repeats interleaved.

    python benchmarks/bench_compare.py [--images 1000] [--repeat 3] [--only spdl-go,SPDL]
        [--json benchmarks/results/compare.json]
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
BATCH = 32
DL_WORKERS = (0, 1, 2, 4)


# --------------------------------------------------------------------------
# Loaders: each returns an iterator of (images, labels) torch tensors
# --------------------------------------------------------------------------


# The auto run's tuner decisions (spdl_go_loader fills it; the worker
# returns it with the run's figures).
TUNING: list[str] = []


def spdl_go_loader(items, concurrency):
    from bench_image import image_pipeline, to_array

    p = image_pipeline(items, CORES, batch=BATCH, concurrency=concurrency)
    try:
        for images, labels in p:
            yield to_array(images), to_array(labels)
        if concurrency == "auto":
            s = p.stats().stages[0]
            TUNING.extend(t.format() for t in s.tuning_log)
            TUNING.append(f"ended at concurrency {s.concurrency}: {s.tuning}")
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
            im = im.convert("RGB")
            w, h = im.size
            s = 256 / min(w, h)
            nw, nh = max(256, round(w * s)), max(256, round(h * s))
            im = im.resize((nw, nh), Image.BILINEAR)
            left, top = (nw - 224) // 2, (nh - 224) // 2
            im = im.crop((left, top, left + 224, top + 224))
            return torch.from_numpy(np.asarray(im).copy()), label


def dataloader_loader(items, workers):
    return harness.torch_dataloader(PILDataset(items), BATCH, workers)


def spdl_go_dataloader_loader(items, threads: int):
    """The same PIL dataset through spdl_go.DataLoader: threads, not processes."""
    import spdl_go

    with spdl_go.DataLoader(PILDataset(items), batch_size=BATCH, num_threads=threads, output="torch") as dl:
        yield from dl


def spdl_loader(items, threads: int, decoder_threads: int | None = None):
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

    cfg = None
    if decoder_threads is not None:
        cfg = spdl.io.decode_config(decoder_options={"threads": str(decoder_threads)})

    def decode(item):
        path, label = item
        packets = spdl.io.demux_image(path)
        return spdl.io.decode_packets(packets, filter_desc=filter_desc, decode_config=cfg), label

    def collate(batch):
        frames = [f for f, _ in batch]
        buffer = spdl.io.convert_frames(frames)
        labels = torch.tensor([label for _, label in batch], dtype=torch.int64)
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


def dali_loader(items, threads: int):
    return harness.dali_resize_crop(items, BATCH, threads, antialias=False)


def import_error(*modules: str) -> str | None:
    """Why an anchor cannot run here (its import fails), or None."""
    import importlib

    try:
        for m in modules:
            importlib.import_module(m)
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


# The optional anchors: loader kinds, the modules they need, their label.
OPTIONAL = (
    (("spdl", "spdl1"), ("spdl", "spdl.io", "spdl.pipeline"), "SPDL 0.8"),
    (("dali",), ("nvidia.dali", "nvidia.dali.plugin.pytorch"), "DALI"),
)


SPDL_GO_HAND = (1, 2, 3, 4)  # decode concurrency of the hand-tuned configurations


def configs() -> list[tuple[str, str, str]]:
    """(name, loader kind, parameter) of every configuration."""
    cs = [("spdl-go auto", "spdl-go", "auto")]
    cs += [(f"spdl-go c={c}", "spdl-go", str(c)) for c in SPDL_GO_HAND]
    cs += [(f"DataLoader+PIL w={w}", "dataloader", str(w)) for w in DL_WORKERS]
    cs += [(f"spdl_go.DataLoader+PIL t={t}", "spdl-go-dl", str(t)) for t in (2, 4)]
    cs += [(f"SPDL 0.8 t={CORES}", "spdl", str(CORES)), (f"SPDL 0.8 t={CORES}, 1 decoder thread", "spdl1", str(CORES))]
    cs += [(f"DALI CPU t={CORES}", "dali", str(CORES))]
    return cs


def loader(kind: str, param: str, items):
    if kind == "spdl-go":
        return spdl_go_loader(items, param if param == "auto" else int(param))
    if kind == "dataloader":
        return dataloader_loader(items, int(param))
    if kind == "spdl-go-dl":
        return spdl_go_dataloader_loader(items, int(param))
    if kind == "spdl":
        return spdl_loader(items, int(param))
    if kind == "spdl1":
        return spdl_loader(items, int(param), decoder_threads=1)
    if kind == "dali":
        return dali_loader(items, int(param))
    raise ValueError(f"unknown loader kind {kind!r}")


def worker(kind: str, param: str, n_images: int) -> dict:
    import torch  # imported for every kind: the same baseline
    from datasets import imagenet_like

    items = imagenet_like(n_images)

    def count(batch) -> int:
        images, labels = batch
        shp = tuple(images.shape)
        assert images.dtype == torch.uint8 and shp[1:] in ((224, 224, 3), (3, 224, 224)), shp
        assert shp[0] == labels.shape[0]
        return shp[0]

    r = harness.measure(loader(kind, param, items), count, len(items))
    if TUNING:
        r["tuning"] = TUNING
    return r


def best(rows: dict, prefix: str) -> str | None:
    names = [n for n in rows if n.startswith(prefix)]
    return max(names, key=lambda n: rows[n]["items_per_s"]) if names else None


def ratios(rows: dict, runs: dict | None = None) -> dict:
    """spdl-go's default configuration (one decode thread per core) and its
    auto configuration against the best configuration of each anchor; with
    ``runs``, also auto against the best hand-tuned configuration round by
    round (the two ran a few seconds apart, so a change in the machine's
    load between rounds cancels out), the median of those ratios."""
    out: dict = {}
    ours = f"spdl-go c={CORES}"
    go = rows.get(ours)
    if not go:
        return out
    out["spdl_go"] = ours
    for key, prefix in (("dataloader", "DataLoader"), ("spdl", "SPDL"), ("dali", "DALI")):
        b = best(rows, prefix)
        if not b:
            continue
        r = rows[b]
        out[f"{key}_best"] = b
        out[f"throughput_vs_{key}_best"] = go["items_per_s"] / r["items_per_s"]
        out[f"peak_rss_vs_{key}_best"] = go["peak_rss_mib"] / r["peak_rss_mib"]
        out[f"peak_pss_vs_{key}_best"] = go["peak_pss_mib"] / r["peak_pss_mib"]
        out[f"loader_rss_vs_{key}_best"] = go["loader_rss_mib"] / max(r["loader_rss_mib"], 1e-9)
        out[f"cpu_vs_{key}_best"] = go["cpu_s_per_1000"] / r["cpu_s_per_1000"]
    hand = best(rows, "spdl-go c=")
    if hand and "spdl-go auto" in rows:
        out["spdl_go_best_hand_tuned"] = hand
        out["auto_vs_best_hand_tuned"] = rows["spdl-go auto"]["items_per_s"] / rows[hand]["items_per_s"]
        if runs and len(runs.get("spdl-go auto", [])) == len(runs.get(hand, [])):
            per = [a["items_per_s"] / h["items_per_s"] for a, h in zip(runs["spdl-go auto"], runs[hand], strict=True)]
            out["auto_vs_best_hand_tuned_per_round"] = per
            out["auto_vs_best_hand_tuned_paired"] = statistics.median(per)
    return out


def print_ratios(r: dict) -> None:
    if not r:
        return
    print()
    for key, label, target in (
        ("dataloader", "DataLoader", 2.5),
        ("spdl", "SPDL 0.8", 1.5),
        ("dali", "DALI CPU", None),
    ):
        if f"{key}_best" not in r:
            continue
        goal = f" (target >= {target})" if target else ""
        print(
            f"{r['spdl_go']} vs best {label} ({r[key + '_best']}): throughput x{r['throughput_vs_' + key + '_best']:.2f}"
            f"{goal}, CPU per image x{r['cpu_vs_' + key + '_best']:.2f}, "
            f"peak RSS x{r['peak_rss_vs_' + key + '_best']:.2f}, peak PSS x{r['peak_pss_vs_' + key + '_best']:.2f}, "
            f"loader RSS (peak minus after-import) x{r['loader_rss_vs_' + key + '_best']:.2f}"
        )
    if "auto_vs_best_hand_tuned" in r:
        print(
            f"spdl-go auto vs best hand-tuned ({r['spdl_go_best_hand_tuned']}): "
            f"x{r['auto_vs_best_hand_tuned']:.2f} (target >= 0.95)"
        )
    if "auto_vs_best_hand_tuned_paired" in r:
        per = ", ".join(f"{x:.2f}" for x in r["auto_vs_best_hand_tuned_per_round"])
        print(f"  round by round: {per}; median x{r['auto_vs_best_hand_tuned_paired']:.2f}")


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--_worker":
        print(json.dumps(worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
        return

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated name prefixes of the configurations to run")
    ap.add_argument("--json", default=str(HERE / "results" / "compare.json"))
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run")
    args = ap.parse_args()

    from datasets import imagenet_like

    items = imagenet_like(args.images)  # generate/cache before any timing
    harness.warm_page_cache(p for p, _ in items)

    skipped: dict[str, str] = {}
    cfgs = configs()
    if args.only:
        prefixes = [s.strip() for s in args.only.split(",") if s.strip()]
        cfgs = [c for c in cfgs if any(c[0].startswith(p) for p in prefixes)]
    for kinds, modules, label in OPTIONAL:
        if not any(c[1] in kinds for c in cfgs):
            continue
        err = import_error(*modules)
        if err:
            for c in cfgs:
                if c[1] in kinds:
                    skipped[c[0]] = f"import failed: {err}"
            print(f"skipping {label}: import failed: {err}", file=sys.stderr)
    cfgs = [c for c in cfgs if c[0] not in skipped]

    runs = harness.run_all(__file__, cfgs, [str(args.images)], args.repeat, args.timeout, skipped)
    rows = harness.median_rows(runs)
    print(
        f"\n{args.images} ImageNet-like JPEGs, decode + resize 256 + center crop 224, batch {BATCH}, "
        f"{CORES} cores, median of {args.repeat} run(s)\n"
    )
    print(harness.markdown_table(rows, "img", skipped))
    r = ratios(rows, runs)
    print_ratios(r)
    for i, run in enumerate(runs.get("spdl-go auto", [])):
        print(f"\nspdl-go auto, run {i + 1}: the tuner's decisions (stats().stages[0].tuning_log)")
        for line in run.get("tuning", []):
            print(f"  {line}")

    meta = {
        "benchmark": "image",
        "images": args.images,
        "repeat": args.repeat,
        "cores": CORES,
        "batch": BATCH,
        "ratios": r,
    }
    harness.write_results(
        args.json, meta, rows, runs, skipped, "decode + resize 256 + center crop 224 + batch 32", "images"
    )


if __name__ == "__main__":
    main()
