"""The portable ingress engine: asyncio (uvloop when installed) streams.

A thin shell: an ``asyncio.Protocol`` per connection forwards bytes to an
``HttpSession`` and implements ``ByteSink`` over the transport. Everything
HTTP lives in the shared session and sans-IO core.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, cast

from hookrouter.errors import EngineUnavailable
from hookrouter.ingress.server import HttpServer
from hookrouter.ingress.session import HttpSession


class _Connection(asyncio.Protocol):
    __slots__ = ("_server", "session", "transport")

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self.transport: asyncio.Transport | None = None
        self.session: HttpSession | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
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


class AsyncioEngine:
    """Listens with ``loop.create_server``; one protocol object per connection."""

    name = "asyncio"

    def __init__(self, *, backlog: int = 1024) -> None:
        self._backlog = backlog
        self._listener: asyncio.Server | None = None

    async def start(self, server: HttpServer, host: str, port: int) -> tuple[str, int]:
        """Start listening; returns the bound address (port 0 picks a free one)."""
        loop = asyncio.get_running_loop()
        try:
            self._listener = await loop.create_server(
                lambda: _Connection(server),
                host,
                port,
                backlog=self._backlog,
                reuse_address=True,
            )
        except OSError as exc:
            raise EngineUnavailable(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}", reason="listen_failed"
            ) from exc
        bound = self._listener.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

    async def stop_accepting(self) -> None:
        if self._listener is not None:
            self._listener.close()

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            await self._listener.wait_closed()
            self._listener = None

    def stats(self) -> dict[str, Any]:
        return {"engine": self.name, "listening": self._listener is not None}
