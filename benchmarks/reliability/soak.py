"""soak: an image pipeline for many epochs, watching for slow leaks.

JPEG and PNG files (made with numpy and pillow) are read, decoded, resized
and collated, epoch after epoch, by three pipelines: a native one
(``sources.files`` -> ``read_file`` -> ``decode_image`` -> ``resize`` ->
``collate``, with a Python stage), one with a Python source and a Python
loading stage, and ``DataLoader``. After each epoch the worker samples
RSS, OS threads, open fds and the engine's live memory
(``memory_stats()``, ``arrow_allocated_bytes()``). Each pipeline runs up
to its number of epochs, or for max_s seconds (15 short, 100 full) but
never fewer than MIN_EPOCHS (40), so a slow machine stays in time.

Bounds, after the first half of the epochs (warm-up: pools, Go threads and
allocator arenas reach their working size):

* RSS: the least-squares slope over the second half at most 1 MiB/epoch
  (RSS_SLOPE_MAX). An epoch decodes 96 images of 120x160 (57 KiB each,
  5.4 MiB an epoch): keeping one decoded image in 6 already exceeds the
  bound, while allocator noise over a half of 20+ epochs stays far below
  (measured: -10 to +12 KiB/epoch on CPython and 3.13t).
* Python threads and fds: no growth, the second half's maximum at most
  the first half's. OS threads: at most THREAD_SLACK (2) over the first
  half's maximum: Go starts an OS thread when more goroutines than ever
  before are blocked in cgo or a syscall at once and keeps it, so a rare
  new peak adds one for good (seen once in 1,343 epochs on 3.13t), while a
  leak adds threads with the epochs and passes the slack within hundreds.
* engine memory: what is live at the end of each epoch does not grow (the
  second half's maximum at most the first half's), and all of it is
  released after ``close()`` (0 tensors, 0 Arrow bytes).
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import corpus

RSS_SLOPE_MAX = 1 << 20  # bytes per epoch
MIN_EPOCHS = 40  # at least, whatever the time bound
THREAD_SLACK = 2
N_IMAGES = 96


def _build(kind: str, root: str) -> Any:
    from spdl_go import DataLoader, PipelineBuilder, ops, sources

    if kind == "native":
        return (
            PipelineBuilder()
            .add_source(sources.files(root, shuffle=True, seed=1), continuous=True)
            .pipe(ops.read_file(), concurrency=4)
            .pipe(ops.decode_image(), concurrency=2)
            .pipe(ops.resize(size=(64, 64)), concurrency=2)
            .pipe(lambda x: (x, 1))  # a Python stage among the native ones
            .aggregate(16)
            .pipe(ops.collate(numbers="tensor"))
            .add_sink(3)
            .build(num_threads=4)
        )
    paths = sorted(str(p) for p in Path(root).iterdir())
    if kind == "python":

        def load(p: str) -> bytes:
            with open(p, "rb") as f:
                return f.read()

        return (
            PipelineBuilder()
            .add_source(paths, continuous=True)
            .pipe(load, concurrency=2)
            .pipe(ops.decode_image(size=(64, 64)), concurrency=2)
            .aggregate(16)
            .pipe(ops.collate())
            .add_sink(3)
            .build(num_threads=4)
        )
    if kind == "dataloader":
        import numpy as np
        from PIL import Image

        class Images:
            def __len__(self) -> int:
                return len(paths)

            def __getitem__(self, i: int) -> Any:
                with Image.open(paths[i]) as im:
                    return np.asarray(im.convert("RGB").resize((64, 64))), i

        return DataLoader(Images(), batch_size=16, shuffle=True, num_threads=2, output="numpy")
    raise ValueError(kind)


def w_soak(case: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    p = _build(case["pipeline"], case["root"])
    keys = ("rss", "threads", "py_threads", "fds", "live_bytes", "arrow_bytes")
    series: dict[str, list[int]] = {k: [] for k in keys}
    batches = 0
    t0 = time.monotonic()
    for epoch in range(case["epochs"]):
        if epoch >= MIN_EPOCHS and time.monotonic() - t0 > case["max_s"]:
            break  # bounded in time: a slow machine runs fewer epochs
        for batch in p:
            images = batch[0] if isinstance(batch, (tuple, list)) else batch
            if case["pipeline"] != "dataloader":
                images = np.from_dlpack(images)
            assert images.shape[1:] == (64, 64, 3), images.shape
            batches += 1
        del batch, images
        gc.collect()
        s, m = common.proc_status(), common.engine_memory()
        for k in ("rss", "threads", "fds"):
            series[k].append(s[k])
        series["py_threads"].append(threading.active_count())
        series["live_bytes"].append(m["live_bytes"])
        series["arrow_bytes"].append(m["arrow_bytes"])
    seconds = time.monotonic() - t0
    epochs_done = len(series["rss"])
    p.close()
    clear = common.settle(lambda: (m := common.engine_memory())["live_tensors"] == 0 and m["arrow_bytes"] == 0)
    return {"series": series, "batches": batches, "seconds": seconds, "epochs": epochs_done, "clear_after_close": clear,
            "after_close": common.engine_memory()}  # fmt: skip


def run(short: bool, seed: int, tmp: Path) -> common.Tally:
    import numpy as np

    t = common.Tally("soak", seed)
    rng = np.random.default_rng(seed)
    root = tmp / "images"
    root.mkdir()
    for i in range(N_IMAGES):
        fmt = "jpeg" if i % 2 else "png"
        corpus.write_image(root / f"{i:04d}{corpus.IMAGE_EXT[fmt]}", fmt, rng, h=120, w=160)
    epochs = (
        {"native": 300, "python": 200, "dataloader": 100}
        if short
        else {"native": 2000, "python": 1000, "dataloader": 400}
    )
    max_s = 15 if short else 100  # per pipeline
    cases = [{"kind": "soak", "pipeline": k, "root": str(root), "epochs": n, "max_s": max_s} for k, n in epochs.items()]
    outcomes = common.run_cases(__file__, cases, lambda c: 60 + 2 * c["max_s"])
    for case, o in zip(cases, outcomes, strict=True):
        name = case["pipeline"]
        t.tried += 1
        if o.status != "ok":
            t.bad("crashes" if o.status == "crash" else "hangs", f"{name}: {o.detail}")
            continue
        if "exception" in o.result:
            t.bad("failed_checks", f"{name}: {o.result['exception']}")
            continue
        r, s = o.result, o.result["series"]
        half = len(s["rss"]) // 2
        rss_slope = common.slope([float(x) for x in s["rss"][half:]])
        t.figures[f"{name}_epochs"] = r["epochs"]
        t.figures[f"{name}_batches"] = r["batches"]
        t.figures[f"{name}_epochs_per_s"] = round(r["epochs"] / r["seconds"], 2)
        t.figures[f"{name}_rss_mb_first_last"] = f"{s['rss'][0] / 2**20:.1f} -> {s['rss'][-1] / 2**20:.1f}"
        t.figures[f"{name}_rss_slope_kb_per_epoch"] = round(rss_slope / 1024, 1)
        t.figures[f"{name}_threads_first_last"] = f"{s['threads'][0]} -> {s['threads'][-1]}"
        t.figures[f"{name}_fds_first_last"] = f"{s['fds'][0]} -> {s['fds'][-1]}"
        t.figures[f"{name}_engine_live_bytes_last"] = s["live_bytes"][-1]
        if rss_slope > RSS_SLOPE_MAX:
            t.bad("leaks", f"{name}: RSS grows {rss_slope / 1024:.0f} KiB/epoch after warm-up (bound 1024)")
        for k in ("threads", "py_threads", "fds", "live_bytes", "arrow_bytes"):
            if max(s[k][half:]) > max(s[k][:half]) + (THREAD_SLACK if k == "threads" else 0):
                t.bad("leaks", f"{name}: {k} grew after warm-up: {max(s[k][:half])} -> {max(s[k][half:])}")
        if not r["clear_after_close"]:
            t.bad("leaks", f"{name}: engine memory live after close(): {r['after_close']}")
    return t


if __name__ == "__main__":
    common.worker_main({"soak": w_soak})
