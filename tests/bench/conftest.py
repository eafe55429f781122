"""Fixtures for the benchmark harness's own tests: a small recording HTTP server."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

# bench/ is a top-level package of the repository, not installed with the
# project: make it importable for these tests (pytest runs in importlib mode).
_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)


@dataclass
class Recorder:
    """What the server saw: (path, lower-cased headers, body) per request."""

    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def recording_server() -> Iterator[Recorder]:
    """A keep-alive HTTP/1.1 server on 127.0.0.1 that answers 200 and records requests."""
    rec = Recorder()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            with rec.lock:
                rec.requests.append((self.path, headers, body))
            # One write: separate header/body writes meet Nagle + delayed ACK (40 ms).
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    rec.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
