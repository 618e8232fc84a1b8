"""Native (Go) ops: stages that run on Go threads without touching the GIL.

Use them wherever a Python function would go::

    builder.pipe(spdl_go.ops.to_tensor(dtype="float32"), concurrency=4)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import _lib

__all__ = [
    "NativeOp",
    "available",
    "center_crop",
    "collate",
    "decode_audio",
    "decode_image",
    "decode_video",
    "hflip",
    "identity",
    "normalize",
    "random_hflip",
    "random_resized_crop",
    "read_file",
    "resize",
    "to_device",
    "to_tensor",
]

Size = tuple[int, int] | int


@dataclass(frozen=True, repr=False)
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

    def __repr__(self) -> str:
        from ._storage import redacted

        return f"NativeOp(name={self.name!r}, options={redacted(self.options)!r})"


def available() -> list[str]:
    """Names of the native ops this build of the library provides."""
    names: list[str] = _lib.call_json(_lib.LIB.spdl_ops)
    return names


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


def to_device(device: Any = "cuda", *, pinned: bool = True, keep_on_cpu: tuple[str | int, ...] = ()) -> NativeOp:
    """Copies every tensor of a batch to a CUDA GPU; other fields pass through.

    Put it after ``collate``, usually with concurrency 1 or 2: the copy runs
    in the pipeline's threads on a stream of its own (staged through pooled
    pinned memory unless ``pinned=False``), so batch N+1 is copied while the
    training loop computes on batch N. Batches arrive complete, as DLPack
    tensors with the CUDA device type (``torch.from_dlpack`` makes CUDA
    tensors without a copy). A batch's device memory is reused only after
    the work queued on the stream it was imported on (PyTorch's current
    stream) has run.

    The CUDA runtime is loaded when the pipeline is built (see
    ``spdl_go.cuda.status()``); without it, or without a GPU, building
    fails with an error that says what was tried.

    Args:
        device: "cuda", "cuda:N", an int N, or a ``torch.device``.
        pinned: Stage copies through pinned host memory (asynchronous DMA).
        keep_on_cpu: Top-level dict keys or tuple indices to leave where
            they are (e.g. sample ids the loop reads on the CPU).

    Example:
        >>> b.aggregate(32).pipe(ops.collate(numbers="tensor")).pipe(ops.to_device("cuda:0"))
    """
    from . import cuda

    return NativeOp(
        "to_device",
        {
            "device": _cuda_ordinal(device),
            "pinned": bool(pinned),
            "keep_on_cpu": list(keep_on_cpu),
            "runtime": cuda.runtime_search_paths(),
        },
    )


def _cuda_ordinal(device: Any) -> int:
    if isinstance(device, bool):
        raise TypeError(f"to_device: device must be 'cuda', 'cuda:N' or an int, not {device!r}")
    if isinstance(device, int):
        idx = device
    else:
        text = str(device)  # also a torch.device
        kind, _, num = text.partition(":")
        if kind != "cuda" or (num and not num.isdigit()):
            raise ValueError(f"to_device: device must be 'cuda', 'cuda:N' or an int, not {device!r}")
        idx = int(num) if num else 0
    if idx < 0:
        raise ValueError(f"to_device: device ordinal must be >= 0, got {idx}")
    return idx


def _media_opts(key: str | None, output_key: str | None, **opts: Any) -> dict[str, Any]:
    """Options with None left out, so the op's own defaults apply."""
    out = {k: v for k, v in opts.items() if v is not None}
    if key is not None:
        out["key"] = key
    if output_key is not None:
        out["output_key"] = output_key
    return out


