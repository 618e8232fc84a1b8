"""Statistics of a running pipeline: what ``Pipeline.stats()`` returns.

The engine keeps per-stage counters in atomics and hands out a JSON
snapshot; these frozen dataclasses are that snapshot, typed, with times in
seconds. ``PipelineStats.format()`` renders it as a table, and
``bottleneck`` carries the engine's judgement of what limits throughput.

Example:
    >>> st = pipeline.stats()
    >>> st.stages[0].items_per_s, st.bottleneck.stage
    (812.4, 'decode')
    >>> print(st.format())
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Bottleneck", "PipelineStats", "StageStats", "TuneStep"]


@dataclass(frozen=True)
class TuneStep:
    """One decision of a ``concurrency="auto"`` stage's tuner, with the
    measurement window it rests on."""

    at_s: float
    """Seconds since the epoch started."""
    epoch: int
    """The epoch it was made in (1 for the first)."""
    from_concurrency: int
    """The stage's concurrency before."""
    to_concurrency: int
    """And after (the same where the tuner kept it)."""
    reason: str
    """Why, in words, e.g. "first guess: CPU-bound op (process at 1.2 of 2 cores), fill the idle cores"."""
    items_per_s: float
    """The stage's throughput in the window."""
    busy: float
    """Its workers' busy fraction in the window, in [0, 1]."""
    cpu: float
    """Cores the whole process used in the window (-1 if unknown)."""

    @classmethod
    def _from(cls, d: dict[str, Any]) -> TuneStep:
        return cls(
            at_s=int(d.get("at_ns", 0)) / 1e9,
            epoch=int(d.get("epoch", 0)),
            from_concurrency=int(d.get("from", 0)),
            to_concurrency=int(d.get("to", 0)),
            reason=d.get("reason", "") or "",
            items_per_s=float(d.get("items_per_s", 0.0)),
            busy=float(d.get("busy", 0.0)),
            cpu=float(d.get("cpu", -1.0)),
        )

    def format(self) -> str:
        cpu = f", process {self.cpu:.1f} cores" if self.cpu >= 0 else ""
        return (
            f"epoch {self.epoch} +{self.at_s:.3f}s: {self.from_concurrency} -> {self.to_concurrency}: {self.reason} "
            f"({self.items_per_s:,.0f} items/s, workers {self.busy:.0%} busy{cpu})"
        )


@dataclass(frozen=True)
class StageStats:
    """Counters of one stage, read from the engine's atomics."""

    name: str
    """The stage's name (``pipe(name=)``, else the op's)."""
    kind: str
    """"source", "pipe", "aggregate" or "disaggregate"."""
    concurrency: int
    """Items the stage works on at once (with ``auto``, the current choice)."""
    items_in: int
    """Items the stage took from its input queue this epoch."""
    items_out: int
    """Items the stage put on its output queue this epoch (for the source: items it yielded)."""
    failures: int
    """Items the stage failed (dropped) this epoch."""
    busy_s: float
    """Summed wall time the stage's op ran, over all its threads."""
    active: int
    """Op calls running now."""
    queue_len: int
    """Items waiting in the stage's output queue now."""
    queue_cap: int
    """The output queue's capacity (``build(queue_size=)``)."""
    queue_mean_occupancy: float
    """Mean fullness of the output queue, sampled after each item sent, in
    [0, 1]: near 1, something downstream is the bottleneck; near 0, this
    stage or one before it is."""
    latency_p50_s: float = 0.0
    """Median time of one op call (pipe stages; within 12.5%)."""
    latency_p90_s: float = 0.0
    """90th percentile of one op call's time."""
    latency_p99_s: float = 0.0
    """99th percentile of one op call's time."""
    items_per_s: float = 0.0
    """Items out per second of the epoch's elapsed time."""
    busy_fraction: float = 0.0
    """Busy time over elapsed time times concurrency, in [0, 1]."""
    abandoned: int = 0
    """Calls given up after ``timeout`` (also counted in ``failures``)."""
    auto: bool = False
    """The stage was built with ``concurrency="auto"``; ``concurrency`` is the tuner's current choice."""
    max_concurrency: int = 0
    """With ``auto``, the most threads the tuner may give the stage."""
    tuning: str = ""
    """The tuner's state in words, e.g. "settled at 2 (812 items/s, workers 97% busy)"."""
    tuning_log: list[TuneStep] = field(default_factory=list)
    """With ``auto``, the tuner's last 32 decisions, oldest first: how it
    reached ``concurrency``."""
    op_stats: dict[str, int] = field(default_factory=dict)
    """The op's own counters, e.g. ``read_file``'s cache: cache_memory_hits,
    cache_disk_hits, cache_misses, cache_memory_bytes, cache_disk_bytes,
    cache_evictions, cache_corrupt_entries (disk entries that failed their
    checksum, deleted and read again; cumulative over epochs)."""

    @classmethod
    def _from(cls, d: dict[str, Any]) -> StageStats:
        return cls(
            name=d.get("name", ""),
            kind=d.get("kind", ""),
            concurrency=int(d.get("concurrency", 0)),
            items_in=int(d.get("items_in", 0)),
            items_out=int(d.get("items_out", 0)),
            failures=int(d.get("failures", 0)),
            busy_s=int(d.get("busy_ns", 0)) / 1e9,
            active=int(d.get("active", 0)),
            queue_len=int(d.get("queue_len", 0)),
            queue_cap=int(d.get("queue_cap", 0)),
            queue_mean_occupancy=float(d.get("queue_mean_occupancy", 0.0)),
            latency_p50_s=int(d.get("latency_p50_ns", 0)) / 1e9,
            latency_p90_s=int(d.get("latency_p90_ns", 0)) / 1e9,
            latency_p99_s=int(d.get("latency_p99_ns", 0)) / 1e9,
            items_per_s=float(d.get("items_per_s", 0.0)),
            busy_fraction=float(d.get("busy_fraction", 0.0)),
            abandoned=int(d.get("abandoned", 0)),
            auto=bool(d.get("auto", False)),
            max_concurrency=int(d.get("max_concurrency", 0)),
            tuning=d.get("tuning", "") or "",
            tuning_log=[TuneStep._from(t) for t in d.get("tuning_log") or []],
            op_stats={k: int(v) for k, v in (d.get("op_stats") or {}).items()},
        )


