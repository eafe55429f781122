"""One pooled outbound connection (an asyncio Protocol) and a request's handle.

``_Conn`` feeds bytes to the sans-IO ``ClientConnection`` and reports the
request's end to a callback exactly once: the response, or the error
(timeout, reset, bad response). The pool logic lives in ``transport.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections import deque
from collections.abc import Callable, Hashable
from typing import cast

from hookrouter.core.http1client import ClientConnection, ClientState, HttpResponse
from hookrouter.errors import DeliveryError, ProtocolError

# SO_LINGER on with a zero timeout: close() sends a reset and drops unsent bytes.
_RESET = struct.pack("ii", 1, 0)

Done = Callable[[HttpResponse | None, DeliveryError | None], None]
"""Called once per request with the response, or with the error that ended it."""


class Conn(asyncio.Protocol):
    """One socket: feeds a ClientConnection and reports to the request's callback."""

    __slots__ = ("closed", "conn", "deadline", "idle_since", "on_done", "timer", "transport")

    def __init__(self, body_cap: int) -> None:
        self.conn = ClientConnection(body_cap=body_cap)
        self.transport: asyncio.Transport | None = None
        self.on_done: Done | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.deadline: float | None = None  # of the request in progress
        self.closed = False
        self.idle_since = 0.0

    # -- the attempt deadline ------------------------------------------------
    # One timer per connection, re-armed lazily, instead of one per request:
    # a call_at plus its cancel per delivery is measurable on uvloop. A
    # request only sets ``deadline``; the armed timer, when it fires, expires
    # the request if its deadline passed, re-arms for a later one, or stops.

    def watch(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """Fail the request in progress with a timeout if it is not over by ``deadline``."""
        self.deadline = deadline
        timer = self.timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self.timer = loop.call_at(deadline, self._check_deadline, loop)

    def unwatch(self) -> None:
        """The request is over; an armed timer will find nothing to do."""
        self.deadline = None

    def _check_deadline(self, loop: asyncio.AbstractEventLoop) -> None:
        self.timer = None
        deadline = self.deadline
        if deadline is None or self.closed:
            return
        if loop.time() >= deadline:
            self.deadline = None
            self.fail(
                DeliveryError("no complete response before the attempt deadline", reason="timeout")
            )
        else:
            self.timer = loop.call_at(deadline, self._check_deadline, loop)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, and uvloop
        # calls this one loop turn after create_connection returns; _connect
        # sets the attribute first from create_connection's result.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            response = self.conn.receive_data(data)
        except ProtocolError as exc:
            self.fail(DeliveryError(str(exc.message), reason="bad_response"))
            return
        if response is not None:
            self._resolve(response)

    def eof_received(self) -> bool:
        self._on_eof()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._on_eof()
        self.conn.release()

    def _on_eof(self) -> None:
        self.closed = True
        try:
            response = self.conn.receive_eof()
        except ProtocolError:
            self.fail(
                DeliveryError("connection closed before a response", reason="connection_closed")
            )
            return
        if response is not None:
            self._resolve(response)

    def _resolve(self, response: HttpResponse) -> None:
        done, self.on_done = self.on_done, None
        if not response.keep_alive:
            self.close()  # before the callback, so the pool sees it is not reusable
        if done is not None:
            done(response, None)

    def fail(self, error: DeliveryError) -> None:
        """End the request in progress (if any) with ``error`` and close with a reset."""
        done, self.on_done = self.on_done, None
        self._reset_on_close()
        self.close()
        if done is not None:
            done(None, error)

    def _reset_on_close(self) -> None:
        """Make the close a TCP reset: request bytes not yet acknowledged are dropped.

        A plain close leaves them to the kernel, which keeps retransmitting them;
        after a network partition heals they would reach the endpoint long after
        the attempt ended, past the sender's lease in a cluster (docs/cluster.md).
        """
        transport = self.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):  # closed, or no such option
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)

    def close(self) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.transport.abort()

    @property
    def reusable(self) -> bool:
        return (
            not self.closed and self.conn.state is ClientState.IDLE and self.transport is not None
        )


class RequestHandle:
    """A request started with :meth:`HttpTransport.start`; ``cancel`` abandons it."""

    __slots__ = ("cancelled", "conn", "task")

    def __init__(self) -> None:
        self.cancelled = False
        self.conn: Conn | None = None
        self.task: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        """Drop the request; its callback is not called and its connection is closed."""
        if self.cancelled:
            return
        self.cancelled = True
        if self.conn is not None:
            self.conn.fail(DeliveryError("request cancelled", reason="cancelled"))
        elif self.task is not None:
            self.task.cancel()


class Pool:
    """One origin's connections, and the requests waiting for one."""

    __slots__ = ("host_header", "idle", "key", "open", "waiters")

    def __init__(self, host_header: str, key: Hashable) -> None:
        self.host_header = host_header  # the origin's, spelled once rather than per request
        self.key = key  # the origin it is held under, to drop it once it has no connection
        self.idle: list[Conn] = []  # LIFO: the warmest connection first
        self.open = 0
        self.waiters: deque[asyncio.Future[None]] = deque()


__all__ = ["Conn", "Done", "Pool", "RequestHandle"]
