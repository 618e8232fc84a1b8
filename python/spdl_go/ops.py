"""Native (Go) ops: stages that run on Go threads without touching the GIL.

Use them wherever a Python function would go::

    builder.pipe(spdl_go.ops.to_tensor(dtype="float32"), concurrency=4)
"""

from __future__ import annotations

import ctypes
import json
from dataclasses import dataclass, field
from typing import Any

from . import _lib

__all__ = ["NativeOp", "available", "collate", "identity", "to_tensor"]


@dataclass(frozen=True)
class NativeOp:
    """A named op implemented in Go, with its options.

    Attributes:
        name: The op's registered name (see ``available()``).
        options: JSON-serialisable options for the op.
    """

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def spec(self) -> dict[str, Any]:
        return {"kind": "native", "name": self.name, "options": self.options}


def available() -> list[str]:
    """Names of the native ops this build of the library provides."""
    out = ctypes.c_void_p()
    err = ctypes.c_void_p()
    if _lib.LIB.spdl_ops(ctypes.byref(out), ctypes.byref(err)) != _lib.SPDL_OK:
        raise RuntimeError(_lib.take_string(err.value))
    return json.loads(_lib.take_string(out.value))


def identity() -> NativeOp:
    """Passes items through unchanged (useful to measure engine overhead)."""
    return NativeOp("identity")


def to_tensor(dtype: str = "float32") -> NativeOp:
    """Turns a number, a (nested, rectangular) list of numbers, or a tensor
    into a tensor of ``dtype`` (numpy names: "float32", "uint8", "int64", ...).

    Example:
        >>> b.add_source([[1, 2], [3, 4]]).pipe(ops.to_tensor("int64"))
    """
    return NativeOp("to_tensor", {"dtype": dtype})


def collate(*, pad: bool = False, pad_value: float = 0, numbers: str = "arrow") -> NativeOp:
    """Turns a list of samples (the output of ``aggregate``) into one batch.

    Tensors of equal shape are stacked into one contiguous tensor (N, ...);
    numbers, strings, bytes and None become one Arrow column; dicts and
    tuples are collated field by field. Tensors of different shapes are an
    error unless ``pad`` is set, which pads each to the largest with
    ``pad_value``. ``numbers="tensor"`` turns a column of numbers (labels)
    into a 1-D int64/float64/bool tensor instead of an Arrow array.

    Example:
        >>> (b.add_source(samples).aggregate(32).pipe(ops.collate()))
    """
    return NativeOp("collate", {"pad": pad, "pad_value": pad_value, "numbers": numbers})
