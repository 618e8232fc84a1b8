"""What the reliability probes share: the tally of what went wrong, and a
runner that executes a probe's cases in worker subprocesses, so that a
crash (the process dies), a hang (a case outlives its timeout) or a leak is
counted against the case and never takes the driver down.

Protocol: the driver writes the cases (JSON) to a file and starts
``python <probe>.py --worker CASES START``; the worker prints ``@S i`` before
case i and ``@R i <json>`` after it. A worker that dies or hangs is killed
(its whole process group) and a fresh one goes on with the next case.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Counts that fail the run; every probe prints all of them.
FAILING = ("crashes", "hangs", "leaks", "unnamed", "wrong_bytes", "failed_checks")


@dataclass
class Tally:
    """One probe's figures."""

    name: str
    seed: int
    tried: int = 0
    crashes: int = 0
    hangs: int = 0
    leaks: int = 0
    unnamed: int = 0
    wrong_bytes: int = 0
    # A requirement of the issue broken other than the five above (a good
    # item lost, a slow exit, a truncated GIF decoded as ok, ...).
    failed_checks: int = 0
    figures: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def bad(self, kind: str, what: str, n: int = 1) -> None:
        """Counts ``n`` of ``kind`` (one of FAILING) and keeps why."""
        setattr(self, kind, getattr(self, kind) + n)
        self.problems.append(f"{kind}: {what}")

    def add(self, key: str, n: float = 1) -> None:
        self.figures[key] = self.figures.get(key, 0) + n

    @property
    def failed(self) -> bool:
        return any(getattr(self, k) for k in FAILING)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seed": self.seed,
            "tried": self.tried,
            **{k: getattr(self, k) for k in FAILING},
            "figures": self.figures,
            "problems": self.problems,
            "seconds": round(self.seconds, 1),
            "ok": not self.failed,
        }

    def print(self, max_problems: int = 40) -> None:
        counts = ", ".join(f"{k} {getattr(self, k)}" for k in FAILING)
        verdict = "FAIL" if self.failed else "ok"
        print(f"== {self.name}: {verdict} (seed {self.seed}, {self.seconds:.1f} s): tried {self.tried}, {counts}")
        for k, v in sorted(self.figures.items()):
            print(f"   {k}: {round(v, 4) if isinstance(v, float) else v}")
        # The same problem repeated (one per seed) is shown once, with a count.
        seen: dict[str, int] = {}
        for p in self.problems:
            seen[p] = seen.get(p, 0) + 1
        for i, (p, n) in enumerate(seen.items()):
            if i == max_problems:
                print(f"   ... and {len(seen) - max_problems} more distinct problems")
                break
            print(f"   ! {p}" + (f" (x{n})" if n > 1 else ""))
        sys.stdout.flush()


# How long a worker may take to exit after its last case.
EXIT_TIMEOUT = 30.0


@dataclass
class Outcome:
    """How one case ended: ``status`` is "ok" (``result`` is the worker's
    dict), "crash" (the worker died: ``detail`` has its exit and stderr) or
    "hang" (killed after the timeout)."""

    status: str
    result: dict[str, Any] = field(default_factory=dict)
    detail: str = ""
    seconds: float = 0.0


def _tail(path: str, n: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _why(path: str) -> str:
    """The lines of a dead worker's stderr that say why (a Go panic or
    fatal error, a signal), else its tail."""
    try:
        text = open(path, "rb").read().decode(errors="replace")
    except OSError:
        return ""
    keys = ("panic:", "fatal error:", "SIGSEGV", "SIGABRT", "Fatal Python error", "[signal ", "Killed")
    lines = [ln.strip() for ln in text.splitlines() if any(k in ln for k in keys)]
    return " | ".join(lines[:4])[:600] if lines else "..." + _tail(path, 600)


def run_cases(
    script: str,
    cases: list[dict[str, Any]],
    timeout: float | Callable[[dict[str, Any]], float],
    env: dict[str, str] | None = None,
) -> list[Outcome]:
    """Runs ``cases`` in worker processes of ``script`` (see the module
    docstring), each case within ``timeout`` seconds."""
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="spdl-rel-") as tmp:
        cases_path = os.path.join(tmp, "cases.json")
        with open(cases_path, "w") as f:
            json.dump(cases, f)
        start = 0
        while start < len(cases):
            err_path = os.path.join(tmp, f"stderr-{start}.txt")
            with open(err_path, "wb") as err:
                proc = subprocess.Popen(
                    [sys.executable, script, "--worker", cases_path, str(start)],
                    stdout=subprocess.PIPE,
                    stderr=err,
                    env={**os.environ, **(env or {})},
                    start_new_session=True,
                )
            start = _drive(proc, cases, start, timeout, err_path, outcomes)
    return outcomes


