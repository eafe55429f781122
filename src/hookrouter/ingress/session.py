"""One HTTP connection between a byte transport and the application.

Theory of operation
-------------------
Every ingress engine (asyncio, epoll, io_uring) gives an ``HttpSession`` the
bytes it received and a ``ByteSink`` to write to; the session runs the
sans-IO ``ServerConnection`` and hands complete requests to the application.

The application answers through a ``Reply`` callback, now or later (after
the group commit holding the event). Pipelined requests get one ``_Slot``
each, in order; a slot's bytes go out only when every earlier slot has gone
out, so answers never overtake each other even when a later request is
answered first.

Backpressure: when too many answers are pending or the transport's write
buffer is full, the session pauses reading from the peer.

Timeouts are swept once a second by ``HttpServer`` (``tick``), not timed per
request: a client that stalls mid-headers or mid-body gets a 408 and the
connection closes; an idle keep-alive connection is closed silently.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, Protocol

from hookrouter.core.http1 import (
    CONTINUE_RESPONSE,
    EXPECT_CONTINUE,
    Limits,
    ProtocolFailure,
    Request,
    Response,
    ServerConnection,
    error_body,
    error_response,
    serialize_response,
)
from hookrouter.errors import ProtocolError

log = logging.getLogger(__name__)

Reply = Callable[[Response], None]

# Pipelining depth at which we stop reading more requests from one peer
# (a well-behaved webhook sender pipelines rarely; this bounds memory).
MAX_PENDING_REPLIES: Final = 64

_INTERNAL_ERROR: Final = error_body(
    ProtocolError("internal error", status=500, reason="internal_error")
)


class ByteSink(Protocol):
    """The transport side of one connection, as an engine provides it."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None:
        """Close after queued writes are flushed."""
        ...

    def abort(self) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class Application(Protocol):
    """Handles complete requests; must call ``reply`` exactly once per request."""

    def handle(self, request: Request, reply: Reply) -> None: ...


class SessionHost:
    """What a session needs from the listener that owns it: ``server.HttpServer``.

    Declared here so that this module imports nothing from the server (which
    creates sessions). A base class rather than a Protocol, as ``clock.Clock``
    explains: the compiled session reads these on every request, through the
    native layout instead of a lookup by name.
    """

    app: Application
    limits: Limits
    now: Callable[[], float]  # monotonic seconds
    draining: bool
    date_header: bytes
    header_timeout: float
    body_timeout: float
    keepalive_timeout: float

    def forget(self, session: HttpSession) -> None:
        """The session closed: stop sweeping it."""
        raise NotImplementedError

    def count_protocol_error(self, reason: str) -> None:
        raise NotImplementedError


class _Slot:
    """The place of one answer in the connection's response order."""

    __slots__ = ("data", "keep_alive", "session")

    def __init__(self, session: HttpSession, keep_alive: bool, data: bytes | None = None):
        self.session = session
        self.keep_alive = keep_alive
        self.data = data

    def __call__(self, response: Response) -> None:
        if self.data is not None:
            return  # a second answer to the same request is ignored
        keep_alive = self.keep_alive and not response.close and not self.session.draining
        self.keep_alive = keep_alive
        self.data = serialize_response(
            response, keep_alive=keep_alive, date=self.session.server.date_header
        )
        self.session.flush()


