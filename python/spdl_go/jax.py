"""JAX integration: batches as ``jax.Array``, zero-copy through DLPack.

>>> from spdl_go.jax import to_jax
>>> for batch in pipeline:
...     images, labels = to_jax(batch)
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ._buffers import ArrowArray, Tensor

__all__ = ["to_jax"]


def to_jax(batch: Any) -> Any:
    """Converts every spdl-go Tensor in ``batch`` to a ``jax.Array`` through
    DLPack (zero-copy where JAX can alias the host memory), keeping the
    batch's structure. Arrow columns become ``pyarrow`` arrays; other values
    pass through."""
    if isinstance(batch, Tensor):
        return jnp.from_dlpack(batch)
    if isinstance(batch, ArrowArray):
        return batch.to_pyarrow()
    if isinstance(batch, tuple):
        return tuple(to_jax(x) for x in batch)
    if isinstance(batch, list):
        return [to_jax(x) for x in batch]
    if isinstance(batch, dict):
        return {k: to_jax(v) for k, v in batch.items()}
    return batch