def _drive(
    proc: subprocess.Popen[bytes],
    cases: list[dict[str, Any]],
    start: int,
    timeout: float | Callable[[dict[str, Any]], float],
    err_path: str,
    outcomes: list[Outcome],
) -> int:
    """Reads one worker's reports; returns the next case to run."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    current, began = start, time.monotonic()

    def limit() -> float:
        if current >= len(cases):
            return EXIT_TIMEOUT
        return timeout(cases[current]) if callable(timeout) else timeout

    try:
        while True:
            left = began + limit() - time.monotonic()
            if left <= 0:
                _kill(proc)
                if current >= len(cases):  # every case done, but the process would not exit
                    last = outcomes[-1]
                    last.status, last.detail = "hang", f"the worker did not exit within {EXIT_TIMEOUT:.0f} s"
                    return current
                outcomes.append(Outcome("hang", detail=f"no result within {limit():.0f} s", seconds=limit()))
                return current + 1
            events = sel.select(min(left, 1.0))
            if not events:
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:  # the worker exited
                code = proc.wait()
                if current >= len(cases):
                    return current
                how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
                detail = f"worker died ({how}); stderr: {_why(err_path)}"
                outcomes.append(Outcome("crash", detail=detail, seconds=time.monotonic() - began))
                return current + 1
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.startswith(b"@S "):
                    current, began = int(line.split()[1]), time.monotonic()
                elif line.startswith(b"@R "):
                    _, idx, payload = line.split(b" ", 2)
                    outcomes.append(Outcome("ok", json.loads(payload), seconds=time.monotonic() - began))
                    current, began = int(idx) + 1, time.monotonic()
    finally:
        sel.close()
        if proc.poll() is None:
            _kill(proc)
        proc.stdout.close()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def worker_main(handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]]) -> None:
    """The worker side: runs the cases from ``argv[2]`` from index ``argv[3]``
    with ``handlers[case["kind"]]``. A Python exception out of a handler is
    reported as the case's ``exception`` (the probe decides what it means)."""
    with open(sys.argv[2]) as f:
        cases = json.load(f)
    out = os.fdopen(os.dup(1), "w")  # the protocol's own stream

    def say(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    for i in range(int(sys.argv[3]), len(cases)):
        say(f"@S {i}")
        try:
            res = handlers[cases[i]["kind"]](cases[i])
        except BaseException as e:  # noqa: BLE001 - reported, the probe judges it
            res = {"exception": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-1500:]}
        say(f"@R {i} {json.dumps(res, default=str)}")
    out.close()


# ---- process figures ---------------------------------------------------------


def proc_status() -> dict[str, int]:
    """RSS (bytes), peak RSS, OS threads and open fds of this process."""
    out = {"rss": 0, "hwm": 0, "threads": 0}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                out["hwm"] = int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                out["threads"] = int(line.split()[1])
    out["fds"] = len(os.listdir("/proc/self/fd"))
    return out


def engine_memory() -> dict[str, int]:
    """The engine's live C memory: tensors and Arrow buffers."""
    import spdl_go

    m = spdl_go.memory_stats()
    return {
        "live_tensors": int(m.get("live_tensors", 0)),
        "live_bytes": int(m.get("live_bytes", 0)),
        "arrow_bytes": int(spdl_go.arrow_allocated_bytes()),
    }


def settle(check: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Polls ``check`` (after a gc) until it holds or ``seconds`` pass:
    threads and buffers are released asynchronously."""
    import gc

    deadline = time.monotonic() + seconds
    while True:
        gc.collect()
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def slope(ys: list[float]) -> float:
    """Least-squares slope of ys over their index."""
    n = len(ys)
    if n < 2:
        return 0.0
    mx = (n - 1) / 2
    my = sum(ys) / n
    num = sum((i - mx) * (y - my) for i, y in enumerate(ys))
    den = sum((i - mx) ** 2 for i in range(n))
    return num / den


def pipeline_errors(pipeline: Any) -> tuple[int, list[str]]:
    """The epoch's failed count and its recent error messages."""
    st = pipeline.stats()
    return int(st.failures), list(st.recent_errors)
