"""Sans-IO HTTP/1.1 server connection over httptools (llhttp).

Theory of operation
-------------------
``ServerConnection`` turns bytes into events and responses into bytes; it owns
no socket and reads no clock, so the asyncio engine and the native (epoll /
io_uring) engine drive the very same object. Feed it with
``receive_data(data)``; it returns the events that data completed:

* ``Request``            a whole request (headers and body) ready to handle;
* ``EXPECT_CONTINUE``    the client waits for ``100 Continue`` before its body;
* ``ProtocolFailure``    the peer broke HTTP or a limit: answer it, then close.

Several requests may complete from one read (pipelining); responses must go
out in request order, which the session layer above guarantees.

Limits are enforced while parsing, before anything is buffered beyond them:
the request line plus headers are capped (431) by the raw bytes fed, a line
not yet ended included; the body is capped by its declared Content-Length as
soon as the headers end, and by the bytes received for chunked bodies (413);
chunk sizes are held to 20 digits and chunk extensions plus trailers to 16 KiB
a body (400). llhttp itself rejects framing attacks (both Content-Length and
Transfer-Encoding, bad chunk sizes, bare LF) with 400.

Timeouts belong to the shell (it has the clock); ``request_in_progress`` and
``requests_started`` let it tell an idle keep-alive connection from a client
stuck mid-request, and ``timeout_response()`` gives the 408 to send.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import httptools
import orjson

from hookrouter._native.accel import http1 as native_http1
from hookrouter.errors import HookrouterError, ProtocolError

# The C fast path for whole requests of the common shape (``_native/http1_head.c``):
# (data, start, max_header_bytes, max_headers, max_body) -> fields, or None to
# let llhttp parse from ``start`` on. None when the extension is not built.
FastParse = Callable[
    [bytes, int, int, int, int], tuple[str, str, str, dict[str, str], bytes, bool, int] | None
]
FAST_PARSE_REQUEST: Final[FastParse | None] = (
    None if native_http1 is None else native_http1.parse_request
)
# Its writer of whole responses: (status line, content type, body, date,
# headers, close) -> bytes, or None to let the Python code write it.
FastWrite = Callable[[bytes, str, bytes, bytes, tuple[tuple[str, str], ...], bool], bytes | None]
FAST_SERIALIZE_RESPONSE: Final[FastWrite | None] = (
    None if native_http1 is None else native_http1.serialize_response
)

# Precedents: nginx caps a header line at 8 KiB (large_client_header_buffers
# 4 8k); Node caps the header block at 16 KiB. Webhook senders send small
# header blocks, so 32 KiB total leaves room for long signature headers.
DEFAULT_MAX_HEADER_BYTES: Final = 32 * 1024
DEFAULT_MAX_HEADERS: Final = 100
DEFAULT_MAX_BODY_BYTES: Final = 1024 * 1024

# Common header names as peers spell them -> lower-cased text (webhook senders'
# and receivers' usual fields): one dict probe instead of a lower() and a
# decode() per field (shared with core/http1client).
KNOWN_HEADER_NAMES: Final[dict[bytes, str]] = {
    spelled: spelled.lower().decode("latin-1")
    for name in (
        b"Host", b"Content-Type", b"Content-Length", b"User-Agent", b"Accept",
        b"Accept-Encoding", b"Connection", b"Expect", b"Transfer-Encoding",
        b"Stripe-Signature", b"X-GitHub-Event", b"X-GitHub-Delivery", b"X-GitHub-Hook-ID",
        b"X-Hub-Signature-256", b"X-Shopify-Hmac-Sha256", b"X-Shopify-Topic",
        b"X-Shopify-Webhook-Id", b"X-Shopify-Shop-Domain", b"X-Slack-Signature",
        b"X-Slack-Request-Timestamp", b"Webhook-Id", b"Webhook-Timestamp",
        b"Webhook-Signature", b"Svix-Id", b"Svix-Timestamp", b"Svix-Signature",
        b"Server", b"Date", b"Keep-Alive", b"Retry-After", b"Cache-Control", b"Vary",
        b"Content-Encoding", b"Location", b"X-Request-Id",
    )
    for spelled in (name, name.lower())
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-connection framing limits."""

    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_headers: int = DEFAULT_MAX_HEADERS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


