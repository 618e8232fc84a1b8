"""Measurement helpers shared by the side-by-side benchmarks.

Each configuration runs in a fresh subprocess (``run_config``), so memory
and CPU figures are not polluted by earlier runs. Inside it, ``measure``
iterates a loader and records, per run: items/s, CPU-seconds per 1,000
items (self + reaped children, from getrusage, less the CPU the memory
sampling itself took), peak RSS and peak PSS summed over the process tree
(sampled every 100 ms from /proc, so worker processes count), the same at
the start (after imports, before the loader),
and time to first batch. ``median_rows``, ``markdown_table`` and
``bar_chart`` turn repeated runs into the printed table and the PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------
# Process-tree memory sampling
# --------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out.extend(int(c) for c in f.read().split())
            except OSError:
                pass
    except OSError:
        pass
    return out


def _tree(pid: int) -> list[int]:
    pids, stack = [], [pid]
    while stack:
        p = stack.pop()
        pids.append(p)
        stack.extend(_children(p))
    return pids


def _mem_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in KiB of one process; (0, 0) if it is gone."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


class MemSampler:
    """Samples the RSS and PSS of a process tree every ``interval`` seconds
    from a thread, keeping the peaks. Reading smaps_rollup costs the kernel
    about 7 ms per torch-sized process, charged to this process: ``cpu`` is
    the CPU time the samples took, which ``measure`` takes out of the
    loader's CPU time, and the interval (0.1 s) keeps the share of a core
    they use small."""

    def __init__(self, pid: int | None = None, interval: float = 0.1):
        self.pid = pid or os.getpid()
        self.interval = interval
        self.peak_rss = self.peak_pss = 0
        self.cpu = 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        c0 = time.thread_time()
        rss = pss = 0
        for p in _tree(self.pid):
            r, s = _mem_kib(p)
            rss += r
            pss += s
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_pss = max(self.peak_pss, pss)
        self.cpu += time.thread_time() - c0

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self):
        self.sample()  # the baseline, before the loader starts
        self.start_rss, self.start_pss = self.peak_rss, self.peak_pss
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.sample()


def torch_dataloader(dataset: Any, batch_size: int, workers: int):
    """Iterates the stock torch DataLoader over a map-style dataset with
    ``workers`` worker processes, and shuts the workers down (and reaps
    them) when the caller stops, so that no run leaves processes behind."""
    import torch

    dl = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=int(workers), persistent_workers=False)
    it = iter(dl)
    try:
        yield from it
    finally:
        del it


def dali_resize_crop(items: list, batch_size: int, threads: int, antialias: bool):
    """NVIDIA DALI's CPU-only pipeline (no GPU: device_id=None) over
    (path, label) items: decoders.image -> short side 256 (bilinear) ->
    centre crop 224, into torch by DALIGenericIterator."""
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    files = [str(p) for p, _ in items]
    labels = [int(label) for _, label in items]

    @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, prefetch_queue_depth=2)
    def pipe():
        data, label = fn.readers.file(files=files, labels=labels, random_shuffle=False, name="reader")
        images = fn.decoders.image(data, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_shorter=256, interp_type=types.INTERP_LINEAR, antialias=antialias)
        return fn.crop(images, crop=(224, 224)), label

    p = pipe()
    p.build()
    it = DALIGenericIterator(
        p, ["images", "labels"], reader_name="reader", last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=False
    )
    for out in it:
        yield out[0]["images"], out[0]["labels"].reshape(-1).long()


def cpu_seconds() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def measure(batches: Iterable[Any], count: Callable[[Any], int], expect: int) -> dict:
    """Iterates ``batches`` (a generator that builds its loader lazily, so
    start-up is timed) and returns one run's figures. ``count(batch)`` gives
    the items in a batch and checks its shape; the total must be ``expect``."""
    with MemSampler() as mem:
        c0, t0, m0 = cpu_seconds(), time.perf_counter(), mem.cpu
        first = None
        n = 0
        for b in batches:
            if first is None:
                first = time.perf_counter() - t0
            n += count(b)
        dt = time.perf_counter() - t0
        dc = cpu_seconds() - c0 - (mem.cpu - m0)
    if n != expect:
        raise AssertionError(f"got {n} of {expect} items")
    return {
        "items": n,
        "items_per_s": n / dt,
        "cpu_s_per_1000": dc / n * 1000,
        "peak_rss_mib": mem.peak_rss / 1024,
        "peak_pss_mib": mem.peak_pss / 1024,
        "start_rss_mib": mem.start_rss / 1024,
        "start_pss_mib": mem.start_pss / 1024,
        "loader_rss_mib": (mem.peak_rss - mem.start_rss) / 1024,
        "loader_pss_mib": (mem.peak_pss - mem.start_pss) / 1024,
        "first_batch_s": first,
        "wall_s": dt,
    }


def _cpu_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs, from /proc/stat; (0, 0) elsewhere."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v) - idle, sum(v)


def settle(idle: float = 0.9, window: float = 0.25, most: float = 5.0) -> None:
    """Waits (at most ``most`` seconds) until the machine's CPUs are at
    least ``idle`` idle over a ``window``: the previous run's processes
    (a DataLoader's workers freeing hundreds of MB as they exit) must not
    run into the next one, which would otherwise pay for them."""
    end = time.monotonic() + most
    while time.monotonic() < end:
        b0, t0 = _cpu_busy()
        time.sleep(window)
        b1, t1 = _cpu_busy()
        if t1 == t0 or (b1 - b0) / (t1 - t0) <= 1 - idle:
            return


def run_config(script: str | Path, args: list[str], timeout: float) -> dict:
    """Runs ``script --_worker *args`` in a fresh interpreter, once the
    machine is quiet (``settle``); the worker prints one JSON line (its
    last line of stdout)."""
    settle()
    cmd = [sys.executable, str(script), "--_worker", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


KEYS = (
    "items_per_s",
    "cpu_s_per_1000",
    "peak_rss_mib",
    "peak_pss_mib",
    "loader_rss_mib",
    "loader_pss_mib",
    "first_batch_s",
)


def median_rows(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Per configuration, the median of each figure over its runs."""
    return {n: {k: statistics.median(r[k] for r in rs) for k in KEYS if k in rs[0]} for n, rs in runs.items() if rs}


def markdown_table(rows: dict[str, dict], unit: str, skipped: dict[str, str] | None = None) -> str:
    """The printed results table; ``unit`` names the item ("images")."""
    hdr = (
        "configuration",
        f"{unit}/s",
        f"CPU-s/1000 {unit}",
        "peak PSS MiB",
        "peak RSS MiB",
        "loader PSS MiB",
        "loader RSS MiB",
        "1st batch s",
    )
    out = ["| " + " | ".join(hdr) + " |", "|" + "|".join(["---"] + ["---:"] * (len(hdr) - 1)) + "|"]
    for name, r in rows.items():
        out.append(
            f"| {name} | {r['items_per_s']:.0f} | {r['cpu_s_per_1000']:.2f} | {r['peak_pss_mib']:.0f} "
            f"| {r['peak_rss_mib']:.0f} | {r.get('loader_pss_mib', 0):.0f} | {r.get('loader_rss_mib', 0):.0f} "
            f"| {r['first_batch_s']:.2f} |"
        )
    for name, why in (skipped or {}).items():
        out.append(f"| {name} | skipped: {why[:120]} |" + " |" * (len(hdr) - 2))
    return "\n".join(out)


def bar_chart(rows: dict[str, dict], path: Path, title: str, unit: str, ours: str = "spdl-go") -> str | None:
    """Throughput and peak memory bars; returns why not, if no chart."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        return f"matplotlib unavailable: {e}"
    names = list(rows)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 0.5 * len(names) + 2.5))
    colors = ["tab:green" if n.startswith(ours) else "tab:blue" if n.startswith("SPDL") else "tab:gray" for n in names]
    a1.barh(names, [rows[n]["items_per_s"] for n in names], color=colors)
    a1.set_xlabel(f"{unit}/s (higher is better)")
    a2.barh(names, [rows[n]["peak_pss_mib"] for n in names], color=colors, label="PSS")
    a2.barh(names, [rows[n]["peak_rss_mib"] for n in names], color="none", edgecolor="black", label="RSS")
    a2.set_xlabel("peak memory, MiB, process tree (lower is better)")
    a2.legend()
    for a in (a1, a2):
        a.invert_yaxis()
    a2.set_yticklabels([])
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def progress(total: int):
    """A tqdm bar, or a stand-in with the same two methods if tqdm is absent."""
    try:
        from tqdm import tqdm

        return tqdm(total=total, unit="run")
    except ImportError:

        class _Bar:
            def __init__(self) -> None:
                self.n = 0

            def set_description(self, s: str) -> None:
                print(f"[{self.n + 1}/{total}] {s}", file=sys.stderr, flush=True)

            def update(self) -> None:
                self.n += 1

            def close(self) -> None:
                pass

        return _Bar()


def warm_page_cache(paths: Iterable[str]) -> None:
    for p in paths:
        Path(p).read_bytes()


def run_all(
    script: str | Path,
    cfgs: list[tuple[str, str, str]],
    extra: list[str],
    repeat: int,
    timeout: float,
    skipped: dict[str, str],
) -> dict[str, list[dict]]:
    """Runs each (name, kind, param) configuration ``repeat`` times, repeats
    interleaved, each in a fresh process (``script --_worker kind param
    *extra``). A configuration whose run fails is recorded in ``skipped``
    with the reason and not run again."""
    jobs = [c for _ in range(repeat) for c in cfgs if c[0] not in skipped]
    bar = progress(len(jobs))
    runs: dict[str, list[dict]] = {c[0]: [] for c in cfgs if c[0] not in skipped}
    for name, kind, param in jobs:
        if name in skipped:  # failed on an earlier repeat
            bar.update()
            continue
        bar.set_description(name)
        try:
            runs[name].append(run_config(Path(script).resolve(), [kind, param, *extra], timeout))
        except Exception as e:  # noqa: BLE001
            skipped[name] = f"run failed: {e}"
            print(f"\n{name}: run failed: {e}", file=sys.stderr)
        bar.update()
    bar.close()
    return {n: r for n, r in runs.items() if n not in skipped}


def anchor_ratios(rows: dict[str, dict], ours: Iterable[str], anchors: dict[str, str]) -> dict[str, dict]:
    """Each of our rows against the best (highest items/s) row of each
    anchor; ``anchors`` maps a group name to its rows' name prefix."""
    out: dict[str, dict] = {}
    for name in ours:
        if name not in rows:
            continue
        go = rows[name]
        for group, prefix in anchors.items():
            cand = {k: v for k, v in rows.items() if k.startswith(prefix)}
            if not cand:
                continue
            best = max(cand, key=lambda k: cand[k]["items_per_s"])
            b = cand[best]
            out[f"{name} vs {group}"] = {
                "best": best,
                "throughput": go["items_per_s"] / b["items_per_s"],
                "cpu_per_item": go["cpu_s_per_1000"] / b["cpu_s_per_1000"],
                "peak_pss": go["peak_pss_mib"] / b["peak_pss_mib"],
                "peak_rss": go["peak_rss_mib"] / b["peak_rss_mib"],
            }
    return out


def print_anchor_ratios(rat: dict[str, dict], unit: str) -> None:
    if rat:
        print()
    for k, r in rat.items():
        print(
            f"{k} (best: {r['best']}): throughput x{r['throughput']:.2f}, CPU/{unit} x{r['cpu_per_item']:.2f}, "
            f"peak PSS x{r['peak_pss']:.2f}, peak RSS x{r['peak_rss']:.2f}"
        )


def same_batches(runs: dict[str, list[dict]]) -> tuple[dict[str, Any], bool]:
    """The batch description each configuration's worker recorded ("sample"),
    and whether they all agree; prints which."""
    samples = {n: r[0]["sample"] for n, r in runs.items() if r and "sample" in r[0]}
    same = len({json.dumps(s) for s in samples.values()}) <= 1
    print(
        f"\nbatches: {next(iter(samples.values()), None)} from every configuration"
        if same
        else f"\nWARNING: configurations yield different batches: {samples}"
    )
    return samples, same


def write_results(path: str | Path, meta: dict, rows: dict, runs: dict, skipped: dict, title: str, unit: str) -> None:
    """Writes the JSON results (``meta`` plus rows, runs and skipped) and a
    PNG chart next to it, and says where."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_suffix(".png")
    why = bar_chart(rows, png, title, unit) if rows else "no rows"
    doc = {**meta, "rows": rows, "runs": runs, "skipped": skipped, "chart": None if why else str(png)}
    out.write_text(json.dumps(doc, indent=2))
    print(f"\nwrote {out}" + (f" and {png}" if not why else f" (no chart: {why})"))


class ItemsDataset:
    """Base of the anchors' map-style datasets: holds (path, label, ...) items."""

    def __init__(self, items):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)


