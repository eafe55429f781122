"""A webhook receiver that logs every attempt: which router sent it, when it began and ended.

Which router: the sink looks the peer's address up in each router's
``/proc/<pid>/net/tcp`` (its own network namespace) and finds the router
process holding that socket (``/proc/<pid>/fd``), once per connection. On a
starved machine the sink may accept a connection only after the router gave
up on it and closed its end: that attempt's node is ``UNKNOWN``. Time spans
are the sink's own monotonic clock, so attempts from different routers
compare on one clock. The reply is chosen per attempt by ``answer(node,
path)`` (status, delay).
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import httptools


@dataclass(slots=True)
class Attempt:
    node: str
    tenant: str
    event_id: str
    path: str
    began: float
    ended: float = 0.0
    status: int = 0
    answered: bool = False  # the reply went out on a connection the router still had open

    @property
    def succeeded(self) -> bool:
        """The router was told 200 (a reply to a connection it had abandoned tells it nothing)."""
        return self.status == 200 and self.answered

    @property
    def delivery(self) -> tuple[str, str]:
        return (self.event_id, self.path)


Answer = Callable[[str, str], tuple[int, float]]
UNKNOWN = "?"  # the router had closed its end before the sink looked


def _always_ok(_node: str, _path: str) -> tuple[int, float]:
    return 200, 0.0


def _sockets_by_inode(pid: int) -> dict[str, tuple[str, int]]:
    """Inode -> local (address, port) of every established IPv4 TCP socket in ``pid``'s netns."""
    found = {}
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[9] != "0":  # TIME_WAIT has no inode
            address, port = fields[1].split(":")
            host = socket.inet_ntoa(bytes.fromhex(address)[::-1])
            found[fields[9]] = (host, int(port, 16))
    return found


def _node_ports(pids: dict[int, str]) -> dict[tuple[str, int], str]:
    """Local (address, port) -> router name, for every socket the routers hold now.

    Each router's sockets are looked up in its own network namespace
    (``/proc/<pid>/net/tcp``): a router may run in a namespace of its own.
    """
    out = {}
    for pid, name in pids.items():
        fd_dir = f"/proc/{pid}/fd"
        try:
            sockets = _sockets_by_inode(pid)
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                local = sockets.get(link[8:-1])
                if local is not None:
                    out[local] = name
    return out


class _Proto(asyncio.Protocol):
    def __init__(self, sink: AttemptSink) -> None:
        self.sink = sink
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.node = UNKNOWN
        self.url = b""
        self.event_id = ""
        self.began = 0.0
        self.waiting: Attempt | None = None  # received, not yet answered

    def connection_lost(self, exc: Exception | None) -> None:
        self.sink.transports.discard(self.transport)
        # The router gave up on it (its deadline): no longer in flight for the
        # router, so no longer counted as concurrent here either.
        if self.waiting is not None:
            self._end(self.waiting)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.sink.transports.add(self.transport)
        host, port = transport.get_extra_info("peername")[:2]
        self.node = self.sink.node_of(host, port)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_message_begin(self) -> None:
        self.url, self.event_id, self.began = b"", "", time.monotonic()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"webhook-id":
            self.event_id = value.decode()

    def on_message_complete(self) -> None:
        path = self.url.decode()
        tenant = path.strip("/").split("/")[-1]
        attempt = Attempt(self.node, tenant, self.event_id, path, self.began)
        status, delay = self.sink.answer(self.node, path)
        attempt.status = status
        sink = self.sink
        with sink.lock:
            sink.attempts.append(attempt)
            sink.open_per_tenant[tenant] += 1
            sink.peak_per_tenant[tenant] = max(
                sink.peak_per_tenant[tenant], sink.open_per_tenant[tenant]
            )
        self.waiting = attempt
        if delay > 0:
            asyncio.get_running_loop().call_later(delay, self._reply, attempt)
        else:
            self._reply(attempt)

    def _end(self, attempt: Attempt) -> bool:
        """Count the attempt out once; False if it already was."""
        if attempt.ended:
            return False
        attempt.ended = time.monotonic()
        self.waiting = None
        with self.sink.lock:
            self.sink.open_per_tenant[attempt.tenant] -= 1
        return True

    def _reply(self, attempt: Attempt) -> None:
        if not self._end(attempt):
            return  # the router closed the connection before the answer
        if self.transport is not None and not self.transport.is_closing():
            attempt.answered = True
            self.transport.write(
                f"HTTP/1.1 {attempt.status} X\r\ncontent-length: 2\r\n\r\nok".encode()
            )


class AttemptSink:
    """The receiver on its own thread (``with AttemptSink() as sink``)."""

    def __init__(self, answer: Answer = _always_ok, host: str = "127.0.0.1") -> None:
        self.answer = answer
        self.host = host
        self.pids: dict[int, str] = {}  # router pid -> node name (set as routers start)
        self._ports: dict[tuple[str, int], str] = {}
        self.attempts: list[Attempt] = []
        self.open_per_tenant: Counter[str] = Counter()
        self.peak_per_tenant: Counter[str] = Counter()
        self.lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        # Open connections, closed at exit: a router cut off by a test never
        # closes its end, and Python before 3.13 has no Server.close_clients().
        self.transports: set[asyncio.Transport | None] = set()
        self.port = 0

    def __enter__(self) -> AttemptSink:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _start(self) -> asyncio.Server:
        return await asyncio.get_running_loop().create_server(lambda: _Proto(self), self.host, 0)

    def __exit__(self, *exc: object) -> None:
        server = self._server
        if server is not None:
            asyncio.run_coroutine_threadsafe(self._close(server), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _close(self, server: asyncio.Server) -> None:
        server.close()
        for transport in list(self.transports):
            if transport is not None:
                transport.abort()
        await server.wait_closed()
        await asyncio.sleep(0)  # let the aborted transports run connection_lost

    def node_of(self, host: str, port: int) -> str:
        """The router holding the socket at ``host:port`` (the map is rebuilt on a miss)."""
        name = self._ports.get((host, port))
        if name is None:
            self._ports = _node_ports(dict(self.pids))
            name = self._ports.get((host, port), UNKNOWN)
        return name

    def url(self, tenant: str) -> str:
        return f"http://{self.host}:{self.port}/t/{tenant}"

    def snapshot(self) -> list[Attempt]:
        with self.lock:
            return list(self.attempts)

    def delivered(self) -> set[str]:
        """Event ids answered 200 at least once."""
        return {a.event_id for a in self.snapshot() if a.succeeded}


def overlaps(attempts: list[Attempt]) -> list[tuple[Attempt, Attempt]]:
    """Pairs of attempts of one delivery by two nodes whose time spans overlap."""
    per: dict[tuple[str, str], list[Attempt]] = {}
    for a in attempts:
        per.setdefault(a.delivery, []).append(a)
    found = []
    for group in per.values():
        group.sort(key=lambda a: a.began)
        for i, a in enumerate(group):
            a_end = a.ended or float("inf")
            for b in group[i + 1 :]:
                if b.began >= a_end:
                    break
                if b.node != a.node:
                    found.append((a, b))
    return found


def attempted_after_success(attempts: list[Attempt]) -> list[Attempt]:
    """Attempts that began after their delivery had been answered 200."""
    first_ok: dict[tuple[str, str], float] = {}
    for a in attempts:
        if a.succeeded:
            first_ok[a.delivery] = min(first_ok.get(a.delivery, a.ended), a.ended)
    return [a for a in attempts if a.delivery in first_ok and a.began > first_ok[a.delivery]]
