"""io_uring specifics: buffer-ring exhaustion, feature probe, setup fallbacks."""

from __future__ import annotations

import hashlib
import socket
import threading

import pytest
from tests.support.native_harness import Responder, TransportServer

from hookrouter._native import engine as native

pytestmark = pytest.mark.skipif(native is None, reason="native extension not built")


class DigestResponder(Responder):
    """Accumulate everything; on EOF answer with the length and sha256, then close."""

    def __init__(self) -> None:
        self.received: dict[int, hashlib._Hash] = {}
        self.sizes: dict[int, int] = {}

    def on_data(self, srv: TransportServer, conn: int, data: bytes) -> None:
        self.received.setdefault(conn, hashlib.sha256()).update(data)
        self.sizes[conn] = self.sizes.get(conn, 0) + len(data)

    def on_eof(self, srv: TransportServer, conn: int) -> None:
        digest = self.received.get(conn, hashlib.sha256()).hexdigest()
        srv.send(conn, f"{self.sizes.get(conn, 0)} {digest}".encode())
        srv.engine.close(conn)


def test_buffer_ring_exhaustion_rearms_and_loses_nothing(uring_backend: str) -> None:
    """4 buffers of 256 bytes against 64 senders of 32 KiB each at once."""
    srv = TransportServer(uring_backend, DigestResponder(), buf_count=4, buf_size=256)
    port = srv.start()
    payloads = [bytes([i % 251]) * 1000 + bytes(range(256)) * 124 for i in range(64)]
    answers: list[bytes] = [b""] * len(payloads)
    barrier = threading.Barrier(len(payloads))

    def client(i: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            barrier.wait()  # everyone writes at the same moment: a burst
            s.sendall(payloads[i])
            s.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            answers[i] = b"".join(chunks)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(payloads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    srv.wait_until(lambda: len(srv.closed) == len(payloads))
    stats = srv.stop()
    for payload, answer in zip(payloads, answers, strict=True):
        assert answer == f"{len(payload)} {hashlib.sha256(payload).hexdigest()}".encode()
    assert stats["enobufs"] > 0, stats  # the ring really ran dry ...
    assert stats["rearm_recv"] >= stats["enobufs"]  # ... and every stop was re-armed
    assert stats["buffers_outstanding"] == 0


def test_probe_reports_this_kernel(uring_backend: str) -> None:
    assert native is not None
    facts = native.probe(zcrx_ifname="lo")
    assert facts["setup_errno"] == 0
    assert facts["multishot_recv"] == 1 and facts["multishot_accept"] == 1
    assert facts["buf_ring_errno"] == 0
    # Loopback has no hardware queue: registration must fail, and say so.
    assert facts["zcrx_errno"] != 0


def test_engine_info_shows_the_setup_it_got(uring_backend: str) -> None:
    srv = TransportServer(uring_backend)
    srv.start()
    info = srv.call(srv.engine.info)
    srv.stop()
    assert info["backend"] == "io_uring"
    facts = native.probe() if native else {}
    if facts.get("defer_taskrun_errno") == 0:
        assert info["defer_taskrun"] and info["single_issuer"]
    assert info["notify"] == "eventfd"


def test_ring_fd_notification_mode_serves(uring_backend: str) -> None:
    srv = TransportServer(uring_backend, notify="ring")
    port = srv.start()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for _ in range(20):
            s.sendall(b"ping")
            assert s.recv(4) == b"ping"
    srv.wait_until(lambda: len(srv.closed) == 1)
    srv.stop()
