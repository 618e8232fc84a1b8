"""concurrency="auto": the tuner's decisions, as stats() shows them.

The tuner's logic is tested window by window, without a clock, in Go
(core/pipeline/autotune_step_test.go); these tests check what reaches
Python, on ops whose scaling does not depend on the machine's load.
"""

from __future__ import annotations

import hashlib
import time

from spdl_go import PipelineBuilder
from spdl_go.stats import StageStats, TuneStep

KNOWN = ("first guess", "probe up", "gained", "no gain", "idle", "re-check", "throughput held", "lost", "neither")


def check_log(s: StageStats, budget: int) -> list[TuneStep]:
    """The log explains the stage's concurrency: each step starts where the
    last one ended, stays within the ceiling and gives a reason and the
    window it measured."""
    log = s.tuning_log
    assert log, s
    for prev, t in zip(log, log[1:], strict=False):
        assert t.from_concurrency == prev.to_concurrency, log
        assert (t.epoch, t.at_s) >= (prev.epoch, prev.at_s), log
    for t in log:
        assert 1 <= t.from_concurrency <= s.max_concurrency and 1 <= t.to_concurrency <= budget, t
        assert any(k in t.reason for k in KNOWN), t
        assert t.items_per_s > 0 and 0 <= t.busy <= 1 and t.at_s > 0 and t.epoch >= 1, t
        assert t.cpu == -1 or t.cpu >= 0, t
    assert log[-1].to_concurrency == s.concurrency, log
    return log


def test_tuning_log_explains_growth(no_leaks):
    # time.sleep releases the GIL and uses no CPU: the stage scales with
    # threads however loaded the machine is, and has no first guess (it
    # is not CPU-bound), so the tuner climbs and says why.
    def wait(x):
        time.sleep(0.002)
        return x

    p = (
        PipelineBuilder()
        .add_source(range(1500))
        .pipe(wait, concurrency="auto", max_concurrency=6)
        .add_sink(4)
        .build(cpu_budget=6)
    )
    assert sorted(p) == list(range(1500))
    st = p.stats()
    s = st.stages[0]
    log = check_log(s, 6)
    assert s.concurrency >= 2, st.format()
    grew = [t for t in log if t.to_concurrency > t.from_concurrency]
    assert grew and "probe up" in grew[0].reason, st.format()
    # format() shows the last decisions under the stage's tuning line.
    text = st.format()
    assert f"{log[-1].from_concurrency} -> {log[-1].to_concurrency}: {log[-1].reason}" in text
    p.close()


def test_tuning_log_carries_over_epochs(no_leaks):
    # The choice and its log carry over: the second epoch's decisions
    # continue from where the first left the stage.
    def work(x):
        # hashlib releases the GIL on large inputs: a CPU-bound op that
        # threads can run in parallel, as a native decode does.
        return hashlib.sha256(bytes(1_000_000)).digest()[0] + x * 0

    p = (
        PipelineBuilder()
        .add_source(range(400), continuous=True)
        .pipe(work, concurrency="auto", max_concurrency=2)
        .add_sink(4)
        .build(cpu_budget=2)
    )
    for _ in range(2):
        assert sum(1 for _ in p) == 400
    st = p.stats()
    assert st.epoch == 2
    log = check_log(st.stages[0], 2)
    assert log[0].epoch == 1, st.format()
    p.close()