def decode_audio(
    *,
    sample_rate: int | None = None,
    num_channels: int | None = None,
    lowpass_filter_width: int | None = None,
    start: float | None = None,
    duration: float | None = None,
    num_samples: int | None = None,
    max_samples: int | None = None,
    key: str | None = None,
    output_key: str | None = None,
) -> NativeOp:
    """Decodes audio (WAV, FLAC, MP3, Ogg/Vorbis, Opus, AAC/M4A, ...) into a
    float32 tensor (channels, samples) in [-1, 1].

    The input is a path or the file's bytes; or a ``(data, label, ...)``
    tuple or a dict, where ``key`` (default "audio") names the field.

    Args:
        sample_rate: Resample to this rate (default: the file's).
        num_channels: Mix to this many channels (default: the file's).
        lowpass_filter_width: The resampling filter's length as
            ``torchaudio.functional.resample`` counts it: the windowed
            sinc's zero crossings on each side, 1-64. Default: 16,
            libswresample's (what SPDL and the ffmpeg CLI use).
            torchaudio's default, 6, resamples in about half the time and
            lets a little more aliasing through near the new Nyquist
            frequency.
        start: Seconds to skip (seeks; sample-exact).
        duration: Seconds to decode from ``start``.
        num_samples: Crop or zero-pad to exactly this many samples, so that
            clips batch together.
        max_samples: Refuse an output of more samples, channels times
            samples per channel (default 400_000_000: a little over an hour
            of 48 kHz stereo, 1.6 GB). Checked against ``num_samples`` or
            the file's declared length before anything is allocated, and
            while decoding; the error names the file and the limit.

    Example:
        >>> b.pipe(ops.decode_audio(sample_rate=16000, num_channels=1, num_samples=16000), concurrency=4)
    """
    return NativeOp(
        "decode_audio",
        _media_opts(
            key,
            output_key,
            sample_rate=sample_rate,
            num_channels=num_channels,
            lowpass_filter_width=lowpass_filter_width,
            start=start,
            duration=duration,
            num_samples=num_samples,
            max_samples=max_samples,
        ),
    )


def decode_video(
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
    apply_rotation: bool | None = None,
    apply_sar: bool | None = None,
    threads: int | None = None,
    max_frames: int | None = None,
    max_pixels: int | None = None,
    max_output_bytes: int | None = None,
    key: str | None = None,
    output_key: str | None = None,
) -> NativeOp:
    """Decodes frames of a video (H.264, HEVC, VP8/9, AV1, MPEG-4, ...) into a
    uint8 tensor (T, H, W, C), decoding only what the frames it keeps need:
    it stops after the last, skips frames nothing shown references, and
    jumps over keyframes to the next frame it needs; the frames are the
    same as a straight decode's.

    Choose frames with at most one of ``indices`` (in the order given),
    ``fps`` (a rate over the span) or ``num_frames`` (evenly spaced over the
    span); with none, every frame of the span. The span is ``start`` and
    ``duration`` seconds (seeking to the keyframe before ``start``).

    Args:
        mode: "rgb" (default), "bgr" or "gray" (C=1).
        size: Output (height, width); or ``short_side`` to keep the aspect.
        interpolation: "bilinear" (default), "area", "bicubic", "nearest".
        apply_rotation: Turn frames as the stream's display matrix says (a
            phone video's rotation, 90/180/270 degrees; FFmpeg's CLI calls
            it autorotate); ``size``/``short_side`` then apply to the turned
            frame. Default False: frames as coded, as SPDL and torchvision
            return them. ``spdl_go.media.probe`` shows a stream's
            ``rotation``.
        apply_sar: Stretch the width by the sample aspect ratio (non-square
            pixels; probe's ``sample_aspect_ratio``), giving the display
            shape. Default False.
        threads: Decoder threads per video (default 1; pipelines decode
            several videos at once).
        max_frames: Refuse to return more frames (default 4096).
        max_pixels: Refuse frames, as decoded or resized, of more than this
            width * height (default 50_000_000).
        max_output_bytes: Refuse an output tensor of more bytes, T * H * W
            * C (default 2 GiB), before it is allocated; the error names
            the file and the limit.
        key: The field holding the path or bytes in dict items (default "video").

    Example:
        >>> b.pipe(ops.decode_video(num_frames=8, short_side=112), concurrency=2)
    """
    return NativeOp(
        "decode_video",
        _media_opts(
            key,
            output_key,
            indices=list(indices) if indices is not None else None,
            fps=fps,
            num_frames=num_frames,
            start=start,
            duration=duration,
            mode=mode,
            size=list(size) if size is not None else None,
            short_side=short_side,
            interpolation=interpolation,
            apply_rotation=apply_rotation,
            apply_sar=apply_sar,
            threads=threads,
            max_frames=max_frames,
            max_pixels=max_pixels,
            max_output_bytes=max_output_bytes,
        ),
    )


def _size(size: Size | None) -> list[int] | int | None:
    if size is None or isinstance(size, int):
        return size
    return list(size)


