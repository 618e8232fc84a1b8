"""Resuming a WebDataset epoch from remote shards: a state that knows the
shards' sample counts against one that does not.

The shards are tar files on nginx (loopback, started here as the tests
start it), each request answered after --latency-ms (20 ms by default, an
object store's time to first byte). A first process reads --consumed of
the epoch in shard order (shuffled shards, no shuffle buffer), saves the
ResumableSource state and stops. Each configuration then resumes from that
state in a fresh process and reads the rest of the epoch, checking that
the samples it gets plus the consumed ones are the epoch, each once:

* "resume, sizes known": the state as saved; shards consumed whole are
  not opened;
* "resume, no sizes": the same state without its "sizes" (as saved by a
  version that did not record them): every consumed shard is read again
  and its samples skipped.
* "rest of epoch, uninterrupted": the anchor; the same pipeline reading
  the whole epoch, timed from the first unconsumed sample (what the
  resume would ideally cost).

Median of --repeat; prints items/s for the rest of the epoch and the ratios.

    python benchmarks/bench_resume.py [--shards 48] [--per-shard 32] [--consumed 0.75]
        [--latency-ms 20] [--repeat 3] [--json benchmarks/results/resume.json]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python" / "tests"))  # servers.py: nginx on loopback

import harness  # noqa: E402

BATCH = 32


def _source(base: str, shards: int):
    from spdl_go import sources

    urls = [f"{base}/lat/shard-{i:04d}.tar" for i in range(shards)]
    return sources.webdataset(urls, shuffle=True, seed=7, with_index=True)


def _pipeline(src):
    import spdl_go

    return spdl_go.PipelineBuilder().add_source(src).aggregate(BATCH).add_sink(4).build()


def _ids(batch) -> list[int]:
    return [s["__index__"] for s in batch]


def consume(base: str, shards: int, n: int, state_path: str) -> None:
    import spdl_go

    src = spdl_go.ResumableSource(_source(base, shards))
    p = _pipeline(src.source)
    seen: list[int] = []
    with p.auto_stop():
        for b in src.track(p):
            seen += _ids(b)
            if len(seen) >= n:
                break
        state = src.state_dict()
    p.close()
    Path(state_path).write_text(json.dumps({"state": state, "seen": seen}))


def worker(kind: str, param: str, base: str, shards: str, state_path: str) -> None:
    import spdl_go

    saved = json.loads(Path(state_path).read_text())
    state, seen = saved["state"], saved["seen"]
    total = int(shards) * int(param)
    got: list[int] = []

    def count(batch) -> int:
        got.extend(_ids(batch))
        return len(batch)

    if kind == "uninterrupted":

        def batches():
            p = _pipeline(_source(base, int(shards)))
            with p.auto_stop():
                it = iter(p)
                skipped = 0
                while skipped < len(seen):  # not timed: the consumed part
                    skipped += len(next(it))
                yield from it
            p.close()

        gen = batches()
        first = next(gen)  # times from the first batch after the consumed part

        def chain():
            yield first
            yield from gen

        row = harness.measure(chain(), count, total - len(seen))
        print(json.dumps(row))
        return
    if kind == "no-sizes":
        state = {**state, "progress": {k: v for k, v in state["progress"].items() if k != "sizes"}}
    src = spdl_go.ResumableSource(_source(base, int(shards)))
    src.load_state_dict(state)
    stats = {}

    def batches():
        p = _pipeline(src.source)
        with p.auto_stop():
            yield from src.track(p)
            stats.update(p.stats().source.op_stats)
        p.close()

    row = harness.measure(batches(), count, total - len(seen))
    if sorted(got + seen) != sorted(set(got + seen)) or len(got) + len(seen) != total:
        raise AssertionError("resumed samples plus consumed ones are not the epoch, each once")
    row.update(stats)
    print(json.dumps(row))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", type=int, default=48)
    ap.add_argument("--per-shard", type=int, default=32)
    ap.add_argument("--sample-kib", type=int, default=32)
    ap.add_argument("--consumed", type=float, default=0.75)
    ap.add_argument("--latency-ms", type=float, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default="")
    ap.add_argument("--_worker", nargs=5)
    args = ap.parse_args()
    if args._worker:
        worker(*args._worker)
        return
    import numpy as np
    from servers import Nginx

    work = Path(tempfile.mkdtemp(prefix="spdl-go-bench-resume-"))
    (work / "root").mkdir()
    (work / "nginx").mkdir()
    rng = np.random.default_rng(0)
    for s in range(args.shards):
        with tarfile.open(work / "root" / f"shard-{s:04d}.tar", "w", format=tarfile.PAX_FORMAT) as tf:
            for i in range(args.per_shard):
                for ext, data in (
                    ("bin", rng.integers(0, 256, args.sample_kib << 10, dtype=np.uint8).tobytes()),
                    ("cls", str(i % 10).encode()),
                ):
                    info = tarfile.TarInfo(f"{s:04d}{i:05d}.{ext}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
    total = args.shards * args.per_shard
    n = int(total * args.consumed) // BATCH * BATCH
    srv = Nginx(work / "root", work / "nginx", latency_ms=args.latency_ms)
    skipped: dict[str, str] = {}
    try:
        state_path = str(work / "state.json")
        t0 = time.perf_counter()
        consume(srv.url, args.shards, n, state_path)
        print(f"consumed {n} of {total} samples in {time.perf_counter() - t0:.2f}s", file=sys.stderr)
        cfgs = [
            ("resume, sizes known", "sizes", str(args.per_shard)),
            ("resume, no sizes", "no-sizes", str(args.per_shard)),
            ("rest of epoch, uninterrupted", "uninterrupted", str(args.per_shard)),
        ]
        runs = harness.run_all(__file__, cfgs, [srv.url, str(args.shards), state_path], args.repeat, 600, skipped)
    finally:
        srv.stop()
    rows = harness.median_rows(runs)
    for name, rs in runs.items():
        rows[name]["wall_s"] = statistics.median(r["wall_s"] for r in rs)
        for k in ("resume_units_skipped", "resume_samples_skipped"):
            if rs and k in rs[0]:
                rows[name][k] = rs[0][k]
    print(
        f"\n{args.shards} shards of {args.per_shard} samples ({args.sample_kib} KiB), {args.latency_ms:g} ms latency per request; "
        f"{n} of {total} consumed, resumed on 1 rank; median of {args.repeat}\n"
    )
    print(harness.markdown_table(rows, "samples", skipped))
    for name, r in rows.items():
        if "resume_units_skipped" in r:
            print(
                f"{name}: {r['resume_units_skipped']} shards not opened, {r['resume_samples_skipped']} samples skipped"
            )
    a, b, c = (rows.get(k) for k in ("resume, sizes known", "resume, no sizes", "rest of epoch, uninterrupted"))
    if a and b:
        print(
            f"\nresume with sizes / without: x{b['wall_s'] / a['wall_s']:.2f} faster to finish the epoch "
            f"({a['wall_s']:.2f}s against {b['wall_s']:.2f}s)"
        )
    if a and c:
        print(f"resume with sizes / uninterrupted rest of the epoch: x{a['wall_s'] / c['wall_s']:.2f} the time")
    if args.json:
        harness.write_results(
            args.json,
            {
                "shards": args.shards,
                "per_shard": args.per_shard,
                "consumed": n,
                "latency_ms": args.latency_ms,
                "repeat": args.repeat,
            },
            rows,
            runs,
            skipped,
            "Resume",
            "samples",
        )


if __name__ == "__main__":
    main()
