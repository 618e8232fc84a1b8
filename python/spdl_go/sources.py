"""Native sources: items produced in Go, with no Python call per item."""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["NativeSource", "arange", "distributed_env", "sampler"]


@dataclass(frozen=True)
class NativeSource:
    """A source implemented in Go."""

    kind: str
    options: dict[str, Any]

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.options}


def arange(start: int, stop: int | None = None, step: int = 1) -> NativeSource:
    """Integers like ``range(start, stop, step)``, produced in Go.

    Example:
        >>> PipelineBuilder().add_source(sources.arange(1000))
    """
    if stop is None:
        start, stop = 0, start
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"arange: {name} must be an int, got {type(v).__name__}")
    if step == 0:
        raise ValueError("arange: step must not be zero")
    return NativeSource("range", {"start": start, "stop": stop, "step": step})


def distributed_env() -> tuple[int, int]:
    """(rank, world_size) of this process in a distributed job.

    From an initialised ``torch.distributed`` process group if there is one,
    else from the ``RANK`` and ``WORLD_SIZE`` environment variables that
    ``torchrun`` sets, else (0, 1).
    """
    import sys

    dist = sys.modules.get("torch.distributed")  # only if the user imported torch
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None and world is None:
        return 0, 1
    try:
        r, w = int(rank or 0), int(world or 1)
    except ValueError:
        raise ValueError(f"RANK={rank!r} and WORLD_SIZE={world!r} must be integers") from None
    if not 0 <= r < w:
        raise ValueError(f"RANK={r} must be in [0, WORLD_SIZE={w})")
    return r, w


def sampler(
    data: int | Sequence[Any],
    *,
    shuffle: bool = False,
    seed: int = 0,
    drop_last: bool = False,
    rank: int | None = None,
    world_size: int | None = None,
    epoch: int = 0,
) -> NativeSource:
    """This rank's share of a dataset, one epoch per iteration, in Go.

    ``data`` is the dataset size (the source then yields indices) or a
    sequence of samples made of plain values (paths, bytes, numbers,
    strings, and tuples, lists or dicts of them), which the source yields
    themselves, with no Python call per item: a native op such as
    ``ops.decode_image`` then reads them GIL-free.

    Every epoch has its own order: with ``shuffle``, a permutation that
    depends only on ``seed`` and the epoch number (the first is ``epoch``,
    then one more per iteration of the pipeline). In a distributed job each
    rank takes every ``world_size``-th item of that order, starting at its
    ``rank``, so the ranks split the epoch without overlap; when the size
    does not divide evenly, every rank still gets the same count, by
    repeating a few items from the start of the epoch or, with
    ``drop_last``, by dropping the remainder. ``rank`` and ``world_size``
    default to ``distributed_env()``.

    Example:
        >>> paths_and_labels = [("img0.jpg", 3), ("img1.jpg", 7)]
        >>> p = (PipelineBuilder()
        ...      .add_source(sources.sampler(paths_and_labels, shuffle=True, seed=1))
        ...      .pipe(ops.decode_image(size=(224, 224)), concurrency=4)
        ...      .aggregate(32).pipe(ops.collate()).add_sink().build())
    """
    from . import _codec

    env_rank, env_world = distributed_env() if rank is None or world_size is None else (0, 1)
    rank = env_rank if rank is None else rank
    world_size = env_world if world_size is None else world_size
    for name, v in (("seed", seed), ("rank", rank), ("world_size", world_size), ("epoch", epoch)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"sampler: {name} must be an int, got {type(v).__name__}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"sampler: rank must be in [0, world_size) with world_size >= 1, got rank={rank}, world_size={world_size}")
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"sampler: seed must be in [0, 2**64), got {seed}")
    if epoch < 0:
        raise ValueError(f"sampler: epoch must be >= 0, got {epoch}")
    options: dict[str, Any] = {
        "shuffle": bool(shuffle),
        "seed": seed,
        "drop_last": bool(drop_last),
        "rank": rank,
        "world_size": world_size,
        "epoch": epoch,
    }
    if isinstance(data, int) and not isinstance(data, bool):
        if data < 1:
            raise ValueError(f"sampler: the dataset size must be >= 1, got {data}")
        options["n"] = data
    elif isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        items = list(data)
        if not items:
            raise ValueError("sampler: the dataset is empty")
        options["n"] = len(items)
        try:
            wire = b"l" + len(items).to_bytes(8, "little") + b"".join(map(_codec.encode_plain, items))
        except (TypeError, ValueError):
            for i, it in enumerate(items):  # name the sample
                try:
                    _codec.encode_plain(it)
                except (TypeError, ValueError) as e:
                    raise TypeError(f"sampler: sample {i} ({it!r:.120}): {e}") from None
            raise
        options["items_wire"] = base64.b64encode(wire).decode("ascii")
    else:
        raise TypeError(f"sampler: data must be a dataset size or a sequence of samples, got {type(data).__name__}")
    return NativeSource("sampler", options)
