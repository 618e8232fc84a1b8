"""Options for remote reads (http(s)://, s3://, gs:// and az:// names), shared by
``ops.read_file`` and the sources that read shards and files."""

from __future__ import annotations

import os
from typing import Any

_S3_KEYS = (
    "endpoint",
    "region",
    "profile",
    "access_key",
    "secret_key",
    "session_token",
    "anonymous",
    "virtual_host",
)


_GCS_KEYS = ("endpoint", "credentials_file", "anonymous")
_AZURE_KEYS = ("account", "endpoint", "connection_string", "account_key", "sas_token", "anonymous")


def storage_options(
    timeout: float | None,
    retries: int | None,
    s3: dict[str, Any] | None,
    who: str,
    ca_file: str | None = None,
    gcs: dict[str, Any] | None = None,
    azure: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``timeout_s``/``retries``/``ca_file``/``s3``/``gcs``/``azure``
    options of a reader."""
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
    # Everything not given here comes from the AWS SDK's defaults (the
    # AWS_* variables as they are when the pipeline is built, the shared
    # config and credentials files, web identity, ECS, IMDS, SSO).
    settings: dict[str, Any] = {}
    if s3:
        unknown = set(s3) - set(_S3_KEYS)
        if unknown:
            raise ValueError(f"{who}: unknown s3 setting(s) {sorted(unknown)}; known: {', '.join(_S3_KEYS)}")
        for k in ("anonymous", "virtual_host"):
            if k in s3 and not isinstance(s3[k], bool):
                raise ValueError(f"{who}: s3 setting {k} must be True or False, got {s3[k]!r}")
        settings.update(s3)
    out["s3"] = {k: v for k, v in settings.items() if v not in ("", None)}
    if gcs:
        unknown = set(gcs) - set(_GCS_KEYS)
        if unknown:
            raise ValueError(f"{who}: unknown gcs setting(s) {sorted(unknown)}; known: {', '.join(_GCS_KEYS)}")
        if "anonymous" in gcs and not isinstance(gcs["anonymous"], bool):
            raise ValueError(f"{who}: gcs setting anonymous must be True or False, got {gcs['anonymous']!r}")
        g = {k: (os.fspath(v) if k == "credentials_file" else v) for k, v in gcs.items() if v not in ("", None)}
        if g:
            out["gcs"] = g
    if azure:
        unknown = set(azure) - set(_AZURE_KEYS)
        if unknown:
            raise ValueError(f"{who}: unknown azure setting(s) {sorted(unknown)}; known: {', '.join(_AZURE_KEYS)}")
        if "anonymous" in azure and not isinstance(azure["anonymous"], bool):
            raise ValueError(f"{who}: azure setting anonymous must be True or False, got {azure['anonymous']!r}")
        a = {k: v for k, v in azure.items() if v not in ("", None)}
        if a:
            out["azure"] = a
    return out


_SECRET_KEYS = ("secret_key", "session_token", "connection_string", "account_key", "sas_token")


def redacted(value: Any) -> Any:
    """``value`` (options) with S3 secrets replaced, for reprs and logs."""
    if isinstance(value, dict):
        return {k: ("<redacted>" if k in _SECRET_KEYS and v else redacted(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redacted(v) for v in value)
    return value
