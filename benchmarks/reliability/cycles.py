"""cycles: build / iterate / leave-mid-epoch, over and over.

Each cycle (a seeded draw) builds a pipeline that mixes Python and native
stages over a Python, native (``arange``) or ``files`` source, reads a
random number of items, then leaves it one way: ``break`` then ``stop()``;
``break`` out of ``with pipeline.auto_stop()``; dropping the pipeline
without ``stop()`` and ``gc.collect()``; ``close()``; a continuous source
read partly twice; a ``DataLoader`` loop left by ``break``. Every cycle
checks the items it got (values in order where the order is defined).

Each worker first runs one cycle of every shape and exit, then random
ones, 100 in all (warm-up: Go threads, pools and imports reach their
working size), and records its baseline: Python
threads, OS threads, open fds. After its cycles, with the pipelines gone
and a few seconds to settle, the engine holds no tensor and no Arrow
buffer, Python threads and fds are back to the baseline, and OS threads
at most 2 over it.
"""

from __future__ import annotations

import gc
import random
import sys
import threading
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import corpus

SHAPES = ("python", "native", "files", "dataloader")
EXITS = ("stop", "auto_stop", "drop_gc", "close", "continuous_twice", "exhaust")
N = 40  # items per source
# Go keeps an OS thread it started for a new peak of blocked cgo calls (see
# soak.py); Python threads, fds and engine memory are held to the baseline.
THREAD_SLACK = 2
# Cycles before the baseline. Go's OS threads grow to the peak of blocked
# cgo calls that the random configurations reach and then stay: measured
# over 800 cycles on 3.13t (three seeds), 12-13 -> 15-16 within the first
# 400, flat after; 24 warm-up cycles left one worker 3 over its baseline.
WARM_UP = 100


def _build(shape: str, root: str, continuous: bool, rng: random.Random) -> Any:
    from spdl_go import PipelineBuilder, ops, sources

    if shape == "python":
        b = PipelineBuilder().add_source(list(range(N)), continuous=continuous)
        b = b.pipe(lambda x: [x, x], concurrency=rng.randint(1, 3), output_order="input")
        b = b.pipe(ops.to_tensor("int64"), concurrency=2, output_order="input").pipe(_first)
    elif shape == "native":
        b = PipelineBuilder().add_source(sources.arange(N), continuous=continuous)
        b = b.pipe(ops.identity()).pipe(lambda x: x * 1, concurrency=rng.randint(1, 3), output_order="input")
    else:
        b = PipelineBuilder().add_source(sources.files(root, with_index=True), continuous=continuous)
        b = b.pipe(ops.read_file(), concurrency=2, output_order="input")
        b = b.pipe(ops.decode_image(size=(16, 16)), concurrency=2, output_order="input").pipe(lambda x: x[1])
    # max_failures=0: a failed item (a bug of the probe or of the engine) ends the cycle loudly
    return b.add_sink(rng.randint(1, 4)).build(num_threads=rng.randint(1, 4), max_failures=0)


def _first(t: Any) -> int:
    import numpy as np

    return int(np.from_dlpack(t)[0])


def _cycle(rng: random.Random, root: str, shape: str, how: str) -> str:
    """One cycle; returns "" or what was wrong."""
    from spdl_go import DataLoader

    take = rng.randint(0, N + 2)
    if shape == "dataloader":

        class Squares:
            def __len__(self) -> int:
                return N

            def __getitem__(self, i: int) -> int:
                return i * i

        loader = DataLoader(Squares(), batch_size=4, num_threads=2, output="numpy")
        seen: list[int] = []
        for batch in loader:
            seen.extend(int(v) for v in batch)
            if len(seen) >= take:
                break
        if how == "close":
            loader.close()
        del loader
        if seen != [i * i for i in range(len(seen))] or len(seen) < min(take, N):
            return f"DataLoader delivered {seen[:8]}... ({len(seen)}), want the squares in order ({min(take, N)}+)"
        return ""
    continuous = how == "continuous_twice" or rng.random() < 0.5
    p = _build(shape, root, continuous, rng)
    got: list[int] = []

    def read(pipeline: Any, limit: int) -> None:
        for x in pipeline:
            got.append(x)
            if len(got) >= limit:
                break

    if how == "auto_stop":
        with p.auto_stop():
            read(p, take)
    else:
        read(p, take)
        if how == "continuous_twice":
            read(p, take + rng.randint(0, N))
        elif how == "exhaust":
            read(p, 10**9)
    if how in ("stop", "continuous_twice", "exhaust"):
        p.stop()
    elif how == "close":
        p.close()
    del p  # drop_gc: no stop(), the collector's job
    gc.collect()
    want = list(range(N))
    # a continuous loop that ran to the epoch's end (take > N) leaves the
    # next iterator the next epoch, read whole
    whole = want + want if continuous and take > N else want
    if how == "exhaust" and got != whole:
        return f"{shape}: the epoch(s) read to the end delivered {len(got)} items ({got[:8]}...), not {len(whole)}"
    if got != (want + want)[: len(got)]:
        return f"{shape}/{how}: items {got[:8]}... are not the source's in order"
    return ""


