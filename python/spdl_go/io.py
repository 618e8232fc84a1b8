"""The eager API: load, probe and save one file at a time, no pipeline.

Each function is one call into the Go engine, made without the GIL (so
many Python threads can load at once and truly in parallel) and safe from
any number of threads. Results are :class:`spdl_go.Tensor` objects in C
memory, which numpy, torch and jax import without a copy (DLPack)::

    import spdl_go.io

    img = spdl_go.io.load_image("cat.jpg", short_side=256)      # (H, W, 3) uint8
    batch = spdl_go.io.load_image_batch(paths, size=(224, 224))  # (N, 224, 224, 3)
    torch.from_dlpack(batch)

The loaders run the pipeline ops themselves: ``load_image`` is
``ops.decode_image``, ``load_audio`` is ``ops.decode_audio``, ``load_video``
is ``ops.decode_video``, with the same options, the same limits
(``max_pixels``, ``max_samples``, ``max_output_bytes``) and the same
errors: ``ValueError`` for an invalid option (as ``build()`` raises it),
``RuntimeError`` with the engine's message, which names the input, when
the input cannot be decoded (as a native op's failure in a pipeline).
The parsers of plain formats (``load_npy``, ``load_npz``, ``load_wav``,
``iter_tarfile``) raise ``ValueError`` for bad data, as SPDL's do.

Names and arguments follow SPDL's ``spdl.io`` where the meaning is the same;
each docstring says where spdl-go differs.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, cast

from . import _codec, _lib, ops
from ._buffers import Tensor
from .media import MediaInfo, StreamInfo, probe

__all__ = [
    "MediaInfo",
    "StreamInfo",
    "encode_image",
    "iter_tarfile",
    "load_audio",
    "load_image",
    "load_image_batch",
    "load_npy",
    "load_npz",
    "load_video",
    "load_wav",
    "probe",
    "save_image",
]

_LG = logging.getLogger(__name__)

_SPDL_INVALID = -2  # spdl.h: the request or an option is invalid

Source = str | os.PathLike[str] | bytes | bytearray | memoryview
"""A file's path, or its bytes."""

Size = tuple[int, int] | int


def _take(out: _lib.SpdlBuf) -> bytes:
    try:
        return ctypes.string_at(out.data, out.len)
    finally:
        _lib.LIB.spdl_free(out.data)


def _run(fn: Any, *args: Any, error: type[Exception]) -> bytes:
    """Calls ``fn(*args, &out, &err)`` and returns the bytes of ``out``;
    raises ValueError (SPDL_INVALID) or ``error`` with the engine's message."""
    _lib.check_fork()
    out = _lib.SpdlBuf()
    err = ctypes.c_void_p()
    rc = fn(*args, ctypes.byref(out), ctypes.byref(err))
    if rc != _lib.SPDL_OK:
        msg = _lib.take_string(err.value)
        raise (ValueError if rc == _SPDL_INVALID else error)(msg)
    return _take(out)


def _source(src: Source) -> str | bytes:
    if isinstance(src, (bytes, bytearray, memoryview)):
        return bytes(src)
    if isinstance(src, (str, os.PathLike)):
        return os.fspath(src)
    raise TypeError(f"expected a path (str or os.PathLike) or bytes, got {type(src).__name__}")


def _apply(op: ops.NativeOp, value: Any, **request: Any) -> Any:
    req = json.dumps({"op": {"name": op.name, "options": op.options}, **request}).encode()
    data = _codec.encode_plain(value)
    return _codec.decode(_run(_lib.LIB.spdl_io_apply, req, len(req), data, len(data), error=RuntimeError))


def _window(
    timestamp: tuple[float, float] | None, start: float | None, duration: float | None
) -> tuple[float | None, float | None]:
    """SPDL's ``timestamp=(start, end)`` as the ops' start and duration."""
    if timestamp is None:
        return start, duration
    if start is not None or duration is not None:
        raise ValueError("give timestamp=(start, end) or start/duration, not both")
    t0, t1 = timestamp
    if not t1 > t0:
        raise ValueError(f"timestamp must be (start, end) with end > start, got {timestamp!r}")
    return float(t0), float(t1) - float(t0)


