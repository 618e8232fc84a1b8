"""Ops the execution-region tests run in worker processes (and
subinterpreters): importable by name, with no numpy at import time, so
that a subinterpreter can load them."""

from __future__ import annotations

import os
import time
from typing import Any


def pid_of(x: Any) -> tuple[Any, int]:
    return x, os.getpid()


def square(x: int) -> int:
    return x * x


def plus_one(x: int) -> int:
    return x + 1


def fail_on_3(x: int) -> int:
    if x == 3:
        raise ValueError(f"bad item {x}")
    return x


def fail_on_3_of_pair(x: tuple[int, int]) -> tuple[int, int]:
    if x[0] == 3:
        raise ValueError(f"bad item {x[0]}")
    return x


def slow_square(x: int) -> int:
    time.sleep(0.02)
    return x * x


def die_on_5(x: int) -> int:
    if x == 5:
        os._exit(7)
    return x


def kill_self_on_5(x: int) -> int:
    import signal

    if x == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def image(x: int) -> Any:
    import numpy as np

    return np.full((64, 64, 3), x % 251, dtype=np.uint8)


def make_unpicklable(x: int) -> Any:
    return lambda: x


def interp_id(x: int) -> tuple[int, int]:
    """The item and the subinterpreter it ran in (0: the main one)."""
    import _interpreters  # type: ignore[import-not-found]  # 3.14+

    return x, _interpreters.get_current()[0]


def set_mark(value: str) -> None:
    os.environ["SPDL_GO_REGION_MARK"] = value


def read_mark(x: int) -> tuple[int, str]:
    return x, os.environ.get("SPDL_GO_REGION_MARK", "")


def failing_init() -> None:
    raise RuntimeError("no dataset here")


def uses_numpy(x: int) -> int:
    import numpy as np

    return int(np.int64(x))
