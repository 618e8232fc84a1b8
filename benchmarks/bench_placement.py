"""Where the loader runs: in the training process, or in a worker process.

The noisy-neighbour case (SPDL's "parallelism" study) on standard CPython:
a training loop whose step is a fixed amount of CPU-bound Python work
(--step-ms of it when the process is alone, calibrated first), fed by a
pipeline with a Python decode/augment stage (Pillow decode, resize to
224x224, random flip, numpy) at concurrency 4, batches of 32. Loader
threads running Python compete with the loop for the GIL; a worker process
does not.

Configurations (each a fresh process, median of --repeat):

* spdl-go threads: the pipeline in the training process (decode stage in
  Python, aggregate, native collate);
* spdl-go subprocess: the same pipeline through
  spdl_go.pipeline.run_pipeline_in_subprocess (batches through shared
  memory);
* spdl-go process region: decode, batching and collate between
  .to(ProcessPoolExecutorConfig(max_workers=2)) and .to(MAIN_PROCESS)
  (each worker decodes at concurrency 2; each batch crosses once, through
  shared memory);
* SPDL subprocess: SPDL 0.8's run_pipeline_in_subprocess with the same
  stages (np.stack to collate), batches pickled through its queue
  (skipped, with the reason, when spdl cannot be imported);
* DataLoader w=4: torch DataLoader, 4 worker processes, the same decode.

Rows: training steps/s (the target: spdl-go subprocess gives the most),
and the loader alone (no training step) for scale.

Then the handoff: what one (32, 224, 224, 3) uint8 batch costs to reach
the loop, in µs, from a pipeline that only passes one ready batch on
(--handoff-batches times, SPDL's rows a fiftieth of that; its source
makes the batch with the engine and yields it again and again): the
pipeline built in-process (the anchor);
the same pipeline through run_pipeline_in_subprocess (shared memory,
served from Go in the worker; the target is at most the anchor + 10 µs);
the source alone through iterate_in_subprocess (a Python iterable: the
worker's Python sends each batch); SPDL's iterate_in_subprocess over one
numpy batch (pickled through its queue), and with its
SharedMemorySegmentPool arena.

    python benchmarks/bench_placement.py [--images 2560] [--step-ms 25] [--repeat 5]
        [--handoff-batches 20000] [--json benchmarks/results/placement.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402

BATCH = 32
SIZE = 224
CONCURRENCY = 4
SHAPE = (BATCH, SIZE, SIZE, 3)


# ---- what runs in the loader (importable: worker processes unpickle it) ----


def decode(path: str) -> Any:
    import numpy as np
    from PIL import Image

    with Image.open(path) as im:
        im = im.convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
    a = np.asarray(im)
    if random.random() < 0.5:
        a = a[:, ::-1]
    return np.ascontiguousarray(a)


def stack(xs: list) -> Any:
    import numpy as np

    return np.stack(xs)


class DecodeDataset:
    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> Any:
        return decode(self.paths[i])


def zeros(_: int) -> Any:
    import numpy as np

    return np.zeros((SIZE, SIZE, 3), dtype=np.uint8)


class OneBatchRepeated:
    """A source that makes one (32, 224, 224, 3) uint8 batch with the
    engine (a collate, in the process it runs in) and passes it on n
    times: what it costs to hand a batch over."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        import spdl_go
        from spdl_go import ops

        make = spdl_go.PipelineBuilder().add_source(range(BATCH)).pipe(zeros).aggregate(BATCH).pipe(ops.collate())
        p = make.add_sink(1).build(num_threads=1)
        with p.auto_stop():
            (batch,) = list(p)
        for _ in range(self.n):
            yield batch


def _handoff_config(n: int) -> Any:
    import spdl_go

    return spdl_go.PipelineBuilder().add_source(OneBatchRepeated(n)).add_sink(3).get_config()