@dataclass(frozen=True)
class Bottleneck:
    """The stage that limits throughput, as the engine judges it."""

    stage: str
    """``"consumer"`` (the loop reading the pipeline), ``"source"``, a stage name, or ``""`` if unclear."""
    reason: str
    """Why, in words, with the numbers the judgement rests on."""
    advice: str
    """What to change, e.g. which stage's concurrency to raise."""

    @classmethod
    def _from(cls, d: dict[str, Any]) -> Bottleneck:
        return cls(stage=d.get("stage", ""), reason=d.get("reason", ""), advice=d.get("advice", ""))


@dataclass(frozen=True)
class PipelineStats:
    """A snapshot of a pipeline's counters (``Pipeline.stats()``)."""

    state: str
    """"built", "running", "done", "failed" or "stopped"."""
    epoch: int
    """Epochs started so far (the running one included)."""
    elapsed_s: float
    """Wall time since the epoch started (until it ended, once it has)."""
    source: StageStats
    """The source's counters (``items_out`` is items produced)."""
    stages: list[StageStats]
    """The counters of the user's stages, in the order they were added."""
    sink_len: int
    """Finished items waiting for the consumer now."""
    sink_cap: int
    """The sink's capacity (``add_sink(buffer_size=)``)."""
    delivered: int
    """Items handed to the consumer this epoch."""
    failures: int
    """Items failed this epoch over all stages."""
    error: str
    """Why the pipeline failed, or ``""``."""
    recent_errors: list[str] = field(default_factory=list)
    """The last 16 item errors (stage, item and traceback), oldest first."""
    bottleneck: Bottleneck = field(default_factory=lambda: Bottleneck("", "", ""))
    """The stage that limits throughput, as the engine judges it."""
    sink_mean_occupancy: float = 0.0
    """Mean fullness of the sink over the epoch, in [0, 1]: near 1 means the
    consumer (the training loop) is the slower side."""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    """The engine's JSON snapshot as it came."""

    @classmethod
    def _from(cls, d: dict[str, Any]) -> PipelineStats:
        sink = d.get("sink") or {}
        return cls(
            state=d.get("state", ""),
            epoch=int(d.get("epoch", 0)),
            elapsed_s=int(d.get("elapsed_ns", 0)) / 1e9,
            source=StageStats._from(d.get("source") or {}),
            stages=[StageStats._from(s) for s in d.get("stages") or []],
            sink_len=int(sink.get("len", 0)),
            sink_cap=int(sink.get("cap", 0)),
            delivered=int(sink.get("delivered", 0)),
            failures=int(d.get("failures", 0)),
            error=d.get("error", "") or "",
            recent_errors=list(d.get("recent_errors") or []),
            bottleneck=Bottleneck._from(d.get("bottleneck") or {}),
            sink_mean_occupancy=float(sink.get("mean_occupancy", 0.0)),
            raw=d,
        )

    def format(self) -> str:
        """A human-readable table of the per-stage counters."""
        rate = self.delivered / self.elapsed_s if self.elapsed_s > 0 else 0.0
        lines = [
            f"epoch {self.epoch} ({self.state}): {self.delivered} items delivered in {self.elapsed_s:.3f}s "
            f"({rate:,.0f}/s), {self.failures} failures",
            f"  {'stage':<24}{'conc':>5}{'in':>10}{'out':>10}{'fail':>6}{'busy s':>9}{'busy':>6}{'queue':>7}"
            f"{'p50 ms':>9}{'p99 ms':>9}",
        ]
        for s in [self.source, *self.stages]:
            lines.append(
                f"  {s.name:<24}{s.concurrency:>5}{s.items_in:>10}{s.items_out:>10}{s.failures:>6}"
                f"{s.busy_s:>9.3f}{s.busy_fraction:>6.0%}{s.queue_mean_occupancy:>7.0%}"
                f"{s.latency_p50_s * 1e3:>9.2f}{s.latency_p99_s * 1e3:>9.2f}"
            )
        for s in [self.source, *self.stages]:
            if s.auto:
                lines.append(f"  {s.name}: concurrency auto (max {s.max_concurrency}): {s.tuning}")
                lines.extend(f"    {t.format()}" for t in s.tuning_log[-8:])
            if s.op_stats:
                lines.append(f"  {s.name}: " + ", ".join(f"{k} {v:,}" for k, v in sorted(s.op_stats.items())))
        lines.append(f"  sink buffer {self.sink_len}/{self.sink_cap} (mean {self.sink_mean_occupancy:.0%} full)")
        b = self.bottleneck
        if b.stage:
            lines.append(f"  bottleneck: {b.stage}: {b.reason}; {b.advice}")
        elif b.reason:
            lines.append(f"  bottleneck: {b.reason}")
        return "\n".join(lines)
