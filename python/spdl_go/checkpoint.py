"""Mid-epoch checkpoints for pipelines fed by a sampler-based source.

``sources.sampler``, ``sources.files`` and ``sources.image_folder`` deal out
a known number of samples in an order fixed by the seed and the epoch. Made
with ``with_index=True``, every sample carries its dataset index through
the pipeline (media ops keep it; ``collate`` turns it into a column). A
``ResumableSource`` records the indices of the batches handed to the
training loop, and its state resumes the epoch exactly there, with any
number of ranks or threads:

    src = ResumableSource(sources.image_folder(root, shuffle=True, with_index=True))
    pipeline = build(src.source)    # builds with add_source(src.source, continuous=True)
    for images, labels, idx in src.track(pipeline):    # one epoch
        train(images, labels)
    torch.save(src.state_dict(), path)                 # at any step; under torchrun, on every rank
    # after a restart:
    src.load_state_dict(torch.load(path)); pipeline = build(src.source)
"""

from __future__ import annotations

import json
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from . import _lib
from .sources import NativeSource

__all__ = ["ResumableSource"]


class ResumableSource:
    """Tracks how much of each epoch of a source the training loop has
    consumed, for ``state_dict`` / ``load_state_dict``.

    Sampler-based sources (``sampler``, ``files``, ``image_folder``) resume
    with the next unseen sample in the same order. Streaming sources
    (``webdataset``, ``table``) resume by dealing the epoch's shards or
    parts to the ranks again and skipping the samples already consumed:
    nothing is lost or repeated. Shards consumed whole are not opened
    again, where their sample counts are known (Parquet footers give
    them; tar shards and Arrow batches once read to their end); a shard
    consumed in part is read again, its consumed samples skipped.

    Args:
        source: A source from ``sources.sampler``, ``files``,
            ``image_folder``, ``webdataset`` or ``table``. To use
            ``track``'s default index reader, make it with
            ``with_index=True``.
    """

    def __init__(self, source: NativeSource) -> None:
        if not isinstance(source, NativeSource) or source.resumes is None:
            raise TypeError(
                "ResumableSource: needs a source from sources.sampler, files, image_folder, webdataset or table "
                f"(got {source!r:.80})"
            )
        self._stream = source.resumes == "stream"
        self._base = source
        self._cfg = source.sampler_config()
        self._dataset = source.state_dataset()
        self._resume: dict[str, Any] | None = None
        # The epoch being read: where it started, and the dataset indices
        # handed to the training loop since.
        self._progress: dict[str, Any] = {"epoch": source.epoch, "prefix": 0}
        self._consumed: list[int] = []
        self._finished = False
        self._next_epoch = self._progress["epoch"]
        # Streaming sources: the units' sample counts learned from the
        # tracked pipelines, and the one being tracked (weakly).
        self._sizes: dict[str, int] = {}
        self._tracked: Callable[[], Any] = lambda: None
        self._last: Callable[[], Any] = lambda: None  # the pipeline tracked last

    @property
    def source(self) -> NativeSource:
        """The source to build the pipeline from: the given one, or after
        ``load_state_dict`` the same with its first epoch resumed."""
        if self._resume is None:
            return self._base
        return self._base.resumed(self._resume)

    def track(self, pipeline: Any, index: Callable[[Any], Any] | None = None) -> Iterator[Any]:
        """Iterates one epoch of ``pipeline``, recording each batch's
        dataset indices as it is handed out.

        Args:
            pipeline: A pipeline built from ``self.source`` with
                ``add_source(..., continuous=True)``, or such a pipeline's
                config run by ``run_pipeline_in_subprocess``: each call
                reads one epoch, and a call after one left unfinished
                reads on in that epoch (its progress carries on).
            index: Returns a batch's indices (a tensor, an Arrow array or a
                sequence of ints). By default ``batch["__index__"]`` of a
                dict batch, each sample's ``"__index__"`` in a list of
                dicts (samples aggregated without collate), or else the
                last element of a tuple or list batch.
        """
        read = index or _default_index
        if not self._continues(pipeline):
            if self._next_epoch != self._progress["epoch"] or self._consumed or self._finished:
                self._progress = {"epoch": self._next_epoch, "prefix": 0}
            self._consumed, self._finished = [], False
            self._next_epoch = self._progress["epoch"] + 1
        self._last = weakref.ref(pipeline) if _weakrefable(pipeline) else lambda: pipeline
        if self._stream:
            try:
                self._tracked = weakref.ref(pipeline)
            except TypeError:
                self._tracked = lambda: pipeline
        for batch in pipeline:
            self._consumed.extend(_ints(read(batch)))
            yield batch
        self._finished = True
        self._learn_sizes()

    def _continues(self, pipeline: Any) -> bool:
        """Whether ``pipeline`` is the one tracked last and still runs the
        epoch that was left unfinished (a continuous pipeline's next
        iterator reads on in that epoch, so its progress carries on)."""
        return not self._finished and self._last() is pipeline and bool(getattr(pipeline, "_running", False))

    def _learn_sizes(self) -> None:
        """Keeps the unit sizes the tracked pipeline's source knows."""
        p = self._tracked()
        state = getattr(p, "_source_state", None)
        if state is None:
            return
        try:
            got = state()
        except RuntimeError:
            return  # closed: what it knew was kept when its epoch ended
        for u, n in ((got or {}).get("sizes") or {}).items():
            self._sizes[str(u)] = int(n)

    def local_state(self) -> dict[str, Any]:
        """This rank's progress in the current epoch: the batches handed to
        the training loop (prefetched ones do not count). In a distributed
        job, every rank's goes to ``merge_states``; ``state_dict`` does
        that through torch.distributed."""
        if self._stream:
            self._learn_sizes()
            return {
                "version": 1,
                "stream": True,
                "dataset": dict(self._dataset),
                "epoch": self._progress["epoch"],
                "finished": self._finished,
                "consumed": _ranges_by_unit(self._consumed),
                "sizes": dict(self._sizes),
            }
        if self._finished:
            rank_state = None  # the epoch is done on this rank
        else:
            rank_state = _sampler_call(
                {"op": "state", "config": self._cfg, "progress": self._progress, "consumed": self._consumed}
            )
        return {
            "version": 1,
            "dataset": dict(self._dataset),
            "epoch": self._progress["epoch"],
            "finished": self._finished,
            "rank_state": rank_state,
        }

    @staticmethod
    def merge_states(states: list[dict[str, Any]]) -> dict[str, Any]:
        """Combines every rank's ``local_state`` into the job's state."""
        if not states:
            raise ValueError("merge_states: no states")
        first = states[0]
        for s in states:
            if s.get("version") != 1 or s["dataset"] != first["dataset"] or s["epoch"] != first["epoch"]:
                raise ValueError("merge_states: the states come from different datasets, epochs or versions")
        if first.get("stream"):
            if all(s["finished"] for s in states):
                return {
                    "version": 1,
                    "stream": True,
                    "dataset": first["dataset"],
                    "progress": {"epoch": first["epoch"] + 1, "consumed": {}},
                }
            merged: dict[str, list[list[int]]] = {}
            sizes: dict[str, int] = {}
            conflicts: set[str] = set()
            for s in states:
                for u, r in s["consumed"].items():
                    merged.setdefault(u, []).extend(r)
                for u, n in (s.get("sizes") or {}).items():
                    if sizes.setdefault(u, n) != n:
                        conflicts.add(u)  # ranks disagree: the unit is read again
            consumed = {u: _merge_runs(r) for u, r in sorted(merged.items(), key=lambda kv: int(kv[0]))}
            sizes = {u: n for u, n in sizes.items() if u in consumed and u not in conflicts}
            progress = {"epoch": first["epoch"], "consumed": consumed, "sizes": sizes}
            return {"version": 1, "stream": True, "dataset": first["dataset"], "progress": progress}
        if all(s["finished"] for s in states):
            progress = {"epoch": first["epoch"] + 1, "prefix": 0}
        else:
            progress = _sampler_call(
                {"op": "merge", "n": first["dataset"]["n"], "states": [_rank_state(s) for s in states]}
            )
        return {"version": 1, "dataset": first["dataset"], "progress": progress}

    def state_dict(self) -> dict[str, Any]:
        """Where the job is in its current epoch, small and JSON-serialisable.

        In a distributed job (an initialised torch.distributed group), every
        rank must call it at the same step; it gathers and merges all ranks'
        progress, and every rank gets the same state.
        """
        local = self.local_state()
        world = self._cfg["world_size"]
        if world == 1:
            return self.merge_states([local])
        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                f"state_dict: this rank is one of {world}, but no torch.distributed group is initialised to "
                "gather the others; call local_state() on every rank and merge_states(states)"
            )
        states: list[Any] = [None] * world
        dist.all_gather_object(states, local)
        return self.merge_states(states)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes from ``state_dict()``'s result (possibly saved by a job
        with another number of ranks): build the pipeline again from
        ``source``; its next epoch finishes the saved one with the samples
        not yet consumed, shared over this job's ranks."""
        if not isinstance(state, dict) or state.get("version") != 1 or "progress" not in state:
            raise ValueError(
                "load_state_dict: not a spdl_go.DataLoader or ResumableSource state (want the dict state_dict() returned)"
            )
        if bool(state.get("stream")) != self._stream:
            raise ValueError("load_state_dict: the state is for another kind of source (streaming vs sampled)")
        mine = self._dataset
        for k, v in state["dataset"].items():
            if mine.get(k) != v:
                raise ValueError(f"load_state_dict: the state is for {k}={v!r}, this source has {k}={mine.get(k)!r}")
        progress = dict(state["progress"])
        self._resume = progress
        self._progress, self._consumed, self._finished = progress, [], False
        self._next_epoch = progress["epoch"]


