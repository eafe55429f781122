"""``[server] max_connections`` and fd exhaustion, on every ingress engine (issue 33 item 7).

At the cap the router stops accepting (the kernel's listen queue holds the
next connections) and accepts again when one closes; out of file descriptors
it pauses accepting for a moment instead of failing on every loop turn.
"""

from __future__ import annotations

import http.client
import os
import resource
import select
import socket
import time
import uuid
from pathlib import Path

import psutil
from tests.e2e.conftest import stripe_event
from tests.support.router import RouterProcess, base_config


def _metric(router: RouterProcess, line_start: str) -> float:
    _, _, metrics = router.request("GET", "/metrics")
    for line in metrics.decode().splitlines():
        if line.startswith(line_start):
            return float(line.split()[-1])
    return 0.0


def _signed_request() -> bytes:
    body, headers = stripe_event(f"evt_{uuid.uuid4().hex}")
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (
        f"POST /in/acme-stripe HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
        f"{head}Connection: close\r\n\r\n"
    ).encode() + body


def _answer(sock: socket.socket, timeout: float) -> bytes:
    if not select.select([sock], [], [], timeout)[0]:
        return b""
    return sock.recv(65536)


def test_the_connection_past_max_connections_waits_then_gets_through(
    tmp_path: Path, engine: str
) -> None:
    cap = 4
    config = base_config(tmp_path / "data", 0, engine)
    config["server"]["max_connections"] = cap
    with RouterProcess(tmp_path, config) as router:
        idle = [socket.create_connection(("127.0.0.1", router.port)) for _ in range(cap)]
        try:
            time.sleep(0.3)  # let the router take all of them
            # The kernel completes the handshake (listen queue); the router does not accept.
            sender = socket.create_connection(("127.0.0.1", router.port), timeout=5)
            sender.sendall(_signed_request())
            assert _answer(sender, 1.5) == b"", "answered past max_connections"
            idle.pop().close()
            started = time.monotonic()
            reply = _answer(sender, 5.0)
            took = time.monotonic() - started
            sender.close()
            assert reply.startswith(b"HTTP/1.1 200 "), reply[:200]
            assert took < 2.0, f"accepted {took:.2f} s after a slot freed"
            assert _metric(router, "hookrouter_ingress_max_connections ") == cap
            paused = 'hookrouter_ingress_accept_paused_total{reason="max_connections"}'
            assert _metric(router, paused) >= 1
            # The 3 idle ones and this /metrics request.
            assert _metric(router, "hookrouter_ingress_connections ") == cap
        finally:
            for sock in idle:
                sock.close()
        log = router.log()
    assert "accept failed" not in log


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_out_of_file_descriptors_pauses_accepting_without_spinning(
    tmp_path: Path, engine: str
) -> None:
    """EMFILE: no busy loop, no log storm, and accepting resumes once fds are back.

    The old native engines waited for one of their own connections to close,
    which never comes when the fds went elsewhere (here: the limit is raised
    back while every idle connection is still held).
    """
    config = base_config(tmp_path / "data", 0, engine)
    config["server"]["max_connections"] = 1000
    config["server"]["header_timeout_seconds"] = 60.0
    with RouterProcess(tmp_path, config) as router:
        assert router.proc is not None
        pid = router.proc.pid
        limits = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (_open_fds(pid) + 8, limits[1]))
        idle: list[socket.socket] = []
        try:
            idle = [socket.create_connection(("127.0.0.1", router.port)) for _ in range(40)]
            time.sleep(0.5)  # the router is now out of fds, with connections queued
            proc = psutil.Process(pid)
            cpu = proc.cpu_times()
            time.sleep(2.0)
            after = proc.cpu_times()
            spent = (after.user + after.system) - (cpu.user + cpu.system)
            assert spent < 0.5, f"the router spent {spent:.2f} s of CPU in 2 s while out of fds"
            resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
            started = time.monotonic()
            conn = http.client.HTTPConnection("127.0.0.1", router.port, timeout=10)
            conn.request("GET", "/healthz")
            status = conn.getresponse().status
            conn.close()
            took = time.monotonic() - started
        finally:
            for sock in idle:
                sock.close()
        assert status == 200
        # The queue ahead of it (the idle connections) is accepted first, at once.
        assert took < 3.0, f"accepting resumed {took:.2f} s after fds were available"
        log = router.log()
    assert log.count("accept failed") <= 2, log[-2000:]
