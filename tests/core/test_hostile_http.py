"""Hostile request streams against the sans-IO server connection (issue 33).

Each test feeds what an attacker on the ingest port would send and checks the
connection refuses it as soon as a limit is passed, without buffering beyond it.
"""

from __future__ import annotations

import gzip
import time

import pytest

from hookrouter.core.content_coding import decode_body
from hookrouter.core.http1 import Limits, ProtocolFailure, Request, ServerConnection
from hookrouter.errors import UnsupportedEncoding

HEAD = b"POST /in/src HTTP/1.1\r\nHost: x\r\nX-Big: "


def _failure(events: list[object]) -> ProtocolFailure | None:
    fails = [e for e in events if isinstance(e, ProtocolFailure)]
    return fails[0] if fails else None


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("piece", [1, 1000, 4096, 65536])
def test_a_header_line_that_never_ends_is_431_once_past_the_limit(fast: bool, piece: int) -> None:
    """httptools buffers a field until its CRLF: the raw bytes fed are what is counted."""
    limit = 8192
    conn = ServerConnection(Limits(max_header_bytes=limit), fast=fast)
    sent = 0
    events = conn.receive_data(HEAD)
    sent += len(HEAD)
    while _failure(events) is None:
        assert sent <= limit + piece, "no 431 one read after the head passed the limit"
        events = conn.receive_data(b"a" * piece)
        sent += piece
    fail = _failure(events)
    assert fail is not None
    assert (fail.error.status, fail.error.reason) == (431, "headers_too_large")
    assert conn.closed
    assert conn.receive_data(b"a" * piece) == []  # nothing more is parsed


def test_a_header_name_without_a_colon_is_bounded_too() -> None:
    conn = ServerConnection(Limits(max_header_bytes=4096))
    events = conn.receive_data(b"POST / HTTP/1.1\r\n")
    for _ in range(10):
        events += conn.receive_data(b"N" * 1024)
    fail = _failure(events)
    assert fail is not None and fail.error.status == 431


def test_an_endless_header_costs_linear_time() -> None:
    """Old code re-copied the growing field on every read (quadratic CPU)."""
    conn = ServerConnection()  # default limit: 32 KiB
    started = time.perf_counter()
    conn.receive_data(HEAD)
    for _ in range(2000):  # 8 MB offered in 4 KiB reads
        if conn.closed:
            break
        conn.receive_data(b"a" * 4096)
    assert conn.closed
    assert time.perf_counter() - started < 0.5


def test_a_head_just_under_the_limit_is_served_in_small_reads() -> None:
    limit = 4096
    head = b"POST /in/src HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nX-Pad: "
    raw = head + b"p" * (limit - len(head) - 4) + b"\r\n\r\nok"
    assert len(raw) - 2 == limit
    for fast in (True, False):
        conn = ServerConnection(Limits(max_header_bytes=limit), fast=fast)
        events: list[object] = []
        for i in range(0, len(raw), 7):
            events += conn.receive_data(raw[i : i + 7])
        assert [type(e) for e in events] == [Request], fast


def test_pipelined_requests_in_one_big_read_are_not_counted_as_one_head() -> None:
    """Bodies and complete heads in a read do not count against the next head."""
    limit = 2048
    body = b"x" * 3000
    one = b"POST /a HTTP/1.1\r\nContent-Length: 3000\r\n\r\n" + body
    conn = ServerConnection(Limits(max_header_bytes=limit), fast=False)
    events = conn.receive_data(one * 5 + b"POST /b HTTP/1.1\r\nX: 1")
    assert [type(e) for e in events] == [Request] * 5
    assert conn.request_in_progress and not conn.closed
    events = conn.receive_data(b"\r\nContent-Length: 0\r\n\r\n")
    assert [type(e) for e in events] == [Request]