def load_image(
    src: Source,
    *,
    mode: str | None = None,
    size: Size | None = None,
    short_side: int | None = None,
    interpolation: str | None = None,
    crop: str | None = None,
    crop_size: Size | None = None,
    scale: tuple[float, float] | None = None,
    ratio: tuple[float, float] | None = None,
    seed: int | None = None,
    max_pixels: int | None = None,
    name: str | None = None,
    **options: Any,
) -> Tensor:
    """Decodes an image (a path or its bytes) into a uint8 tensor (H, W, C).

    The options are ``ops.decode_image``'s, which this runs (see it for
    each); any further keyword is passed to it as well.

    Args:
        src: The image's path or bytes.
        mode: "rgb" (default), "bgr" or "gray" (C=1).
        size, short_side, interpolation: Resize (fused with decoding).
        crop, crop_size, scale, ratio, seed: Center or random resized crop.
        max_pixels: Refuse larger images (default 100M).
        name: What to call bytes in errors.

    Raises:
        ValueError: An option is invalid.
        RuntimeError: The image cannot be decoded (empty, truncated,
            corrupt, not an image, over ``max_pixels``); the message names it.

    Differences from SPDL: SPDL's ``demux_config``, ``decode_config``,
    ``filter_desc`` and ``device_config`` are replaced by the ops' options
    (move the tensor to a GPU with ``torch.from_dlpack(t).cuda()``); the
    result is an ``spdl_go.Tensor``, not a ``CPUBuffer``.
    """
    op = ops.decode_image(
        mode=mode,
        size=size,
        short_side=short_side,
        interpolation=interpolation,
        crop=crop,
        crop_size=crop_size,
        scale=scale,
        ratio=ratio,
        seed=seed,
        max_pixels=max_pixels,
        **options,
    )
    return cast(Tensor, _apply(op, _source(src), name=name or ""))


def load_audio(
    src: Source,
    timestamp: tuple[float, float] | None = None,
    *,
    sample_rate: int | None = None,
    num_channels: int | None = None,
    start: float | None = None,
    duration: float | None = None,
    num_samples: int | None = None,
    max_samples: int | None = None,
    name: str | None = None,
    **options: Any,
) -> Tensor:
    """Decodes audio (a path or its bytes) into a float32 tensor
    (channels, samples) in [-1, 1].

    The options are ``ops.decode_audio``'s, which this runs.

    Args:
        src: The file's path or bytes.
        timestamp: SPDL's window ``(start, end)`` in seconds; or give
            ``start`` and ``duration``.
        sample_rate, num_channels: Resample, mix (default: the file's).
        num_samples: Crop or zero-pad to exactly this many samples.
        max_samples: Refuse a larger output (default 400_000_000).
        name: What to call bytes in errors.
        options: Other ``ops.decode_audio`` options, such as
            ``lowpass_filter_width``.

    Raises:
        ValueError: An option is invalid.
        RuntimeError: The audio cannot be decoded; the message names it.

    Differences from SPDL: the layout is (channels, samples) float32, as
    the op produces, where SPDL's default filter gives (samples, channels)
    in the file's sample format; ``demux_config``, ``decode_config`` and
    ``filter_desc`` are replaced by the options above.
    """
    start, duration = _window(timestamp, start, duration)
    op = ops.decode_audio(
        sample_rate=sample_rate,
        num_channels=num_channels,
        start=start,
        duration=duration,
        num_samples=num_samples,
        max_samples=max_samples,
        **options,
    )
    return cast(Tensor, _apply(op, _source(src), name=name or ""))


