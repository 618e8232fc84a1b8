"""Real servers on loopback for remote-read tests: nginx (Debian's package),
versitygw (an S3-compatible gateway) and fake-gcs-server (a Google Cloud
Storage emulator), both installed by .ci/run with ``go install``. Missing binaries skip the tests, except where
SPDL_GO_REQUIRE_SERVERS is set (.ci/run sets it), where they fail."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

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
        log = work / "fake-gcs-server.log"
        self._log = open(log, "w")
        self.proc = subprocess.Popen(
            [
                binary,
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                str(self.port),
                "-backend",
                "memory",
                "-data",
                str(root),
                "-public-host",
                self.host,
                "-external-url",
                f"http://{self.host}",
                "-log-level",
                "error",
            ],
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )
        _wait(self.port, self.proc, log)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
