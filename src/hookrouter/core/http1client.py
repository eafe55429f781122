"""Sans-IO HTTP/1.1 client connection over httptools (llhttp): requests out, responses in.

Theory of operation
-------------------
``ClientConnection`` serialises one request at a time and parses the answer;
it owns no socket and reads no clock (the transport shell in
``delivery/transport.py`` does both). One request per connection at a time,
no pipelining: webhook receivers are arbitrary servers, and a pipelined
request behind a slow one would inherit its latency.

States (enum + table below): IDLE --send--> WAITING --response, keep-alive-->
IDLE; WAITING --response with ``Connection: close`` / truncated body / EOF /
garbage--> CLOSED; IDLE --EOF--> CLOSED. A CLOSED connection is never reused.

Response handling, chosen for a webhook sender:

* the body is kept up to ``body_cap`` bytes (64 KiB: enough for an error
  page excerpt in the attempt log); past that the response is returned at
  once, marked ``truncated``, and the connection is closed rather than
  drained -- a receiver streaming megabytes must not cost us the reading;
* 1xx interim responses are skipped; 3xx is just a status (no redirects);
* a body delimited by connection close completes on ``receive_eof``;
* header bytes are capped (64 KiB) as they arrive, a line without its end
  included, so a hostile receiver cannot grow memory; at most 5 interim
  (1xx) responses are skipped before the answer counts as broken.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import httptools

from hookrouter._native.accel import http1 as native_http1
from hookrouter.core.http1 import KNOWN_HEADER_NAMES
from hookrouter.errors import ProtocolError

DEFAULT_BODY_CAP: Final = 64 * 1024
# Twice the server side's 32 KiB: responses may carry big cookies and CSP headers.
DEFAULT_MAX_RESPONSE_HEADER_BYTES: Final = 64 * 1024
USER_AGENT: Final = "hookrouter/0.1"
# Go's net/http client gives up after 5 interim responses (max1xxResponses):
# a receiver sending 1xx forever must not keep an attempt alive on headers.
MAX_INFORMATIONAL_RESPONSES: Final = 5

# The C fast path for a whole response of the common shape arriving in one
# read (``_native/http1_head.c``): (data, max_header_bytes, body_cap) ->
# (status, headers, body, keep_alive), or None to let llhttp parse it.
FastParse = Callable[[bytes, int, int], tuple[int, dict[str, str], bytes, bool] | None]
FAST_PARSE_RESPONSE: Final[FastParse | None] = (
    None if native_http1 is None else native_http1.parse_response
)
# The same module's writer for a request of the usual shape (one allocation,
# no f-string per header): (method, target, host, headers, user agent, body)
# -> bytes, or None to let the Python code below write it (or refuse it).
FastSerialize = Callable[[str, str, str, Any, str, bytes], bytes | None]
FAST_SERIALIZE_REQUEST: Final[FastSerialize | None] = (
    None if native_http1 is None else native_http1.serialize_request
)


class ClientState(enum.StrEnum):
    IDLE = "idle"
    WAITING = "waiting"
    CLOSED = "closed"


class ClientInput(enum.StrEnum):
    SEND = "send"
    RESPONSE_KEEP_ALIVE = "response_keep_alive"
    RESPONSE_CLOSE = "response_close"
    EOF = "eof"
    ERROR = "error"


TRANSITIONS: Final[dict[tuple[ClientState, ClientInput], ClientState]] = {
    (ClientState.IDLE, ClientInput.SEND): ClientState.WAITING,
    (ClientState.WAITING, ClientInput.RESPONSE_KEEP_ALIVE): ClientState.IDLE,
    (ClientState.WAITING, ClientInput.RESPONSE_CLOSE): ClientState.CLOSED,
    (ClientState.WAITING, ClientInput.EOF): ClientState.CLOSED,
    (ClientState.WAITING, ClientInput.ERROR): ClientState.CLOSED,
    (ClientState.IDLE, ClientInput.EOF): ClientState.CLOSED,
    (ClientState.IDLE, ClientInput.ERROR): ClientState.CLOSED,
    (ClientState.CLOSED, ClientInput.EOF): ClientState.CLOSED,
    (ClientState.CLOSED, ClientInput.ERROR): ClientState.CLOSED,
}


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A parsed response. Header names are lower-cased; repeats joined with ", "."""

    status: int
    headers: dict[str, str]
    body: bytes  # at most body_cap bytes
    truncated: bool
    keep_alive: bool

    # Written out so that mypyc compiles it (see http1.Request).
    def __init__(
        self,
        status: int,
        headers: dict[str, str],
        body: bytes,
        truncated: bool,
        keep_alive: bool,
    ) -> None:
        object.__setattr__(self, "status", status)  # frozen: no plain assignment
        object.__setattr__(self, "headers", headers)
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "truncated", truncated)
        object.__setattr__(self, "keep_alive", keep_alive)


