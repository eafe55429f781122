"""The engine-independent HTTP server: sessions, timeouts, graceful stop.

An ingress engine owns sockets and calls ``HttpServer.new_session(sink)`` for
each accepted connection; everything above the byte transport (parsing,
ordering, timeouts, draining) is shared, so every engine behaves the same.
Timeouts are swept once a second over all sessions instead of arming a timer
per request, which would cost more than the request itself on the hot path.
"""

from __future__ import annotations

import asyncio
import email.utils
from collections import Counter
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter as PromCounter
from prometheus_client import Gauge

from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.core.http1 import Limits
from hookrouter.ingress.session import Application, ByteSink, HttpSession, SessionHost
from hookrouter.metrics import REGISTRY

PROTOCOL_ERRORS = PromCounter(
    "hookrouter_http_protocol_errors",
    "Connections ended by a protocol error or timeout, by reason.",
    ["reason"],
    registry=REGISTRY,
)
OPEN_CONNECTIONS = Gauge(
    "hookrouter_http_connections", "Open ingress connections.", registry=REGISTRY
)
INGRESS_CONNECTIONS = Gauge(
    "hookrouter_ingress_connections",
    "Open ingress connections, against [server] max_connections.",
    registry=REGISTRY,
)
MAX_CONNECTIONS = Gauge(
    "hookrouter_ingress_max_connections", "[server] max_connections in force.", registry=REGISTRY
)
ACCEPT_PAUSES = PromCounter(
    "hookrouter_ingress_accept_paused",
    "Times accepting paused: at max_connections, or out of file descriptors.",
    ["reason"],
    registry=REGISTRY,
)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Client-side deadlines. Precedents: nginx client_header_timeout and
    client_body_timeout default to 60 s and keepalive_timeout to 75 s; webhook
    senders are machines, so headers get less time."""

    header_seconds: float = 10.0
    body_seconds: float = 30.0
    keepalive_seconds: float = 75.0


class HttpServer(SessionHost):
    """Shared state of all sessions of one listener."""

    def __init__(
        self,
        app: Application,
        *,
        limits: Limits | None = None,
        timeouts: Timeouts | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.app = app
        timeouts = timeouts or Timeouts()
        self.limits = limits or Limits()
        self.header_timeout = timeouts.header_seconds
        self.body_timeout = timeouts.body_seconds
        self.keepalive_timeout = timeouts.keepalive_seconds
        self.now = clock.monotonic
        self._clock = clock
        self.sessions: set[HttpSession] = set()
        self.draining = False
        self.date_header = b""
        self._sweeper: asyncio.TimerHandle | None = None
        self._protocol_errors: Counter[str] = Counter()
        self._accepted = 0
        self._refresh_date()

    def new_session(self, sink: ByteSink) -> HttpSession:
        session = HttpSession(self, sink)
        self.sessions.add(session)
        self._accepted += 1
        OPEN_CONNECTIONS.inc()
        INGRESS_CONNECTIONS.inc()
        return session

    def forget(self, session: HttpSession) -> None:
        if session in self.sessions:
            self.sessions.discard(session)
            OPEN_CONNECTIONS.dec()
            INGRESS_CONNECTIONS.dec()

    def count_protocol_error(self, reason: str) -> None:
        self._protocol_errors[reason] += 1
        PROTOCOL_ERRORS.labels(reason).inc()

    # -- periodic sweep ------------------------------------------------------

    def start(self) -> None:
        """Start the once-a-second sweep on the running loop."""
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(1.0, self._sweep)

    def _sweep(self) -> None:
        self._refresh_date()
        self.sweep(self.now())
        self._sweeper = asyncio.get_running_loop().call_later(1.0, self._sweep)

    def sweep(self, now: float) -> None:
        """Apply timeouts to every session as of monotonic ``now``."""
        for session in list(self.sessions):
            session.tick(now)

    def _refresh_date(self) -> None:
        self.date_header = email.utils.formatdate(self._clock.time(), usegmt=True).encode()

    # -- graceful stop ---------------------------------------------------------

    async def drain(self, grace_seconds: float) -> None:
        """Answer what is in progress with ``connection: close``, close idle ones.

        Returns when every session has closed or ``grace_seconds`` passed; then the
        rest are closed anyway (their events, if acknowledged, are durable).
        """
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_seconds
        while True:
            for session in list(self.sessions):
                session.close_if_idle()
            if not self.sessions or loop.time() >= deadline:
                break
            await asyncio.sleep(0.05)
        for session in list(self.sessions):
            session.sink.abort()

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    def stats(self) -> dict[str, Any]:
        return {
            "connections": len(self.sessions),
            "accepted": self._accepted,
            "protocol_errors": dict(self._protocol_errors),
            "draining": self.draining,
        }

    def __repr__(self) -> str:
        return f"<HttpServer connections={len(self.sessions)} draining={self.draining}>"
