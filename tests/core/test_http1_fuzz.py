"""Property tests: the ingest HTTP core fed arbitrary and mutated byte streams.

The server connection (``core/http1.py``, llhttp and the C fast path
``_native._http1``) runs inside a real ``HttpSession`` whose application
answers every request at once. Whatever the bytes and however they are cut
into reads, these must hold:

* no exception escapes the session (a bug would show as a 500 or a crash);
* what is buffered stays bounded: the head fed while incomplete, the URL and
  the body never pass their limits;
* everything written back is a sequence of well-formed HTTP/1.1 responses,
  and after a close nothing more is written.

The delivery client (``core/http1client.py``) gets the same treatment with
hostile responses: each ends as a response within the body cap or as a
``ProtocolError``, and the head it buffers stays within its cap.

The normal suite runs a short bounded slice (a few seconds). For a long run::

    HOOKROUTER_FUZZ_SECONDS=300 pytest -q tests/core/test_http1_fuzz.py

runs each property with fresh random seeds until that many seconds have passed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import httptools
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hookrouter._native.accel import http1 as native_http1
from hookrouter.core.http1 import Limits, Request, Response
from hookrouter.core.http1client import ClientConnection, ClientState
from hookrouter.errors import ProtocolError
from hookrouter.ingress.server import HttpServer
from hookrouter.ingress.session import Reply

FUZZ_SECONDS = float(os.environ.get("HOOKROUTER_FUZZ_SECONDS", "0"))
SHORT = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LONG = settings(SHORT, max_examples=2000)

SEEDS = [
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /in/src HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /in/src HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext=1\r\nhello\r\n0\r\nTrailer: t\r\n\r\n",
    b"POST /in/src HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\nok",
    b"GET / HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade\r\nContent-Length: 1\r\n\r\nx",
    b"GET /a HTTP/1.0\r\n\r\n",
    b"POST /in/src HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
]
RUNS = [b"a", b"0", b";", b"\r\n", b"\n", b"\r", b":", b" ", b"\x00", b"\xff", b"f"]


class _Sink:
    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.wrote_after_close = False

    def write(self, data: bytes) -> None:
        if self.closed:
            self.wrote_after_close = True
        self.out += data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _Echo:
    """Answers each request at once, sometimes asking to close."""

    def handle(self, request: Request, reply: Reply) -> None:
        assert isinstance(request.body, bytes)
        close = request.path.endswith("close")
        reply(Response(200, b'{"ok":true}', close=close))


class _Responses:
    """Parses what the session wrote; raises on anything not HTTP/1.1."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.complete = True
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self) -> None:
        self.complete = False

    def on_message_complete(self) -> None:
        self.complete = True
        self.statuses.append(self.parser.get_status_code())


def _mutate(data: st.DataObject, seed: bytes) -> bytes:
    raw = bytearray(seed)
    for _ in range(data.draw(st.integers(0, 4), label="mutations")):
        where = data.draw(st.integers(0, len(raw)), label="at")
        kind = data.draw(st.sampled_from(["insert", "delete", "replace", "run", "repeat"]))
        if kind == "insert":
            raw[where:where] = data.draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del raw[where : where + data.draw(st.integers(1, 8))]
        elif kind == "replace" and where < len(raw):
            raw[where] = data.draw(st.integers(0, 255))
        elif kind == "run":
            raw[where:where] = data.draw(st.sampled_from(RUNS)) * data.draw(st.integers(1, 9000))
        elif kind == "repeat":
            raw += bytes(raw)
    return bytes(raw)