def clips_main(
    script: str,
    *,
    doc: str,
    default_clips: int,
    json_default: Path,
    dataset: Callable[[int], list],
    configs: Callable[[int], list[tuple[str, str, str]]],
    import_error: Callable[[str], str | None],
    worker: Callable[[str, str, int], dict],
    header: Callable[[argparse.Namespace], str],
    title: str,
    batch: int,
    ours: Iterable[str],
    anchors: dict[str, str],
) -> None:
    """The command line of a clip benchmark (audio, video): as a worker
    (``--_worker kind param clips``) it prints one run's JSON; otherwise it
    runs every configuration, prints the table, the batches each produced
    and the ratios against the anchors, and writes JSON and a chart."""
    if len(sys.argv) == 5 and sys.argv[1] == "--_worker":
        print(json.dumps(worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
        return
    cores = os.cpu_count() or 1
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--clips", type=int, default=default_clips)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=cores)
    ap.add_argument("--json", default=str(json_default))
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run")
    args = ap.parse_args()

    items = dataset(args.clips)  # generate/cache before any timing
    warm_page_cache(p for p, *_ in items)

    skipped: dict[str, str] = {}
    cfgs = configs(args.threads)
    for name, kind, _ in cfgs:
        if err := import_error(kind):
            skipped[name] = err
            print(f"skipping {name}: {err}", file=sys.stderr)
    runs = run_all(script, cfgs, [str(args.clips)], args.repeat, args.timeout, skipped)
    rows = median_rows(runs)

    print(f"\n{header(args)}; {args.threads} threads, {cores} cores; median of {args.repeat} run(s)\n")
    print(markdown_table(rows, "clips", skipped))
    print("\nclips/s: " + ", ".join(f"{n} {r['items_per_s']:.1f}" for n, r in rows.items()))
    samples, same = same_batches(runs)
    rat = anchor_ratios(rows, ours, anchors)
    print_anchor_ratios(rat, "clip")

    meta = {"clips": args.clips, "repeat": args.repeat, "threads": args.threads, "cores": cores, "batch": batch}
    meta |= {"same_batches": same, "batches": samples, "ratios": rat}
    write_results(args.json, meta, rows, runs, skipped, title, "clips")


def measure_batches(batches: Iterable[Any], dtype: Any, sample_shape: tuple, expect: int) -> dict:
    """``measure`` for loaders that yield (data, labels) torch batches:
    checks each batch's dtype and per-sample shape and int64 labels, and
    records the batch description ("sample") so that runs can show every
    configuration produced the same batches."""
    import torch

    shapes = set()

    def count(batch) -> int:
        data, labels = batch
        shp = tuple(data.shape)
        assert data.dtype == dtype and shp[1:] == sample_shape, (data.dtype, shp)
        assert labels.dtype == torch.int64 and tuple(labels.shape) == (shp[0],), (labels.dtype, labels.shape)
        shapes.add((str(data.dtype), shp[1:], str(labels.dtype)))
        return shp[0]

    r = measure(batches, count, expect)
    r["sample"] = [list(map(str, s)) for s in sorted(shapes)]
    return r
