"""remote: reads through a server that injects faults.

A fault server (faultserver.py, in the worker process) serves generated
files; a seeded schedule makes a share of the requests fail: 500, 503,
connection resets, stalls longer than the read timeout (before the headers
or mid-body), truncated bodies, a Content-Length larger than the body.
Files are read with ``ops.read_file`` (http URLs, ``timeout``/``retries``),
and shards and Parquet files with ``sources.webdataset`` and
``sources.table`` over http. Counted: wrong bytes (a delivered object or
row that differs from the file), unnamed errors (a failure that does not
name the URL), hangs, crashes. A read that fails after its retries is
allowed when its error names the URL (the figures show how many).

A server that declares a shorter Content-Length than the object and
closes is not among the faults: over plain HTTP the short body is a
complete, valid response, and no client can tell.
"""

from __future__ import annotations

import hashlib
import random
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import corpus
from faultserver import FaultServer

FAULT_RATE = 0.35
TIMEOUT_S = 0.4  # the client's read timeout; stalls last STALL_S
STALL_S = 1.5
RETRIES = 8


def _digest(b: Any) -> str:
    return hashlib.sha256(bytes(b)).hexdigest()


def w_read(case: dict[str, Any]) -> dict[str, Any]:
    from spdl_go import PipelineBuilder, ops

    root = Path(case["root"])
    srv = FaultServer(root, case["seed"], FAULT_RATE, STALL_S).start()
    names = case["names"]
    want = {n: _digest((root / n).read_bytes()) for n in names}
    urls = [(srv.url(n), n) for n in names]
    p = (
        PipelineBuilder()
        .add_source(urls)
        .pipe(ops.read_file(timeout=TIMEOUT_S, retries=RETRIES), concurrency=16)
        .pipe(lambda x: (x[1], _digest(x[0]), len(x[0])))
        .add_sink(8)
        .build(max_failures=-1)
    )
    got, exc = [], ""
    try:
        got = list(p)
    except Exception as e:  # noqa: BLE001 - judged by the probe
        exc = f"{type(e).__name__}: {e}"
    failures, errors = common.pipeline_errors(p)
    p.close()
    srv.stop()
    wrong = [f"{n}: {size} bytes, not {(root / n).stat().st_size}" for n, d, size in got if d != want[n]]
    return {"reads": len(names), "delivered": len(got), "wrong": wrong, "failures": failures, "errors": errors,
            "exception": exc, "faults": dict(srv.faults), "requests": sum(srv.requests.values()),
            "urls": [u for u, _ in urls]}  # fmt: skip


def w_sources(case: dict[str, Any]) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from spdl_go import PipelineBuilder, sources

    root = Path(case["root"])
    srv = FaultServer(root, case["seed"], FAULT_RATE / 2, STALL_S).start()
    out: dict[str, Any] = {"wrong": [], "errors": [], "failures": 0, "delivered": 0, "exception": ""}
    shards = [srv.url(s) for s in case["shards"]]
    want = {tuple(k) for k in case["shard_samples"]}
    p = (
        PipelineBuilder()
        .add_source(sources.webdataset(shards, timeout=TIMEOUT_S, retries=RETRIES))
        .pipe(lambda s: (str(s["__url__"]).rsplit("/", 1)[-1], str(s["__key__"]), _digest(s["bin"])))
        .add_sink(8)
        .build(max_failures=-1)
    )
    try:
        for s in p:
            out["delivered"] += 1
            if s not in want:
                out["wrong"].append(f"shard sample {s[0]}/{s[1]}: bytes differ")
    except Exception as e:  # noqa: BLE001
        out["exception"] = f"{type(e).__name__}: {e}"
    f, errs = common.pipeline_errors(p)
    out["failures"] += f
    out["errors"] += errs
    p.close()
    rows = set()
    for name in case["tables"]:
        t = pq.read_table(root / name)
        rows |= {(r["id"], r["payload"], r["text"]) for r in t.to_pylist()}
    p = (
        PipelineBuilder()
        .add_source(
            sources.table([srv.url(n) for n in case["tables"]], scalars=True, timeout=TIMEOUT_S, retries=RETRIES)
        )
        .pipe(lambda r: (r["id"], r["payload"], r["text"]))
        .add_sink(8)
        .build(max_failures=-1)
    )
    try:
        for r in p:
            out["delivered"] += 1
            if r not in rows:
                out["wrong"].append(f"table row {r[0]}: values differ")
    except Exception as e:  # noqa: BLE001
        out["exception"] = out["exception"] or f"{type(e).__name__}: {e}"
    f, errs = common.pipeline_errors(p)
    out["failures"] += f
    out["errors"] += errs
    p.close()
    srv.stop()
    out["faults"] = dict(srv.faults)
    out["requests"] = sum(srv.requests.values())
    out["urls"] = shards + [srv.url(n) for n in case["tables"]]
    return out