def _pieces(data: st.DataObject, stream: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(stream):
        size = data.draw(st.sampled_from([1, 2, 3, 7, 64, 500, 4096, 1 << 20]), label="read")
        out.append(stream[pos : pos + size])
        pos += size
    return out


def _drive(data: st.DataObject, stream: bytes) -> None:
    limits = Limits(
        max_header_bytes=data.draw(st.sampled_from([64, 300, 4096, 32768]), label="head"),
        max_headers=data.draw(st.sampled_from([2, 100]), label="fields"),
        max_body_bytes=data.draw(st.sampled_from([0, 10, 4096, 1 << 20]), label="body"),
    )
    server = HttpServer(_Echo(), limits=limits)
    sink = _Sink()
    session = server.new_session(sink)
    conn = session._conn
    for piece in _pieces(data, stream):
        session.data_received(piece)  # raises only on a bug
        assert conn._head_fed <= limits.max_header_bytes + 1
        assert sum(map(len, conn._body)) <= limits.max_body_bytes
        if not conn.closed:
            assert len(conn._url) <= limits.max_header_bytes
    session.eof_received()
    session.connection_lost()
    assert not sink.wrote_after_close
    responses = _Responses()
    responses.parser.feed_data(bytes(sink.out))  # raises on a malformed response
    assert responses.complete, "a response was cut short"
    assert all(100 <= status < 600 for status in responses.statuses)


def _for_a_while(test: Callable[[], None]) -> None:
    """Once in the normal suite; repeatedly with new seeds for a long opt-in run."""
    deadline = time.monotonic() + FUZZ_SECONDS
    test()
    while time.monotonic() < deadline:
        test()


def test_arbitrary_bytes_get_well_formed_answers() -> None:
    @(LONG if FUZZ_SECONDS else SHORT)
    @given(st.data(), st.binary(max_size=3000))
    def prop(data: st.DataObject, stream: bytes) -> None:
        _drive(data, stream)

    _for_a_while(prop)


def test_mutated_requests_get_well_formed_answers() -> None:
    @(LONG if FUZZ_SECONDS else SHORT)
    @given(st.data(), st.lists(st.sampled_from(SEEDS), min_size=1, max_size=4))
    def prop(data: st.DataObject, seeds: list[bytes]) -> None:
        stream = b"".join(_mutate(data, seed) for seed in seeds)
        _drive(data, stream)

    _for_a_while(prop)


@pytest.mark.skipif(native_http1 is None, reason="the C fast path is not built")
def test_the_c_fast_path_never_reads_past_its_input() -> None:
    assert native_http1 is not None
    parse = native_http1.parse_request

    @(LONG if FUZZ_SECONDS else SHORT)
    @given(
        st.data(),
        st.one_of(st.binary(max_size=2000), st.sampled_from(SEEDS)),
        st.sampled_from([16, 300, 32768]),
    )
    def prop(data: st.DataObject, stream: bytes, max_head: int) -> None:
        stream = _mutate(data, stream)
        start = data.draw(st.integers(0, len(stream)), label="start")
        parsed = parse(stream, start, max_head, 100, 4096)
        if parsed is not None:
            method, path, query, headers, body, _keep_alive, end = parsed
            assert start < end <= len(stream)
            assert all(isinstance(text, str) for text in (method, path, query))
            assert isinstance(headers, dict) and len(body) <= 4096
            assert end - start - len(body) <= max_head

    _for_a_while(prop)


RESPONSE_SEEDS = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end",
]


def test_the_delivery_client_survives_hostile_responses() -> None:
    """What a receiver answers ends as a response or a ProtocolError, within the caps."""

    @(LONG if FUZZ_SECONDS else SHORT)
    @given(
        st.data(),
        st.one_of(st.binary(max_size=3000), st.sampled_from(RESPONSE_SEEDS)),
        st.booleans(),
    )
    def prop(data: st.DataObject, stream: bytes, fast: bool) -> None:
        stream = _mutate(data, stream)
        conn = ClientConnection(body_cap=100, max_header_bytes=300, fast=fast)
        conn.send_request("POST", "/hook", "x", [], b"{}")
        try:
            for piece in _pieces(data, stream):
                response = conn.receive_data(piece)
                assert conn._head_fed <= 301
                if response is not None:
                    assert len(response.body) <= 100
                    break
            else:
                response = conn.receive_eof()
                assert response is None or len(response.body) <= 100
        except ProtocolError:
            assert conn.state is ClientState.CLOSED

    _for_a_while(prop)