def load_video(
    src: Source,
    timestamp: tuple[float, float] | None = None,
    *,
    indices: list[int] | None = None,
    fps: float | None = None,
    num_frames: int | None = None,
    start: float | None = None,
    duration: float | None = None,
    mode: str | None = None,
    size: tuple[int, int] | None = None,
    short_side: int | None = None,
    interpolation: str | None = None,
    threads: int | None = None,
    max_frames: int | None = None,
    max_pixels: int | None = None,
    max_output_bytes: int | None = None,
    name: str | None = None,
    **options: Any,
) -> Tensor:
    """Decodes frames of a video (a path or its bytes) into a uint8 tensor
    (T, H, W, C).

    The options are ``ops.decode_video``'s, which this runs: choose frames
    with ``indices``, ``fps`` or ``num_frames`` over the window; with none,
    every frame of it.

    Args:
        src: The file's path or bytes.
        timestamp: SPDL's window ``(start, end)`` in seconds; or give
            ``start`` and ``duration``.
        mode, size, short_side, interpolation: Output pixels.
        threads: Decoder threads (default 1), SPDL's
            ``decoder_options={"threads": ...}``.
        max_frames, max_pixels, max_output_bytes: Limits, checked before
            the output is allocated.
        name: What to call bytes in errors.

    Raises:
        ValueError: An option is invalid.
        RuntimeError: The video cannot be decoded or is over a limit; the
            message names it.

    Differences from SPDL: frames are RGB (T, H, W, 3) by default, as the
    op produces (SPDL's default filter is the same); ``demux_config``,
    ``decode_config`` and ``filter_desc`` are replaced by the options.
    """
    start, duration = _window(timestamp, start, duration)
    op = ops.decode_video(
        indices=indices,
        fps=fps,
        num_frames=num_frames,
        start=start,
        duration=duration,
        mode=mode,
        size=size,
        short_side=short_side,
        interpolation=interpolation,
        threads=threads,
        max_frames=max_frames,
        max_pixels=max_pixels,
        max_output_bytes=max_output_bytes,
        **options,
    )
    return cast(Tensor, _apply(op, _source(src), name=name or ""))


def load_image_batch(
    srcs: Sequence[Source],
    *,
    width: int | None = None,
    height: int | None = None,
    size: Size | None = None,
    mode: str | None = None,
    strict: bool = True,
    num_threads: int = 0,
    names: Sequence[str] | None = None,
    **options: Any,
) -> Tensor:
    """Decodes images into one uint8 batch tensor (N, H, W, C).

    The images are decoded in parallel on Go threads (at most
    ``num_threads``; 0: one per CPU), without the GIL; they must come out
    the same size, so give a size (``width`` and ``height``, or ``size``)
    or a crop. Other options are ``ops.decode_image``'s (``short_side``,
    ``crop``, ``crop_size``, ``interpolation``, ``max_pixels``, ...).

    Args:
        srcs: Paths or bytes of the images.
        width, height: Resize each image to this size (SPDL's arguments).
        size: Or ``(height, width)``, as ``decode_image``.
        mode: "rgb" (default), "bgr" or "gray".
        strict: With True (default) the first image that fails fails the
            call, and the error names its index and source; with False,
            failed images are left out of the batch (each error is logged
            as a warning) and only all of them failing raises.
        num_threads: Decoding threads for this call.
        names: What to call each bytes input in errors.

    Raises:
        ValueError: An option is invalid, or ``srcs`` is empty.
        RuntimeError: An image failed (``strict``) or every image failed,
            or the images are not all the same size.

    Differences from SPDL: ``pix_fmt`` is ``mode``; ``demux_config``,
    ``decode_config``, ``filter_desc``, ``device_config`` and ``storage``
    are not taken; the images decode in parallel.
    """
    if not srcs:
        raise ValueError("load_image_batch: srcs must not be empty")
    if (width is None) != (height is None):
        raise ValueError("load_image_batch: give both width and height (or size=(height, width))")
    if width is not None:
        if size is not None:
            raise ValueError("load_image_batch: give width and height or size, not both")
        size = (int(cast(int, height)), int(width))
    if names is not None and len(names) != len(srcs):
        raise ValueError(f"load_image_batch: {len(names)} names for {len(srcs)} sources")
    op = ops.decode_image(size=size, mode=mode, **options)
    request: dict[str, Any] = {"batch": True, "strict": bool(strict), "threads": int(num_threads)}
    if names is not None:
        request["names"] = [str(n) for n in names]
    batch, errors = _apply(op, [_source(s) for s in srcs], **request)
    for e in errors:
        _LG.warning("load_image_batch: left out %s", e)
    return cast(Tensor, batch)