def w_cycles(case: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random(case["seed"])
    root = case["root"]
    for shape in SHAPES:  # warm-up: every shape and exit, then random ones
        for how in EXITS:
            _cycle(rng, root, shape, how)
    for _ in range(WARM_UP - len(SHAPES) * len(EXITS)):
        _cycle(rng, root, rng.choice(SHAPES), rng.choice(EXITS))
    baseline = {"py_threads": threading.active_count(), **common.proc_status()}
    wrong: list[str] = []
    for _ in range(case["cycles"]):
        shape, how = rng.choice(SHAPES), rng.choice(EXITS)
        why = _cycle(rng, root, shape, how)
        if why:
            wrong.append(why)
    gc.collect()

    def back() -> bool:
        m, s = common.engine_memory(), common.proc_status()
        return (
            m["live_tensors"] == 0
            and m["arrow_bytes"] == 0
            and threading.active_count() <= baseline["py_threads"]
            and s["threads"] <= baseline["threads"] + THREAD_SLACK
            and s["fds"] <= baseline["fds"]
        )

    ok = common.settle(back, 5.0)
    after = {"py_threads": threading.active_count(), **common.proc_status(), **common.engine_memory()}
    names = sorted(t.name for t in threading.enumerate())
    return {"wrong": wrong[:20], "n_wrong": len(wrong), "ok": ok, "baseline": baseline, "after": after,
            "py_thread_names": names}  # fmt: skip


def run(short: bool, seed: int, tmp: Path) -> common.Tally:
    import numpy as np

    t = common.Tally("cycles", seed)
    root = tmp / "images"
    root.mkdir()
    nrng = np.random.default_rng(seed)
    for i in range(N):
        corpus.write_image(root / f"{i:03d}.png", "png", nrng, h=24, w=32)
    total = 150 if short else 1000
    per_worker = 50
    cases = [
        {"kind": "cycles", "seed": seed * 1000 + i, "root": str(root), "cycles": min(per_worker, total - done)}
        for i, done in enumerate(range(0, total, per_worker))
    ]
    outcomes = common.run_cases(__file__, cases, lambda c: 60 + 1.0 * c["cycles"])
    for case, o in zip(cases, outcomes, strict=True):
        label = f"worker seed {case['seed']}"
        t.tried += case["cycles"]
        if o.status != "ok":
            t.bad("crashes" if o.status == "crash" else "hangs", f"{label}: {o.detail}")
            continue
        r = o.result
        if "exception" in r:
            t.bad("failed_checks", f"{label}: a cycle raised {r['exception'][:300]}")
            continue
        t.add("seconds_in_cycles", round(o.seconds, 1))
        for w in r["wrong"]:
            t.bad("failed_checks", f"{label}: {w}")
        if not r["ok"]:
            b, a = r["baseline"], r["after"]
            t.bad(
                "leaks",
                f"{label}: not back to baseline: py threads {b['py_threads']}->{a['py_threads']} "
                f"({r['py_thread_names']}), OS threads {b['threads']}->{a['threads']}, fds {b['fds']}->{a['fds']}, "
                f"live tensors {a['live_tensors']}, Arrow bytes {a['arrow_bytes']}",
            )
        else:
            t.add("workers_back_to_baseline", 1)
    return t


if __name__ == "__main__":
    common.worker_main({"cycles": w_cycles})
