"""A training-style loop over a dataset this demo generates itself.

Run it with ``python -m spdl_go.demo`` (``make demo`` from a checkout). It
writes a few thousand small samples (float32 3x32x32 feature maps plus a
label, one file each, and one deliberately corrupt file) to a cache folder,
then trains a linear classifier with numpy for two epochs, feeding it with
an spdl-go pipeline: a Python loader stage on Go threads, batching, and a
native collate stage that hands batches over zero-copy (DLPack for the
features, Arrow for the labels). It prints throughput and the pipeline's
per-stage stats.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

import spdl_go
from spdl_go import PipelineBuilder, ops

SHAPE = (3, 32, 32)
CLASSES = 10


def generate(root: Path, n: int, seed: int = 0) -> list[tuple[str, int]]:
    """Writes n samples (deterministic from seed) unless already there."""
    root.mkdir(parents=True, exist_ok=True)
    manifest = root / f"manifest-{n}-{seed}.txt"
    if manifest.exists():
        return [(p, int(label)) for p, label in (line.split("\t") for line in manifest.read_text().splitlines())]
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(CLASSES, *SHAPE)).astype(np.float32)
    items = []
    for i in range(n):
        label = int(rng.integers(CLASSES))
        x = centers[label] + rng.normal(scale=2.0, size=SHAPE).astype(np.float32)
        path = root / f"sample-{seed}-{i:06d}.f32"
        x.tofile(path)
        items.append((str(path), label))
    bad = root / f"sample-{seed}-corrupt.f32"
    bad.write_bytes(b"\x00" * 100)  # truncated: one item fails, the epoch goes on
    items.insert(n // 2, (str(bad), 0))
    manifest.write_text("".join(f"{p}\t{label}\n" for p, label in items))
    return items


def load(item: tuple[str, int]) -> dict:
    path, label = item
    x = np.fromfile(path, dtype=np.float32)
    if x.size != np.prod(SHAPE):
        raise ValueError(f"{path}: {x.size * 4} bytes, expected {int(np.prod(SHAPE)) * 4}")
    return {"x": x.reshape(SHAPE), "label": label}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument(
        "--data", type=Path, default=Path(os.environ.get("SPDL_GO_DATA", Path(tempfile.gettempdir()) / "spdl-go-demo"))
    )
    args = ap.parse_args()

    t0 = time.perf_counter()
    items = generate(args.data, args.samples)
    print(f"dataset: {len(items)} files in {args.data} ({time.perf_counter() - t0:.1f}s to prepare)")

    pipeline = (
        PipelineBuilder()
        .add_source(items, continuous=True)  # one epoch per `for`
        .pipe(load, concurrency=args.threads, name="load")
        .aggregate(args.batch_size)
        .pipe(ops.collate(), concurrency=2, name="collate")
        .add_sink(buffer_size=4)
        .build(num_threads=args.threads + 2)
    )

    import pyarrow as pa

    rng = np.random.default_rng(1)
    dim = int(np.prod(SHAPE))
    w = rng.normal(scale=0.01, size=(dim, CLASSES)).astype(np.float32)
    lr = 0.05
    for epoch in range(args.epochs):
        seen = correct = 0
        loss_sum = 0.0
        t0 = time.perf_counter()
        for batch in pipeline:
            x = np.from_dlpack(batch["x"]).reshape(-1, dim)  # zero-copy view of C memory
            y = pa.array(batch["label"]).to_numpy()  # zero-copy Arrow column
            logits = x @ w
            logits -= logits.max(axis=1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=1, keepdims=True)
            loss_sum += float(-np.log(p[np.arange(len(y)), y] + 1e-9).sum())
            correct += int((p.argmax(axis=1) == y).sum())
            p[np.arange(len(y)), y] -= 1
            w -= lr * (x.T @ p) / len(y)
            seen += len(y)
        dt = time.perf_counter() - t0
        print(
            f"epoch {epoch + 1}/{args.epochs}: {seen} samples in {dt:.2f}s = {seen / dt:,.0f} samples/s, "
            f"loss {loss_sum / max(seen, 1):.3f}, accuracy {correct / max(seen, 1):.1%}"
        )
        stats = pipeline.stats()
        print(stats.format())
        for err in stats.recent_errors:
            print("  failed item:", err.splitlines()[0])
    pipeline.close()
    del batch, x  # the last batch's memory goes back to the pool
    mem = spdl_go.memory_stats()
    print(f"engine memory after close: {mem['live_bytes']} bytes live, {mem['pooled_bytes']} bytes pooled")


if __name__ == "__main__":
    main()
