"""Mechanics of the C transport on every backend present: events, sends, closes."""

from __future__ import annotations

import socket
import struct

import pytest
from tests.support.native_harness import (
    FixedResponder,
    Responder,
    TransportServer,
    response_for,
)

from hookrouter._native import engine as native

pytestmark = pytest.mark.skipif(native is None, reason="native extension not built")


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, f"peer closed after {len(buf)} of {n} bytes"
        buf += chunk
    return bytes(buf)


def test_echo_events_in_order_and_one_closed_per_accept(backend: str) -> None:
    srv = TransportServer(backend)
    port = srv.start()
    with _connect(port) as s:
        s.sendall(b"hello")
        assert _recv_exact(s, 5) == b"hello"
        s.sendall(b"world")
        assert _recv_exact(s, 5) == b"world"
        s.shutdown(socket.SHUT_WR)
        assert s.recv(10) == b""  # the server closed after our EOF
    srv.wait_until(lambda: len(srv.closed) == 1)
    stats = srv.stop()
    assert native is not None
    (conn,) = srv.accepted
    assert srv.closed == {conn: "closed"}
    assert bytes(srv.data[conn]) == b"helloworld"
    assert srv.kinds[native.EOF] == 1
    assert stats["connections"] == 0 and stats["bytes_in"] == 10 and stats["bytes_out"] == 10


def test_pipelined_requests_answered_in_order(backend: str) -> None:
    # Small buffers so 200 pipelined requests span many receive buffers.
    srv = TransportServer(backend, FixedResponder(body_size=40), buf_size=256, buf_count=64)
    port = srv.start()
    requests = b"".join(b"GET /%d HTTP/1.1\r\nhost: x\r\n\r\n" % i for i in range(200))
    expected = b"".join(response_for(i, 40) for i in range(200))
    with _connect(port) as s:
        s.sendall(requests)
        assert _recv_exact(s, len(expected)) == expected
    srv.wait_until(lambda: len(srv.closed) == 1)
    srv.stop()


def test_partial_sends_under_a_slow_reader(backend: str) -> None:
    """An 8 MiB answer to a reader that does not read: queued, then delivered intact."""
    size = 8 * 1024 * 1024  # more than the kernel buffers on both sides can hold
    srv = TransportServer(backend, FixedResponder(body_size=size), high_water=256 * 1024)
    port = srv.start()
    with _connect(port) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(b"GET / HTTP/1.1\r\n\r\n")
        # The kernel buffers fill: part of the answer must wait in the engine.
        srv.wait_until(lambda: srv.engine.stats()["pending_bytes"] > 0)
        assert srv.high_water_hits == 1
        got = _recv_exact(s, len(response_for(0, size)))
        assert got == response_for(0, size)
    srv.wait_until(lambda: len(srv.closed) == 1)
    stats = srv.stop()
    assert srv.drained == 1  # DRAINED after the queue fell below the low-water mark
    assert stats["bytes_out"] == len(response_for(0, size))
    if backend == "epoll":
        assert stats["partial_sends"] > 0


def test_thousands_of_connections(backend: str) -> None:
    n = 2000
    srv = TransportServer(backend, FixedResponder(), max_conns=n + 10)
    port = srv.start()
    socks = [_connect(port) for _ in range(n)]
    srv.wait_until(lambda: srv.engine.stats()["connections"] == n)
    for s in socks:
        s.sendall(b"GET / HTTP/1.1\r\n\r\n")
    want = response_for(0, 16)
    for s in socks:
        assert _recv_exact(s, len(want)) == want
    for s in socks:
        s.close()
    srv.wait_until(lambda: len(srv.closed) == n)
    stats = srv.stop()
    assert stats["accepted"] == n and stats["connections"] == 0
    assert set(srv.closed.values()) <= {"closed", "reset"}


def test_clients_vanishing_mid_request(backend: str) -> None:
    srv = TransportServer(backend, FixedResponder())
    port = srv.start()
    for i in range(300):
        s = _connect(port)
        s.sendall(b"POST /hook HTTP/1.1\r\ncontent-le")  # no end of headers
        if i % 2:  # half of them reset the connection instead of closing it
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    srv.wait_until(lambda: len(srv.closed) == 300)
    stats = srv.stop()
    assert stats["connections"] == 0
    reasons = set(srv.closed.values())
    assert reasons <= {"closed", "reset"} and "reset" in reasons


def test_pause_stops_delivery_until_resume(backend: str) -> None:
    srv = TransportServer(backend, Responder())
    port = srv.start()
    with _connect(port) as a, _connect(port) as b:
        srv.wait_until(lambda: len(srv.accepted) == 2)
        conn_a = srv.accepted[0]
        assert srv.call(lambda: srv.engine.pause(conn_a))
        a.sendall(b"held back")
        # Round-trips on b prove the loop turned several times meanwhile.
        for _ in range(5):
            b.sendall(b"ping")
            assert _recv_exact(b, 4) == b"ping"
        assert bytes(srv.data[conn_a]) == b""
        assert srv.call(lambda: srv.engine.resume(conn_a))
        assert _recv_exact(a, 9) == b"held back"
    srv.wait_until(lambda: len(srv.closed) == 2)
    srv.stop()


