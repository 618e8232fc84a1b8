"""GPU checks for ``ops.to_device``: pinned staging, copy correctness,
stream safety of reused device memory, and overlap of copies with compute.

It needs an NVIDIA GPU and PyTorch with CUDA. Run it as one prepared
script where a GPU is lent (the device tool; see its README):

    make gpu-bundle     # here: .gpu/libspdl.so built without FFmpeg (needs only libc)
    # there, with .gpu carried:
    SPDL_GO_LIBRARY=.gpu/libspdl.so PYTHONPATH=python python3 benchmarks/gpu_check.py --out $OUT/gpu_check.json

Each check records its figures, or its error, in the JSON; the script exits
1 if a check failed and 2 if there is no usable GPU. On a machine without
one it says so and exits 2 (CI never runs it).

What each check shows:
  runtime      what spdl_go.cuda.status() found.
  pinned       to_device staged through pinned memory (pinned bytes cached,
               none left in use) and host-to-device GB/s with pinned
               against pageable staging.
  correctness  every element of every batch on the GPU equals the CPU
               batch it came from (uint8 images, int64 labels, float32).
  streams      a batch imported on a side stream, read there by a kernel
               that runs after a long sleep, is released while the kernel
               is pending; the next batches reuse its memory: the result
               must still be the old batch's sum (the copy waited for the
               event recorded on the consumer's stream).
  overlap      time for N training-like steps (matmuls on the default
               stream) with batches from to_device, against compute alone
               and loading alone: overlap = (compute + load - both) /
               min(compute, load), 1.0 when the copies hide entirely.
               The same loop with torch's pin_memory().cuda(non_blocking=True)
               is timed for comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

import spdl_go
from spdl_go import cuda, ops


def _pipeline(arrays: list[Any], n: int, to_device: ops.NativeOp | None, prefetch: int = 3) -> spdl_go.Pipeline:
    """Batches i = arrays[i % len(arrays)], copied to the GPU by to_device."""

    def batch(i: int) -> Any:
        return arrays[i % len(arrays)]

    b = spdl_go.PipelineBuilder().add_source(range(n)).pipe(batch, name="batch")
    if to_device is not None:
        b = b.pipe(to_device, concurrency=2, output_order="input", name="to_device")
    return b.add_sink(prefetch).build()


def check_pinned(torch: Any) -> dict[str, Any]:
    size = 64 << 20
    arrays = [np.full(size, i, dtype=np.uint8) for i in range(4)]
    out: dict[str, Any] = {"batch_mib": size >> 20}
    for pinned in (True, False):
        cuda.trim_memory()
        p = _pipeline(arrays, 40, ops.to_device("cuda:0", pinned=pinned))
        with p.auto_stop():
            t0 = time.perf_counter()
            n = 0
            for b in p:
                x = torch.from_dlpack(b)
                n += x.numel()
                del x, b
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
        key = "pinned" if pinned else "pageable"
        out[f"{key}_gb_s"] = round(n / dt / 1e9, 2)
        st = cuda.memory_stats()
        out[f"{key}_memory_stats"] = st
        if pinned:
            assert st["pinned_cached_bytes"] >= size, f"no pinned staging buffer was cached: {st}"
        assert st["pinned_live_bytes"] == 0, f"pinned staging left in use: {st}"
    return out


def check_correctness(torch: Any) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    samples = [
        {
            "image": rng.integers(0, 256, (32, 3, 224, 224), dtype=np.uint8),
            "label": rng.integers(0, 1000, 32, dtype=np.int64),
            "feat": rng.standard_normal((32, 77), dtype=np.float32),
        }
        for _ in range(6)
    ]
    bad = 0
    batches = 0
    p = _pipeline(samples, 60, ops.to_device("cuda:0"))
    with p.auto_stop():
        for i, b in enumerate(p):
            want = samples[i % len(samples)]
            for k, v in b.items():
                g = torch.from_dlpack(v)
                assert g.device.type == "cuda", f"{k} arrived on {g.device}"
                if not np.array_equal(g.cpu().numpy(), want[k]):
                    bad += 1
            batches += 1
    assert batches == 60 and bad == 0, f"{bad} fields of {batches} batches differ from the CPU data"
    return {"batches": batches, "fields_differing": bad}


def check_streams(torch: Any) -> dict[str, Any]:
    size = 16 << 20
    arrays = [np.full(size // 4, float(i + 1), dtype=np.float32) for i in range(8)]
    side = torch.cuda.Stream()
    wrong = 0
    rounds = 10
    cuda.trim_memory()
    waits0 = cuda.memory_stats()["reuse_waits"]
    p = _pipeline(arrays, rounds * 4, ops.to_device("cuda:0"), prefetch=1)
    with p.auto_stop():
        it = iter(p)
        for r in range(rounds):
            b = next(it)
            expect = float(arrays[(r * 4) % len(arrays)][0]) * (size // 4)
            with torch.cuda.stream(side):
                x = torch.from_dlpack(b)  # __dlpack__(stream=side)
                torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before the read
                total = x.double().sum()
            del x, b  # released while the read is still queued
            for _ in range(3):  # these copies may land in the released buffer
                next(it)
            side.synchronize()
            if total.item() != expect:
                wrong += 1
        for _ in it:
            pass
    waits = cuda.memory_stats()["reuse_waits"] - waits0
    assert wrong == 0, f"{wrong} of {rounds} reads saw memory overwritten by a later batch"
    return {"rounds": rounds, "wrong_reads": wrong, "reuse_waits": waits}


def _time(fn: Callable[[], None], torch: Any) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def check_overlap(torch: Any, steps: int) -> dict[str, Any]:
    size = 16 << 20  # float32 elements: 64 MiB batches
    arrays = [np.full((size // 4096, 4096), float(i), dtype=np.float32) for i in range(4)]
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    resident = torch.from_numpy(arrays[0]).cuda()

    def step(x: Any) -> None:
        y = x[:4096].to(torch.bfloat16)
        for _ in range(6):
            y = y @ w
        x.sum()  # reads the whole batch

    def compute_only() -> None:
        for _ in range(steps):
            step(resident)

    def load_only() -> None:
        p = _pipeline(arrays, steps, ops.to_device("cuda:0"))
        with p.auto_stop():
            for b in p:
                torch.from_dlpack(b)

    def both() -> None:
        p = _pipeline(arrays, steps, ops.to_device("cuda:0"))
        with p.auto_stop():
            for b in p:
                step(torch.from_dlpack(b))

    def torch_way() -> None:
        p = _pipeline(arrays, steps, None)
        with p.auto_stop():
            for b in p:
                step(torch.from_dlpack(b).pin_memory().cuda(non_blocking=True))

    compute_only()  # warm-up: kernels, pools
    both()
    t = {
        name: _time(fn, torch)
        for name, fn in [
            ("compute", compute_only),
            ("load", load_only),
            ("both", both),
            ("torch_pin_memory", torch_way),
        ]
    }
    overlap = (t["compute"] + t["load"] - t["both"]) / min(t["compute"], t["load"])
    return {
        "steps": steps,
        "batch_mib": size * 4 >> 20,
        **{f"{k}_s": round(v, 4) for k, v in t.items()},
        "overlap": round(overlap, 3),
        "both_vs_compute": round(t["both"] / t["compute"], 3),
        "torch_pin_memory_vs_both": round(t["torch_pin_memory"] / t["both"], 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="", help="write the results as JSON here")
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    st = cuda.status()
    results: dict[str, Any] = {"runtime": st.__dict__, "spdl_go": spdl_go.__version__}
    if not st.available:
        print(f"gpu_check: no usable GPU ({st.error}); nothing to check", file=sys.stderr)
        print(json.dumps(results, indent=1))
        return 2
    import torch

    results["torch"] = torch.__version__
    results["gpu"] = torch.cuda.get_device_name(0)
    failed = False
    for name, fn in [
        ("pinned", lambda: check_pinned(torch)),
        ("correctness", lambda: check_correctness(torch)),
        ("streams", lambda: check_streams(torch)),
        ("overlap", lambda: check_overlap(torch, args.steps)),
    ]:
        t0 = time.perf_counter()
        try:
            results[name] = {"ok": True, **fn()}
        except Exception as e:  # one failing check must not hide the others
            failed = True
            results[name] = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
        results[name]["seconds"] = round(time.perf_counter() - t0, 2)
        print(name, json.dumps(results[name]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