@dataclass(slots=True)
class Request:
    """A complete HTTP request. Header names are lower-cased."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool
    http_version: str = "1.1"

    # Written out: mypyc leaves a dataclass's generated __init__ interpreted
    # (mypyc/mypyc#817), several times slower than a compiled one.
    def __init__(  # noqa: PLR0917 (the dataclass's own signature)
        self,
        method: str,
        path: str,
        query: str,
        headers: dict[str, str],
        body: bytes,
        keep_alive: bool,
        http_version: str = "1.1",
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive
        self.http_version = http_version


@dataclass(frozen=True, slots=True)
class ProtocolFailure:
    """The connection cannot continue; send ``error``'s status, then close."""

    error: ProtocolError


class _ExpectContinue:
    __slots__ = ()

    def __repr__(self) -> str:
        return "EXPECT_CONTINUE"


EXPECT_CONTINUE: Final = _ExpectContinue()
CONTINUE_RESPONSE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"

Event = Request | ProtocolFailure | _ExpectContinue


# Not frozen: built once or twice per request, and a frozen dataclass is
# slower to construct (object.__setattr__ per field); treat it as immutable.
@dataclass(slots=True)
class Response:
    """What a handler answers. ``close`` asks to end the connection after it."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False

    # Written out: mypyc leaves a dataclass's generated __init__ interpreted
    # (see Request).
    def __init__(
        self,
        status: int,
        body: bytes = b"",
        content_type: str = "application/json",
        headers: tuple[tuple[str, str], ...] = (),
        close: bool = False,
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers
        self.close = close


class _Abort(Exception):
    """Raised inside a parser callback to stop parsing on a limit violation."""

    def __init__(self, error: ProtocolError) -> None:
        super().__init__(error.message)
        self.error = error


# Chunk framing limits. h11 allows at most 20 hex digits in a chunk size
# (leading zeros included); hyper caps a body's chunk extensions (and we add
# trailers) at 16 KiB in all, which also bounds one chunk-size line.
MAX_CHUNK_SIZE_DIGITS: Final = 20
MAX_CHUNK_EXTENSION_BYTES: Final = 16 * 1024
_HEX_DIGITS: Final = re.compile(rb"[0-9A-Fa-f]*")
_LINE, _DATA, _DATA_END, _TRAILERS = range(4)


class _ChunkedFraming:
    """Follows a chunked body's framing ahead of llhttp to bound what it skips.

    llhttp checks the syntax but skips chunk extensions (and zeros before a
    size) without counting them: 50 MB of extensions passed. This finds where
    the body ends and refuses, before llhttp sees them, a size with too many
    digits or extensions and trailers past their budget.
    """

    __slots__ = ("_digits", "_extra", "_in_size", "_left", "_line", "_state", "done")

    def __init__(self) -> None:
        self._state = _LINE
        self._digits = b""  # the size's hex digits read so far
        self._in_size = True  # still reading the size's digits on this line
        self._line = 0  # bytes of the current trailer line
        self._left = 0  # data bytes (or CRLF bytes) still to skip
        self._extra = 0  # extension and trailer bytes of the whole body
        self.done = False

    def scan(self, data: bytes, pos: int) -> int:
        """Follow ``data`` from ``pos``; returns where the body ends in it (or ``len(data)``)."""
        size = len(data)
        while pos < size and not self.done:
            state = self._state
            if state in {_DATA, _DATA_END}:
                take = min(self._left, size - pos)
                pos += take
                self._left -= take
                if not self._left:
                    if state == _DATA:
                        self._state, self._left = _DATA_END, 2
                    else:
                        self._state = _LINE
                continue
            newline = data.find(b"\n", pos)
            end = size if newline < 0 else newline
            if state == _LINE:
                if self._in_size:
                    digits_end = _HEX_DIGITS.match(data, pos, end)
                    stop = digits_end.end() if digits_end is not None else pos
                    self._digits += data[pos:stop]
                    if len(self._digits) > MAX_CHUNK_SIZE_DIGITS:
                        raise _Abort(
                            ProtocolError(
                                f"chunk size over {MAX_CHUNK_SIZE_DIGITS} hex digits",
                                reason="bad_chunk_size",
                            )
                        )
                    self._in_size = stop == end and newline < 0
                    self._count_extra(end - stop)
                else:
                    self._count_extra(end - pos)
                if newline < 0:
                    return size
                pos = newline + 1
                self._extra -= 1  # the line's CR is framing, not extension
                chunk = int(self._digits, 16) if self._digits else 0
                self._digits, self._in_size = b"", True
                self._state, self._left = (_DATA, chunk) if chunk else (_TRAILERS, 0)
                continue
            # _TRAILERS: header lines until an empty one ends the body.
            self._line += end - pos
            self._count_extra(end - pos)
            if newline < 0:
                return size
            pos = newline + 1
            self._extra -= 1  # the line's CR
            if self._line <= 1:  # "\r\n" alone: the end of the message
                self.done = True
            self._line = 0
        return pos

    def _count_extra(self, count: int) -> None:
        self._extra += count
        if self._extra > MAX_CHUNK_EXTENSION_BYTES:
            raise _Abort(
                ProtocolError(
                    f"chunk extensions and trailers over {MAX_CHUNK_EXTENSION_BYTES} bytes",
                    reason="chunk_extensions_too_large",
                )
            )


class ServerConnection:
    """One server-side HTTP/1.1 connection, bytes in and events out."""

    # The request being parsed lives in flat attributes rather than a
    # per-request object: this is the hottest code in the router.
    __slots__ = (
        "_body",
        "_body_bytes",
        "_body_left",
        "_chunks",
        "_closed",
        "_events",
        "_fast",
        "_head_fed",
        "_head_reset",
        "_head_tail",
        "_header_bytes",
        "_header_count",
        "_headers",
        "_headers_done",
        "_in_request",
        "_limits",
        "_max_body",
        "_max_header_bytes",
        "_max_headers",
        "_parser",
        "_upgrade_body",
        "_url",
        "requests_started",
    )

    def __init__(self, limits: Limits | None = None, *, fast: bool = True) -> None:
        """``fast=False`` parses everything with llhttp (tests compare the two paths)."""
        self._fast = FAST_PARSE_REQUEST if fast else None
        self._limits = limits = limits or Limits()
        self._max_body = limits.max_body_bytes
        self._max_header_bytes = limits.max_header_bytes
        self._max_headers = limits.max_headers
        # Made when first needed (most requests parse whole in C) and dropped
        # by ``release``: its callbacks hold this connection, a reference
        # cycle that only the cyclic GC would free, in pauses of the loop.
        self._parser: httptools.HttpRequestParser | None = None
        self._events: list[Event] = []
        self._in_request = False
        self._headers_done = False
        self._url = b""
        self._header_count = 0
        self._headers: dict[str, str] = {}
        self._header_bytes = 0
        # Raw bytes fed to llhttp while a request head was incomplete: httptools
        # buffers a field until its CRLF, so only this count sees an endless line.
        self._head_fed = 0
        self._head_reset = False
        self._head_tail = b""  # the last bytes of a head fed so far (its end may straddle)
        self._body: list[bytes] = []
        self._body_bytes = 0
        self._body_left = -1  # the declared Content-Length, -1 when none
        self._chunks: _ChunkedFraming | None = None
        self._closed = False
        # Set while collecting the body of an Upgrade request by hand (see
        # _on_upgrade): (request without body, body bytes still missing).
        self._upgrade_body: tuple[Request, list[bytes], int] | None = None
        self.requests_started = 0

    # -- public API -------------------------------------------------------

    @property
    def request_in_progress(self) -> bool:
        """True between the first byte of a request and its last."""
        return self._in_request or self._upgrade_body is not None

    @property
    def receiving_body(self) -> bool:
        """True once a request's headers are complete and until its body is."""
        return self._upgrade_body is not None or (self._in_request and self._headers_done)

    @property
    def closed(self) -> bool:
        """True after a protocol failure or a request asking to close; feed no more data."""
        return self._closed

    def release(self) -> None:
        """The connection is gone: parse nothing more, and let go of llhttp."""
        self._closed = True
        self._parser = None

    def receive_data(self, data: bytes) -> list[Event]:
        """Parse ``data`` and return the events it completed."""
        if self._upgrade_body is not None:
            self._collect_upgrade_body(data)
        elif not self._closed:
            done = 0 if self._in_request or self._fast is None else self._parse_whole(data)
            if done < len(data):
                self._feed(data[done:] if done else data)
        events, self._events = self._events, []
        return events

    def _parse_whole(self, data: bytes) -> int:
        """Whole requests of the common shape, in C; returns where llhttp must go on.

        Only between requests (llhttp then stands at a message start, so it can
        take over at any request boundary). A request asking to close ends the
        parsing: nothing after it is a request to serve (RFC 9112, 9.6).
        """
        fast = self._fast
        assert fast is not None
        done, size = 0, len(data)
        while done < size:
            parsed = fast(data, done, self._max_header_bytes, self._max_headers, self._max_body)
            if parsed is None:
                return done
            method, path, query, headers, body, keep_alive, done = parsed
            self.requests_started += 1
            self._head_fed = 0
            self._events.append(Request(method, path, query, headers, body, keep_alive))
            if not keep_alive:
                self._closed = True
                return size
        return done

    def _feed(self, data: bytes) -> None:
        """Feed llhttp one message part at a time: a head, then its body.

        httptools accumulates a header name or value until its line ends (and
        re-copies it on every read), so a line that never ends would grow
        without bound before ``on_header`` could count it. The raw bytes fed
        while a head is incomplete are counted instead, and a head is fed at
        most ``max_header_bytes`` (+1) at a time, so 431 comes the moment it
        passes the limit, as nginx (large_client_header_buffers) and Node's
        llhttp binding (max-http-header-size) count raw header bytes.

        Pieces end where the message parts end (the head at its empty line,
        a body at its declared length or last chunk), so every count starts
        at its own message's first byte, even with requests pipelined.
        """
        parser = self._parser
        if parser is None:
            parser = self._parser = httptools.HttpRequestParser(self)
        size = len(data)
        pos = 0
        while pos < size and not self._closed:
            if self._in_request and self._headers_done:
                chunks = self._chunks
                if chunks is not None:
                    try:
                        cut = chunks.scan(data, pos)
                    except _Abort as refused:  # not "exc": mypyc types a name once
                        self._fail(refused.error)
                        return
                elif self._body_left >= 0:
                    cut = min(size, pos + self._body_left - self._body_bytes)
                else:
                    cut = size
                head = False
            else:
                cut = self._head_end(data, pos)
                head = True
            if cut <= pos:  # nothing left to split at: llhttp decides
                cut = size
            piece = data[pos:cut] if pos or cut < size else data
            self._head_reset = False
            try:
                parser.feed_data(piece)
            except httptools.HttpParserCallbackError as exc:
                cause = exc.__context__
                error = cause.error if isinstance(cause, _Abort) else _malformed(exc)
                self._fail(error)
                return
            except httptools.HttpParserUpgrade as exc:
                self._on_upgrade(data[pos + exc.args[0] :])
                return
            except httptools.HttpParserError as exc:
                self._fail(_malformed(exc))
                return
            pos = cut
            if not head:
                if self._in_request and self._chunks is not None and self._chunks.done:
                    # Our framing saw the last chunk end where llhttp did not.
                    self._fail(_malformed(ValueError("chunked body framing mismatch")))
                continue
            if self._head_reset:
                self._head_tail = b""
                continue
            self._head_fed += len(piece)
            self._head_tail = (self._head_tail + piece[-3:])[-3:]
            if self._head_fed > self._max_header_bytes:
                self._fail(self._headers_too_large())
                return

    def _head_end(self, data: bytes, pos: int) -> int:
        """Where the head being fed from ``pos`` ends (just past CRLF CRLF), or the allowance.

        llhttp (strict) ends a head only at an empty line; finding it here
        lets the body be fed (and its framing checked) from its first byte.
        """
        stop = min(len(data), pos + self._max_header_bytes - self._head_fed + 1)
        tail = self._head_tail
        if tail:
            joined = (tail + data[pos : pos + 3]).find(b"\r\n\r\n")
            if joined >= 0:
                return min(stop, pos + joined + 4 - len(tail))
        found = data.find(b"\r\n\r\n", pos, stop)
        return stop if found < 0 else found + 4

    def timeout_response(self) -> bytes:
        """The 408 to send when the shell's deadline for this request passed."""
        self._closed = True
        return error_response(
            ProtocolError("request not completed in time", status=408, reason="request_timeout")
        )

    # -- httptools callbacks ------------------------------------------------

    def on_message_begin(self) -> None:
        self._in_request = True
        self._headers_done = False
        self._url = b""
        self._headers = {}
        self._header_count = 0
        self._header_bytes = 0
        self._body = []
        self._body_bytes = 0
        self._body_left = -1
        self._chunks = None
        self.requests_started += 1

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._header_bytes += len(url)
        if self._header_bytes > self._max_header_bytes:
            raise _Abort(self._headers_too_large())

    def on_header(self, name: bytes, value: bytes) -> None:
        # Straight into the request's dict (no list of raw pairs walked again at
        # the end); llhttp hands over each field whole, even split across reads.
        self._header_count += 1
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > self._max_header_bytes or self._header_count > self._max_headers:
            raise _Abort(self._headers_too_large())
        key = KNOWN_HEADER_NAMES.get(name)
        if key is None:
            key = name.lower().decode("latin-1")
        text = value.decode("latin-1")
        headers = self._headers
        previous = headers.get(key)
        headers[key] = text if previous is None else f"{previous}, {text}"

    def on_headers_complete(self) -> None:
        self._headers_done = True
        self._head_fed = 0
        self._head_reset = True
        headers = self._headers
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit():
            self._body_left = int(declared)
            if self._body_left > self._max_body:
                raise _Abort(_body_too_large(self._limits))
        coding = headers.get("transfer-encoding")
        if coding is not None:
            _check_transfer_codings(coding)
            if coding.rpartition(",")[2].strip().lower() == "chunked":
                self._chunks = _ChunkedFraming()
        if "expect" in headers and headers["expect"].lower() == "100-continue":
            self._events.append(EXPECT_CONTINUE)

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self._max_body:
            raise _Abort(_body_too_large(self._limits))
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._in_request = False
        self._head_fed = 0
        self._head_reset = True
        parser = self._parser
        assert parser is not None  # llhttp is calling
        path, _, query = self._url.decode("latin-1").partition("?")
        chunks = self._body
        # Handed to the request: a body kept here would live as long as the
        # connection (until its next request, or its release).
        self._body = []
        self._events.append(
            Request(
                parser.get_method().decode("ascii"),
                path,
                query,
                self._headers,
                chunks[0] if len(chunks) == 1 else b"".join(chunks),
                parser.should_keep_alive(),
                parser.get_http_version(),
            )
        )

    # -- internals ----------------------------------------------------------

    def _on_upgrade(self, rest: bytes) -> None:
        """An Upgrade (h2c, websocket) or CONNECT request completed its headers.

        hookrouter never switches protocols (RFC 9110 lets a server ignore
        Upgrade), but llhttp stops parsing at such a request and treats what
        follows as the new protocol, so a declared body is collected here by
        hand. The connection closes after the answer: the parser cannot go on.
        """
        self._closed = True
        request = self._events.pop() if self._events else None
        if not isinstance(request, Request):
            self._fail(ProtocolError("protocol upgrade is not supported", reason="bad_upgrade"))
            return
        request.keep_alive = False
        declared = request.headers.get("content-length", "0")
        if "transfer-encoding" in request.headers or not declared.isdigit():
            self._fail(
                ProtocolError("a chunked Upgrade request is not supported", reason="bad_upgrade")
            )
            return
        if int(declared) > self._limits.max_body_bytes:
            self._fail(_body_too_large(self._limits))
            return
        self._upgrade_body = (request, [], int(declared))
        self._collect_upgrade_body(rest)

    def _collect_upgrade_body(self, data: bytes) -> None:
        assert self._upgrade_body is not None
        request, chunks, missing = self._upgrade_body
        if data:
            chunks.append(data[:missing])
            missing -= min(missing, len(data))
        if missing:
            self._upgrade_body = (request, chunks, missing)
            return
        self._upgrade_body = None
        request.body = b"".join(chunks)
        self._events.append(request)

    def _headers_too_large(self) -> ProtocolError:
        limits = self._limits
        return ProtocolError(
            f"request headers over the limit ({limits.max_header_bytes} bytes, "
            f"{limits.max_headers} fields)",
            status=431,
            reason="headers_too_large",
        )

    def _fail(self, error: ProtocolError) -> None:
        self._closed = True
        self._in_request = False
        self._events.append(ProtocolFailure(error))

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("busy" if self._in_request else "idle")
        return f"<ServerConnection {state} requests={self.requests_started}>"