class HttpSession:
    """Drives one connection: parse, dispatch in order, write in order."""

    __slots__ = (
        "_conn",
        "_paused",
        "_slots",
        "_stall_mark",
        "_stall_since",
        "_stuck_since",
        "closed",
        "idle_since",
        "server",
        "sink",
        "write_paused",
    )

    def __init__(self, server: SessionHost, sink: ByteSink) -> None:
        self.server = server
        self.sink = sink
        self._conn = ServerConnection(server.limits)
        # A list, not a deque: mypyc compiles list operations to C calls and
        # deque methods to lookups by name (two per request); it holds a few slots.
        self._slots: list[_Slot] = []
        self._paused = False
        self._stall_mark = -1
        self._stall_since = 0.0
        # Since when our answers wait on the peer to read them (write buffer
        # over its high-water mark, or closed with bytes still queued); -1 if not.
        self._stuck_since = -1.0
        self.closed = False
        self.write_paused = False
        self.idle_since = server.now()

    @property
    def draining(self) -> bool:
        return self.server.draining

    # -- engine callbacks -------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        for event in self._conn.receive_data(data):
            if isinstance(event, Request):
                self._dispatch(event)
            elif event is EXPECT_CONTINUE:
                self._queue(_Slot(self, True, CONTINUE_RESPONSE), interim=True)
            elif isinstance(event, ProtocolFailure):
                self.server.count_protocol_error(event.error.reason)
                self._queue(_Slot(self, False, error_response(event.error)))
        self._update_read_state()

    def eof_received(self) -> None:
        """The peer finished sending; answer what is pending, then close."""
        if not self._slots:
            self._close()

    def connection_lost(self) -> None:
        self.closed = True
        self._slots.clear()
        self._conn.release()
        self.server.forget(self)

    def pause_writing(self) -> None:
        self.write_paused = True
        if self._stuck_since < 0:
            self._stuck_since = self.server.now()
        self._update_read_state()

    def resume_writing(self) -> None:
        self.write_paused = False
        if not self.closed:
            self._stuck_since = -1.0
        self._update_read_state()

    # -- timeouts (called by HttpServer's sweep) ------------------------------

    def tick(self, now: float) -> None:
        """Apply request and keep-alive timeouts as of monotonic ``now``."""
        conn = self._conn
        if self._stuck_since >= 0 and now - self._stuck_since > self.server.body_timeout:
            # A peer that does not read its answers gets as long as one sending
            # a body (nginx's send_timeout); a close would wait on it forever.
            self.server.count_protocol_error("write_timeout")
            self.closed = True
            self._stuck_since = -1.0
            self.sink.abort()
            return
        if self.closed:
            return
        if conn.request_in_progress:
            if self._stall_mark != conn.requests_started:
                self._stall_mark, self._stall_since = conn.requests_started, now
            elif now - self._stall_since > self._request_timeout(conn):
                self.server.count_protocol_error("request_timeout")
                self._queue(_Slot(self, False, conn.timeout_response()))
        elif not self._slots and now - self.idle_since > self._idle_timeout(conn):
            self._close()

    def _idle_timeout(self, conn: ServerConnection) -> float:
        # Like nginx's client_header_timeout: a connection that has not begun a
        # request waits only as long as a request's head may take.
        server = self.server
        return server.keepalive_timeout if conn.requests_started else server.header_timeout

    def _request_timeout(self, conn: ServerConnection) -> float:
        server = self.server
        if conn.receiving_body:
            return server.header_timeout + server.body_timeout
        return server.header_timeout

    # -- ordering ---------------------------------------------------------

    def _dispatch(self, request: Request) -> None:
        slot = _Slot(self, request.keep_alive)
        self._slots.append(slot)
        try:
            self.server.app.handle(request, slot)
        except Exception:  # the handler maps known errors itself; this is a bug
            log.exception("unhandled error in request handler")
            slot(Response(500, _INTERNAL_ERROR, close=True))

    def _queue(self, slot: _Slot, *, interim: bool = False) -> None:
        self._slots.append(slot)
        if not interim and not slot.keep_alive:
            self._paused = True
            self.sink.pause_reading()
        self.flush()

    def flush(self) -> None:
        """Write every answer that is ready and not preceded by a pending one."""
        slots = self._slots
        while slots and slots[0].data is not None:
            slot = slots.pop(0)
            if self.closed:
                return
            self.sink.write(slot.data)  # type: ignore[arg-type]
            if not slot.keep_alive:
                self._close()
                return
        if not slots:
            self.idle_since = self.server.now()
            if self.draining:
                self._close()
                return
        self._update_read_state()

    def _update_read_state(self) -> None:
        if self.closed or self._conn.closed:
            return
        want_pause = self.write_paused or len(self._slots) >= MAX_PENDING_REPLIES
        if want_pause != self._paused:
            self._paused = want_pause
            if want_pause:
                self.sink.pause_reading()
            else:
                self.sink.resume_reading()

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            if self._stuck_since < 0:  # until connection_lost, answers wait on the peer
                self._stuck_since = self.server.now()
            self.sink.close()

    def close_if_idle(self) -> bool:
        """Close now when no request is pending or in progress (graceful stop)."""
        if self._slots or self._conn.request_in_progress:
            return False
        self._close()
        return True

    def __repr__(self) -> str:
        return f"<HttpSession pending={len(self._slots)} closed={self.closed} {self._conn!r}>"
