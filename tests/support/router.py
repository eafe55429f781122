"""Run a real hookrouter process for end-to-end tests.

``RouterProcess`` writes a TOML config into a temp directory, starts
``python -m hookrouter serve`` on a free 127.0.0.1 port, waits for
``/healthz``, and stops it (SIGTERM, or SIGKILL to test crash safety).
Requests go over real sockets with the standard library's http.client.
"""

from __future__ import annotations

import atexit
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import tomli_w

ADMIN_TOKEN = "e2e-admin-token"
STRIPE_SECRET = "whsec_e2e_stripe_secret"
STANDARD_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
ENDPOINT_SECRET = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"


_LIVE: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftovers() -> None:
    """A test that failed half-way must not leave a router running after pytest."""
    for proc in list(_LIVE):
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_config(data_dir: Path, port: int, engine: str = "asyncio") -> dict[str, Any]:
    """Two tenants, a Stripe and a Standard Webhooks source, one endpoint each."""
    return {
        "server": {"listen": f"127.0.0.1:{port}", "engine": engine, "max_body_bytes": 65536},
        "store": {"path": str(data_dir)},
        "admin": {"token": ADMIN_TOKEN},
        "delivery": {"allow_private_networks": True},
        "tenants": [{"id": "acme"}, {"id": "globex"}],
        "sources": [
            {"id": "acme-stripe", "tenant": "acme", "provider": "stripe",
             "secrets": [STRIPE_SECRET]},
            {"id": "globex-std", "tenant": "globex", "provider": "standard",
             "secrets": [STANDARD_SECRET]},
        ],
        "endpoints": [
            {"id": "acme-invoices", "tenant": "acme", "url": "http://127.0.0.1:9/never",
             "event_types": ["invoice.*"], "secret": ENDPOINT_SECRET},
            {"id": "globex-all", "tenant": "globex", "url": "http://127.0.0.1:9/never",
             "secret": ENDPOINT_SECRET},
        ],
    }  # fmt: skip


class RouterProcess:
    """A hookrouter server in a child process."""

    def __init__(
        self,
        workdir: Path,
        config: Mapping[str, Any] | None = None,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> None:
        """``host``: the address it listens on; ``prefix``: a command to run it under

        (``ip netns exec NAME`` puts it in a network namespace).
        """
        self.workdir = workdir
        self.host = host
        self.prefix = list(prefix)
        self._picked = port is None  # a picked port may be taken before the child binds it
        self.port = port or free_port()
        self.config = dict(config or base_config(workdir / "data", self.port))
        self.config["server"] = {**self.config["server"], "listen": f"{host}:{self.port}"}
        self.config_path = workdir / "hookrouter.toml"
        self.log_path = workdir / "router.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 15.0) -> RouterProcess:
        """Start the child and wait until it, not whoever else holds the port, is healthy.

        A port from ``free_port`` can be taken before the child binds it (by any
        connection's local end): the child then exits, and another router on
        that port would answer ``/healthz``. So health counts only once the
        child's own log says it listens, and a picked port that turned out
        busy is picked again.
        """
        for _ in range(3):
            if self._launch(timeout):
                return self
            self.port = free_port()
        raise RuntimeError(f"router found no free port in 3 tries:\n{self.log()}")

    def _launch(self, timeout: float) -> bool:
        """Run the child until healthy (True), or until it could not bind a picked port."""
        self.config["server"] = {**self.config["server"], "listen": f"{self.host}:{self.port}"}
        self.config_path.write_bytes(tomli_w.dumps(self.config).encode())
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        logged = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [
                    *self.prefix,
                    sys.executable,
                    "-m",
                    "hookrouter",
                    "serve",
                    "--config",
                    str(self.config_path),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        _LIVE.add(self.proc)
        listening = re.compile(rb"listening on http://\S+:%d " % self.port)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                _LIVE.discard(self.proc)
                own = self._log_since(logged)
                if self._picked and b"cannot listen on" in own:
                    return False
                code = self.proc.returncode
                raise RuntimeError(f"router exited early (code {code}):\n{self.log()}")
            try:
                if (
                    listening.search(self._log_since(logged))
                    and self.request("GET", "/healthz")[0] == 200
                ):
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        self.proc.kill()
        self.proc.wait()
        raise RuntimeError(f"router did not become healthy:\n{self.log()}")

    def _log_since(self, offset: int) -> bytes:
        """What the log gained since ``offset`` (this child's lines, not a former run's)."""
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Send ``sig`` and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            _LIVE.discard(self.proc)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def connection(self, timeout: float = 10.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        conn = self.connection()
        try:
            conn.request(method, path, body=body, headers=dict(headers or {}))
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def post(self, source: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, Any]:
        status, _, data = self.request("POST", f"/in/{source}", body, headers)
        return status, orjson.loads(data) if data else None

    def admin(
        self, method: str, path: str, doc: Any = None, token: str | None = ADMIN_TOKEN
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        body = orjson.dumps(doc) if doc is not None else None
        status, _, data = self.request(method, "/admin/v1" + path, body, headers)
        return status, orjson.loads(data) if data else None

    def raw(self, data: bytes, *, read_timeout: float = 5.0) -> bytes:
        """Send raw bytes, read until the server closes (or the timeout)."""
        with socket.create_connection((self.host, self.port), timeout=read_timeout) as sock:
            sock.sendall(data)
            chunks = []
            try:
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
            except TimeoutError:
                pass
            return b"".join(chunks)

    def __enter__(self) -> RouterProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