def _malformed(exc: Exception) -> ProtocolError:
    detail = str(exc) or type(exc).__name__
    return ProtocolError(f"malformed HTTP request: {detail}", status=400, reason="malformed_http")


def _check_transfer_codings(header: str) -> None:
    """Refuse transfer codings other than chunked (RFC 9112 §6.1: 501).

    llhttp de-chunks ``gzip, chunked`` and hands over the still-compressed
    body as if it were plain: the signature check would then fail as
    ``bad_signature``, a misleading answer. Compression belongs in
    Content-Encoding, which the ingest path decodes.
    """
    for part in header.split(","):
        name = part.strip().lower()
        if name not in {"chunked", "identity"}:
            raise _Abort(
                ProtocolError(
                    f"transfer-coding {name!r} is not supported: send the body chunked or "
                    "with Content-Length (a compressed body goes in Content-Encoding)",
                    status=501,
                    reason="unsupported_transfer_encoding",
                )
            )


def _body_too_large(limits: Limits) -> ProtocolError:
    return ProtocolError(
        f"request body exceeds {limits.max_body_bytes} bytes",
        status=413,
        reason="body_too_large",
    )


# -- response serialisation ---------------------------------------------------

_REASONS: Final = {
    100: "Continue", 200: "OK", 201: "Created", 202: "Accepted", 204: "No Content",
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
    413: "Content Too Large", 415: "Unsupported Media Type", 422: "Unprocessable Content",
    429: "Too Many Requests", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable",
}  # fmt: skip