def run(short: bool, seed: int, tmp: Path) -> common.Tally:
    t = common.Tally("remote", seed)
    rng = random.Random(seed)
    root = tmp / "www"
    root.mkdir()
    n_reads = 200 if short else 1500
    n_files = min(n_reads, 300)
    names = []
    for i in range(n_files):
        size = rng.choice((rng.randint(0, 2048), rng.randint(2048, 65536), rng.randint(65536, 400_000)))
        (root / f"obj-{i:04d}.bin").write_bytes(rng.randbytes(size))
        names.append(f"obj-{i:04d}.bin")
    reads = [names[i % n_files] for i in range(n_reads)]
    rng.shuffle(reads)
    per = 100
    cases: list[dict[str, Any]] = [
        {"kind": "read", "root": str(root), "seed": seed * 100 + i, "names": reads[i : i + per]}
        for i in range(0, n_reads, per)
    ]
    # shards and Parquet over http
    shard_samples = []
    shards = []
    for s in range(2 if short else 6):
        samples = []
        for k in range(12):
            data = rng.randbytes(rng.randint(100, 30_000))
            samples.append((f"{k:06d}", {"bin": data}))
            shard_samples.append((f"shard-{s}.tar", f"{k:06d}", hashlib.sha256(data).hexdigest()))
        corpus.write_shard(root / f"shard-{s}.tar", samples)
        shards.append(f"shard-{s}.tar")
    tables = []
    for s in range(2 if short else 4):
        corpus.write_table(root / f"part-{s}.parquet", "parquet", corpus.table_rows(s * 1000, 64, rng), row_group=16)
        tables.append(f"part-{s}.parquet")
    cases.append({"kind": "sources", "root": str(root), "seed": seed * 100 + 99, "shards": shards,
                  "shard_samples": shard_samples, "tables": tables})  # fmt: skip
    outcomes = common.run_cases(__file__, cases, 180.0)
    for case, o in zip(cases, outcomes, strict=True):
        label = f"{case['kind']} seed {case['seed']}"
        if o.status != "ok":
            t.tried += len(case.get("names", [])) or 1
            t.bad("crashes" if o.status == "crash" else "hangs", f"{label}: {o.detail}")
            continue
        r = o.result
        if "traceback" in r:
            t.bad("failed_checks", f"{label}: worker error {r['exception'][:300]}")
            continue
        t.tried += r.get("reads", r["delivered"] + r["failures"])
        t.add(f"{case['kind']}_delivered", r["delivered"])
        t.add(f"{case['kind']}_failed_after_retries", r["failures"])
        t.add("requests", r["requests"])
        for k, v in r["faults"].items():
            t.add(f"fault_{k}", v)
        for w in r["wrong"]:
            t.bad("wrong_bytes", f"{label}: {w}")
        if r["exception"]:
            t.bad("failed_checks", f"{label}: the loop raised (epoch lost): {r['exception'][:300]}")
        for e in r["errors"]:
            if not any(u in e for u in r["urls"]):
                t.bad("unnamed", f"{label}: error names no URL: {e[:300]}")
    return t


if __name__ == "__main__":
    common.worker_main({"read": w_read, "sources": w_sources})
