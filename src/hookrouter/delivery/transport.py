"""Outbound HTTP transport: keep-alive pools per origin over asyncio Protocols.

Why a minimal client instead of aiohttp
---------------------------------------
aiohttp would spend about the whole per-event CPU budget of the delivery
target on the POST alone; this transport uses a fraction of it (the
comparison, ``python -m bench.delivery.client_compare``, is in
docs/performance.md, "Outbound HTTP client"). It reuses the sans-IO
parser/serialiser in ``core/http1client.py`` and keeps only what a webhook sender needs: POST,
keep-alive pools, TLS with verification, deadlines. (pycurl would add a C
dependency and its own event integration for no gain over this.)

Behaviour
---------
* Origin = (scheme, host, port, resolved address). The caller resolves and
  SSRF-checks the host first (``delivery/resolver.py``); we connect to that
  exact address and send the name in Host and TLS SNI, so there is no second
  DNS lookup to rebind.
* TLS verifies certificates (``ssl.create_default_context()``); a failure is
  ``DeliveryError(reason="tls_verify_failed")`` naming the cause.
* Each attempt has a connect timeout and a total deadline (connect + send +
  response); a timed-out connection is aborted, never reused.
* Redirects are not followed: a 3xx is just a status.
* Pools: at most ``max_connections_per_origin`` connections per origin;
  callers beyond that wait (within their deadline) for one to free up.
* Across origins, at most ``max_idle`` connections are kept idle (the
  router passes ``[delivery] workers``): past it, the one idle longest is
  closed, whatever its origin. With at most ``workers`` in flight, the
  delivery sockets stay under twice that, which is what the ingress cap's
  fd budget leaves for them (``config/server.py``). Endpoints are written
  by tenants, so a platform whose customers each run their own receiver
  would otherwise hold an idle socket per recently served host and run
  out of descriptors, for the ingest port and the store too. Idle rather
  than open connections are capped so that a saturated pool spread over
  a few hosts still reuses its connections.
* Stale keep-alive connections: a pooled connection the server closed is
  noticed (EOF arrives while idle) and skipped; one idle longer than
  ``idle_timeout`` (1.5 s, under gunicorn's 2 s keep-alive default, the
  shortest common server default) is closed instead of reused, because the
  server may be closing it at that very moment. The request is retried on a
  fresh connection only in those cases, where it was certainly not sent.
  Idle connections are also held in one list in the order they went idle,
  so the periodic sweep looks only at those past their time, not at every
  origin ever served.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, cast

from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.core.http1client import (
    DEFAULT_BODY_CAP,
    HttpResponse,
)
from hookrouter.delivery.connection import Conn, Done, Pool, RequestHandle
from hookrouter.errors import DeliveryError

DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_MAX_PER_ORIGIN: Final = 64
DEFAULT_MAX_IDLE: Final = 64
DEFAULT_IDLE_TIMEOUT: Final = 1.5


# Not frozen, with __init__ written out: a frozen dataclass's generated __init__
# is interpreted under mypyc and sets each field through object.__setattr__;
# an origin is built on each endpoint's first attempt. Treat it as immutable:
# it is a key of the connection pools.
@dataclass(slots=True)
class Origin:
    """Where to connect: the name for Host/SNI and the checked address to dial."""

    scheme: str  # "http" | "https"
    host: str
    port: int
    address: str

    def __init__(self, scheme: str, host: str, port: int, address: str) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.address = address

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        name = f"[{self.host}]" if ":" in self.host else self.host
        return name if self.port == default else f"{name}:{self.port}"

    # Written out, so that they are compiled: the ones @dataclass generates are
    # interpreted, and the pool lookup hashes an origin on every delivery.
    def __hash__(self) -> int:
        return hash(self._fields())

    def __eq__(self, other: object) -> bool:
        return self._fields() == other._fields() if isinstance(other, Origin) else NotImplemented

    def _fields(self) -> tuple[str, str, int, str]:
        return (self.scheme, self.host, self.port, self.address)


_Request = tuple[str, str, Origin, Sequence[tuple[str, str]], bytes]
"""(method, target, origin, headers, body)"""


@dataclass(frozen=True, slots=True)
class TransportStats:
    origins: int
    open_connections: int
    idle_connections: int
    connections_opened: int
    requests: int
    reused: int
    stale_skipped: int
    waiting: int
    evicted: int  # idle connections closed to stay within max_idle


class HttpTransport:
    """Shared outbound client for all tenants. One instance per worker loop."""

    def __init__(
        self,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_connections_per_origin: int = DEFAULT_MAX_PER_ORIGIN,
        max_idle: int = DEFAULT_MAX_IDLE,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        body_cap: int = DEFAULT_BODY_CAP,
        ssl_context: ssl.SSLContext | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.max_per_origin = max_connections_per_origin
        self.max_idle = max(1, max_idle)
        self.idle_timeout = idle_timeout
        self.body_cap = body_cap
        self.ssl_context = ssl_context or ssl.create_default_context()
        self._clock = clock
        self._pools: dict[Origin, Pool] = {}
        self._idle_order: OrderedDict[Conn, Pool] = OrderedDict()  # longest idle first
        self._emptied: set[Pool] = set()  # pools left with no connection: swept
        self._open = 0  # connections open or being opened, all origins
        self._opened = self._requests = self._reused = self._stale = self._evicted = 0
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def running_loop(self) -> asyncio.AbstractEventLoop:
        """The worker loop, looked up once: ``get_running_loop`` costs a getpid each call."""
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def start(
        self,
        origin: Origin,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        *,
        total_timeout: float,
        on_done: Done,
    ) -> RequestHandle:
        """Start one request; ``on_done(response, error)`` is called exactly once.

        The hot path: with an idle pooled connection the request is written
        at once, with no task and no coroutine; only a connect (or a wait for
        a pool slot) runs in a task. ``total_timeout`` bounds the whole
        attempt: waiting for a connection, connecting, sending, reading.
        """
        loop = self.running_loop()
        handle = RequestHandle()
        if self._closed:
            error = DeliveryError("transport is closed", reason="shutdown")
            loop.call_soon(on_done, None, error)
            return handle
        deadline = loop.time() + total_timeout
        pool = self._pools.get(origin)
        if pool is None:
            pool = self._pools[origin] = Pool(origin.host_header, origin)
            self._emptied.add(pool)  # dropped by the sweep if it never gets a connection
        conn = self._idle(pool)
        if conn is not None:
            request = (method, target, origin, headers, body)
            self._send(pool, conn, handle, request, deadline=deadline, on_done=on_done)
            return handle
        task = loop.create_task(
            self._connect_then_send(
                pool, handle, (method, target, origin, headers, body), deadline, on_done
            )
        )
        handle.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return handle

    async def request(
        self,
        origin: Origin,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        *,
        total_timeout: float,
    ) -> HttpResponse:
        """Coroutine flavour of :meth:`start`: the response, or raises ``DeliveryError``."""
        future: asyncio.Future[HttpResponse] = asyncio.get_running_loop().create_future()

        def done(response: HttpResponse | None, error: DeliveryError | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                assert response is not None
                future.set_result(response)

        handle = self.start(
            origin, method, target, headers, body, total_timeout=total_timeout, on_done=done
        )
        try:
            return await future
        except asyncio.CancelledError:
            handle.cancel()  # our caller gave up: the connection is unusable
            raise

    def _send(
        self,
        pool: Pool,
        conn: Conn,
        handle: RequestHandle,
        request: _Request,
        *,
        deadline: float,
        on_done: Done,
    ) -> None:
        method, target, _, headers, body = request
        loop = self.running_loop()
        self._requests += 1
        try:
            data = conn.conn.send_request(method, target, pool.host_header, headers, body)
        except ValueError as exc:
            self._release(pool, conn)
            loop.call_soon(on_done, None, DeliveryError(str(exc), reason="bad_request"))
            return

        def finished(response: HttpResponse | None, error: DeliveryError | None) -> None:
            conn.unwatch()
            self._release(pool, conn)
            if not handle.cancelled:
                on_done(response, error)

        handle.conn = conn
        conn.on_done = finished
        conn.watch(loop, deadline)
        assert conn.transport is not None
        conn.transport.write(data)

    async def _connect_then_send(
        self,
        pool: Pool,
        handle: RequestHandle,
        request: _Request,
        deadline: float,
        on_done: Done,
    ) -> None:
        try:
            conn = await self._acquire(request[2], pool, deadline)
        except DeliveryError as exc:
            on_done(None, exc)
            return
        handle.task = None
        if self.running_loop().time() >= deadline:
            # The connection came after the deadline (the process was paused,
            # or the loop stalled): the attempt is over, and in cluster mode
            # its lease may be another node's by now. Nothing is written.
            self._release(pool, conn)
            error = DeliveryError(
                "the deadline passed before the request was sent", reason="timeout"
            )
            on_done(None, error)
            return
        self._send(pool, conn, handle, request, deadline=deadline, on_done=on_done)

    def _idle(self, pool: Pool) -> Conn | None:
        """A reusable pooled connection, closing stale ones on the way (see docstring)."""
        now = self._clock.monotonic()
        while pool.idle:
            conn = pool.idle.pop()
            del self._idle_order[conn]
            if conn.reusable and now - conn.idle_since < self.idle_timeout:
                self._reused += 1
                return conn
            self._stale += 1
            self._discard(pool, conn)
        return None

    def _discard(self, pool: Pool, conn: Conn) -> None:
        """Close a connection that is neither idle nor in use any more, and count it gone."""
        conn.close()
        self._gone(pool)

    def _gone(self, pool: Pool) -> None:
        """One connection of ``pool`` fewer (closed, or its connect failed)."""
        pool.open -= 1
        self._open -= 1
        if pool.open == 0:
            self._emptied.add(pool)

    def _close_idle(self, conn: Conn, pool: Pool) -> None:
        """Close an idle connection already taken out of the idle order."""
        pool.idle.remove(conn)
        self._discard(pool, conn)

    async def _acquire(self, origin: Origin, pool: Pool, deadline: float) -> Conn:
        while True:
            conn = self._idle(pool)
            if conn is not None:
                return conn
            if pool.open < self.max_per_origin:
                pool.open += 1
                self._open += 1
                try:
                    return await self._connect(origin, deadline)
                except BaseException:
                    self._gone(pool)
                    self._wake(pool)
                    raise
            await self._wait_for_slot(pool, deadline)

    async def _wait_for_slot(self, pool: Pool, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        slot: asyncio.Future[None] = loop.create_future()
        pool.waiters.append(slot)
        timer = loop.call_at(deadline, _expire_slot, slot)
        try:
            await slot
        except BaseException:
            # Woken and then cancelled or timed out in the same turn: pass the
            # wake-up on, or the next waiter would sleep until its deadline.
            if slot.done() and not slot.cancelled() and slot.exception() is None:
                self._wake(pool)
            raise
        finally:
            timer.cancel()
            with contextlib.suppress(ValueError):
                pool.waiters.remove(slot)

    def _wake(self, pool: Pool) -> None:
        while pool.waiters:
            slot = pool.waiters.popleft()
            if not slot.done():
                slot.set_result(None)
                return

    def _release(self, pool: Pool, conn: Conn) -> None:
        if conn.reusable and not self._closed:
            conn.idle_since = self._clock.monotonic()
            pool.idle.append(conn)
            order = self._idle_order
            order[conn] = pool
            if len(order) > self.max_idle:
                self._evicted += 1
                self._close_idle(*order.popitem(last=False))
        else:
            self._discard(pool, conn)
        self._wake(pool)

    async def _connect(self, origin: Origin, deadline: float) -> Conn:
        loop = asyncio.get_running_loop()
        budget = min(self.connect_timeout, deadline - loop.time())
        tls = origin.scheme == "https"
        body_cap = self.body_cap
        try:
            async with asyncio.timeout(max(budget, 0.0)):
                transport, conn = await loop.create_connection(
                    lambda: Conn(body_cap),
                    host=origin.address,
                    port=origin.port,
                    ssl=self.ssl_context if tls else None,
                    server_hostname=origin.host if tls else None,
                )
        except TimeoutError as exc:
            raise DeliveryError(
                f"connect to {origin.host} ({origin.address}:{origin.port}) timed out",
                reason="connect_timeout",
            ) from exc
        except ssl.SSLCertVerificationError as exc:
            raise DeliveryError(
                f"TLS certificate of {origin.host} rejected: {exc.verify_message}",
                reason="tls_verify_failed",
            ) from exc
        except ssl.SSLError as exc:
            raise DeliveryError(f"TLS error with {origin.host}: {exc}", reason="tls_error") from exc
        except ConnectionRefusedError as exc:
            raise DeliveryError(
                f"connection to {origin.address}:{origin.port} refused", reason="connect_refused"
            ) from exc
        except OSError as exc:
            raise DeliveryError(
                f"cannot connect to {origin.address}:{origin.port}: {exc}", reason="connect_error"
            ) from exc
        conn.transport = transport
        self._opened += 1
        return conn

    def sweep(self) -> int:
        """Close idle connections past ``idle_timeout``; returns how many (call on a timer).

        Looks only at the connections past their time and the pools emptied
        since the last sweep: its cost does not grow with the origins held.
        """
        now = self._clock.monotonic()
        order = self._idle_order
        closed = 0
        while order:
            conn, pool = next(iter(order.items()))
            if now - conn.idle_since < self.idle_timeout:
                break
            del order[conn]
            self._close_idle(conn, pool)
            closed += 1
        pools = self._pools
        for pool in self._emptied:
            origin = cast(Origin, pool.key)
            if pool.open == 0 and not pool.waiters and pools.get(origin) is pool:
                del pools[origin]
        self._emptied.clear()
        return closed

    async def aclose(self) -> None:
        """Close every idle connection; in-flight ones close as their requests end."""
        self._closed = True
        order = self._idle_order
        while order:
            self._close_idle(*order.popitem(last=False))
        await asyncio.sleep(0)  # let the transports run connection_lost

    def stats(self) -> TransportStats:
        return TransportStats(
            origins=len(self._pools),
            open_connections=self._open,
            idle_connections=len(self._idle_order),
            connections_opened=self._opened,
            requests=self._requests,
            reused=self._reused,
            stale_skipped=self._stale,
            waiting=sum(len(p.waiters) for p in self._pools.values()),
            evicted=self._evicted,
        )

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"HttpTransport(origins={s.origins}, open={s.open_connections}, "
            f"idle={s.idle_connections})"
        )


def _expire_slot(slot: asyncio.Future[None]) -> None:
    if not slot.done():
        slot.set_exception(
            DeliveryError("no connection became free before the deadline", reason="pool_timeout")
        )


__all__ = ["Done", "HttpTransport", "Origin", "RequestHandle", "TransportStats"]