def encode_image(
    data: Any,
    format: str = "jpeg",
    *,
    pix_fmt: str | None = None,
    quality: int = 75,
    subsampling: str = "420",
    compression_level: int = -1,
) -> bytes:
    """Encodes an image array as JPEG or PNG and returns the file's bytes.

    Args:
        data: A CPU array with ``__dlpack__`` (numpy, torch, spdl_go.Tensor)
            of shape (H, W), (H, W, 1), (H, W, 3) or (H, W, 4): uint8, or
            uint16 for 16-bit grayscale PNG. Any strides.
        format: "jpeg" (TurboJPEG) or "png".
        pix_fmt: "rgb24", "bgr24", "rgba" (alpha is dropped in JPEG),
            "gray" or "gray16"; default: from the shape and dtype.
        quality: JPEG quality, 1..100 (default 75, as Pillow and torchvision).
        subsampling: JPEG chroma subsampling, "420" (default), "422" or "444".
        compression_level: PNG zlib level, 0..9 (-1: default).

    Raises:
        ValueError: The array or an option is not one that can be encoded.

    Differences from SPDL: SPDL's ``encode_image(path, data, pix_fmt,
    encode_config)`` writes a file; here ``encode_image`` returns bytes and
    ``save_image`` writes. ``yuv444p`` input is not taken.
    """
    fmt = format.lower()
    fmt = "jpeg" if fmt == "jpg" else fmt
    opts: dict[str, Any] = {
        "format": fmt,
        "quality": quality,
        "subsampling": subsampling,
        "compression_level": compression_level,
    }
    if pix_fmt is not None:
        opts["pix_fmt"] = pix_fmt
    raw = json.dumps(opts).encode()
    if not hasattr(data, "__dlpack__"):
        raise ValueError(f"encode_image: expected an array with __dlpack__ (numpy, torch), got {type(data).__name__}")
    wire = _codec.encode(data)
    return _run(_lib.LIB.spdl_io_encode_image, wire, len(wire), raw, len(raw), error=RuntimeError)


def save_image(
    path: str | os.PathLike[str],
    data: Any,
    pix_fmt: str | None = None,
    *,
    quality: int = 75,
    subsampling: str = "420",
    compression_level: int = -1,
) -> None:
    """Writes an image array to ``path`` as JPEG (.jpg, .jpeg) or PNG (.png),
    chosen by the extension. The arguments are ``encode_image``'s.

    Raises:
        ValueError: The extension is neither, or the array or an option
            cannot be encoded.
        OSError: The file cannot be written.

    Differences from SPDL: SPDL writes through FFmpeg's muxer with
    ``qscale``, ``bit_rate`` and the like; here JPEG takes ``quality`` and
    PNG ``compression_level``.
    """
    ext = Path(path).suffix.lower()
    fmt = {".jpg": "jpeg", ".jpeg": "jpeg", ".png": "png"}.get(ext)
    if fmt is None:
        raise ValueError(f"save_image: {os.fspath(path)!r}: the extension must be .jpg, .jpeg or .png")
    encoded = encode_image(
        data, fmt, pix_fmt=pix_fmt, quality=quality, subsampling=subsampling, compression_level=compression_level
    )
    with open(path, "wb") as f:
        f.write(encoded)


def _load(format: str, data: Source, opts: dict[str, Any]) -> Any:
    if isinstance(data, (str, os.PathLike)):
        if opts.get("name") is None:
            opts["name"] = os.fspath(data)
        with open(data, "rb") as f:
            data = f.read()
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else None
    if mv is not None and isinstance(mv.obj, bytes) and mv.nbytes == len(mv.obj) and mv.contiguous:
        data, mv = mv.obj, None  # a whole bytes object: pass it as is, no copy
    raw = json.dumps({k: v for k, v in opts.items() if v is not None}).encode()
    if mv is None:
        buf: Any = data
        addr: Any = buf
        n = len(buf)
    elif mv.readonly:
        buf = addr = bytes(mv)  # ctypes takes no pointer into a read-only view
        n = len(buf)
    else:
        # The ctypes array holds the buffer export for the call, so the
        # source cannot be resized (and its memory moved) meanwhile.
        n = mv.nbytes
        buf = (ctypes.c_char * n).from_buffer(mv)
        addr = ctypes.addressof(buf)
    try:
        return _codec.decode(_run(_lib.LIB.spdl_io_load, format.encode(), raw, len(raw), addr, n, error=ValueError))
    finally:
        del buf
        if mv is not None:
            mv.release()


