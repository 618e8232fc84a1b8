"""The reliability probes of issue 14: soak, cycles, corrupt, remote, cache,
signals. Each runs its cases in subprocesses and prints its figures; the
driver exits 1 on any crash, hang, leak, unnamed error, wrong byte or
failed check.

    python benchmarks/reliability/run.py --short            # CI: about 3 minutes
    python benchmarks/reliability/run.py --full --json out.json
    python benchmarks/reliability/run.py --short --only signals --seed 7

Seeds are fixed (``--seed``, default 14) and printed: the same seed makes
the same corpus, the same fault schedule and the same kill times.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

PROBES = ("soak", "cycles", "corrupt", "remote", "cache", "signals")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--short", action="store_true", help="the CI form (about 3 minutes)")
    mode.add_argument("--full", action="store_true", help="the full form (at most about 15 minutes)")
    ap.add_argument("--only", action="append", choices=PROBES, help="run only this probe (repeatable)")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()

    import spdl_go

    gil = "off" if sysconfig.get_config_var("Py_GIL_DISABLED") and not getattr(sys, "_is_gil_enabled", bool)() else "on"
    print(
        f"reliability ({'short' if args.short else 'full'}), seed {args.seed}: spdl_go {spdl_go.__version__} "
        f"from {Path(spdl_go.__file__).parent}, Python {platform.python_version()} (GIL {gil})"
    )
    tallies: list[common.Tally] = []
    start = time.monotonic()
    for name in args.only or PROBES:
        mod = importlib.import_module(name)
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"spdl-rel-{name}-") as tmp:
            try:
                tally = mod.run(args.short, args.seed, Path(tmp))
            except Exception as e:  # noqa: BLE001 - a probe that breaks is a failure, not the end
                tally = common.Tally(name, args.seed)
                tally.bad("failed_checks", f"the probe itself raised {type(e).__name__}: {e}")
                import traceback

                traceback.print_exc()
        tally.seconds = time.monotonic() - t0
        tally.print()
        tallies.append(tally)
    failed = [t.name for t in tallies if t.failed]
    total = time.monotonic() - start
    print(f"== reliability: {'FAIL (' + ', '.join(failed) + ')' if failed else 'ok'} in {total:.0f} s")
    if args.json:
        report = {
            "mode": "short" if args.short else "full",
            "seed": args.seed,
            "python": platform.python_version(),
            "gil": gil,
            "seconds": round(total, 1),
            "probes": [t.as_dict() for t in tallies],
        }
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