def _weakrefable(obj: Any) -> bool:
    try:
        weakref.ref(obj)
    except TypeError:
        return False
    return True


def _ranges(ks: list[int]) -> list[list[int]]:
    """Sorted ints as [start, end) runs: a shard read in order is one run."""
    out: list[list[int]] = []
    for k in ks:
        if out and out[-1][1] == k:
            out[-1][1] = k + 1
        else:
            out.append([k, k + 1])
    return out


def _merge_runs(runs: list[list[int]]) -> list[list[int]]:
    """[start, end) runs, sorted, with overlapping and touching ones joined."""
    out: list[list[int]] = []
    for a, b in sorted(runs):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _ranges_by_unit(ids: list[int]) -> dict[str, list[list[int]]]:
    """Stream sample ids (unit << 32 | number) grouped by unit, as runs."""
    by: dict[int, list[int]] = {}
    for i in ids:
        by.setdefault(i >> 32, []).append(i & 0xFFFFFFFF)
    return {str(u): _ranges(sorted(set(ks))) for u, ks in sorted(by.items())}


def _default_index(batch: Any) -> Any:
    if isinstance(batch, dict):
        if "__index__" not in batch:
            raise KeyError(
                "ResumableSource.track: the batch has no '__index__'; make the source with with_index=True or pass index="
            )
        return batch["__index__"]
    if isinstance(batch, list) and batch and isinstance(batch[0], dict):
        # Samples aggregated without collate.
        try:
            return [s["__index__"] for s in batch]
        except KeyError:
            raise KeyError(
                "ResumableSource.track: a sample of the batch has no '__index__'; make the source with "
                "with_index=True or pass index="
            ) from None
    if isinstance(batch, (tuple, list)) and batch:
        return batch[-1]
    raise TypeError(f"ResumableSource.track: cannot find the indices in a {type(batch).__name__}; pass index=")


def _ints(x: Any) -> list[int]:
    if hasattr(x, "to_pyarrow"):
        return [int(v) for v in x.to_pyarrow().to_pylist()]
    if hasattr(x, "__dlpack__"):
        import numpy as np

        return np.from_dlpack(x).reshape(-1).tolist()
    if isinstance(x, int):
        return [x]
    return [int(v) for v in x]


def _sampler_call(req: dict[str, Any]) -> Any:
    raw = json.dumps(req).encode()
    return _lib.call_json(_lib.LIB.spdl_sampler_call, raw, len(raw), error=ValueError)


def _rank_state(s: dict[str, Any]) -> dict[str, Any]:
    if s["finished"] or s["rank_state"] is None:
        raise ValueError(
            "merge_states: some ranks finished the epoch and others did not; save at the same step on every rank"
        )
    return s["rank_state"]