def read_file(
    *,
    key: str | None = None,
    output_key: str | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    s3: dict[str, Any] | None = None,
    gcs: dict[str, Any] | None = None,
    azure: dict[str, Any] | None = None,
    ca_file: str | None = None,
    cache_memory_bytes: int = 0,
    cache_dir: str | None = None,
    cache_disk_bytes: int = 0,
) -> NativeOp:
    """Reads a file or object: name → bytes (bytes pass through).

    Names are local paths, ``file://``, ``http(s)://``, ``s3://bucket/key``,
    ``gs://bucket/object`` or ``az://container/blob``
    URLs. Remote reads retry with backoff on server errors (5xx, 429),
    resets and stalls; errors name the URL and the HTTP status. A waiting
    request costs a goroutine, not a thread, so give the stage a high
    concurrency (64 or more) to keep many requests in flight; its calls do
    not count against ``build(num_threads=...)``, which bounds CPU work.

    Args:
        key, output_key: Which field holds the name (default "path"), and
            where the bytes go (default: in its place).
        timeout: Seconds an attempt may wait for the response headers, and
            again for each piece of the body (default 30).
        retries: Retries of a failed attempt (default 3).
        s3: S3 settings overriding the AWS SDK's defaults (the ``AWS_*``
            variables as they are when the pipeline is built, the shared
            config and credentials files and their profiles, a web
            identity token, ECS container and EC2 instance credentials,
            SSO, ``credential_process``; expiring credentials are
            refreshed): endpoint (e.g. "http://127.0.0.1:9000"), region,
            profile, access_key and secret_key (with session_token),
            anonymous (unsigned requests, for public buckets),
            virtual_host. Secrets are redacted in reprs.
        gcs: Google Cloud Storage settings for ``gs://bucket/object``
            names, overriding the client's defaults (Application Default
            Credentials; ``STORAGE_EMULATOR_HOST`` for an emulator):
            endpoint, credentials_file (a service account key), anonymous
            (public buckets).
        azure: Azure Blob Storage settings for ``az://container/blob`` (or
            ``abfs[s]://container@account.dfs.core.windows.net/blob``)
            names: account, endpoint (the blob service URL),
            connection_string, account_key, sas_token, anonymous (public
            containers). Unset, they come from
            ``AZURE_STORAGE_CONNECTION_STRING``, else
            ``AZURE_STORAGE_ACCOUNT`` with ``AZURE_STORAGE_KEY`` or
            ``AZURE_STORAGE_SAS_TOKEN``, else ``DefaultAzureCredential``.
        ca_file: A PEM bundle of certificate authorities to trust for
            ``https://`` (default: the system's).
        cache_memory_bytes: Keep up to this many bytes of recently read
            objects in memory (an LRU), for datasets that fit.
        cache_dir, cache_disk_bytes: Keep remote objects in this directory,
            up to this many bytes, evicting the least recently used. The
            directory may be shared by processes (entries appear whole)
            and outlives the run. Names are assumed to keep their content.
            Hits and misses show in ``stats().stages[i].op_stats``.

    Example:
        >>> b.add_source(urls).pipe(ops.read_file(), concurrency=64).pipe(ops.decode_image(size=224), concurrency=4)
    """
    from ._storage import storage_options

    cache: dict[str, Any] = {}
    for name, v in (("cache_memory_bytes", cache_memory_bytes), ("cache_disk_bytes", cache_disk_bytes)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"read_file: {name} must be an int >= 0, got {v!r}")
        if v:
            cache[name] = v
    if cache_dir is not None:
        if not cache_disk_bytes:
            raise ValueError("read_file: cache_dir needs cache_disk_bytes, the disk cache's budget")
        cache["cache_dir"] = str(cache_dir)
    elif cache_disk_bytes:
        raise ValueError("read_file: cache_disk_bytes needs cache_dir")
    return NativeOp(
        "read_file",
        {
            **_media_opts(key, output_key),
            **storage_options(timeout, retries, s3, "read_file", ca_file, gcs, azure),
            **cache,
        },
    )


