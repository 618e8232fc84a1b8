"""The wire format between Python and the Go engine (see core/wire/wire.go).

Two ways to send a value:

* structured (``encode``): Go can read it. Used when a native stage comes next.
* opaque (``encode_opaque``): only an id into the object registry travels.
  Used when Python code comes next (a Python stage or the consumer), so the
  object comes back exactly as it left, at the cost of one dict entry.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import Any

from ._buffers import ArrowArray, Tensor

_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_U64x2 = struct.Struct("<QQ")

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

# ---- object registry -------------------------------------------------------
# Objects that travel opaquely live here until the receiver takes them back
# (decode pops) or Go drops them (the release callback pops).
_objects: dict[int, Any] = {}
_next_id = 1
_id_lock = threading.Lock()


def _register(obj: Any) -> int:
    global _next_id
    with _id_lock:
        oid = _next_id
        _next_id += 1
    _objects[oid] = obj
    return oid


def release_object(oid: int) -> None:
    _objects.pop(oid, None)


def live_objects() -> int:
    """How many objects are held for Go right now (for leak tests)."""
    return len(_objects)


# ---- DLPack import ----------------------------------------------------------
_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_VERSIONED = b"dltensor_versioned"
_LEGACY = b"dltensor"
# Renaming marks the capsule consumed, so its destructor leaves the tensor
# to Go. These constants must outlive every capsule: module globals do.
_USED_VERSIONED = b"used_dltensor_versioned"
_USED_LEGACY = b"used_dltensor"


def _take_dlpack(obj: Any) -> tuple[int, int]:
    """Takes ownership of obj's DLPack export; returns (tag, pointer)."""
    if hasattr(obj, "__dlpack_device__"):
        dev = obj.__dlpack_device__()
        if int(dev[0]) != 1:
            raise TypeError(
                f"cannot pass a tensor on device {tuple(dev)} to spdl_go stages: only CPU "
                "tensors travel through a pipeline; move it with .cpu() first"
            )
    try:
        cap = obj.__dlpack__(max_version=(1, 0))
    except TypeError:  # producers that predate DLPack 1.0
        cap = obj.__dlpack__()
    if _api.PyCapsule_IsValid(cap, _VERSIONED):
        ptr = _api.PyCapsule_GetPointer(cap, _VERSIONED)
        _api.PyCapsule_SetName(cap, _USED_VERSIONED)
        return ord("V"), ptr
    if _api.PyCapsule_IsValid(cap, _LEGACY):
        ptr = _api.PyCapsule_GetPointer(cap, _LEGACY)
        _api.PyCapsule_SetName(cap, _USED_LEGACY)
        return ord("v"), ptr
    raise TypeError(f"{type(obj).__name__}.__dlpack__() returned something that is not a DLPack capsule")


# ---- encoding ----------------------------------------------------------------
def encode(obj: Any) -> bytes:
    """Encodes obj so that Go can read it.

    None, bool, int (64-bit), float, str, bytes, list, tuple, dict with str
    keys and anything with ``__dlpack__`` travel as themselves; any other
    object travels as an opaque reference.
    """
    out = bytearray()
    _encode(out, obj, 0)
    return bytes(out)


def encode_plain(obj: Any) -> bytes:
    """Encodes obj, which must hold only plain values (None, bool, 64-bit
    int, float, str, bytes, and lists, tuples and dicts with str keys of
    them): no tensors and no opaque references. Raises TypeError naming
    the first value that is not plain."""
    out = bytearray()
    _encode(out, obj, 0, plain=True)
    return bytes(out)


def encode_opaque(obj: Any) -> bytes:
    return b"O" + _U64.pack(_register(obj))


def encode_tensor_or_opaque(obj: Any) -> bytes:
    """A ``Tensor`` as a tensor (a new reference), anything else opaque."""
    if type(obj) is Tensor:
        return b"D" + _U64.pack(obj._new_ref())
    return b"O" + _U64.pack(_register(obj))


