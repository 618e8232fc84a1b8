"""PyTorch integration: batches as torch tensors, pipelines as datasets.

    >>> from spdl_go.torch import as_iterable_dataset
    >>> ds = as_iterable_dataset(pipeline)            # a torch IterableDataset
    >>> for images, labels in torch.utils.data.DataLoader(ds, batch_size=None):
    ...     ...                                         # torch tensors, zero-copy

spdl-go runs its own threads, so the DataLoader around it must not start
worker processes (``num_workers=0``, the default): a pipeline cannot cross
``fork()``, and the dataset says so clearly if it finds itself in a worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.utils.data

from ._buffers import ArrowArray, Tensor
from .pipeline import Pipeline

__all__ = ["IterablePipeline", "as_iterable_dataset", "to_torch"]


def to_torch(batch: Any) -> Any:
    """Converts every spdl-go Tensor in ``batch`` (and every object with
    ``__dlpack__``) to a ``torch.Tensor`` sharing its memory, keeping the
    batch's structure (tuples, lists, dicts). Arrow columns become
    ``pyarrow`` arrays; other values pass through."""
    if isinstance(batch, Tensor):
        return torch.from_dlpack(batch)
    if isinstance(batch, ArrowArray):
        return batch.to_pyarrow()
    if isinstance(batch, tuple):
        return tuple(to_torch(x) for x in batch)
    if isinstance(batch, list):
        return [to_torch(x) for x in batch]
    if isinstance(batch, dict):
        return {k: to_torch(v) for k, v in batch.items()}
    if hasattr(batch, "__dlpack__") and not isinstance(batch, torch.Tensor):
        return torch.from_dlpack(batch)
    return batch


class IterablePipeline(torch.utils.data.IterableDataset):
    """A pipeline as a ``torch.utils.data.IterableDataset``: each iteration
    iterates the pipeline once (one epoch if it was built with
    ``add_source(..., continuous=True)``; else it reads on in the one pass)
    and yields its batches converted by ``to_torch``.

    Use it with ``DataLoader(ds, batch_size=None)`` (the pipeline already
    batches) and no worker processes.
    """

    def __init__(self, pipeline: Pipeline, *, convert: bool = True) -> None:
        if not isinstance(pipeline, Pipeline):
            raise TypeError(f"as_iterable_dataset: expected a spdl_go Pipeline, got {type(pipeline).__name__}")
        self.pipeline = pipeline
        self.convert = convert

    def __iter__(self) -> Iterator[Any]:
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError(_NO_WORKERS)
        for batch in self.pipeline:
            yield to_torch(batch) if self.convert else batch

    def __reduce__(self) -> Any:
        # A DataLoader worker started with "spawn" or "forkserver" (Python
        # 3.14's default on Linux) gets the dataset pickled: say why that
        # cannot work rather than "cannot pickle '_thread.lock' object".
        raise RuntimeError(_NO_WORKERS)


_NO_WORKERS = (
    "spdl-go pipelines run their own threads and cannot be used in DataLoader worker "
    "processes (nor pickled); pass num_workers=0 (the default) to the DataLoader"
)


def as_iterable_dataset(pipeline: Pipeline, *, convert: bool = True) -> IterablePipeline:
    """Wraps ``pipeline`` as a torch ``IterableDataset`` (see IterablePipeline)."""
    return IterablePipeline(pipeline, convert=convert)
