"""Media helpers that run in Go: probing files without decoding them, and
the native media ops (also reachable as ``spdl_go.ops``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from . import _lib

__all__ = ["MediaInfo", "StreamInfo", "probe"]


@dataclass(frozen=True)
class StreamInfo:
    """One stream of a media file. Fields that do not apply are 0."""

    index: int
    type: str
    codec: str
    duration: float = 0.0
    width: int = 0
    height: int = 0
    frame_rate: float = 0.0
    frames: int = 0
    sample_rate: int = 0
    channels: int = 0
    rotation: int = 0
    """Degrees clockwise (0, 90, 180, 270) to turn the video for display
    (its display matrix); ``decode_video(apply_rotation=True)`` applies it."""
    sample_aspect_ratio: tuple[int, int] | None = None
    """Pixel shape (num, den) when not square; ``decode_video(apply_sar=True)``
    applies it."""
    attached_picture: bool = False
    """Cover art attached to an audio file, not a video."""


@dataclass(frozen=True)
class MediaInfo:
    """What ``probe`` found: the container and its streams."""

    format: str
    duration: float
    bit_rate: int
    streams: list[StreamInfo] = field(default_factory=list)

    def first(self, kind: str) -> StreamInfo | None:
        """The first stream of a kind ("video", "audio"), if any."""
        return next((s for s in self.streams if s.type == kind), None)


def probe(src: str | os.PathLike[str] | bytes, *, name: str | None = None) -> MediaInfo:
    """Describes an image, audio or video file without decoding it.

    Args:
        src: A path, or the file's bytes.
        name: What to call bytes in error messages.

    Raises:
        ValueError: the input is missing, empty or not media FFmpeg reads;
            the message names it.

    Example:
        >>> info = spdl_go.media.probe("clip.mp4")
        >>> info.first("video").frames
        240
    """
    _lib.check_fork()
    if isinstance(src, (bytes, bytearray, memoryview)):
        data = bytes(src)
        args: tuple[bytes, bytes | None, int] = ((name or "").encode(), data, len(data))
    else:
        args = (os.fsencode(src), None, 0)
    d: dict[str, Any] = _lib.call_json(_lib.LIB.spdl_probe, *args, error=ValueError)
    return MediaInfo(
        format=d.get("format", ""),
        duration=float(d.get("duration", 0.0)),
        bit_rate=int(d.get("bit_rate", 0)),
        streams=[
            StreamInfo(
                **{
                    **s,
                    "duration": float(s.get("duration", 0)),
                    "frame_rate": float(s.get("frame_rate", 0)),
                    "sample_aspect_ratio": _ratio(s.get("sample_aspect_ratio")),
                }
            )
            for s in d.get("streams") or []
        ],
    )


def _ratio(value: Any) -> tuple[int, int] | None:
    return (int(value[0]), int(value[1])) if value else None