def _status_line(status: int) -> bytes:
    return f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n".encode("ascii")


_STATUS_LINES: Final = {code: _status_line(code) for code in _REASONS}


def serialize_response(
    response: Response, *, keep_alive: bool, date: bytes = b"", fast: bool = True
) -> bytes:
    """The bytes of ``response``; ``date`` is a preformatted Date value or empty.

    ``fast=False`` skips the C writer (tests hold the two equal).
    """
    status_line = _STATUS_LINES.get(response.status) or _status_line(response.status)
    close = not keep_alive or response.close
    if fast and FAST_SERIALIZE_RESPONSE is not None:
        data = FAST_SERIALIZE_RESPONSE(
            status_line, response.content_type, response.body, date, response.headers, close
        )
        if data is not None:
            return data
    head = [
        status_line,
        b"content-type: ",
        response.content_type.encode("latin-1"),
        b"\r\ncontent-length: ",
        str(len(response.body)).encode("ascii"),
        b"\r\n",
    ]
    if date:
        head += (b"date: ", date, b"\r\n")
    for name, value in response.headers:
        head += (name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n")
    if close:
        head.append(b"connection: close\r\n")
    head += (b"\r\n", response.body)
    return b"".join(head)


def error_body(error: HookrouterError) -> bytes:
    """The JSON body every error carries: ``{"error": reason, "message": text}``."""
    return orjson.dumps({"error": error.reason, "message": error.message})


def error_response(error: ProtocolError) -> bytes:
    """A complete close-after response for a protocol failure."""
    return serialize_response(
        Response(status=error.status, body=error_body(error), close=True), keep_alive=False
    )
