"""signals: leaving a pipeline loop while Python code is stuck in it.

Each case is a child process that iterates a pipeline (``for batch in
pipeline``, the same inside ``with pipeline.auto_stop()``, or a
``DataLoader``) while a Python stage, a Python source's ``next()`` or a
dataset's ``__getitem__`` is stuck: (a) in ``time.sleep(1000)``, (b) in a
pure-Python loop (CPU-bound, holding the GIL on a GIL build). The loop is
then left by SIGINT (Ctrl-C), ``sys.exit(3)``, an uncaught exception, or a
SIGTERM handler that raises. Measured from the signal (or the raise):

* the process exits within EXIT_MAX_S (5 s); past HANG_S it is killed and
  counted as a hang;
* with SIGINT, ``KeyboardInterrupt`` reaches the loop within KI_MAX_S (1 s);
* ``sys.exit(3)`` exits with status 3.

And ``stop()`` from another thread (a slow stage, or a stuck one) ends the
consumer's ``for`` loop normally, and makes ``get_item`` raise
``EOFError``, not ``PipelineFailure``, within EXIT_MAX_S.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import common

EXIT_MAX_S = 5.0
KI_MAX_S = 1.0
HANG_S = 10.0
SETTLE_S = 0.5  # after the first item, time for the stage to get stuck

CHILD = r"""
import json, os, signal, sys, threading, time
# Started in the background by a non-interactive shell, a process inherits
# SIGINT ignored and Python installs no KeyboardInterrupt handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
cfg = json.loads(sys.argv[1])
from spdl_go import DataLoader, PipelineBuilder

def say(what):
    os.write(1, f"{what} {time.monotonic()}\n".encode())

def stuck():
    if cfg["stuck"] == "sleep":
        time.sleep(1000)
    x = 0
    while True:  # CPU-bound, pure Python
        x += 1

def stage(i):
    if cfg["where"] == "stage" and i >= 1:
        stuck()
    if cfg.get("slow"):
        time.sleep(cfg["slow"])
    return i

class Source:
    def __iter__(self):
        yield 0
        if cfg["where"] == "source":
            stuck()
        yield from range(1, 10**9)

if cfg["exit"] == "sigterm":
    def on_term(signum, frame):
        raise RuntimeError("terminated (SIGTERM)")
    signal.signal(signal.SIGTERM, on_term)

def leave():
    # sys.exit / exception: left from inside the loop, once the stage is stuck
    time.sleep(SETTLE)
    say("RAISE")
    if cfg["exit"] == "sys_exit":
        sys.exit(3)
    if cfg["exit"] == "exception":
        raise ValueError("the training step failed")

SETTLE = cfg["settle"]
if cfg["form"] == "dataloader":
    class DS:
        def __len__(self):
            return 10**6
        def __getitem__(self, i):
            return stage(i)
    loop = DataLoader(DS(), batch_size=1, num_threads=1, output="numpy")
else:
    loop = PipelineBuilder().add_source(Source()).pipe(stage).add_sink(1).build(num_threads=2)

def consume(it):
    n = 0
    try:
        for _ in it:
            n += 1
            if n == 1:
                say("READY")
                if cfg["exit"] in ("sys_exit", "exception"):
                    leave()
    except KeyboardInterrupt:
        say("KI")
        raise
    say(f"ENDED {n}")

if cfg["exit"] == "stop_thread":
    def stopper():
        time.sleep(SETTLE + 0.5)
        say("STOP")
        loop.stop()
        say("STOPPED")
    threading.Thread(target=stopper, daemon=True).start()
    if cfg["form"] == "get_item":
        try:
            while True:
                loop.get_item()
                say("READY")
        except EOFError:
            say("EOF")
        except BaseException as e:
            say(f"RAISED {type(e).__name__}: {str(e).splitlines()[0][:200]}".replace(" ", "_"))
            raise
    else:
        try:
            consume(loop)
        except BaseException as e:
            say(f"RAISED {type(e).__name__}: {str(e).splitlines()[0][:200]}".replace(" ", "_"))
            raise
    sys.exit(0)

if cfg["form"] == "auto_stop":
    with loop.auto_stop():
        consume(loop)
else:
    consume(loop)
"""


def _run_child(cfg: dict[str, Any]) -> dict[str, Any]:
    """Runs one case; returns the times of its events (monotonic) and how
    it ended."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    events: dict[str, float] = {}
    extra: list[str] = []
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    start = time.monotonic()
    sent = None
    deadline = start + 30.0  # to READY (imports, start)
    end = None
    while True:
        now = time.monotonic()
        if sent is None and "READY" in events and cfg["exit"] in ("sigint", "sigterm") and now >= events["READY"] + 0.5:
            os.kill(proc.pid, signal.SIGINT if cfg["exit"] == "sigint" else signal.SIGTERM)
            sent = time.monotonic()
            events["SENT"] = sent
            deadline = sent + HANG_S
        if "RAISE" in events or "STOP" in events:
            deadline = min(deadline, events.get("RAISE", events.get("STOP", now)) + HANG_S)
        if now > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {"events": events, "extra": extra, "hang": True, "stderr": proc.stderr.read().decode()[-800:]}
        for _ in sel.select(0.02):
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                end = time.monotonic()
                sel.unregister(proc.stdout)
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                parts = line.decode().split()
                if len(parts) >= 2:
                    events.setdefault(parts[0], float(parts[-1]))
                    if len(parts) > 2:
                        extra.append(" ".join(parts[1:-1]).replace("_", " "))
        if end is not None:
            break
    code = proc.wait()
    return {"events": events, "extra": extra, "hang": False, "code": code, "end": end,
            "stderr": proc.stderr.read().decode()[-800:]}  # fmt: skip