def test_stacked_content_codings_are_refused_before_any_is_inflated() -> None:
    payload = b'{"id":"evt_1"}'
    body = payload
    for _ in range(3):
        body = gzip.compress(body)
    with pytest.raises(UnsupportedEncoding, match="stacked") as caught:
        decode_body("gzip, gzip, gzip", body, 65536)
    assert caught.value.status == 415
    # Two layers are still decoded (a sender behind a compressing proxy).
    assert decode_body("gzip, gzip", gzip.compress(gzip.compress(payload)), 65536) == payload
    assert decode_body("identity, gzip, identity", gzip.compress(payload), 65536) == payload


def test_thousands_of_codings_cost_no_inflating() -> None:
    body = b'{"id":"evt_1"}'
    for _ in range(300):
        body = gzip.compress(body, compresslevel=1)
    started = time.perf_counter()
    with pytest.raises(UnsupportedEncoding):
        decode_body(", ".join(["gzip"] * 300), body, 1 << 20)
    assert time.perf_counter() - started < 0.01


CHUNKED = b"POST /in/src HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"


def _feed_pieces(conn: ServerConnection, data: bytes, piece: int) -> list[object]:
    events: list[object] = []
    for i in range(0, len(data), piece):
        events += conn.receive_data(data[i : i + piece])
        if conn.closed:
            break
    return events


@pytest.mark.parametrize("piece", [1, 5, 4096, 1 << 20])
def test_chunk_extensions_past_their_budget_are_400(piece: int) -> None:
    conn = ServerConnection()
    events = conn.receive_data(CHUNKED)
    # 50 MB of extensions on one chunk were accepted; stop at the first 16 KiB.
    fed = 0
    extension = b";x=" + b"e" * 65533
    events += conn.receive_data(b"1")
    while not conn.closed and fed < 50 << 20:
        events += _feed_pieces(conn, extension, piece)
        fed += len(extension)
    fail = _failure(events)
    assert fail is not None, "50 MB of chunk extensions accepted"
    assert (fail.error.status, fail.error.reason) == (400, "chunk_extensions_too_large")
    assert fed <= 64 * 1024


def test_small_extensions_on_many_chunks_add_up_to_the_budget() -> None:
    one = b"1;name=" + b"v" * 100 + b"\r\nx\r\n"
    conn = ServerConnection()
    events = conn.receive_data(CHUNKED + one * 200 + b"0\r\n\r\n")
    fail = _failure(events)
    assert fail is not None and fail.error.reason == "chunk_extensions_too_large"


@pytest.mark.parametrize("piece", [1, 7, 1 << 20])
def test_a_chunk_size_padded_with_zeros_is_400(piece: int) -> None:
    conn = ServerConnection()
    events = _feed_pieces(conn, CHUNKED + b"0" * 5000 + b"1\r\nx\r\n0\r\n\r\n", piece)
    fail = _failure(events)
    assert fail is not None, "a size with 5000 leading zeros parsed"
    assert (fail.error.status, fail.error.reason) == (400, "bad_chunk_size")
    assert conn.closed


@pytest.mark.parametrize("piece", [1, 3, 64, 1 << 20])
def test_ordinary_chunked_bodies_still_pass(piece: int) -> None:
    """Extensions, trailers, 20-digit sizes, many chunks; pipelined after a chunked one."""
    body = (
        b"5;name=value\r\nhello\r\n"
        + b"00000000000000000001\r\n!\r\n"
        + b"1\r\n.\r\n" * 3000
        + b"0\r\nX-Trailer: t\r\n\r\n"
    )
    follow = b"POST /b HTTP/1.1\r\nContent-Length: 2\r\n\r\nok"
    conn = ServerConnection()
    events = _feed_pieces(conn, CHUNKED + body + follow + CHUNKED + b"0\r\n\r\n", piece)
    got = [e for e in events if isinstance(e, Request)]
    assert [type(e) for e in events] == [Request] * 3, events[:3]
    assert got[0].body == b"hello!" + b"." * 3000
    assert (got[1].path, got[1].body) == ("/b", b"ok")
    assert got[2].body == b""
