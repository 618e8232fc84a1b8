"""Python owners of C memory handed out by the engine: tensors (DLPack) and
Arrow arrays (Arrow PyCapsule interface). Both are zero-copy: consumers read
the engine's C memory directly, and it is freed when the last user lets go.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import POINTER, Structure, c_char_p, c_int32, c_int64, c_uint8, c_uint16, c_uint64, c_void_p
from typing import Any

from . import _lib

__all__ = ["ArrowArray", "Tensor"]


class _DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class _DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class _DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", _DLDevice),
        ("ndim", c_int32),
        ("dtype", _DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


_DTYPE_NAMES = {
    (0, 8): "int8",
    (0, 16): "int16",
    (0, 32): "int32",
    (0, 64): "int64",
    (1, 8): "uint8",
    (1, 16): "uint16",
    (1, 32): "uint32",
    (1, 64): "uint64",
    (2, 16): "float16",
    (2, 32): "float32",
    (2, 64): "float64",
    (4, 16): "bfloat16",
    (6, 8): "bool",
}

_KDLCPU, _KDLCUDA = 1, 2

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [c_void_p, c_char_p, c_void_p]

# Capsule names must outlive the capsules; module constants do.
_DLTENSOR_VERSIONED = b"dltensor_versioned"
_DLTENSOR = b"dltensor"
_ARROW_SCHEMA = b"arrow_schema"
_ARROW_ARRAY = b"arrow_array"


class Tensor:
    """An n-dimensional array in C memory owned by the engine.

    It implements the DLPack protocol, so every array library imports it
    without a copy::

        batch = next(iter(pipeline))
        images = torch.from_dlpack(batch)   # or numpy.from_dlpack(batch)

    Each import holds its own reference; the memory returns to the engine's
    pool when this object and every import of it are gone.
    """

    __slots__ = ("_ptr", "__weakref__")
    _ptr: int  # 0 once released

    def __init__(self) -> None:
        raise TypeError("spdl_go.Tensor objects are made by pipelines, not constructed directly")

    @classmethod
    def _adopt(cls, ptr: int) -> Tensor:
        """Takes over one reference to the spdl_tensor at ptr."""
        t = object.__new__(cls)
        t._ptr = ptr
        return t

    def _new_ref(self) -> int:
        """A new reference to the underlying block, for sending to Go."""
        _lib.LIB.spdl_tensor_incref(self._ptr)
        return self._ptr

    def __del__(self) -> None:
        ptr = getattr(self, "_ptr", 0)
        if ptr:
            self._ptr = 0
            _lib.LIB.spdl_tensor_decref(ptr)

    def _view(self) -> _DLTensor:
        return _DLTensor.from_address(_lib.LIB.spdl_tensor_dltensor(self._ptr))

    @property
    def shape(self) -> tuple[int, ...]:
        v = self._view()
        return tuple(v.shape[i] for i in range(v.ndim))

    @property
    def strides(self) -> tuple[int, ...] | None:
        """Strides in elements, or None when the tensor is contiguous."""
        v = self._view()
        if not v.strides:
            return None
        return tuple(v.strides[i] for i in range(v.ndim))

    @property
    def dtype(self) -> str:
        """The element type as numpy names it (e.g. "uint8", "float32")."""
        d = self._view().dtype
        name = _DTYPE_NAMES.get((d.code, d.bits), f"dlpack(code={d.code}, bits={d.bits})")
        return name if d.lanes == 1 else f"{name}x{d.lanes}"

    @property
    def data_ptr(self) -> int:
        """Address of the first element."""
        v = self._view()
        return (v.data or 0) + v.byte_offset

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    @property
    def device(self) -> str:
        """Where the data is: "cpu", or "cuda:N" after ``ops.to_device``."""
        d = self._view().device
        return "cpu" if d.device_type == _KDLCPU else f"cuda:{d.device_id}"

    def __dlpack_device__(self) -> tuple[int, int]:
        d = self._view().device
        return (d.device_type, d.device_id)

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """Exports the tensor as a DLPack capsule (no copy).

        Versioned ("dltensor_versioned") when the consumer accepts DLPack
        1.x, else the legacy "dltensor" capsule.

        For a CUDA tensor, ``stream`` is the consumer's stream as DLPack
        numbers it (None or 1: the legacy default stream, 2: per-thread
        default, else a ``cudaStream_t``; -1: none). The data is complete
        before the tensor leaves the pipeline, so any stream may read it at
        once; the stream is remembered so that the memory is reused only
        after the work queued on it has run.
        """
        if copy:
            raise BufferError("spdl_go.Tensor does not copy on export; copy after importing")
        device = self.__dlpack_device__()
        if dl_device is not None and tuple(dl_device) != device:
            raise BufferError(f"spdl_go.Tensor lives on {self.device}, not DLPack device {tuple(dl_device)}")
        if device[0] == _KDLCUDA:
            if stream is None:
                stream = 1
            if not isinstance(stream, int) or stream == 0 or stream < -1:
                raise BufferError(f"__dlpack__: stream must be None, -1, 1, 2 or a CUDA stream handle, not {stream!r}")
            _lib.LIB.spdl_tensor_note_stream(self._ptr, stream)
        if max_version is not None and max_version[0] >= 1:
            managed = _lib.LIB.spdl_tensor_to_dlpack_versioned(self._ptr)
            name = _DLTENSOR_VERSIONED
        else:
            managed = _lib.LIB.spdl_tensor_to_dlpack_legacy(self._ptr)
            name = _DLTENSOR
        if not managed:
            raise MemoryError("spdl_go: out of memory exporting a tensor")
        return _capsule_new(managed, name, _lib.DLPACK_CAPSULE_DESTRUCTOR)

    def numpy(self) -> Any:
        """This tensor as a numpy array sharing its memory (CPU tensors only)."""
        import numpy

        if self.__dlpack_device__()[0] != _KDLCPU:
            raise BufferError(f"spdl_go.Tensor is on {self.device}; numpy reads only CPU memory")

        return numpy.from_dlpack(self)

    def __repr__(self) -> str:
        if not self._ptr:
            return "spdl_go.Tensor(<released>)"
        device = self.device
        where = "" if device == "cpu" else f", device={device!r}"
        return f"spdl_go.Tensor(shape={self.shape}, dtype={self.dtype}{where})"


class ArrowArray:
    """A column of values in Arrow's C Data Interface, in C memory.

    It implements the Arrow PyCapsule interface, so ``pyarrow.array(col)``
    (and polars, DuckDB, ...) import it without a copy. Arrow export moves
    the data: each ArrowArray can be imported once; import it once and keep
    the pyarrow array.
    """

    __slots__ = ("_schema", "_array", "_lock", "__weakref__")
    _schema: int  # 0 once imported or freed
    _array: int
    _lock: threading.Lock

    def __init__(self) -> None:
        raise TypeError("spdl_go.ArrowArray objects are made by pipelines, not constructed directly")

    @classmethod
    def _adopt(cls, schema: int, array: int) -> ArrowArray:
        a = object.__new__(cls)
        a._schema = schema
        a._array = array
        a._lock = threading.Lock()
        return a

    def __del__(self) -> None:
        schema, array = getattr(self, "_schema", 0), getattr(self, "_array", 0)
        if schema or array:
            self._schema = self._array = 0
            _lib.LIB.spdl_arrow_free(schema, array)

    def _require(self) -> None:
        if not self._array:
            raise RuntimeError("this spdl_go.ArrowArray was already imported (Arrow export moves the data)")

    def __len__(self) -> int:
        self._require()
        return c_int64.from_address(self._array).value  # ArrowArray.length is the first field

    @property
    def format(self) -> str:
        """The Arrow format string (e.g. "l" int64, "g" float64, "u" utf8)."""
        self._require()
        return (c_char_p.from_address(self._schema).value or b"").decode()  # ArrowSchema.format is the first field

    def __arrow_c_array__(self, requested_schema: Any = None) -> tuple[Any, Any]:
        """Hands the column to an Arrow consumer (no copy); callable once."""
        with self._lock:
            self._require()
            schema, array = self._schema, self._array
            self._schema = self._array = 0
        return (
            _capsule_new(schema, _ARROW_SCHEMA, _lib.ARROW_SCHEMA_CAPSULE_DESTRUCTOR),
            _capsule_new(array, _ARROW_ARRAY, _lib.ARROW_ARRAY_CAPSULE_DESTRUCTOR),
        )

    def to_pyarrow(self) -> Any:
        """Imports the column into pyarrow (zero-copy)."""
        import pyarrow

        return pyarrow.array(self)

    def __repr__(self) -> str:
        if not self._array:
            return "spdl_go.ArrowArray(<imported>)"
        return f"spdl_go.ArrowArray(format={self.format!r}, length={len(self)})"
