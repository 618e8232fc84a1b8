"""Native sources: items produced in Go, with no Python call per item."""

from __future__ import annotations

import base64
import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ListedSource",
    "NativeSource",
    "arange",
    "distributed_env",
    "files",
    "image_folder",
    "sampler",
    "table",
    "webdataset",
]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")


@dataclass(frozen=True, repr=False)
class NativeSource:
    """A source implemented in Go.

    Attributes:
        kind: The Go source kind (``sources.Register`` in core/sources).
        options: Its options, as sent to Go; the shared sampling options
            are the ``"sampling"`` group, remote-read options ``"storage"``.
        resumes: How ``ResumableSource`` resumes it: ``"sampled"`` (a
            known number of samples in an order fixed by seed and epoch),
            ``"stream"`` (shards or parts dealt to ranks, consumed samples
            skipped) or None (not resumable).
    """

    kind: str
    options: dict[str, Any]
    resumes: str | None = None

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.options}

    @property
    def epoch(self) -> int:
        """The first epoch's number."""
        return int(self.options.get("sampling", {}).get("epoch", 0))

    def sampler_config(self) -> dict[str, Any]:
        """The dataset (``n`` samples, or the shard ``urls``) and how it is
        dealt: shuffle, seed, world_size, rank, drop_last."""
        if self.resumes is None:
            raise TypeError(f"{self.kind} source: not resumable")
        g = self.options["sampling"]
        what = "n" if self.resumes == "sampled" else "urls"
        return {what: self.options[what], **{k: g[k] for k in ("shuffle", "seed", "world_size", "rank", "drop_last")}}

    def state_dataset(self) -> dict[str, Any]:
        """What identifies the dataset in a saved state: a state applies to
        a source with the same (any rank, any world size)."""
        cfg = self.sampler_config()
        return {k: v for k, v in cfg.items() if k not in ("world_size", "rank")}

    def resumed(self, progress: dict[str, Any]) -> NativeSource:
        """A copy whose first epoch resumes ``progress`` (a merged state's)."""
        if self.resumes == "sampled":
            resume = {"resume": progress}
        elif self.resumes == "stream":
            resume = {
                "stream_resume": {
                    "epoch": progress["epoch"],
                    "consumed": progress["consumed"],
                    "sizes": progress.get("sizes", {}),
                }
            }
        else:
            raise TypeError(f"{self.kind} source: not resumable")
        sampling = {**self.options["sampling"], "epoch": progress["epoch"]}
        return dataclasses.replace(self, options={**self.options, **resume, "sampling": sampling})

    def __repr__(self) -> str:
        from ._storage import redacted

        opts = {k: v for k, v in self.options.items() if k != "items_wire"}  # large and opaque
        return f"{type(self).__name__}(kind={self.kind!r}, options={redacted(opts)!r})"


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
    with_index: bool = False,
) -> NativeSource:
    """This rank's share of a dataset, in Go: one epoch per engine run
    (each iteration with ``add_source(..., continuous=True)``).

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

    options: dict[str, Any] = {
        "sampling": _sampling("sampler", shuffle, seed, drop_last, rank, world_size, epoch),
        "with_index": bool(with_index),
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
    return NativeSource("sampler", options, "sampled")


def _sampling(
    who: str, shuffle: bool, seed: int, drop_last: bool, rank: int | None, world_size: int | None, epoch: int
) -> dict[str, Any]:
    """The sampling group of every sampled source, checked by Go."""
    env_rank, env_world = distributed_env() if rank is None or world_size is None else (0, 1)
    rank = env_rank if rank is None else rank
    world_size = env_world if world_size is None else world_size
    for name, v in (("seed", seed), ("rank", rank), ("world_size", world_size), ("epoch", epoch)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{who}: {name} must be an int, got {type(v).__name__}")
    group = {
        "shuffle": bool(shuffle),
        "seed": seed,
        "drop_last": bool(drop_last),
        "rank": rank,
        "world_size": world_size,
        "epoch": epoch,
    }
    import json

    from . import _lib

    raw = json.dumps(group).encode()
    try:
        _lib.call(_lib.LIB.spdl_spec_check, b"sampling", raw, len(raw), error=ValueError)
    except ValueError as e:
        raise ValueError(f"{who}: {e}") from None
    return group


def _sampler_call(req: dict[str, Any], who: str = "") -> Any:
    """Asks Go (spdl_sampler_call); its error is a ValueError, after ``who``."""
    import json

    from . import _lib

    raw = json.dumps(req).encode()
    try:
        return _lib.call_json(_lib.LIB.spdl_sampler_call, raw, len(raw), error=ValueError)
    except ValueError as e:
        if not who:
            raise
        raise ValueError(f"{who}: {e}") from None


@dataclass(frozen=True, repr=False)
class ListedSource(NativeSource):
    """A dataset listed in Go (``files``, ``image_folder``) and dealt out by
    the sampler: shuffled, split over ranks and resumable like ``sampler``.

    Attributes:
        classes: The class names, in label order (``image_folder``; empty
            for ``files``).
    """

    classes: tuple[str, ...] = ()

    def __len__(self) -> int:
        """Samples in the whole dataset (all ranks)."""
        return int(self.options["n"])


def _listed(
    who: str,
    listing: dict[str, Any],
    shuffle: bool,
    seed: int,
    drop_last: bool,
    rank: int | None,
    world_size: int | None,
    epoch: int,
    with_index: bool,
) -> ListedSource:
    options = {
        "sampling": _sampling(who, shuffle, seed, drop_last, rank, world_size, epoch),
        "with_index": bool(with_index),
    }
    info = _sampler_call({"op": "list", "listing": listing})  # Go's errors name the path
    return ListedSource(
        "sampler", {**options, "n": info["n"], "listing": listing}, "sampled", tuple(info.get("classes") or ())
    )


def _exts(extensions: Sequence[str] | str | None) -> list[str]:
    if extensions is None:
        return []
    if isinstance(extensions, str):
        extensions = [extensions]
    return [str(e) for e in extensions]


def files(
    root: str | os.PathLike[str],
    *,
    extensions: Sequence[str] | str | None = None,
    recursive: bool = True,
    shuffle: bool = False,
    seed: int = 0,
    drop_last: bool = False,
    rank: int | None = None,
    world_size: int | None = None,
    epoch: int = 0,
    with_index: bool = False,
    s3: dict[str, Any] | None = None,
    gcs: dict[str, Any] | None = None,
    azure: dict[str, Any] | None = None,
    timeout: float | None = None,
    retries: int | None = None,
) -> ListedSource:
    """The files under a directory, or matching a glob, as paths.

    Listed once in Go, sorted by path (so every rank and every machine sees
    the same order), then dealt out per epoch like ``sampler``: seeded
    shuffling, a share per rank, resumable.

    Args:
        root: A directory, or a pattern where ``*``, ``?`` and ``[...]``
            match within a path element and ``**`` matches any depth
            (``"/data/train/**/*.jpg"``).
        extensions: Keep only these (``".jpg"`` or ``"jpg"``, any case).
        recursive: Descend into subdirectories of a directory ``root``.
        with_index: Yield ``(path, index)`` for ``ResumableSource``.
        s3, gcs, azure, timeout, retries: For an ``s3://``, ``gs://`` or
            ``az://`` root or pattern, which is listed (see
            ``ops.read_file``).

    Raises:
        ValueError: ``root`` does not exist or cannot be read, or nothing
            matches; the message names the path.

    Example:
        >>> src = sources.files("/data/train", extensions=[".jpg"], shuffle=True)
        >>> b = PipelineBuilder().add_source(src).pipe(ops.read_file()).pipe(ops.decode_image(size=224))
    """
    from ._storage import storage_options

    listing = {
        "kind": "files",
        "root": os.fspath(root),
        "extensions": _exts(extensions),
        "recursive": bool(recursive),
        "storage": storage_options(timeout, retries, s3, "files", gcs=gcs, azure=azure),
    }
    return _listed("files", listing, shuffle, seed, drop_last, rank, world_size, epoch, with_index)


def image_folder(
    root: str | os.PathLike[str],
    *,
    extensions: Sequence[str] | str | None = IMAGE_EXTENSIONS,
    shuffle: bool = False,
    seed: int = 0,
    drop_last: bool = False,
    rank: int | None = None,
    world_size: int | None = None,
    epoch: int = 0,
    with_index: bool = False,
    s3: dict[str, Any] | None = None,
    gcs: dict[str, Any] | None = None,
    azure: dict[str, Any] | None = None,
    timeout: float | None = None,
    retries: int | None = None,
) -> ListedSource:
    """An ImageNet-style folder, ``root/<class>/**/<file>``, as
    ``(path, label)`` tuples.

    Classes are the subdirectories of ``root`` in sorted order (label 0 is
    the first), as torchvision's ``ImageFolder`` numbers them; the source's
    ``classes`` lists them. Sampling, sharding and resume work as in
    ``sampler``. A class with no matching file is an error, since it would
    shift every later label. ``with_index=True`` yields ``(path, label,
    index)`` for ``ResumableSource``. An ``s3://``, ``gs://`` or ``az://``
    root is listed (``s3=``, ``gcs=``, ``azure=`` as in ``ops.read_file``); there, classes are the first "directory" level that
    holds objects.

    Example:
        >>> src = sources.image_folder("/data/imagenet/train", shuffle=True, seed=0)
        >>> len(src), src.classes[:2]
        (1281167, ('n01440764', 'n01443537'))
        >>> b = (PipelineBuilder().add_source(src)
        ...      .pipe(ops.read_file()).pipe(ops.decode_image(size=224), concurrency=8))
    """
    from ._storage import storage_options

    listing = {
        "kind": "image_folder",
        "root": os.fspath(root),
        "extensions": _exts(extensions),
        "recursive": True,
        "storage": storage_options(timeout, retries, s3, "image_folder", gcs=gcs, azure=azure),
    }
    return _listed("image_folder", listing, shuffle, seed, drop_last, rank, world_size, epoch, with_index)


def webdataset(
    urls: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    required: Sequence[str] = (),
    decode: dict[str, str] | None = None,
    shuffle: bool = False,
    seed: int = 0,
    shuffle_buffer: int = 0,
    drop_last: bool = False,
    rank: int | None = None,
    world_size: int | None = None,
    epoch: int = 0,
    timeout: float | None = None,
    retries: int | None = None,
    s3: dict[str, Any] | None = None,
    gcs: dict[str, Any] | None = None,
    azure: dict[str, Any] | None = None,
    with_index: bool = False,
    prefetch_shards: int = 2,
) -> NativeSource:
    """Samples from tar shards in the WebDataset layout, read in Go.

    Consecutive members that share a key (the path up to the first dot of
    the file name) are one sample: ``000123.jpg``, ``000123.cls`` and
    ``000123.json`` become ``{"__key__": "000123", "__url__": shard,
    "jpg": b"...", "cls": b"3", "json": b"{...}"}``. Native ops take a
    field by key: ``ops.decode_image(key="jpg")``. GNU and PAX long names
    are supported.

    Args:
        urls: Shard paths, each possibly a brace pattern
            (``"/data/shard-{000000..000127}.tar"``, ``"{train,val}.tar"``).
        required: Fields every sample must have (``("jpg", "cls")``); a
            sample without one fails alone, naming the shard and the key.
        decode: Field types by extension: "bytes" (default), "str", "int",
            "float" or "json" (e.g. ``{"cls": "int", "json": "json"}``).
        shuffle, seed: Shuffle the shard order, anew each epoch.
        shuffle_buffer: Also shuffle samples through a buffer of this many.
        drop_last, rank, world_size: Shards are dealt to ranks like samples
            in ``sampler`` (padded by repeating shards, or dropped); ranks
            read equal sample counts when shards hold equal counts.
        timeout, retries, s3, gcs, azure: Remote reads, as in
            ``ops.read_file``: shards may be ``http(s)://``, ``s3://``,
            ``gs://`` or ``az://`` URLs (or patterns, except http),
            streamed in 8 MiB range
            requests (a failed one is retried, not the whole shard).
        prefetch_shards: Shards opened ahead of the one being read. Each
            open shard is read up to 16 MiB ahead in a Go thread, so the
            next range request, and the next shard's first, wait on the
            network while samples are taken; raise it for many small
            remote shards, 0 opens each shard only at its turn.

    A shard that is missing, truncated or corrupt fails as one item after
    the samples before the damage; the next shard goes on. The source
    streams: it has no length. ``with_index=True`` gives each sample an
    ``"__index__"`` (shard and number in it) for ``ResumableSource``.

    Example:
        >>> src = sources.webdataset("/data/shard-{000000..000127}.tar", required=("jpg", "cls"),
        ...                          decode={"cls": "int"}, shuffle=True, shuffle_buffer=1000)
        >>> b = PipelineBuilder().add_source(src).pipe(ops.decode_image(key="jpg", size=224), concurrency=8)
    """
    if isinstance(urls, (str, os.PathLike)):
        urls = [urls]
    url_list = [os.fspath(u) for u in urls]
    if not url_list:
        raise ValueError("webdataset: no shards given")
    if not isinstance(shuffle_buffer, int) or isinstance(shuffle_buffer, bool):
        raise ValueError(f"webdataset: shuffle_buffer must be an int >= 0, got {shuffle_buffer!r}")
    if not isinstance(prefetch_shards, int) or isinstance(prefetch_shards, bool):
        raise ValueError(f"webdataset: prefetch_shards must be an int >= 0, got {prefetch_shards!r}")
    from ._storage import storage_options

    options: dict[str, Any] = dict(
        sampling=_sampling("webdataset", shuffle, seed, drop_last, rank, world_size, epoch),
        urls=url_list,
        required=[str(r) for r in required],
        decode=dict(decode or {}),
        shuffle_buffer=shuffle_buffer,
        storage=storage_options(timeout, retries, s3, "webdataset", gcs=gcs, azure=azure),
        with_index=bool(with_index),
        prefetch_shards=prefetch_shards,
    )
    return NativeSource("webdataset", options, "stream")


def table(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    columns: Sequence[str] | None = None,
    scalars: bool = False,
    shuffle: bool = False,
    seed: int = 0,
    shuffle_buffer: int = 0,
    drop_last: bool = False,
    rank: int | None = None,
    world_size: int | None = None,
    epoch: int = 0,
    batch_rows: int = 4096,
    timeout: float | None = None,
    retries: int | None = None,
    s3: dict[str, Any] | None = None,
    gcs: dict[str, Any] | None = None,
    azure: dict[str, Any] | None = None,
    with_index: bool = False,
    verify_checksums: bool = True,
) -> NativeSource:
    """Rows of Parquet (``.parquet``, ``.pq``) and Arrow IPC (``.arrow``,
    ``.feather``, ``.ipc``) files, read in Go, as dicts of their columns.

    Binary columns (encoded images, audio) arrive as ``bytes`` for native
    ops to decode (``ops.decode_image(key="img")``). Other columns arrive as
    1-row Arrow arrays that ``collate`` joins into the batch's Arrow column
    by reference when rows come in file order (no copy), or into a tensor
    with ``collate(numbers="tensor")``. ``scalars=True`` gives Python values
    instead, for Python stages that read each row.

    Args:
        paths: Files, brace patterns or globs (``"data/part-*.parquet"``).
        columns: Columns to read (default: all).
        shuffle, seed, drop_last, rank, world_size: Row groups (Parquet)
            or record batches (Arrow) are dealt to ranks like samples in
            ``sampler``; rows inside one are read in order.
        shuffle_buffer: Also shuffle rows through a buffer of this many.
        batch_rows: Parquet rows decoded at a time.
        timeout, retries, s3, gcs, azure: Remote reads, as in
            ``ops.read_file``: files may be ``http(s)://``, ``s3://``,
            ``gs://`` or ``az://`` URLs, read with range
            requests (the footer, then each column chunk).
        verify_checksums: Check the CRC32 of each Parquet page that has one
            (pyarrow's ``write_page_checksum=True``) before decoding its
            row group; ``False`` skips the check.

    A file that is missing, unreadable or lacks a selected column fails as
    one item per epoch, naming it and the column; the other files are read.
    A corrupt row group or record batch (a page CRC that does not match,
    damage the reader detects) fails as one item naming the file and the
    part, and with ``scalars=True`` a row whose text is not UTF-8 fails
    naming its row and column; these count against ``max_failures``.
    ``with_index=True`` gives each row an ``"__index__"`` for
    ``ResumableSource``.

    Example:
        >>> src = sources.table("/data/train-*.parquet", columns=["jpg", "label", "caption"], shuffle=True)
        >>> b = (PipelineBuilder().add_source(src)
        ...      .pipe(ops.decode_image(key="jpg", size=224), concurrency=8)
        ...      .aggregate(64).pipe(ops.collate()))        # caption: one Arrow column, zero-copy
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    path_list = [os.fspath(p) for p in paths]
    if not path_list:
        raise ValueError("table: no files given")
    if not isinstance(shuffle_buffer, int) or isinstance(shuffle_buffer, bool):
        raise ValueError(f"table: shuffle_buffer must be an int >= 0, got {shuffle_buffer!r}")
    if not isinstance(batch_rows, int) or batch_rows < 1:
        raise ValueError(f"table: batch_rows must be an int >= 1, got {batch_rows!r}")
    from ._storage import storage_options

    options: dict[str, Any] = dict(
        sampling=_sampling("table", shuffle, seed, drop_last, rank, world_size, epoch),
        urls=path_list,
        columns=list(columns or []),
        scalars=bool(scalars),
        shuffle_buffer=shuffle_buffer,
        batch_rows=batch_rows,
        storage=storage_options(timeout, retries, s3, "table", gcs=gcs, azure=azure),
        with_index=bool(with_index),
        verify_checksums=bool(verify_checksums),
    )
    return NativeSource("table", options, "stream")
