"""Real servers on loopback for remote-read tests: nginx (Debian's package),
versitygw (an S3-compatible gateway), fake-gcs-server (a Google Cloud
Storage emulator) and Azurite (Azure Blob Storage's), which .ci/servers
installs. Missing binaries skip the tests, except where
SPDL_GO_REQUIRE_SERVERS is set (.ci/run sets it), where they fail."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import IO

import pytest


def _need(name: str, *extra: str) -> str:
    for cand in [shutil.which(name), *extra]:
        if cand and os.path.exists(cand):
            return cand
    msg = f"{name} is not installed (.ci/run installs it)"
    if os.environ.get("SPDL_GO_REQUIRE_SERVERS"):
        pytest.fail(msg)
    pytest.skip(msg)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    raise RuntimeError(f"server did not start on port {port}: {log.read_text() if log.exists() else ''}")


def _launch(args: list[str], port: int, log: Path) -> tuple[subprocess.Popen, IO[str]]:
    """Starts a server in its own session, its output in log, and waits
    until it listens on port."""
    out = open(log, "w")
    proc = subprocess.Popen(args, stdout=out, stderr=out, start_new_session=True)
    _wait(port, proc, log)
    return proc, out


ECHO_MODULE = "/usr/share/nginx/modules/ngx_http_echo_module.so"


class Nginx:
    """nginx serving ``root`` at ``url``, throttled at ``url + "/slow"``,
    and, with ``latency_ms``, after that delay at ``url + "/lat"`` (like an
    object store's time to first byte; needs Debian's echo module)."""

    def __init__(self, root: Path, work: Path, rate_kb: int = 64, latency_ms: float = 0) -> None:
        binary = _need("nginx", "/usr/sbin/nginx")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        user = "user root root;" if os.geteuid() == 0 else ""
        load, lat = "", ""
        if latency_ms:
            if not os.path.exists(ECHO_MODULE):
                raise RuntimeError(
                    f"latency needs nginx's echo module ({ECHO_MODULE}: apt-get install libnginx-mod-http-echo)"
                )
            load = f"load_module {ECHO_MODULE};"
            lat = f"location ~ ^/lat/(.*)$ {{ echo_sleep {round(latency_ms / 1000, 3)!r}; echo_exec /$1; }}"
        conf = work / "nginx.conf"
        conf.write_text(f"""{load}
{user}
worker_processes 2;
error_log {work}/error.log;
pid {work}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {work}/body; proxy_temp_path {work}/proxy; fastcgi_temp_path {work}/fcgi;
  uwsgi_temp_path {work}/uwsgi; scgi_temp_path {work}/scgi;
  keepalive_requests 100000;
  server {{
    listen 127.0.0.1:{self.port};
    root {root};
    location /slow/ {{ alias {root}/; limit_rate {rate_kb}k; }}
    {lat}
  }}
}}
""")
        self.proc = subprocess.Popen(
            [binary, "-p", str(work), "-c", str(conf), "-g", "daemon off;"], start_new_session=True
        )
        _wait(self.port, self.proc, work / "error.log")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class S3Server:
    """versitygw serving the directories under ``root`` as buckets."""

    access_key = "spdlgo-test"
    secret_key = "spdlgo-test-secret-key"
    region = "us-east-1"

    def __init__(self, root: Path, work: Path) -> None:
        binary = _need("versitygw", os.path.expanduser("~/go/bin/versitygw"), "/tmp/vgw-bin/versitygw")
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        log = work / "versitygw.log"
        self._log = open(log, "w")
        self.proc = subprocess.Popen(
            [
                binary,
                "--access",
                self.access_key,
                "--secret",
                self.secret_key,
                "--region",
                self.region,
                "--quiet",
                "--port",
                f"127.0.0.1:{self.port}",
                "posix",
                "--nometa",
                str(root),
            ],
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )
        _wait(self.port, self.proc, log)

    def settings(self) -> dict[str, str]:
        return {
            "endpoint": self.endpoint,
            "region": self.region,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
        }

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class GCSServer:
    """fake-gcs-server with the directories under ``root`` as buckets, in
    memory; clients reach it through ``STORAGE_EMULATOR_HOST=host``."""

    def __init__(self, root: Path, work: Path) -> None:
        binary = _need("fake-gcs-server", os.path.expanduser("~/go/bin/fake-gcs-server"))
        self.port = _free_port()
        self.host = f"127.0.0.1:{self.port}"
        args = [binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port), "-backend", "memory"]
        args += [
            "-data",
            str(root),
            "-public-host",
            self.host,
            "-external-url",
            f"http://{self.host}",
            "-log-level",
            "error",
        ]
        self.proc, self._log = _launch(args, self.port, work / "fake-gcs-server.log")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class AzuriteServer:
    """Azurite's blob service (npm's azurite) with its development account.
    ``upload`` puts blobs through the REST API, signed with Shared Key
    (stdlib only), so that tests need no Azure package."""

    account = "devstoreaccount1"
    key = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

    def __init__(self, work: Path) -> None:
        if os.environ.get("SPDL_GO_NO_NODE"):
            pytest.skip("Azurite runs on node, which this root (.ci/sidroot) lacks; the host's interpreters run it")
        binary = _need("azurite-blob", "/usr/bin/azurite-blob", "/usr/local/bin/azurite-blob")
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/{self.account}"
        args = [binary, "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--location", str(work / "data")]
        args += ["--silent", "--loose", "--skipApiVersionCheck"]
        self.proc, self._log = _launch(args, self.port, work / "azurite.log")

    def connection_string(self) -> str:
        return f"DefaultEndpointsProtocol=http;AccountName={self.account};AccountKey={self.key};BlobEndpoint={self.endpoint};"

    def _request(self, method: str, path: str, query: str = "", body: bytes = b"", headers: dict | None = None) -> None:
        import base64
        import email.utils
        import hashlib
        import hmac
        import urllib.parse
        import urllib.request

        # urllib would add a form Content-Type to a PUT: name one, and sign it.
        h = {
            "x-ms-date": email.utils.formatdate(usegmt=True),
            "x-ms-version": "2021-08-06",
            "Content-Type": "application/octet-stream",
        }
        h.update(headers or {})
        canon_headers = "".join(f"{k}:{v}\n" for k, v in sorted(h.items()) if k.startswith("x-ms-"))
        resource = f"/{self.account}/{self.account}{path}"
        if query:
            resource += "".join(f"\n{k}:{v}" for k, v in sorted(p.split("=", 1) for p in query.split("&")))
        length = str(len(body)) if body else ""
        ctype = h.get("Content-Type", "")
        to_sign = f"{method}\n\n\n{length}\n\n{ctype}\n\n\n\n\n\n\n{canon_headers}{resource}"
        sig = base64.b64encode(hmac.new(base64.b64decode(self.key), to_sign.encode(), hashlib.sha256).digest()).decode()
        h["Authorization"] = f"SharedKey {self.account}:{sig}"
        url = f"{self.endpoint}{urllib.parse.quote(path)}" + (f"?{query}" if query else "")
        req = urllib.request.Request(url, data=body if method == "PUT" else None, method=method, headers=h)
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()

    def create_container(self, name: str) -> None:
        self._request("PUT", f"/{name}", "restype=container")

    def upload(self, container: str, name: str, data: bytes) -> None:
        self._request(
            "PUT",
            f"/{container}/{name}",
            body=data,
            headers={"x-ms-blob-type": "BlockBlob"},
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()
