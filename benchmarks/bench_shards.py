"""Remote WebDataset throughput by how many shards are opened ahead, and
remote Parquet against the same files on local disk.

Tar shards on nginx (loopback, started here as the tests start it), each
request answered after --latency-ms (20 ms by default, an object store's
time to first byte): many small shards (48 of 1 MiB) and a few large ones
(4 of 32 MiB). ``sources.webdataset(urls, prefetch_shards=N)`` -> aggregate(32)
is read to the end for N in 0 (each shard opened at its turn: the anchor),
1, 2 (the default) and 4; every open shard also reads up to 16 MiB ahead.
Each run checks the byte count. Median of --repeat, interleaved, in this
process (the Go reads need no fresh interpreter).

Parquet: 4 files of 8,000 rows (an 8 KiB binary column, an int64 and a
string) in row groups of 500, read with ``sources.table`` -> aggregate(64)
from nginx (same latency), in file order and shuffled over the files,
and, as the anchor, from local disk in file order. Each row group's
selected column chunks are fetched in one request, and the next row
group's (its file opened, if it is another) while the current one is read.

    python benchmarks/bench_shards.py [--latency-ms 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python" / "tests"))  # servers.py: nginx on loopback

PREFETCH = (0, 1, 2, 4)


def _write(path: Path, n: int, size: int, rng) -> int:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for i in range(n):
            data = rng.integers(0, 256, size, dtype="uint8").tobytes()
            info = tarfile.TarInfo(f"{i:06d}.bin")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return n * size


def _epoch(urls: list[str], prefetch: int, want_bytes: int) -> tuple[float, int]:
    import spdl_go
    from spdl_go import sources

    p = (
        spdl_go.PipelineBuilder()
        .add_source(sources.webdataset(urls, prefetch_shards=prefetch))
        .aggregate(32)
        .add_sink(4)
        .build()
    )
    n = got = 0
    t0 = time.perf_counter()
    with p.auto_stop():
        for batch in p:
            n += len(batch)
            got += sum(len(s["bin"]) for s in batch)
    dt = time.perf_counter() - t0
    p.close()
    if got != want_bytes:
        raise AssertionError(f"read {got} bytes, want {want_bytes}")
    return dt, n


def _table_epoch(urls: list[str], rows: int, shuffle: bool = False) -> float:
    import spdl_go
    from spdl_go import sources

    src = sources.table(urls, columns=["img", "label", "caption"], shuffle=shuffle)
    p = spdl_go.PipelineBuilder().add_source(src).aggregate(64).add_sink(4).build()
    n = 0
    t0 = time.perf_counter()
    with p.auto_stop():
        for batch in p:
            n += len(batch)
    dt = time.perf_counter() - t0
    p.close()
    if n != rows:
        raise AssertionError(f"read {n} rows, want {rows}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency-ms", type=float, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import numpy as np
    from servers import Nginx

    work = Path(tempfile.mkdtemp(prefix="spdl-go-bench-shards-"))
    (work / "root").mkdir()
    (work / "nginx").mkdir()
    rng = np.random.default_rng(0)
    sets = {"48 shards of 1 MiB": (48, 32, 32 << 10), "4 shards of 32 MiB": (4, 256, 128 << 10)}
    totals = {}
    for name, (shards, per, size) in sets.items():
        tag = name.split()[-2]
        totals[name] = sum(_write(work / "root" / f"{tag}-{s:03d}.tar", per, size, rng) for s in range(shards))
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 8000
    table = pa.table(
        {
            "img": [rng.integers(0, 256, 8192, dtype=np.uint8).tobytes() for _ in range(rows)],
            "label": pa.array(rng.integers(0, 1000, rows), pa.int64()),
            "caption": [f"caption {i}" for i in range(rows)],
        }
    )
    for f in range(4):
        pq.write_table(table, work / "root" / f"t{f}.parquet", row_group_size=500)
    srv = Nginx(work / "root", work / "nginx", latency_ms=args.latency_ms)
    table_times: dict[str, list[float]] = {"remote": [], "local": [], "shuffled": []}
    times: dict[tuple[str, int], list[float]] = {}
    counts: dict[str, int] = {}
    try:
        for _ in range(args.repeat):
            for name, (shards, _, _) in sets.items():
                tag = name.split()[-2]
                urls = [f"{srv.url}/lat/{tag}-{s:03d}.tar" for s in range(shards)]
                for pf in PREFETCH:
                    dt, n = _epoch(urls, pf, totals[name])
                    times.setdefault((name, pf), []).append(dt)
                    counts[name] = n
            table_times["remote"].append(_table_epoch([f"{srv.url}/lat/t{f}.parquet" for f in range(4)], 4 * rows))
            table_times["shuffled"].append(
                _table_epoch([f"{srv.url}/lat/t{f}.parquet" for f in range(4)], 4 * rows, True)
            )
            table_times["local"].append(
                _table_epoch([str(work / "root" / f"t{f}.parquet") for f in range(4)], 4 * rows)
            )
    finally:
        srv.stop()
    print(f"\n{args.latency_ms:g} ms latency per request; median of {args.repeat}\n")
    print("| shards | prefetch_shards | samples/s | MB/s | ×prefetch 0 |")
    print("|---|---:|---:|---:|---:|")
    for name in sets:
        base = statistics.median(times[(name, 0)])
        for pf in PREFETCH:
            dt = statistics.median(times[(name, pf)])
            print(f"| {name} | {pf} | {counts[name] / dt:,.0f} | {totals[name] / dt / 1e6:,.0f} | {base / dt:.2f} |")
    local, remote, shuffled = (statistics.median(table_times[k]) for k in ("local", "remote", "shuffled"))
    print("\n| Parquet, 4 x 8,000 rows | rows/s | ×local |")
    print("|---|---:|---:|")
    print(f"| local disk (anchor) | {4 * rows / local:,.0f} | 1.00 |")
    print(f"| nginx, {args.latency_ms:g} ms per request | {4 * rows / remote:,.0f} | {local / remote:.2f} |")
    print(f"| nginx, row groups shuffled over the files | {4 * rows / shuffled:,.0f} | {local / shuffled:.2f} |")


if __name__ == "__main__":
    main()
