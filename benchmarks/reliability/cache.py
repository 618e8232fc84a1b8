"""cache: the disk cache of remote reads, killed and damaged.

An origin server (faultserver.py without faults, a thread of the probe)
serves generated objects. A churn process reads them all, epoch after
epoch in a new order, through ``read_file(cache_dir=..., cache_disk_bytes=
half the data)``, so it keeps writing entries and evicting others; it is
killed with SIGKILL at a seeded random moment. After each kill a fresh
process reads everything through the same cache and compares every
object's bytes with the origin's (wrong bytes fail the probe).

Then entries are damaged by hand (a byte flipped, an entry truncated) and
a fresh process reads everything again: every object must come back with
the origin's bytes, and each damaged entry's object must have been
requested from the origin again (not served from the damaged entry).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
from faultserver import FaultServer


def _digest(b: Any) -> str:
    return hashlib.sha256(bytes(b)).hexdigest()


def _reader(case: dict[str, Any], continuous: bool) -> Any:
    from spdl_go import PipelineBuilder, ops

    urls = case["urls"]
    if continuous:
        src: Any = _Shuffled(urls, case["seed"])
    else:
        src = [(u, i) for i, u in enumerate(urls)]
    return (
        PipelineBuilder()
        .add_source(src, continuous=continuous)
        .pipe(
            ops.read_file(cache_dir=case["dir"], cache_disk_bytes=case["budget"], timeout=5, retries=2),
            concurrency=16,
            name="read",
        )  # fmt: skip
        .pipe(lambda x: (x[1], _digest(x[0])))
        .add_sink(8)
        .build(max_failures=-1)
    )


class _Shuffled:
    """The URLs in a new seeded order each epoch."""

    def __init__(self, urls: list[str], seed: int) -> None:
        self.urls, self.rng = urls, random.Random(seed)

    def __iter__(self) -> Any:
        order = list(enumerate(self.urls))
        self.rng.shuffle(order)
        return iter([(u, i) for i, u in order])


def churn(case: dict[str, Any]) -> None:
    """Reads through the cache until killed."""
    p = _reader(case, continuous=True)
    first = True
    while True:
        for _ in p:
            if first:
                os.write(1, b"READY\n")
                first = False


def w_verify(case: dict[str, Any]) -> dict[str, Any]:
    p = _reader(case, continuous=False)
    urls = case["urls"]
    got = list(p)
    failures, errors = common.pipeline_errors(p)
    op = p.stats().stages[0].op_stats
    p.close()
    wrong = [urls[i] for i, d in got if d != case["digests"][i]]
    return {"delivered": len(got), "wrong": wrong, "failures": failures, "errors": errors, "op_stats": op}


def run(short: bool, seed: int, tmp: Path) -> common.Tally:
    t = common.Tally("cache", seed)
    rng = random.Random(seed)
    www, cdir = tmp / "www", tmp / "cache"
    www.mkdir()
    cdir.mkdir()
    names, digests, total = [], [], 0
    for i in range(120):
        data = rng.randbytes(rng.randint(1, 200_000))
        (www / f"o{i:03d}").write_bytes(data)
        names.append(f"o{i:03d}")
        digests.append(_digest(data))
        total += len(data)
    srv = FaultServer(www).start()
    try:
        case = {"kind": "verify", "urls": [srv.url(n) for n in names], "digests": digests, "dir": str(cdir),
                "budget": total // 2, "seed": seed}  # fmt: skip
        kills = 5 if short else 20
        for k in range(kills):
            delay = rng.uniform(0.05, 1.5)
            how = _kill_churn({**case, "seed": seed + k}, delay)
            t.add("kills", 1)
            if how:
                t.bad("failed_checks", f"kill {k}: {how}")
            _verify(t, f"after kill {k} ({delay:.2f} s into the churn)", case)
        t.figures["tmp_files_left"] = len(list((cdir / "tmp").glob("*"))) if (cdir / "tmp").is_dir() else 0
        # damage entries by hand, with a budget that keeps every entry (so
        # that each damaged one is looked up, not evicted first)
        case["budget"] = 2 * total
        _verify(t, "populate", case, count=False)
        url_of = {_entry(cdir, u): u for u in case["urls"]}
        entries = sorted(p for p in url_of if p.is_file())
        t.figures["entries_on_disk"] = len(entries)
        damaged = rng.sample(entries, min(len(entries), 8 if short else 24))
        for i, e in enumerate(damaged):
            b = bytearray(e.read_bytes())
            if i % 2 == 0 and b:
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            else:
                b = b[: rng.randrange(len(b))] if b else b
            e.write_bytes(bytes(b))
        before = {url_of[e]: srv.requests[url_of[e].rsplit("/", 1)[-1]] for e in damaged}
        t.figures["entries_damaged"] = len(damaged)
        _verify(t, "damaged entries", case)
        for u, n in before.items():
            if srv.requests[u.rsplit("/", 1)[-1]] == n:
                t.bad("failed_checks", f"damaged entry of {u} was not read again from the origin")
    finally:
        srv.stop()
    return t


def _entry(cdir: Path, url: str) -> Path:
    k = hashlib.sha256(url.encode()).hexdigest()
    return cdir / k[:2] / k[2:]


def _kill_churn(case: dict[str, Any], delay: float) -> str:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--churn", json.dumps(case)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()  # READY, or "" if it died
    if line.strip() != b"READY":
        proc.kill()
        proc.wait()
        return f"the churn process did not start: {proc.stderr.read().decode()[-400:]}"
    time.sleep(delay)
    if proc.poll() is not None:
        return f"the churn process died before the kill: {proc.stderr.read().decode()[-400:]}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return ""


def _verify(t: common.Tally, label: str, case: dict[str, Any], count: bool = True) -> None:
    (o,) = common.run_cases(__file__, [case], 120.0)
    if count:
        t.tried += 1
    if o.status != "ok":
        t.bad("crashes" if o.status == "crash" else "hangs", f"{label}: {o.detail}")
        return
    r = o.result
    if "traceback" in r:
        t.bad("failed_checks", f"{label}: worker error {r['exception'][:300]}")
        return
    t.add("objects_verified", r["delivered"])
    for k in ("cache_disk_hits", "cache_misses", "cache_corrupt_entries"):
        if k in r["op_stats"]:
            t.add(k, r["op_stats"][k])
    for u in r["wrong"]:
        t.bad("wrong_bytes", f"{label}: {u} served with other bytes than the origin's")
    for e in r["errors"]:
        t.bad("failed_checks", f"{label}: a read failed: {e[:300]}")
        if not any(u in e for u in case["urls"]):
            t.bad("unnamed", f"{label}: error names no URL: {e[:300]}")
    if r["delivered"] + r["failures"] != len(case["urls"]):
        t.bad("failed_checks", f"{label}: {len(case['urls']) - r['delivered']} objects neither delivered nor failed")


if __name__ == "__main__":
    if sys.argv[1] == "--churn":
        churn(json.loads(sys.argv[2]))
    else:
        common.worker_main({"verify": w_verify})
