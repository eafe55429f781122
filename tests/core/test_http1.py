"""The sans-IO HTTP/1.1 server connection: framing, limits, pipelining."""

from __future__ import annotations

import orjson
import pytest

from hookrouter.core.http1 import (
    CONTINUE_RESPONSE,
    EXPECT_CONTINUE,
    Limits,
    ProtocolFailure,
    Request,
    Response,
    ServerConnection,
    error_response,
    serialize_response,
)


def post(body: bytes, path: str = "/in/src", extra: str = "") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


def requests(events: list[object]) -> list[Request]:
    return [e for e in events if isinstance(e, Request)]


def failure(events: list[object]) -> ProtocolFailure:
    (fail,) = [e for e in events if isinstance(e, ProtocolFailure)]
    return fail


def test_content_length_request_is_parsed_with_lowercase_headers() -> None:
    conn = ServerConnection()
    (req,) = conn.receive_data(post(b"hello", "/in/a?x=1", "X-Custom: Yes\r\n"))
    assert isinstance(req, Request)
    assert (req.method, req.path, req.query, req.body) == ("POST", "/in/a", "x=1", b"hello")
    assert req.headers["x-custom"] == "Yes"
    assert req.keep_alive


def test_request_split_byte_by_byte_arrives_whole() -> None:
    conn = ServerConnection()
    data = post(b'{"id":"evt_1"}')
    events: list[object] = []
    for i in range(len(data)):
        events += conn.receive_data(data[i : i + 1])
        if i < len(data) - 1:
            assert conn.request_in_progress
    (req,) = requests(events)
    assert req.body == b'{"id":"evt_1"}'
    assert not conn.request_in_progress


def test_pipelined_requests_come_out_in_order() -> None:
    conn = ServerConnection()
    data = post(b"one") + post(b"two") + b"GET /healthz HTTP/1.1\r\n\r\n"
    got = requests(conn.receive_data(data))
    assert [r.body for r in got] == [b"one", b"two", b""]
    assert [r.method for r in got] == ["POST", "POST", "GET"]
    assert conn.requests_started == 3


def test_chunked_body_is_reassembled() -> None:
    conn = ServerConnection()
    data = (
        b"POST /in/s HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n"
    )
    (req,) = requests(conn.receive_data(data))
    assert req.body == b"Wikipedia"


@pytest.mark.parametrize("coding", ["gzip, chunked", "deflate, chunked", "br,chunked"])
def test_transfer_codings_besides_chunked_fail_501_and_close(coding: str) -> None:
    # llhttp alone would de-chunk and hand over the still-compressed bytes as the body.
    conn = ServerConnection()
    head = f"POST /in/s HTTP/1.1\r\nTransfer-Encoding: {coding}\r\n\r\n".encode()
    err = failure(conn.receive_data(head + b"4\r\nWiki\r\n0\r\n\r\n")).error
    assert (err.status, err.reason) == (501, "unsupported_transfer_encoding")
    assert coding.split(",", maxsplit=1)[0] in err.message and "Content-Encoding" in err.message
    assert conn.closed
    assert error_response(err).startswith(b"HTTP/1.1 501 Not Implemented\r\n")


@pytest.mark.parametrize("coding", ["Chunked", "identity, chunked"])
def test_chunked_spelled_otherwise_is_still_chunked(coding: str) -> None:
    conn = ServerConnection()
    head = f"POST /in/s HTTP/1.1\r\nTransfer-Encoding: {coding}\r\n\r\n".encode()
    (req,) = requests(conn.receive_data(head + b"4\r\nWiki\r\n0\r\n\r\n"))
    assert req.body == b"Wiki"


def test_declared_body_over_limit_fails_413_before_body_arrives() -> None:
    conn = ServerConnection(Limits(max_body_bytes=10))
    events = conn.receive_data(b"POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n")
    err = failure(events).error
    assert (err.status, err.reason) == (413, "body_too_large")
    assert conn.closed
    assert conn.receive_data(b"more bytes") == []