def _encode(out: bytearray, obj: Any, depth: int, plain: bool = False) -> None:
    if depth > 64:
        raise ValueError("value nested deeper than 64 levels")
    t = type(obj)
    if obj is None:
        out += b"N"
    elif t is bool:
        out += b"T" if obj else b"F"
    elif t is int:
        if _INT64_MIN <= obj <= _INT64_MAX:
            out += b"i"
            out += _I64.pack(obj)
        else:
            if plain:
                raise TypeError(f"{obj} does not fit in 64 bits")
            out += b"O"
            out += _U64.pack(_register(obj))
    elif t is float:
        out += b"d"
        out += _F64.pack(obj)
    elif t is str:
        b = obj.encode("utf-8", "surrogatepass")
        out += b"s"
        out += _U64.pack(len(b))
        out += b
    elif t is bytes or t is bytearray or t is memoryview:
        b = bytes(obj)
        out += b"b"
        out += _U64.pack(len(b))
        out += b
    elif t is list or t is tuple:
        out += b"l" if t is list else b"t"
        out += _U64.pack(len(obj))
        for e in obj:
            _encode(out, e, depth + 1, plain)
    elif t is dict and all(type(k) is str for k in obj):
        out += b"m"
        out += _U64.pack(len(obj))
        for k, v in obj.items():
            kb = k.encode("utf-8", "surrogatepass")
            out += _U64.pack(len(kb))
            out += kb
            _encode(out, v, depth + 1, plain)
    elif plain:
        raise TypeError(
            f"a {t.__name__} is not a plain value (use paths, bytes, numbers, strings and containers of them)"
        )
    elif t is Tensor:
        out += b"D"
        out += _U64.pack(obj._new_ref())
    elif hasattr(obj, "__dlpack__"):
        tag, ptr = _take_dlpack(obj)
        out.append(tag)
        out += _U64.pack(ptr)
    else:
        out += b"O"
        out += _U64.pack(_register(obj))


# ---- decoding ----------------------------------------------------------------
def decode(data: bytes | memoryview) -> Any:
    """Decodes one value; takes ownership of every reference it carries."""
    value, pos = _decode(memoryview(data), 0)
    if pos != len(data):
        raise ValueError(f"spdl_go: {len(data) - pos} trailing bytes after a value")
    return value


def _decode(buf: memoryview, pos: int) -> tuple[Any, int]:
    tag = buf[pos]
    pos += 1
    if tag == 0x4F:  # 'O'
        (oid,) = _U64.unpack_from(buf, pos)
        return _objects.pop(oid), pos + 8
    if tag == 0x69:  # 'i'
        return _I64.unpack_from(buf, pos)[0], pos + 8
    if tag == 0x64:  # 'd'
        return _F64.unpack_from(buf, pos)[0], pos + 8
    if tag == 0x4E:  # 'N'
        return None, pos
    if tag == 0x54:  # 'T'
        return True, pos
    if tag == 0x46:  # 'F'
        return False, pos
    if tag == 0x73 or tag == 0x62:  # 's', 'b'
        (n,) = _U64.unpack_from(buf, pos)
        pos += 8
        raw = bytes(buf[pos : pos + n])
        return (raw.decode("utf-8", "surrogatepass") if tag == 0x73 else raw), pos + n
    if tag == 0x6C or tag == 0x74:  # 'l', 't'
        (n,) = _U64.unpack_from(buf, pos)
        pos += 8
        items = []
        for _ in range(n):
            v, pos = _decode(buf, pos)
            items.append(v)
        return (items if tag == 0x6C else tuple(items)), pos
    if tag == 0x6D:  # 'm'
        (n,) = _U64.unpack_from(buf, pos)
        pos += 8
        d = {}
        for _ in range(n):
            (k,) = _U64.unpack_from(buf, pos)
            pos += 8
            key = bytes(buf[pos : pos + k]).decode("utf-8", "surrogatepass")
            pos += k
            d[key], pos = _decode(buf, pos)
        return d, pos
    if tag == 0x44:  # 'D'
        (ptr,) = _U64.unpack_from(buf, pos)
        return Tensor._adopt(ptr), pos + 8
    if tag == 0x41:  # 'A'
        schema, array = _U64x2.unpack_from(buf, pos)
        return ArrowArray._adopt(schema, array), pos + 16
    raise ValueError(f"spdl_go: unknown wire tag {tag:#04x} at byte {pos - 1}")


__all__ = ["decode", "encode", "encode_opaque", "encode_tensor_or_opaque", "live_objects", "release_object"]
