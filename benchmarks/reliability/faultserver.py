"""An HTTP server on loopback that serves a directory with Range support
and, by a seeded schedule, injects faults: 500 and 503 responses,
connection resets, stalls longer than the client's read timeout (before
the headers or mid-body), truncated bodies and a Content-Length larger
than the body. It counts requests per path and faults per kind."""

from __future__ import annotations

import os
import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FAULTS = ("500", "503", "reset", "stall_headers", "stall_body", "truncate", "long_length")


class FaultServer:
    """``FaultServer(root, seed, fault_rate, stall_s)``; ``url(name)`` after
    ``start()``. ``fault_rate`` 0 serves every request."""

    def __init__(self, root: Path, seed: int = 0, fault_rate: float = 0.0, stall_s: float = 2.0) -> None:
        self.root, self.fault_rate, self.stall_s = root, fault_rate, stall_s
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self._httpd: ThreadingHTTPServer | None = None

    def draw(self) -> str:
        with self.lock:
            if self.rng.random() >= self.fault_rate:
                return "ok"
            return self.rng.choice(FAULTS)

    def cut(self, n: int) -> int:
        with self.lock:
            return self.rng.randrange(0, max(n, 1))

    def start(self) -> FaultServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                self.do_GET(head=True)

            def do_GET(self, head: bool = False) -> None:
                name = self.path.split("?", 1)[0].lstrip("/")
                path = server.root / name
                with server.lock:
                    server.requests[name] += 1
                if not path.is_file():
                    self.send_error(404)
                    return
                data = path.read_bytes()
                start, end, status = 0, len(data), 200
                m = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", "") or "")
                if m and (m.group(1) or m.group(2)):
                    if m.group(1):
                        start = int(m.group(1))
                        end = min(int(m.group(2)) + 1, len(data)) if m.group(2) else len(data)
                    else:
                        start = max(0, len(data) - int(m.group(2)))
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
                body = data[start:end]
                fault = "ok" if head else server.draw()
                if fault != "ok":
                    with server.lock:
                        server.faults[fault] += 1
                if fault in ("500", "503"):
                    msg = b"injected fault"
                    self.send_response(int(fault))
                    self.send_header("Content-Length", str(len(msg)))
                    if fault == "503":
                        self.send_header("Retry-After", "0")
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                if fault == "reset":
                    self._reset()
                    return
                if fault == "stall_headers":
                    time.sleep(server.stall_s)
                    self._reset()
                    return
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                extra = 1 + server.cut(100) if fault == "long_length" else 0
                self.send_header("Content-Length", str(len(body) + extra))
                self.end_headers()
                if head:
                    return
                if fault == "ok" or fault == "long_length":
                    self.wfile.write(body)
                    if fault == "long_length":
                        self.wfile.flush()
                        self.close_connection = True
                    return
                part = body[: server.cut(len(body))]
                self.wfile.write(part)
                self.wfile.flush()
                if fault == "stall_body":
                    time.sleep(server.stall_s)
                self._reset()

            def _reset(self) -> None:
                # SO_LINGER 0: close() sends an RST, not a FIN
                try:
                    self.wfile.flush()
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                except OSError:
                    pass
                self.close_connection = True

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # clients that reset or were killed: expected here

        self._httpd = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, name="fault-server", daemon=True).start()
        return self

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return int(self._httpd.server_address[1])

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()


def serve_forever(root: str, port_file: str) -> None:
    """Runs a fault-free server in this process, writing its port to
    ``port_file`` (for probes whose clients get killed)."""
    s = FaultServer(Path(root)).start()
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(s.port))
    os.replace(tmp, port_file)
    while True:
        time.sleep(3600)
