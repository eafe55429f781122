"""The portable ingress engine: asyncio (uvloop when installed) streams.

A thin shell: an ``asyncio.Protocol`` per connection forwards bytes to an
``HttpSession`` and implements ``ByteSink`` over the transport. Everything
HTTP lives in the shared session and sans-IO core.

Accepting is ours, not ``loop.create_server``'s: under load uvloop's server
took about one connection per loop turn, so 512 clients connecting at once
waited in the kernel's accept queue for up to 3.5 s while the loop served
the connections it had (measured: p99 2.3 s at 512 connections, against
56 ms with the C engines, which accept everything that is ready). The
listener below drains the queue (up to ``ACCEPT_BATCH`` per readiness) and
hands each socket to ``connect_accepted_socket``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable
from typing import Any, Final, cast

from hookrouter.errors import EngineUnavailable
from hookrouter.ingress.server import ACCEPT_PAUSES, HttpServer
from hookrouter.ingress.session import HttpSession
from hookrouter.log_throttle import LogThrottle


class _Connection(asyncio.Protocol):
    __slots__ = ("_closed", "_server", "made", "session", "transport")

    def __init__(self, server: HttpServer, closed: Callable[[], None]) -> None:
        self._server = server
        self._closed = closed
        self.made = False  # from here on, connection_lost reports the close
        self.transport: asyncio.Transport | None = None
        self.session: HttpSession | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.made = True
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Responses are small and complete; don't let Nagle hold them.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.session = self._server.new_session(self)

    def data_received(self, data: bytes) -> None:
        if self.session is not None:
            self.session.data_received(data)

    def eof_received(self) -> bool:
        if self.session is not None:
            self.session.eof_received()
        return True  # keep the write side open until our answers are out

    def connection_lost(self, exc: Exception | None) -> None:
        if self.session is not None:
            self.session.connection_lost()
            self.session = None
        self.transport = None
        self._closed()

    def pause_writing(self) -> None:
        if self.session is not None:
            self.session.pause_writing()

    def resume_writing(self) -> None:
        if self.session is not None:
            self.session.resume_writing()

    # -- ByteSink ----------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def pause_reading(self) -> None:
        if self.transport is not None and self.transport.is_reading():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_reading():
            self.transport.resume_reading()


log = logging.getLogger("hookrouter.ingress")

# Connections taken per readiness of the listener: enough to empty a burst in a
# turn or two, few enough that a connect storm cannot hold the loop for long.
ACCEPT_BATCH: Final = 256
# Out of file descriptors: stop watching the listener this long, then retry
# (the queue keeps the connections; watching would spin the loop).
ACCEPT_BACKOFF_S: Final = 0.1
_FD_EXHAUSTED: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class AsyncioEngine:
    """Listens on its own socket and accepts in batches; one protocol object per connection."""

    name = "asyncio"

    def __init__(self, *, backlog: int = 1024, max_connections: int = 10_000) -> None:
        self._backlog = backlog
        self._max_connections = max_connections
        self._sock: socket.socket | None = None
        self._server: HttpServer | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._open = 0  # accepted sockets not yet closed
        self._watching = False  # the listener is registered with the loop
        self._backing_off = False  # out of fds: a retry is scheduled
        self.accepted = 0
        self.accept_errors = 0
        self.accept_pauses = 0
        self._log_throttle = LogThrottle(10.0)  # EMFILE repeats every backoff

    async def start(self, server: HttpServer, host: str, port: int) -> tuple[str, int]:
        """Start listening; returns the bound address (port 0 picks a free one)."""
        try:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.create_server((host, port), family=family, backlog=self._backlog)
        except OSError as exc:
            raise EngineUnavailable(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}", reason="listen_failed"
            ) from exc
        sock.setblocking(False)
        self._sock, self._server = sock, server
        self._watch()
        bound = sock.getsockname()
        return str(bound[0]), int(bound[1])

    def _watch(self) -> None:
        sock = self._sock
        if sock is not None and not self._watching:
            asyncio.get_running_loop().add_reader(sock.fileno(), self._accept_ready)
            self._watching = True

    def _unwatch(self) -> None:
        sock = self._sock
        if sock is not None and self._watching:
            asyncio.get_running_loop().remove_reader(sock.fileno())
        self._watching = False

    def _accept_ready(self) -> None:
        sock, server = self._sock, self._server
        if sock is None or server is None:
            return
        loop = asyncio.get_running_loop()
        for _ in range(ACCEPT_BATCH):
            if self._open >= self._max_connections:
                # At the cap: leave the rest in the kernel's queue until one closes.
                self._unwatch()
                self.accept_pauses += 1
                ACCEPT_PAUSES.labels("max_connections").inc()
                return
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._accept_failed(loop, exc)
                return
            self.accepted += 1
            self._open += 1
            conn.setblocking(False)
            self._connect(loop, server, conn)

    def _connect(
        self, loop: asyncio.AbstractEventLoop, server: HttpServer, conn: socket.socket
    ) -> None:
        protocol = _Connection(server, self._closed)
        task = loop.create_task(loop.connect_accepted_socket(lambda: protocol, conn))
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._connected(done, protocol, conn))

    def _connected(
        self, task: asyncio.Task[Any], protocol: _Connection, conn: socket.socket
    ) -> None:
        self._tasks.discard(task)
        failed = task.cancelled() or task.exception() is not None
        if failed and not task.cancelled():
            self.accept_errors += 1
            log.warning("could not set up an accepted connection: %s", task.exception())
        if failed and not protocol.made:  # no connection_lost will report this one
            conn.close()
            self._closed()

    def _closed(self) -> None:
        self._open -= 1
        if self._open < self._max_connections and not self._backing_off:
            self._watch()

    def _accept_failed(self, loop: asyncio.AbstractEventLoop, exc: OSError) -> None:
        self.accept_errors += 1
        if exc.errno in _FD_EXHAUSTED:
            skipped = self._log_throttle.should_log(loop.time())
            if skipped is not None:
                log.error(
                    "accept failed (%s); pausing accepts for %.1f s at a time%s",
                    exc,
                    ACCEPT_BACKOFF_S,
                    f" ({skipped} more failures since the last message)" if skipped else "",
                )
            self._unwatch()
            self._backing_off = True
            self.accept_pauses += 1
            ACCEPT_PAUSES.labels("fd_exhausted").inc()
            loop.call_later(ACCEPT_BACKOFF_S, self._resume_accepting)
        # Other errors (ECONNABORTED: the client gave up in the queue) concern one
        # connection; the next readiness goes on with the rest.

    def _resume_accepting(self) -> None:
        self._backing_off = False
        if self._open < self._max_connections:
            self._watch()

    async def stop_accepting(self) -> None:
        self._unwatch()
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    async def stop(self) -> None:
        await self.stop_accepting()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def stats(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "listening": self._sock is not None,
            "accepted": self.accepted,
            "accept_errors": self.accept_errors,
            "accept_pauses": self.accept_pauses,
            "max_connections": self._max_connections,
        }
