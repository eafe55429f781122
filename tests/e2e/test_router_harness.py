"""The test harness starts the router it says it started.

A port picked free can be taken before the child binds it; an impostor
answering ``/healthz`` there once let a cluster test run with one of its two
nodes gone (it had exited on the busy port).
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.router import RouterProcess


class _AlwaysHealthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def _impostor(port: int) -> Iterator[None]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _AlwaysHealthy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_picked_port_taken_by_another_server_is_picked_again(tmp_path: Path) -> None:
    router = RouterProcess(tmp_path)
    taken = router.port
    with _impostor(taken), router:
        assert router.proc is not None and router.proc.poll() is None
        assert router.port != taken
        assert router.request("GET", "/healthz")[0] == 200