def load_npy(data: Source, *, copy: bool = True, name: str | None = None) -> Tensor:
    """Loads a NumPy ``.npy`` array (``numpy.save``'s format): its bytes, or
    a path.

    bool, int, uint and float arrays of any shape, C or Fortran order, either
    byte order; the result is C-ordered in native byte order.

    Args:
        data: The .npy bytes (bytes, bytearray, memoryview) or a path.
        copy: Accepted for SPDL's signature; the result is always a copy
            that owns its memory, whatever it says.
        name: What to call bytes in errors.

    Raises:
        ValueError: The data is not .npy, is truncated, or holds an object,
            string, complex or structured dtype; the message says which.

    Differences from SPDL: the result is an ``spdl_go.Tensor`` (a copy in C
    memory; ``numpy.from_dlpack`` views it), never a view of ``data``, so
    ``copy=False`` copies too; paths are accepted too.
    """
    del copy  # always a copy: the tensor lives in the engine's C memory
    return cast(Tensor, _load("npy", data, {"name": name}))


def load_npz(data: Source, *, max_uncompressed_bytes: int = 1 << 30, name: str | None = None) -> dict[str, Tensor]:
    """Loads a NumPy ``.npz`` archive (``numpy.savez``, stored or
    compressed) into a dict of arrays, in archive order.

    Args:
        data: The archive's bytes or a path.
        max_uncompressed_bytes: Refuse an archive whose members declare more
            uncompressed bytes than this in total (default 1 GiB), before
            inflating anything; a member that inflates past its declared
            size is refused too. Raise it only for archives you trust.
        name: What to call bytes in errors.

    Raises:
        ValueError: Not a zip of .npy members, corrupt (checksums are
            verified), or over ``max_uncompressed_bytes``.

    Differences from SPDL: every array is loaded at once (SPDL's
    ``NpzFile`` loads on access) and the limit counts stored members too.
    """
    if max_uncompressed_bytes < 0:
        raise ValueError(f"load_npz: max_uncompressed_bytes must be >= 0, got {max_uncompressed_bytes}")
    return cast(
        "dict[str, Tensor]",
        _load("npz", data, {"name": name, "max_uncompressed_bytes": int(max_uncompressed_bytes)}),
    )


def load_wav(
    data: Source,
    time_offset_seconds: float | None = None,
    duration_seconds: float | None = None,
    *,
    name: str | None = None,
) -> Tensor:
    """Reads the samples of a WAV file, as they are stored, into a tensor
    (samples, channels).

    The dtype follows the file: 8-bit PCM uint8, 16-bit int16, 32-bit int32,
    32/64-bit float float32/float64. Use ``load_audio`` for other encodings,
    resampling or float conversion.

    Args:
        data: The file's bytes or a path.
        time_offset_seconds: Where to start (default 0).
        duration_seconds: How much to read (default: to the end).
        name: What to call bytes in errors.

    Raises:
        ValueError: Not WAV, truncated, an unsupported sample format, or a
            window outside the audio.

    Differences from SPDL: the result is an ``spdl_go.Tensor`` (a copy in C
    memory) rather than a view of ``data``; paths are accepted too.
    """
    for arg, v in (("time_offset_seconds", time_offset_seconds), ("duration_seconds", duration_seconds)):
        if v is not None and not math.isfinite(v):
            raise ValueError(f"load_wav: {arg} must be a finite number of seconds, got {v}")  # JSON has no NaN
    out = _load(
        "wav",
        data,
        {"name": name, "time_offset_seconds": time_offset_seconds, "duration_seconds": duration_seconds},
    )
    samples, _rate = out
    return cast(Tensor, samples)


def iter_tarfile(
    src: bytes | bytearray | memoryview | IO[bytes] | str | os.PathLike[str],
) -> Iterator[tuple[str, memoryview | bytes]]:
    """Yields ``(name, contents)`` for each regular file of a tar archive, in
    archive order (ustar, GNU and PAX headers; directories and links are
    skipped).

    Args:
        src: The archive's bytes, a path, or a file-like object with
            ``read()``.

    Yields:
        For bytes, memoryviews into them (no copy); for a path or a file
        object, ``bytes``.

    Raises:
        ValueError: Not a tar archive, or truncated (checked for the whole
            archive before the first file is yielded).

    Differences from SPDL: a file object is read whole before parsing (SPDL
    streams it); paths are accepted too.
    """
    if isinstance(src, (bytes, bytearray, memoryview)):
        mv = memoryview(src).cast("B")
        views = True
    else:
        if isinstance(src, (str, os.PathLike)):
            with open(src, "rb") as f:
                mv = memoryview(f.read())
        else:
            mv = memoryview(src.read())
        views = False
    entries = _load("tar", mv, {})
    for name, offset, size in entries:
        part = mv[offset : offset + size]
        yield name, (part if views else part.tobytes())