def decode_image(
    *,
    mode: str | None = None,
    dtype: str | None = None,
    size: Size | None = None,
    short_side: int | None = None,
    interpolation: str | None = None,
    crop: str | None = None,
    crop_size: Size | None = None,
    scale: tuple[float, float] | None = None,
    ratio: tuple[float, float] | None = None,
    seed: int | None = None,
    rng_key: str | None = None,
    max_pixels: int | None = None,
    key: str | None = None,
    output_key: str | None = None,
    name_key: str | None = None,
) -> NativeOp:
    """Decodes an image (path or bytes) into a uint8 (or uint16) tensor (H, W, C).

    JPEG goes through libjpeg-turbo, decoding at 1/2, 1/4 or 1/8 scale in
    the DCT domain when the target is that much smaller; PNG, WebP, BMP, GIF
    (first frame), TIFF and the rest through FFmpeg. Resizing and cropping
    given here are fused with decoding: only the output pixels are computed.

    Args:
        mode: "rgb" (default), "bgr", "gray" (C=1) or "rgba" (C=4: the
            image's alpha, or 255 for images without one, such as JPEGs).
            Other modes drop alpha.
        dtype: "uint8" (default; 16-bit images are rounded, v * 255 / 65535)
            or "uint16": 16-bit PNG, TIFF and PNM keep all their bits and
            8-bit images are widened (v * 257), so a mixed set batches into
            one dtype. uint16 takes ``crop="center"`` but no resize: resize
            in floating point after decoding.
        size: Resize to (height, width); or ``short_side`` keeping the aspect.
        interpolation: "bilinear" (default), "area" or "nearest".
        crop: "center" or "random_resized" (torchvision's RandomResizedCrop,
            with ``scale``, ``ratio``, ``seed``, ``rng_key``), to ``crop_size``.
        max_pixels: Refuse larger images (decompression bombs); default 100M.
        key: Field of dict items holding the image (default "image");
            ``name_key`` (default "path") names bytes in errors.

    Example:
        >>> ops.decode_image(short_side=256, crop="center", crop_size=224)
    """
    return NativeOp(
        "decode_image",
        _media_opts(
            key,
            output_key,
            mode=mode,
            dtype=dtype,
            size=_size(size),
            short_side=short_side,
            interpolation=interpolation,
            crop=crop,
            crop_size=_size(crop_size),
            scale=list(scale) if scale is not None else None,
            ratio=list(ratio) if ratio is not None else None,
            seed=seed,
            rng_key=rng_key,
            max_pixels=max_pixels,
            name_key=name_key,
        ),
    )


def resize(
    *,
    size: Size | None = None,
    short_side: int | None = None,
    interpolation: str | None = None,
    key: str | None = None,
    output_key: str | None = None,
) -> NativeOp:
    """Resizes a uint8 HWC image to ``size`` (h, w) or to ``short_side``."""
    return NativeOp(
        "resize", _media_opts(key, output_key, size=_size(size), short_side=short_side, interpolation=interpolation)
    )


def center_crop(size: Size, *, key: str | None = None, output_key: str | None = None) -> NativeOp:
    """Crops the centre ``size`` (h, w) of a uint8 HWC image."""
    return NativeOp("center_crop", _media_opts(key, output_key, size=_size(size)))


def random_resized_crop(
    size: Size,
    *,
    scale: tuple[float, float] | None = None,
    ratio: tuple[float, float] | None = None,
    interpolation: str | None = None,
    seed: int | None = None,
    rng_key: str | None = None,
    key: str | None = None,
    output_key: str | None = None,
) -> NativeOp:
    """torchvision's RandomResizedCrop on a uint8 HWC image.

    Draws repeat for the same ``seed`` and item order; with ``rng_key`` (a
    dict key such as "path") they depend only on the seed and that value.
    """
    return NativeOp(
        "random_resized_crop",
        _media_opts(
            key,
            output_key,
            size=_size(size),
            scale=list(scale) if scale is not None else None,
            ratio=list(ratio) if ratio is not None else None,
            interpolation=interpolation,
            seed=seed,
            rng_key=rng_key,
        ),
    )


def hflip(*, key: str | None = None, output_key: str | None = None) -> NativeOp:
    """Mirrors a uint8 HWC image left to right."""
    return NativeOp("hflip", _media_opts(key, output_key))


def random_hflip(
    p: float = 0.5,
    *,
    seed: int | None = None,
    rng_key: str | None = None,
    key: str | None = None,
    output_key: str | None = None,
) -> NativeOp:
    """Mirrors a uint8 HWC image with probability ``p`` (seeded like random_resized_crop)."""
    return NativeOp("random_hflip", _media_opts(key, output_key, p=p, seed=seed, rng_key=rng_key))


def normalize(
    *,
    mean: tuple[float, ...] | None = None,
    std: tuple[float, ...] | None = None,
    layout: str | None = None,
    key: str | None = None,
    output_key: str | None = None,
) -> NativeOp:
    """uint8 HWC → float32 ``(x / 255 - mean) / std`` in "chw" (default) or "hwc"
    layout; mean and std default to ImageNet's."""
    return NativeOp(
        "normalize",
        _media_opts(
            key,
            output_key,
            mean=list(mean) if mean is not None else None,
            std=list(std) if std is not None else None,
            layout=layout,
        ),
    )