class _Stop(Exception):
    """Raised inside a parser callback to stop at the body cap."""


def serialize_request(
    method: str,
    target: str,
    host: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    *,
    fast: bool = True,
) -> bytes:
    """Request bytes with Host, Content-Length and User-Agent added.

    Values containing CR or LF are refused (header injection through a tenant's
    configured header or an event id would otherwise split the request).
    ``fast=False`` skips the C writer (tests hold the two equal).
    """
    if fast and FAST_SERIALIZE_REQUEST is not None:
        data = FAST_SERIALIZE_REQUEST(method, target, host, headers, USER_AGENT, body)
        if data is not None:
            return data
    parts = [f"{method} {target} HTTP/1.1\r\nhost: {host}\r\n"]
    for name, value in headers:
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
            raise ValueError(f"invalid header {name!r}")
        parts.append(f"{name}: {value}\r\n")
    parts.append(f"user-agent: {USER_AGENT}\r\ncontent-length: {len(body)}\r\n\r\n")
    return "".join(parts).encode("latin-1") + body


class ClientConnection:
    """One client-side HTTP/1.1 connection: bytes in, :class:`HttpResponse` out."""

    __slots__ = (
        "_body",
        "_body_bytes",
        "_chunked",
        "_content_length",
        "_done",
        "_fast",
        "_head_ended",
        "_head_fed",
        "_header_bytes",
        "_headers",
        "_headers_complete",
        "_informational",
        "_parser",
        "_status",
        "body_cap",
        "bytes_received",
        "max_header_bytes",
        "requests_sent",
        "state",
    )

    def __init__(
        self,
        *,
        body_cap: int = DEFAULT_BODY_CAP,
        max_header_bytes: int = DEFAULT_MAX_RESPONSE_HEADER_BYTES,
        fast: bool = True,
    ) -> None:
        """``fast=False`` parses every response with llhttp (tests compare the two paths)."""
        self._fast = FAST_PARSE_RESPONSE if fast else None
        self.body_cap = body_cap
        self.max_header_bytes = max_header_bytes
        self.state = ClientState.IDLE
        self.requests_sent = 0
        self.bytes_received = 0  # for the current request; 0 = the peer said nothing yet
        # Made when first needed (the usual answer parses whole in C) and
        # dropped by ``release``: its callbacks hold this connection, a
        # reference cycle that only the cyclic GC would free.
        self._parser: httptools.HttpResponseParser | None = None
        self._informational = 0
        self._reset()

    def _reset(self) -> None:
        self._status = 0
        self._headers: dict[str, str] = {}
        self._header_bytes = 0
        self._body: list[bytes] = []
        self._body_bytes = 0
        self._headers_complete = False
        # Raw bytes fed while the head is incomplete (see receive_data).
        self._head_fed = 0
        self._head_ended = False
        self._content_length = False
        self._chunked = False
        self._done: HttpResponse | None = None

    def _move(self, event: ClientInput) -> None:
        key = (self.state, event)
        if key not in TRANSITIONS:
            raise ProtocolError(f"client connection: {event.value} while {self.state.value}")
        self.state = TRANSITIONS[key]

    def send_request(
        self, method: str, target: str, host: str, headers: Iterable[tuple[str, str]], body: bytes
    ) -> bytes:
        """Bytes to write for one request; the connection must be IDLE."""
        data = serialize_request(method, target, host, headers, body)
        self._move(ClientInput.SEND)
        self.requests_sent += 1
        self.bytes_received = 0
        self._informational = 0
        self._reset()
        return data

    def receive_data(self, data: bytes) -> HttpResponse | None:
        """Feed bytes; returns the response once complete (or once the body cap is hit)."""
        if self.state is not ClientState.WAITING:
            # Bytes while idle are a protocol violation (nothing was asked).
            self._move(ClientInput.ERROR)
            raise ProtocolError("response bytes received with no request outstanding")
        fast = self._fast
        if fast is not None and self.bytes_received == 0:
            # The usual answer arrives whole in one read: parse it in one C call.
            parsed = fast(data, self.max_header_bytes, self.body_cap)
            if parsed is not None:
                self.bytes_received = len(data)
                status, headers, body, keep_alive = parsed
                self._done = HttpResponse(status, headers, body, False, keep_alive)
                return self._finish()
        self.bytes_received += len(data)
        while data:
            if self._headers_complete:
                piece, data = data, b""  # body bytes: on_body caps them
            else:
                # httptools buffers a header line until its CRLF, so a line that
                # never ends is counted here, as fed, not in on_header.
                allowance = self.max_header_bytes - self._head_fed + 1
                piece, data = data[:allowance], data[allowance:]
            self._head_ended = False
            if not self._feed(piece):
                break  # stopped at the body cap
            if not self._headers_complete and not self._head_ended:
                self._head_fed += len(piece)
                if self._head_fed > self.max_header_bytes:
                    self._move(ClientInput.ERROR)
                    raise ProtocolError(f"response headers exceed {self.max_header_bytes} bytes")
        return self._finish()

    def release(self) -> None:
        """The socket is gone and its end was read: let go of llhttp."""
        self._parser = None

    def _feed(self, data: bytes) -> bool:
        """Parse ``data``; False when parsing stopped at the body cap."""
        parser = self._parser
        if parser is None:
            parser = self._parser = httptools.HttpResponseParser(self)
        try:
            parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if not isinstance(exc.__context__, _Stop):
                self._move(ClientInput.ERROR)
                raise ProtocolError(f"bad response: {exc.__context__ or exc}") from exc
            self._done = self._build(truncated=True)
            return False
        except httptools.HttpParserUpgrade as exc:  # not an HttpParserError subclass
            # 101 + Upgrade: the endpoint left HTTP/1.1, which a webhook POST never asks for.
            self._move(ClientInput.ERROR)
            raise ProtocolError("the endpoint switched protocols (101 Upgrade)") from exc
        except httptools.HttpParserError as exc:
            self._move(ClientInput.ERROR)
            raise ProtocolError(f"malformed HTTP response: {exc}") from exc
        return True

    def receive_eof(self) -> HttpResponse | None:
        """The peer closed. Completes a close-delimited body; otherwise raises if waiting."""
        if self.state is not ClientState.WAITING:
            self._move(ClientInput.EOF)
            return None
        if self._done is None and self._close_delimited():
            self._done = self._build(truncated=False, keep_alive=False)
        if self._done is None:
            self._move(ClientInput.EOF)
            raise ProtocolError("connection closed before the response was complete")
        return self._finish()

    def _close_delimited(self) -> bool:
        return self._headers_complete and not self._content_length and not self._chunked

    def _finish(self) -> HttpResponse | None:
        done = self._done
        if done is None:
            return None
        reusable = done.keep_alive and not done.truncated
        self._move(ClientInput.RESPONSE_KEEP_ALIVE if reusable else ClientInput.RESPONSE_CLOSE)
        self._done = None
        return done

    def _build(self, *, truncated: bool, keep_alive: bool = True) -> HttpResponse:
        parser = self._parser  # None only once released: nothing is reused then
        reusable = parser is not None and parser.should_keep_alive()
        keep_alive = keep_alive and not truncated and reusable
        body = b"".join(self._body)
        return HttpResponse(self._status, self._headers, body, truncated, keep_alive)

    # -- httptools callbacks -------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > self.max_header_bytes:
            raise ProtocolError(f"response headers exceed {self.max_header_bytes} bytes")
        key = KNOWN_HEADER_NAMES.get(name)
        if key is None:
            key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        if key == "content-length":
            self._content_length = True
        elif key == "transfer-encoding" and "chunked" in text.lower():
            self._chunked = True
        old = self._headers.get(key)
        self._headers[key] = text if old is None else f"{old}, {text}"

    def on_headers_complete(self) -> None:
        parser = self._parser
        assert parser is not None  # llhttp is calling
        self._status = parser.get_status_code()
        self._headers_complete = True
        self._head_fed = 0
        self._head_ended = True

    def on_body(self, body: bytes) -> None:
        if self._status < 200:
            return
        room = self.body_cap - self._body_bytes
        if len(body) > room:
            self._body.append(body[:room])
            self._body_bytes += room
            raise _Stop
        self._body.append(body)
        self._body_bytes += len(body)

    def on_message_complete(self) -> None:
        if self._status < 200:  # 1xx interim response: wait for the real one
            self._informational += 1
            if self._informational > MAX_INFORMATIONAL_RESPONSES:
                raise ProtocolError(
                    f"more than {MAX_INFORMATIONAL_RESPONSES} interim (1xx) responses"
                )
            self._reset()
            self._head_ended = True  # the next head's start is counted from the next piece
            return
        self._done = self._build(truncated=False)

    def __repr__(self) -> str:
        return f"<ClientConnection {self.state.value} requests={self.requests_sent}>"


__all__ = [
    "DEFAULT_BODY_CAP",
    "TRANSITIONS",
    "ClientConnection",
    "ClientInput",
    "ClientState",
    "HttpResponse",
    "serialize_request",
]
