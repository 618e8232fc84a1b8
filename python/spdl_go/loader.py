"""A DataLoader-shaped front door for the common case.

PyTorch users switch with a few lines:

    # before
    loader = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, num_workers=8, drop_last=True)
    # after
    loader = spdl_go.DataLoader(ds, batch_size=32, shuffle=True, num_threads=8, drop_last=True)

and iterate it the same way, one epoch per ``for`` (a ``for`` left early
leaves the rest of its epoch to the next one). Underneath it is a
pipeline: a Go sampler deals this rank's indices (a new seeded shuffle each
epoch), ``num_threads`` Go threads call ``dataset[i]`` and ``transform``
(GIL-free between calls; in parallel on free-threaded Python), and batches
are stacked in C memory and handed over zero-copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

from . import ops, sources
from .checkpoint import ResumableSource
from .pipeline import Pipeline, PipelineBuilder
from .stats import PipelineStats

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
        device: None to keep batches in CPU memory, or a CUDA device
            ("cuda", "cuda:1", 1, a ``torch.device``): batches are copied
            there by the pipeline (``ops.to_device``) while the loop trains,
            and arrive as CUDA tensors.

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
        device: Any = None,
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
        self._source = sources.sampler(
            n, shuffle=shuffle, seed=seed, drop_last=drop_last, rank=rank, world_size=world_size
        )
        self._per_rank = _per_rank(n, self._source.sampler_config()["world_size"], drop_last)
        # Tracks the epoch's consumed samples for state_dict.
        self._ckpt = ResumableSource(self._source)
        self._threads, self._prefetch = num_threads, prefetch
        if device is not None and output == "numpy":
            raise ValueError("DataLoader: output='numpy' needs CPU batches; drop device= or use output='torch'")
        # Built now, so that a bad device fails here, not in the pipeline.
        self._to_device = None if device is None else ops.to_device(device, keep_on_cpu=(1,))

        def load(i: int) -> Any:
            sample = dataset[i]
            if transform is not None:
                sample = transform(sample)
            return sample, i  # the index rides along, for state_dict

        self._load = load
        self._convert = _converter(output)
        # Progress of the epoch being read: where it started, and the
        # dataset indices handed to the training loop since.
        self._progress: dict[str, Any] = {"epoch": 0, "prefix": 0}
        self._consumed: list[int] = []
        self._next_epoch = 0
        self._finished = False
        self.pipeline: Pipeline = self._build()

    def _build(self) -> Pipeline:
        b = (
            PipelineBuilder()
            .add_source(self._ckpt.source, continuous=True)
            .pipe(self._load, concurrency=self._threads, name="load", output_order="input")
            .aggregate(self.batch_size, drop_last=self.drop_last)
            .pipe(ops.collate(numbers="tensor"), name="collate")
        )
        if self._to_device is not None:
            # (batch, indices): the indices stay on the CPU for state_dict.
            b = b.pipe(self._to_device, name="to_device")
        return b.add_sink(self._prefetch).build()

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        full, rest = divmod(self._per_rank, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def __iter__(self) -> Iterator[Any]:
        # Each iteration is the source's next epoch (the first one after
        # load_state_dict resumes where the state left off); after a loop
        # left early, it is the rest of that epoch (a continuous source).
        for sample, _ in self._ckpt.track(self.pipeline, index=lambda b: b[1]):
            yield self._convert(sample)

    # ---- checkpointing ----------------------------------------------------------
    def local_state(self) -> dict[str, Any]:
        """This rank's progress in the current epoch (what it has handed to
        the training loop; batches prefetched but not yet yielded do not
        count). In a distributed job, every rank's local state goes to
        ``merge_states``; ``state_dict`` does that through torch.distributed."""
        return self._ckpt.local_state()

    merge_states = staticmethod(ResumableSource.merge_states)

    def state_dict(self) -> dict[str, Any]:
        """Where the job is in its current epoch, small and JSON-serialisable.

        In a distributed job (an initialised torch.distributed group), every
        rank must call it at the same point; it gathers and merges all
        ranks' progress, and every rank gets the same state. A run rebuilt
        with ``load_state_dict`` resumes with the next sample not yet
        handed to the training loop, in the same order, with any number of
        ranks or threads.
        """
        return self._ckpt.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes from ``state_dict()``'s result (possibly saved by a job
        with another number of ranks): the next iteration finishes the saved
        epoch with the samples not yet consumed, shared over this job's
        ranks; the one after starts the next epoch."""
        self._ckpt.load_state_dict(state)
        self.pipeline.close()
        self.pipeline = self._build()

    def stats(self) -> PipelineStats:
        """The underlying pipeline's statistics (see Pipeline.stats)."""
        return self.pipeline.stats()

    def close(self) -> None:
        """Stops the threads and frees the pipeline."""
        self.pipeline.close()

    def __enter__(self) -> DataLoader:
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