def _cases(short: bool) -> list[dict[str, Any]]:
    exits = ("sigint", "sys_exit", "exception", "sigterm")
    cases = []
    for form in ("for", "auto_stop", "dataloader"):
        for where in ("stage", "source"):
            if form == "dataloader" and where == "source":
                continue
            for stuck in ("sleep", "cpu"):
                for ex in exits:
                    if short and not (form == "for" or (ex == "sigint" and where == "stage")):
                        continue
                    if short and form == "for" and where == "source" and stuck == "cpu":
                        continue
                    cases.append({"form": form, "where": where, "stuck": stuck, "exit": ex})
    for form in ("for", "get_item"):
        cases.append({"form": form, "where": "none", "stuck": "sleep", "exit": "stop_thread", "slow": 0.05})
        cases.append({"form": form, "where": "stage", "stuck": "sleep", "exit": "stop_thread"})
    for c in cases:
        c["settle"] = SETTLE_S
    return cases


def _label(c: dict[str, Any]) -> str:
    what = f"{c['where']} stuck in {c['stuck']}" if c["where"] != "none" else f"stage taking {c.get('slow')} s"
    return f"{c['form']} / {c['exit']} / {what}"


def run(short: bool, seed: int, tmp: Path) -> common.Tally:
    t = common.Tally("signals", seed)  # no randomness: the seed is printed for the record
    cases = _cases(short)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(_run_child, cases))
    worst = 0.0
    for c, r in zip(cases, results, strict=True):
        label = _label(c)
        t.tried += 1
        ev = r["events"]
        if "READY" not in ev and c["exit"] != "stop_thread":
            t.bad("failed_checks", f"{label}: never got the first item: {r['stderr'][-300:]}")
            continue
        if c["exit"] == "stop_thread":
            _judge_stop(t, label, c, r)
            continue
        ref = ev.get("SENT", ev.get("RAISE"))
        if ref is None:
            t.bad("failed_checks", f"{label}: the exit was never triggered: {r['stderr'][-300:]}")
            continue
        if r["hang"]:
            t.bad("hangs", f"{label}: still running {HANG_S:.0f} s after the {c['exit']} (killed)")
            worst = max(worst, HANG_S)
            continue
        took = r["end"] - ref
        worst = max(worst, took)
        t.figures[f"exit_s: {label}"] = round(took, 2)
        if took > EXIT_MAX_S:
            t.bad("failed_checks", f"{label}: exited {took:.1f} s after the {c['exit']} (bound {EXIT_MAX_S:.0f} s)")
        if c["exit"] == "sigint":
            if "KI" not in ev:
                t.bad("failed_checks", f"{label}: KeyboardInterrupt never reached the loop")
            elif ev["KI"] - ref > KI_MAX_S:
                t.bad("failed_checks", f"{label}: KeyboardInterrupt reached the loop after {ev['KI'] - ref:.2f} s")
            else:
                t.figures[f"ki_s: {label}"] = round(ev["KI"] - ref, 2)
        if c["exit"] == "sys_exit" and r["code"] != 3:
            t.bad("failed_checks", f"{label}: sys.exit(3) exited with status {r['code']}")
    t.figures["slowest_exit_s"] = round(worst, 2)
    return t


def _judge_stop(t: common.Tally, label: str, c: dict[str, Any], r: dict[str, Any]) -> None:
    ev = r["events"]
    raised = [x for x in r["extra"] if x.startswith(("RuntimeError", "PipelineFailure", "ExceptionGroup"))]
    raised += [x for x in r["extra"] if ":" in x and not x[0].isdigit()]
    if r["hang"]:
        t.bad("hangs", f"{label}: the consumer or stop() still blocked {HANG_S:.0f} s after stop()")
        return
    if "STOP" not in ev:
        t.bad("failed_checks", f"{label}: stop() was never called: {r['stderr'][-300:]}")
        return
    end = ev.get("EOF", ev.get("ENDED"))
    if end is None:
        t.bad("failed_checks", f"{label}: the loop did not end normally: {raised[:1] or r['stderr'][-300:]}")
        return
    took = end - ev["STOP"]
    t.figures[f"loop_end_s: {label}"] = round(took, 2)
    if took > EXIT_MAX_S:
        t.bad("failed_checks", f"{label}: the loop ended {took:.1f} s after stop()")
    if r["code"] != 0:
        t.bad("failed_checks", f"{label}: exit status {r['code']}: {r['stderr'][-300:]}")
