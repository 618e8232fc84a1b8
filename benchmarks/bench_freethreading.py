"""Python stages on Go threads, with and without the GIL.

Runs on the interpreter that starts it; `make bench-ft` runs it on the
standard CPython and on each free-threaded CPython it builds (GIL off)
and prints each. Two measurements:

* scaling: generated JPEGs -> native decode_image (DCT-scaled to short
  side 32, center crop 32; concurrency = cores) -> a CPU-bound pure-Python
  stage (about 8 ms of bytecode per item that never releases the GIL) at
  concurrency 1, 2 and 4 -> items/s, and the ratio to concurrency 1. With
  the GIL the Python stage cannot use more than one core; without it, it
  should scale with cores (target on 2 cores: >= 1.8x from 1 to 2 threads
  on a free-threaded build). The decode is kept cheap (a few % of the CPU)
  because on 2 cores every cycle it takes is one the Python stage cannot
  have.
* overhead: a no-op Python stage between a native source and the sink,
  minus the same pipeline without it, in microseconds per item
  (concurrency 1 and 2).

    python benchmarks/bench_freethreading.py [--items 2000] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spdl_go import PipelineBuilder, ops, sources  # noqa: E402

CORES = os.cpu_count() or 1
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
GIL = "on" if (not FREE_THREADED or sys._is_gil_enabled()) else "off"


def spin(x):
    s = 0
    for i in range(80_000):
        s += i * i
    return x


def noop(x):
    return x


def scaling_run(paths: list[str], concurrency: int) -> float:
    p = (
        PipelineBuilder()
        .add_source(paths)
        .pipe(ops.decode_image(short_side=32, crop="center", crop_size=(32, 32)), concurrency=CORES, name="decode")
        .pipe(spin, concurrency=concurrency, name="python")
        .add_sink(8)
        .build()
    )
    t0 = time.perf_counter()
    n = sum(1 for _ in p)
    dt = time.perf_counter() - t0
    p.close()
    assert n == len(paths), f"{n} of {len(paths)}"
    return n / dt


def overhead_run(n: int, concurrency: int | None) -> float:
    b = PipelineBuilder().add_source(sources.arange(n))
    if concurrency:
        b = b.pipe(noop, concurrency=concurrency)
    p = b.add_sink(16).build()
    t0 = time.perf_counter()
    got = sum(1 for _ in p)
    dt = time.perf_counter() - t0
    p.close()
    assert got == n
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=400, help="images for the scaling runs")
    ap.add_argument("--overhead-items", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from datasets import imagenet_like

    paths = [p for p, _ in imagenet_like(args.items)]
    for p in paths:
        Path(p).read_bytes()
    build = f"CPython {platform.python_version()}{'t' if FREE_THREADED else ''}, GIL {GIL}"

    scaling = {}
    for c in (1, 2, 4):
        scaling[c] = statistics.median(scaling_run(paths, c) for _ in range(args.repeat))
    base = statistics.median(overhead_run(args.overhead_items, None) for _ in range(args.repeat))
    over = {}
    for c in (1, 2):
        t = statistics.median(overhead_run(args.overhead_items, c) for _ in range(args.repeat))
        over[c] = (t - base) / args.overhead_items * 1e6

    print(f"\n{build}, {CORES} cores, median of {args.repeat}\n")
    print("| Python stage concurrency | items/s | vs concurrency 1 |")
    print("|---:|---:|---:|")
    for c, r in scaling.items():
        print(f"| {c} | {r:.0f} | x{r / scaling[1]:.2f} |")
    print()
    print(f"Python no-op stage overhead: {over[1]:.1f} us/item at concurrency 1, {over[2]:.1f} us/item at 2")
    if FREE_THREADED:
        print(f"scaling 1 -> 2 threads: x{scaling[2] / scaling[1]:.2f} (target >= 1.8 with the GIL off)")
    out = {
        "build": build,
        "free_threaded": FREE_THREADED,
        "gil": GIL,
        "cores": CORES,
        "items_per_s": {str(c): r for c, r in scaling.items()},
        "scaling_1_to_2": scaling[2] / scaling[1],
        "python_stage_overhead_us": {str(c): v for c, v in over.items()},
    }
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