class OneArrayRepeated:
    """SPDL's side of the handoff: one numpy batch, n times."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        import numpy as np

        a = np.zeros(SHAPE, dtype=np.uint8)
        for _ in range(self.n):
            yield a


# ---- the training side -----------------------------------------------------


def python_work(units: int) -> int:
    s = 0
    for i in range(units):
        s += i * i
    return s


def calibrate(ms: float) -> int:
    """Units of python_work that take ms milliseconds here, alone."""
    units = 10_000
    while True:
        t = time.perf_counter()
        python_work(units)
        dt = time.perf_counter() - t
        if dt > 0.05:
            return max(1, int(units * ms / 1000 / dt))
        units *= 2


def _numpy(batch: Any) -> Any:
    import numpy as np

    if isinstance(batch, np.ndarray):
        return batch
    if hasattr(batch, "numpy") and not hasattr(batch, "__dlpack_device__"):
        return batch.numpy()
    return np.from_dlpack(batch)


def _spdl_go_config(paths: list[str]) -> Any:
    import spdl_go
    from spdl_go import ops

    b = spdl_go.PipelineBuilder().add_source(paths).pipe(decode, concurrency=CONCURRENCY).aggregate(BATCH)
    return b.pipe(ops.collate()).add_sink(4).get_config()


def _spdl_go_region_config(paths: list[str]) -> Any:
    """The Python decode, batching and collate in a pool of worker
    processes (an execution region); each batch crosses once."""
    import spdl_go
    from spdl_go import ops
    from spdl_go.pipeline.defs import MAIN_PROCESS, ProcessPoolExecutorConfig

    workers = 2
    b = spdl_go.PipelineBuilder().add_source(paths).to(ProcessPoolExecutorConfig(max_workers=workers), buffer_size=8)
    b = b.pipe(decode, concurrency=CONCURRENCY // workers).aggregate(BATCH, drop_last=True).pipe(ops.collate())
    return b.to(MAIN_PROCESS).add_sink(4).get_config()


def _spdl_config(paths: list[str]) -> Any:
    from spdl.pipeline import PipelineBuilder

    b = PipelineBuilder().add_source(paths).pipe(decode, concurrency=CONCURRENCY).aggregate(BATCH, drop_last=True)
    return b.pipe(stack).add_sink(4).get_config()


def loader(kind: str, paths: list[str]) -> Any:
    if kind == "spdl-go-threads":
        from spdl_go.pipeline import build_pipeline

        p = build_pipeline(_spdl_go_config(paths), num_threads=CONCURRENCY + 1)
        with p.auto_stop():
            yield from p
    elif kind == "spdl-go-subprocess":
        from spdl_go.pipeline import run_pipeline_in_subprocess

        with run_pipeline_in_subprocess(_spdl_go_config(paths), num_threads=CONCURRENCY + 1) as it:
            yield from it
    elif kind == "spdl-go-region":
        from spdl_go.pipeline import build_pipeline

        p = build_pipeline(_spdl_go_region_config(paths), num_threads=2)
        with p.auto_stop():
            yield from p
    elif kind == "spdl-subprocess":
        from spdl.pipeline import run_pipeline_in_subprocess as spdl_run

        yield from spdl_run(_spdl_config(paths), num_threads=CONCURRENCY + 1)  # its default start method
    elif kind == "dataloader":
        import torch.utils.data

        yield from torch.utils.data.DataLoader(
            DecodeDataset(paths), batch_size=BATCH, num_workers=CONCURRENCY, drop_last=True, prefetch_factor=2
        )
    else:
        raise ValueError(kind)


def worker(kind: str, mode: str, root: str, n: str, units: str) -> None:
    if kind.startswith("handoff-"):
        handoff(kind, int(n))
        return
    import torch  # noqa: F401  (the same baseline for every loader)

    paths = sorted(str(p) for p in Path(root).rglob("*.jpg"))[: int(n)]
    work = int(units) if mode == "train" else 0
    batches = 0
    it = iter(loader(kind, paths))
    first = next(it)
    t = time.perf_counter()  # from the first batch: start-up is not the question here
    for b in it:
        x = _numpy(b)
        if x.shape != SHAPE:
            raise AssertionError(f"batch shape {x.shape}")
        if work:
            python_work(work)
        batches += 1
        del b, x
    dt = time.perf_counter() - t
    del first
    print(json.dumps({"steps_per_s": batches / dt, "images_per_s": batches * BATCH / dt, "batches": batches}))


def handoff(kind: str, n: int) -> None:
    import functools

    if kind == "handoff-spdl-go-inprocess":
        from spdl_go.pipeline import build_pipeline

        p = build_pipeline(_handoff_config(n), num_threads=1)
        p.start()
        it: Any = p
    elif kind == "handoff-spdl-go-subprocess":
        from spdl_go.pipeline import run_pipeline_in_subprocess

        it = run_pipeline_in_subprocess(_handoff_config(n), num_threads=1)
    elif kind == "handoff-spdl-go-iterate":
        from spdl_go.pipeline import iterate_in_subprocess

        it = iterate_in_subprocess(functools.partial(OneBatchRepeated, n))
    elif kind in ("handoff-spdl-subprocess", "handoff-spdl-arena"):
        from spdl.pipeline import iterate_in_subprocess as spdl_iterate

        kw: dict[str, Any] = {}
        if kind == "handoff-spdl-arena":
            from spdl.pipeline import SharedMemorySegmentPool

            kw["arena"] = SharedMemorySegmentPool(BATCH * SIZE * SIZE * 3 + (1 << 16), 8)
        it = spdl_iterate(functools.partial(OneArrayRepeated, n), **kw)
    else:
        raise ValueError(kind)
    got = 0
    t = 0.0
    for i, b in enumerate(it):
        if i == 10:  # after the start and a warm-up
            t = time.perf_counter()
        got += 1
        del b
    dt = time.perf_counter() - t
    if got != n:
        raise AssertionError(f"{got} of {n} batches")
    print(json.dumps({"us_per_batch": dt / (n - 10) * 1e6}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=2560)
    ap.add_argument("--step-ms", type=float, default=25)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--handoff-batches", type=int, default=20000)
    ap.add_argument("--json", default="")
    ap.add_argument("--_worker", nargs=5)
    args = ap.parse_args()
    if args._worker:
        worker(*args._worker)
        return
    import datasets

    items = datasets.imagenet_like(args.images)
    root = str(Path(items[0][0]).parents[1])
    units = calibrate(args.step_ms)
    skipped: dict[str, str] = {}
    try:
        import spdl.pipeline  # noqa: F401

        have_spdl = True
    except Exception as e:  # noqa: BLE001
        have_spdl = False
        skipped["SPDL"] = f"spdl cannot be imported: {e}"
    loaders = [
        ("spdl-go threads", "spdl-go-threads"),
        ("spdl-go subprocess", "spdl-go-subprocess"),
        ("spdl-go process region", "spdl-go-region"),
    ]
    if have_spdl:
        loaders.append(("SPDL subprocess", "spdl-subprocess"))
    loaders.append(("DataLoader w=4", "dataloader"))
    cfgs = [(f"{name}, training", kind, "train") for name, kind in loaders]
    cfgs += [(f"{name}, loader alone", kind, "alone") for name, kind in loaders]
    runs = harness.run_all(__file__, cfgs, [root, str(args.images), str(units)], args.repeat, 900, skipped)
    hcfgs = [
        ("in-process spdl-go", "handoff-spdl-go-inprocess"),
        ("spdl-go subprocess (shared memory)", "handoff-spdl-go-subprocess"),
        ("spdl-go iterate_in_subprocess, a Python iterable (shared memory)", "handoff-spdl-go-iterate"),
    ]
    if have_spdl:
        hcfgs += [
            ("SPDL subprocess (pickled)", "handoff-spdl-subprocess"),
            ("SPDL subprocess (arena)", "handoff-spdl-arena"),
        ]
    # spdl-go's rows pass --handoff-batches batches; SPDL's, which cost a
    # thousand times more each, a fiftieth of them (at least 200).
    hruns = harness.run_all(
        __file__,
        [(n, k, "-") for n, k in hcfgs if "spdl-go" in n],
        ["-", str(args.handoff_batches), "0"],
        args.repeat,
        900,
        skipped,
    )
    hruns |= harness.run_all(
        __file__,
        [(n, k, "-") for n, k in hcfgs if "spdl-go" not in n],
        ["-", str(max(200, args.handoff_batches // 50)), "0"],
        args.repeat,
        900,
        skipped,
    )

    med = {n: {k: sorted(r[k] for r in rs)[len(rs) // 2] for k in rs[0]} for n, rs in runs.items()}
    hmed = {n: sorted(r["us_per_batch"] for r in rs)[len(rs) // 2] for n, rs in hruns.items()}
    print(f"\n{args.images} images, batches of {BATCH}, a training step of {args.step_ms:g} ms of Python work alone")
    print(f"({units} units), {os.cpu_count()} cores; median of {args.repeat}\n")
    print("| loader | training steps/s | loader alone, batches/s |\n|---|---:|---:|")
    for name, _ in loaders:
        tr, al = med.get(f"{name}, training"), med.get(f"{name}, loader alone")
        print(f"| {name} | {tr['steps_per_s']:.2f} | {al['steps_per_s']:.2f} |" if tr and al else f"| {name} | - | - |")
    print(f"\nA step alone: {1000 / args.step_ms:.1f} steps/s.")
    best = max(((r["steps_per_s"], n) for n, r in med.items() if n.endswith("training")), default=None)
    if best:
        print(f"Most training steps/s: {best[1]} ({best[0]:.2f})")
    print("\n| handoff of one (32, 224, 224, 3) uint8 batch | µs |\n|---|---:|")
    for name, _ in hcfgs:
        if name in hmed:
            print(f"| {name} | {hmed[name]:.1f} |")
    if "in-process spdl-go" in hmed and "spdl-go subprocess (shared memory)" in hmed:
        d = hmed["spdl-go subprocess (shared memory)"] - hmed["in-process spdl-go"]
        print(f"\nspdl-go subprocess - in-process: {d:+.1f} µs per batch (target: at most +10)")
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"meta": vars(args) | {"units": units}, "runs": runs, "handoff": hruns, "skipped": skipped}, indent=1
            )
        )


if __name__ == "__main__":
    main()
