"""Options for remote reads (http(s):// and s3:// names), shared by
``ops.read_file`` and the sources that read shards and files."""

from __future__ import annotations

import os
from typing import Any

_S3_KEYS = ("endpoint", "region", "access_key", "secret_key", "session_token", "virtual_host")


def s3_from_env() -> dict[str, Any]:
    """S3 settings from the variables the AWS tools read, as they are now
    (the Go side sees only the environment the process started with)."""

    def first(*names: str) -> str:
        for n in names:
            v = os.environ.get(n)
            if v:
                return v
        return ""

    return {
        "endpoint": first("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
        "region": first("AWS_REGION", "AWS_DEFAULT_REGION"),
        "access_key": first("AWS_ACCESS_KEY_ID"),
        "secret_key": first("AWS_SECRET_ACCESS_KEY"),
        "session_token": first("AWS_SESSION_TOKEN"),
    }


def storage_options(
    timeout: float | None, retries: int | None, s3: dict[str, Any] | None, who: str, ca_file: str | None = None
) -> dict[str, Any]:
    """The ``timeout_s``/``retries``/``ca_file``/``s3`` options of a reader."""
    out: dict[str, Any] = {}
    if ca_file is not None:
        out["ca_file"] = os.fspath(ca_file)
    if timeout is not None:
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
            raise ValueError(f"{who}: timeout must be seconds > 0, got {timeout!r}")
        out["timeout_s"] = float(timeout)
    if retries is not None:
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise ValueError(f"{who}: retries must be an int >= 0, got {retries!r}")
        out["retries"] = retries
    settings = s3_from_env()
    if s3:
        unknown = set(s3) - set(_S3_KEYS)
        if unknown:
            raise ValueError(f"{who}: unknown s3 setting(s) {sorted(unknown)}; known: {', '.join(_S3_KEYS)}")
        settings.update(s3)
    out["s3"] = {k: v for k, v in settings.items() if v not in ("", None)}
    return out


_SECRET_KEYS = ("secret_key", "session_token")


def redacted(value: Any) -> Any:
    """``value`` (options) with S3 secrets replaced, for reprs and logs."""
    if isinstance(value, dict):
        return {k: ("<redacted>" if k in _SECRET_KEYS and v else redacted(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redacted(v) for v in value)
    return value
