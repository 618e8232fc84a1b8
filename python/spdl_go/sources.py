"""Native sources: items produced in Go, with no Python call per item."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["NativeSource", "arange"]


@dataclass(frozen=True)
class NativeSource:
    """A source implemented in Go."""

    kind: str
    options: dict[str, Any]

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.options}


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
