"""A DataLoader-shaped front door for the common case.

PyTorch users switch with a few lines:

    # before
    loader = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, num_workers=8, drop_last=True)
    # after
    loader = spdl_go.DataLoader(ds, batch_size=32, shuffle=True, num_threads=8, drop_last=True)

and iterate it the same way, one epoch per ``for``. Underneath it is a
pipeline: a Go sampler deals this rank's indices (a new seeded shuffle each
epoch), ``num_threads`` Go threads call ``dataset[i]`` and ``transform``
(GIL-free between calls; in parallel on free-threaded Python), and batches
are stacked in C memory and handed over zero-copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

from . import ops, sources
from .pipeline import Pipeline, PipelineBuilder, PipelineStats

__all__ = ["DataLoader"]


class DataLoader:
    """Batches of a map-style dataset (``len(ds)`` and ``ds[i]``).

    Args:
        dataset: Anything with ``__len__`` and ``__getitem__``. Samples are
            arrays (anything with ``__dlpack__``), numbers, strings, or
            tuples/lists/dicts of them, the same structure in every sample.
        batch_size: Samples per batch.
        shuffle: A new seeded permutation every epoch.
        seed: The shuffle's seed; the same seed gives the same epochs.
        drop_last: Drop the last, partial batch (and, in a distributed job,
            the samples that do not divide evenly over the ranks).
        num_threads: Threads calling ``dataset[i]`` and ``transform``, or
            "auto" to let the engine tune it.
        transform: Called on each sample after loading, on the same threads.
        output: "torch" for torch tensors, "numpy" for numpy arrays, or
            "native" for spdl-go Tensors (DLPack, zero-copy in all cases).
        rank, world_size: This process's share in a distributed job;
            default from ``torch.distributed`` or torchrun's environment.
        prefetch: Batches prepared ahead of the training loop.

    Example:
        >>> loader = DataLoader(ds, batch_size=32, shuffle=True, num_threads=4)
        >>> for epoch in range(10):
        ...     for images, labels in loader:
        ...         train_step(images, labels)
    """

    def __init__(
        self,
        dataset: Any,
        *,
        batch_size: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        num_threads: int | Literal["auto"] = 4,
        transform: Callable[[Any], Any] | None = None,
        output: Literal["torch", "numpy", "native"] = "torch",
        rank: int | None = None,
        world_size: int | None = None,
        prefetch: int = 3,
    ) -> None:
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise TypeError(f"DataLoader: dataset must have __len__ and __getitem__, got {type(dataset).__name__}")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be an int >= 1, got {batch_size!r}")
        if output not in ("torch", "numpy", "native"):
            raise ValueError(f"DataLoader: output must be 'torch', 'numpy' or 'native', got {output!r}")
        if transform is not None and not callable(transform):
            raise TypeError(f"DataLoader: transform must be callable, got {type(transform).__name__}")
        n = len(dataset)
        if n < 1:
            raise ValueError("DataLoader: the dataset is empty")
        self.dataset, self.batch_size, self.drop_last, self.output = dataset, batch_size, drop_last, output
        source = sources.sampler(n, shuffle=shuffle, seed=seed, drop_last=drop_last, rank=rank, world_size=world_size)
        self._per_rank = _per_rank(n, source.options["world_size"], drop_last)

        def load(i: int) -> Any:
            sample = dataset[i]
            return transform(sample) if transform is not None else sample

        self._convert = _converter(output)
        self.pipeline: Pipeline = (
            PipelineBuilder()
            .add_source(source)
            .pipe(load, concurrency=num_threads, name="load", output_order="input")
            .aggregate(batch_size, drop_last=drop_last)
            .pipe(ops.collate(numbers="tensor"), name="collate")
            .add_sink(prefetch)
            .build()
        )

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        full, rest = divmod(self._per_rank, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.pipeline:
            yield self._convert(batch)

    def stats(self) -> PipelineStats:
        """The underlying pipeline's statistics (see Pipeline.stats)."""
        return self.pipeline.stats()

    def close(self) -> None:
        """Stops the threads and frees the pipeline."""
        self.pipeline.close()

    def __enter__(self) -> "DataLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _per_rank(n: int, world: int, drop_last: bool) -> int:
    return n // world if drop_last else -(-n // world)


def _converter(output: str) -> Callable[[Any], Any]:
    if output == "torch":
        from .torch import to_torch

        return to_torch
    if output == "numpy":
        import numpy as np

        from ._buffers import ArrowArray, Tensor

        def to_numpy(b: Any) -> Any:
            if isinstance(b, Tensor):
                return np.from_dlpack(b)
            if isinstance(b, ArrowArray):
                return b.to_pyarrow()
            if isinstance(b, tuple):
                return tuple(to_numpy(x) for x in b)
            if isinstance(b, list):
                return [to_numpy(x) for x in b]
            if isinstance(b, dict):
                return {k: to_numpy(v) for k, v in b.items()}
            return b

        return to_numpy
    return lambda b: b
