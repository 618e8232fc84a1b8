"""Engine overhead: per item for a Go no-op stage and a Python no-op stage,
and per batch for the handoff of a batch into Python.

Each figure is the median of several runs, measured against a baseline
pipeline in the same run (so the source, batching and Python's own loop
are subtracted out). Targets on a 2-core machine: Go stage < 1 us/item,
batch handoff < 20 us.

    python benchmarks/bench_overhead.py [--items N] [--repeat R] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import pyarrow as pa

from spdl_go import PipelineBuilder, ops, sources

BATCH = 1024  # items per list handed to Python in the per-item runs


def drain(pipeline) -> float:
    t0 = time.perf_counter()
    n = 0
    for batch in pipeline:
        n += len(batch)
    dt = time.perf_counter() - t0
    pipeline.close()
    return dt


def per_item_pipeline(n: int, stages: int, python: bool, concurrency: int = 1):
    b = PipelineBuilder().add_source(sources.arange(n))
    for i in range(stages):
        op = (lambda x: x) if python else ops.identity()
        b.pipe(op, concurrency=concurrency, name=f"noop{i}")
    return b.aggregate(BATCH).add_sink(buffer_size=8).build()


def median_time(make, repeat: int) -> float:
    return statistics.median(drain(make()) for _ in range(repeat))


def handoff(kind: str, repeat: int, batches: int = 1000) -> float:
    """Consumer-side seconds per batch: get_item, decode and import.

    The pipeline makes exactly as many batches as its sink buffers, and
    they are all made before the clock starts, so only the handoff is
    timed, not production.
    """
    results = []
    for _ in range(repeat):
        b = PipelineBuilder().add_source(sources.arange(batches * 32)).aggregate(32)
        if kind == "tensor":
            b.pipe(ops.to_tensor("float32"), concurrency=2)
        else:
            b.pipe(ops.collate(), concurrency=2)
        p = b.add_sink(buffer_size=batches).build()
        p.start()
        deadline = time.monotonic() + 10
        while p.stats().sink_len < batches and time.monotonic() < deadline:
            time.sleep(0.01)
        got = 0
        t0 = time.perf_counter()
        for _ in range(batches):
            batch = p.get_item(timeout=10)
            x = np.from_dlpack(batch) if kind == "tensor" else pa.array(batch)
            got += 1
        dt = time.perf_counter() - t0
        p.close()
        del x, batch
        results.append(dt / got)
    return statistics.median(results)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=400_000)
    ap.add_argument("--py-items", type=int, default=40_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=str, default=None)
    args = ap.parse_args()

    n, k = args.items, 4
    base = median_time(lambda: per_item_pipeline(n, 0, False), args.repeat)
    go4 = median_time(lambda: per_item_pipeline(n, k, False), args.repeat)
    go_stage_us = max(go4 - base, 0) / (n * k) * 1e6
    go4c = median_time(lambda: per_item_pipeline(n, 1, False, concurrency=4), args.repeat)
    go_stage_c4_us = max(go4c - base, 0) / n * 1e6

    m = args.py_items
    pbase = median_time(lambda: per_item_pipeline(m, 0, False), args.repeat)
    py1 = median_time(lambda: per_item_pipeline(m, 1, True), args.repeat)
    py_stage_us = max(py1 - pbase, 0) / m * 1e6

    tensor_us = handoff("tensor", args.repeat) * 1e6
    arrow_us = handoff("arrow", args.repeat) * 1e6

    rows = [
        ("Go no-op stage, concurrency 1 (per item)", go_stage_us, 1.0),
        ("Go no-op stage, concurrency 4 (per item)", go_stage_c4_us, 1.0),
        ("Python no-op stage (per item)", py_stage_us, None),
        ("batch handoff: DLPack tensor -> numpy (per batch)", tensor_us, 20.0),
        ("batch handoff: Arrow column -> pyarrow (per batch)", arrow_us, 20.0),
    ]
    print(f"\nengine overhead ({n} items for Go stages, {m} for Python; median of {args.repeat} runs)\n")
    print(f"| {'measure':<52} | {'us':>8} | {'target':>7} | {'ratio to target':>15} |")
    print(f"|{'-' * 54}|{'-' * 10}|{'-' * 9}|{'-' * 17}|")
    for name, us, target in rows:
        t = f"{target:.0f}" if target else "-"
        r = f"{us / target:.2f}x" if target else "-"
        print(f"| {name:<52} | {us:>8.3f} | {t:>7} | {r:>15} |")
    print(f"\nbaseline: source + batching + Python loop = {base / n * 1e6:.3f} us/item")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({name: {"us": us, "target_us": target} for name, us, target in rows}, f, indent=2)


if __name__ == "__main__":
    main()
