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