def test_stale_ids_are_ignored_and_slots_reuse_new_ids(backend: str) -> None:
    srv = TransportServer(backend, Responder(), max_conns=1)
    port = srv.start()
    with _connect(port) as s:
        s.sendall(b"x")
        assert _recv_exact(s, 1) == b"x"
    srv.wait_until(lambda: len(srv.closed) == 1)
    old = srv.accepted[0]
    assert srv.call(lambda: srv.engine.send(old, b"late")) is False
    assert srv.call(lambda: srv.engine.close(old)) is False
    with _connect(port) as s:
        s.sendall(b"y")
        assert _recv_exact(s, 1) == b"y"
    srv.wait_until(lambda: len(srv.closed) == 2)
    srv.stop()
    assert srv.accepted[1] != old
    assert srv.accepted[1] & 0xFFFFFFFF == old & 0xFFFFFFFF  # same slot, new generation


def test_table_full_leaves_connections_in_the_backlog(backend: str) -> None:
    srv = TransportServer(backend, FixedResponder(), max_conns=2)
    port = srv.start()
    first = [_connect(port) for _ in range(2)]
    srv.wait_until(lambda: srv.engine.stats()["connections"] == 2)
    late = _connect(port)  # completes in the kernel backlog
    late.sendall(b"GET / HTTP/1.1\r\n\r\n")
    first[0].close()  # frees a slot: the late one is served
    want = response_for(0, 16)
    assert _recv_exact(late, len(want)) == want
    late.close()
    first[1].close()
    srv.wait_until(lambda: srv.engine.stats()["connections"] == 0)
    stats = srv.stop()
    assert stats["accepted"] >= 3


def test_idle_sweep_uses_the_given_clock(backend: str) -> None:
    srv = TransportServer(backend, Responder(), idle_timeout_ms=5000)
    port = srv.start()
    with _connect(port) as s:
        s.sendall(b"a")
        assert _recv_exact(s, 1) == b"a"
        now = srv.call(lambda: srv.engine.stats() and __import__("time").monotonic())
        assert srv.call(lambda: srv.engine.sweep(int(now * 1000) + 1000)) == 0
        assert srv.call(lambda: srv.engine.sweep(int(now * 1000) + 60_000)) == 1
        srv.call(srv.engine.flush)
        assert s.recv(10) == b""  # closed by the server
    srv.wait_until(lambda: len(srv.closed) == 1)
    srv.stop()
    assert list(srv.closed.values()) == ["timeout"]


def test_close_with_unread_input_still_delivers_the_answer(backend: str) -> None:
    """Lingering close: extra bytes we never read must not turn our FIN into an RST."""
    srv = TransportServer(backend, FixedResponder(body_size=100_000, close_after=1))
    port = srv.start()
    with _connect(port) as s:
        s.sendall(b"GET / HTTP/1.1\r\n\r\n" + b"junk" * 20_000)
        want = response_for(0, 100_000)
        assert _recv_exact(s, len(want)) == want
        assert s.recv(10) == b""  # FIN, not RST
        srv.wait_until(lambda: srv.engine.stats()["connections"] == 1)  # lingering
        assert srv.call(lambda: srv.engine.sweep(-1)) == 0
        assert srv.call(lambda: srv.engine.sweep(2**50)) == 1  # linger deadline passed
    srv.wait_until(lambda: len(srv.closed) == 1)
    srv.stop()
    assert list(srv.closed.values()) == ["closed"]


def test_abort_resets_the_peer(backend: str) -> None:
    srv = TransportServer(backend, Responder())
    port = srv.start()
    with _connect(port) as s:
        srv.wait_until(lambda: len(srv.accepted) == 1)
        conn = srv.accepted[0]
        srv.call(lambda: (srv.engine.abort(conn), srv.engine.flush()))
        with pytest.raises(ConnectionResetError):
            s.recv(10)
    srv.wait_until(lambda: len(srv.closed) == 1)
    srv.stop()
    assert list(srv.closed.values()) == ["aborted"]


def test_shutdown_closes_open_connections(backend: str) -> None:
    srv = TransportServer(backend, Responder())
    port = srv.start()
    socks = [_connect(port) for _ in range(10)]
    srv.wait_until(lambda: len(srv.accepted) == 10)
    srv.stop()
    assert sorted(srv.closed) == sorted(srv.accepted)
    assert set(srv.closed.values()) == {"shutdown"}
    for s in socks:
        s.close()
