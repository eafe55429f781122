"""The sans-IO client connection: bytes in, responses out, states by table."""

from __future__ import annotations

import pytest

from hookrouter.core.http1client import ClientConnection, ClientState, serialize_request
from hookrouter.errors import ProtocolError


def sent(conn: ClientConnection, body: bytes = b'{"a":1}') -> bytes:
    return conn.send_request(
        "POST", "/hook?x=1", "example.com", [("content-type", "application/json")], body
    )


def test_serialises_request_with_host_length_and_agent() -> None:
    data = sent(ClientConnection())
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /hook?x=1 HTTP/1.1"
    assert b"host: example.com" in lines
    assert b"content-length: 7" in lines
    assert b"content-type: application/json" in lines
    assert body == b'{"a":1}'


def test_header_injection_is_refused() -> None:
    ok = [("content-type", "application/json"), ("authorization", "Bearer s3cret")]
    assert serialize_request("POST", "/", "h", ok, b"").count(b"\r\n") == 7
    for headers in (
        [*ok, ("x-id", "a\r\nevil: 1")],
        [("x-id", "a\nevil: 1"), *ok],
        [("x-id", "a\revil")],
        [("x-\nid", "a")],
        [("x:id", "a")],
    ):
        with pytest.raises(ValueError, match="invalid header") as err:
            serialize_request("POST", "/", "h", headers, b"")
        assert "s3cret" not in str(err.value)  # values may be credentials: names only
    assert ClientConnection().state is ClientState.IDLE


def test_response_byte_by_byte_then_keep_alive() -> None:
    conn = ClientConnection()
    sent(conn)
    raw = b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-A: 1\r\nX-A: 2\r\n\r\nhello"
    out = [conn.receive_data(raw[i : i + 1]) for i in range(len(raw))]
    assert out[:-1] == [None] * (len(raw) - 1)
    resp = out[-1]
    assert resp is not None
    assert (resp.status, resp.body, resp.headers["x-a"], resp.keep_alive) == (
        201,
        b"hello",
        "1, 2",
        True,
    )
    assert conn.state is ClientState.IDLE
    sent(conn)  # reusable
    assert conn.requests_sent == 2


def test_chunked_response() -> None:
    conn = ClientConnection()
    sent(conn)
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    resp = conn.receive_data(raw)
    assert resp is not None and resp.body == b"abcde" and conn.state is ClientState.IDLE


def test_connection_close_response_closes() -> None:
    conn = ClientConnection()
    sent(conn)
    resp = conn.receive_data(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
    assert resp is not None and not resp.keep_alive
    assert conn.state is ClientState.CLOSED
    with pytest.raises(ProtocolError):
        sent(conn)


def test_body_cap_truncates_and_closes() -> None:
    conn = ClientConnection(body_cap=10)
    sent(conn)
    resp = conn.receive_data(b"HTTP/1.1 500 Oops\r\nContent-Length: 100000\r\n\r\n" + b"x" * 50)
    assert resp is not None
    assert resp.truncated and resp.body == b"x" * 10 and resp.status == 500
    assert conn.state is ClientState.CLOSED


def test_close_delimited_body_completes_on_eof() -> None:
    conn = ClientConnection()
    sent(conn)
    assert conn.receive_data(b"HTTP/1.1 200 OK\r\n\r\npartial ") is None
    assert conn.receive_data(b"body") is None
    resp = conn.receive_eof()
    assert resp is not None and resp.body == b"partial body" and not resp.keep_alive


def test_eof_mid_response_is_an_error() -> None:
    conn = ClientConnection()
    sent(conn)
    conn.receive_data(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    with pytest.raises(ProtocolError):
        conn.receive_eof()
    assert conn.state is ClientState.CLOSED


def test_interim_1xx_is_skipped() -> None:
    conn = ClientConnection()
    sent(conn)
    resp = conn.receive_data(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
    assert resp is not None and resp.status == 204


def test_garbage_and_unsolicited_bytes_are_protocol_errors() -> None:
    conn = ClientConnection()
    sent(conn)
    with pytest.raises(ProtocolError):
        conn.receive_data(b"NOT HTTP AT ALL\r\n\r\n")
    idle = ClientConnection()
    with pytest.raises(ProtocolError):
        idle.receive_data(b"HTTP/1.1 200 OK\r\n\r\n")


def test_a_switch_of_protocols_is_a_protocol_error_not_a_crash() -> None:
    """httptools signals 101 + Upgrade with an exception outside HttpParserError."""
    conn = ClientConnection()
    sent(conn)
    with pytest.raises(ProtocolError, match="switched protocols"):
        conn.receive_data(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
        )
    assert conn.state is ClientState.CLOSED


def test_oversized_headers_are_refused() -> None:
    conn = ClientConnection(max_header_bytes=100)
    sent(conn)
    with pytest.raises(ProtocolError):
        conn.receive_data(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200 + b"\r\n\r\n")