def test_chunked_body_over_limit_fails_413() -> None:
    conn = ServerConnection(Limits(max_body_bytes=8))
    data = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n5\r\nfghij\r\n"
    assert failure(conn.receive_data(data)).error.status == 413


def test_body_exactly_at_limit_is_accepted() -> None:
    conn = ServerConnection(Limits(max_body_bytes=5))
    (req,) = requests(conn.receive_data(post(b"12345")))
    assert req.body == b"12345"


def test_header_block_over_limit_fails_431() -> None:
    conn = ServerConnection(Limits(max_header_bytes=2048))
    data = b"POST / HTTP/1.1\r\nX-Big: " + b"a" * 3000 + b"\r\n\r\n"
    err = failure(conn.receive_data(data)).error
    assert (err.status, err.reason) == (431, "headers_too_large")


def test_too_many_headers_fails_431() -> None:
    conn = ServerConnection(Limits(max_headers=5))
    extra = "".join(f"X-H{i}: v\r\n" for i in range(6))
    assert failure(conn.receive_data(post(b"", extra=extra))).error.status == 431


@pytest.mark.parametrize(
    "data",
    [
        b"NOT HTTP AT ALL\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"POST / HTTP/9.9\r\n\r\n",
        b"\x00\x01\x02\xff\r\n\r\n",
    ],
)
def test_malformed_requests_fail_400_and_close(data: bytes) -> None:
    conn = ServerConnection()
    err = failure(conn.receive_data(data)).error
    assert (err.status, err.reason) == (400, "malformed_http")
    assert conn.closed


def test_expect_continue_is_signalled_before_the_body() -> None:
    conn = ServerConnection()
    head = b"POST / HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"
    assert conn.receive_data(head) == [EXPECT_CONTINUE]
    (req,) = requests(conn.receive_data(b"abc"))
    assert req.body == b"abc"
    assert CONTINUE_RESPONSE.startswith(b"HTTP/1.1 100 ")


def test_expect_continue_with_oversized_body_is_refused_not_continued() -> None:
    conn = ServerConnection(Limits(max_body_bytes=2))
    head = b"POST / HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"
    events = conn.receive_data(head)
    assert EXPECT_CONTINUE not in events
    assert failure(events).error.status == 413


def test_http10_without_keepalive_closes() -> None:
    conn = ServerConnection()
    (req,) = requests(conn.receive_data(b"POST / HTTP/1.0\r\nContent-Length: 0\r\n\r\n"))
    assert not req.keep_alive


def test_upgrade_request_keeps_its_body_and_closes_after() -> None:
    conn = ServerConnection()
    data = (
        b"POST /in/s HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade\r\nContent-Length: 4\r\n\r\nab"
    )
    assert requests(conn.receive_data(data)) == []
    (req,) = requests(conn.receive_data(b"cd"))
    assert req.body == b"abcd"
    assert not req.keep_alive


def test_receiving_body_tracks_phase_for_timeouts() -> None:
    conn = ServerConnection()
    conn.receive_data(b"POST / HTTP/1.1\r\nContent-")
    assert conn.request_in_progress and not conn.receiving_body
    conn.receive_data(b"Length: 4\r\n\r\nab")
    assert conn.receiving_body
    conn.receive_data(b"cd")
    assert not conn.request_in_progress


def test_timeout_response_is_408_json_and_closes() -> None:
    conn = ServerConnection()
    conn.receive_data(b"POST / HTTP/1.1\r\n")
    data = conn.timeout_response()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ")
    assert b"connection: close" in head
    assert orjson.loads(body)["error"] == "request_timeout"
    assert conn.closed


def test_serialize_response_frames_body_and_headers() -> None:
    data = serialize_response(
        Response(429, b'{"a":1}', headers=(("retry-after", "3"),)), keep_alive=True, date=b"D"
    )
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 429 Too Many Requests"
    assert b"content-length: 7" in lines
    assert b"retry-after: 3" in lines
    assert b"date: D" in lines
    assert b"connection: close" not in lines
    assert body == b'{"a":1}'


def test_serialize_response_close_when_not_keep_alive() -> None:
    data = serialize_response(Response(200), keep_alive=False)
    assert b"connection: close\r\n" in data
