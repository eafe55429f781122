"""Hostile receivers against the delivery client (issue 33).

Tenants choose their endpoints, so a receiver may answer anything: endless
headers, an endless body, one byte at a time, broken framing, 1xx forever,
TLS garbage. Each attempt must end in bounded time and memory with a typed
``DeliveryError``, and a healthy endpoint beside it must keep its latency.
Every receiver here is a raw asyncio TCP server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import psutil
import pytest
from tests.support.delivery_servers import ThrowawayCA

from hookrouter.core.http1client import DEFAULT_BODY_CAP
from hookrouter.delivery.transport import HttpTransport, Origin
from hookrouter.errors import DeliveryError

from .conftest import StartReceiver

Behaviour = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
StartHostile = Callable[..., Awaitable[int]]

JSON = [("content-type", "application/json")]
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


@pytest.fixture
async def hostile() -> AsyncIterator[StartHostile]:
    servers: list[asyncio.Server] = []
    handlers: set[asyncio.Task[None]] = set()

    async def start(behaviour: Behaviour, *, read_head: bool = True) -> int:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            handlers.add(task)
            try:
                if read_head:
                    await reader.readuntil(b"\r\n\r\n")  # the request head (bodies are tiny)
                await behaviour(reader, writer)
            except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
                pass
            finally:
                writer.transport.abort()
                handlers.discard(task)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    yield start
    for server in servers:
        server.close()
    for task in list(handlers):
        task.cancel()
    await asyncio.sleep(0.05)
    for server in servers:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 1)


def origin(port: int, *, tls: bool = False) -> Origin:
    return Origin(
        "https" if tls else "http", "localhost" if tls else "127.0.0.1", port, "127.0.0.1"
    )


async def attempt(t: HttpTransport, port: int, limit: float = 5.0) -> DeliveryError:
    with pytest.raises(DeliveryError) as caught:
        await t.request(origin(port), "POST", "/hook", JSON, b"{}", total_timeout=limit)
    return caught.value


async def stream_forever(writer: asyncio.StreamWriter, head: bytes, piece: bytes) -> None:
    writer.write(head)
    while not writer.is_closing():
        writer.write(piece)
        await writer.drain()


def streaming(head: bytes, piece: bytes) -> Behaviour:
    """A receiver that answers ``head``, then ``piece`` over and over until dropped."""

    async def behave(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await stream_forever(w, head, piece)

    return behave


class PeakRss:
    """Samples this process's RSS while a hostile attempt runs."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self.base = self.peak = self._proc.memory_info().rss
        self._task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, self._proc.memory_info().rss)
            await asyncio.sleep(0.005)

    def __enter__(self) -> PeakRss:
        self._task = asyncio.get_running_loop().create_task(self._sample())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()

    @property
    def grown(self) -> int:
        return self.peak - self.base


async def test_endless_header_line_fails_fast_with_bounded_memory(hostile: StartHostile) -> None:
    port = await hostile(streaming(b"HTTP/1.1 200 OK\r\nX-Big: ", b"a" * 65536))
    t = HttpTransport()
    started = time.monotonic()
    with PeakRss() as rss:
        error = await attempt(t, port)
    took = time.monotonic() - started
    assert error.reason == "bad_response"
    assert "headers exceed" in str(error)
    assert took < 1.0, f"took {took:.2f} s (the old client waited for the deadline)"
    assert rss.grown < 16 << 20, f"grew by {rss.grown >> 20} MiB"
    await t.aclose()


async def test_endless_header_name_fails_too(hostile: StartHostile) -> None:
    port = await hostile(streaming(b"HTTP/1.1 200 OK\r\n", b"N" * 65536))
    t = HttpTransport()
    error = await attempt(t, port)
    assert (error.reason, "headers exceed" in str(error)) == ("bad_response", True)
    await t.aclose()


async def test_endless_body_is_cut_at_the_cap_and_the_connection_dropped(
    hostile: StartHostile,
) -> None:
    head = b"HTTP/1.1 500 Oops\r\ncontent-length: 10000000000\r\n\r\n"
    port = await hostile(streaming(head, b"x" * 65536))
    t = HttpTransport()
    started = time.monotonic()
    with PeakRss() as rss:
        response = await t.request(origin(port), "POST", "/hook", JSON, b"{}", total_timeout=5.0)
    assert response.status == 500 and response.truncated
    assert len(response.body) == DEFAULT_BODY_CAP
    assert time.monotonic() - started < 1.0
    assert rss.grown < 16 << 20
    assert t.stats().open_connections == 0  # closed, never drained
    await t.aclose()


async def test_close_delimited_endless_body_is_cut_too(hostile: StartHostile) -> None:
    port = await hostile(streaming(b"HTTP/1.1 200 OK\r\n\r\n", b"x" * 65536))
    t = HttpTransport()
    response = await t.request(origin(port), "POST", "/hook", JSON, b"{}", total_timeout=5.0)
    assert response.truncated and len(response.body) == DEFAULT_BODY_CAP
    await t.aclose()


async def test_informational_flood_is_a_protocol_error(hostile: StartHostile) -> None:
    port = await hostile(streaming(b"", b"HTTP/1.1 102 Processing\r\n\r\n" * 64))
    t = HttpTransport()
    started = time.monotonic()
    error = await attempt(t, port)
    assert error.reason == "bad_response" and "interim" in str(error)
    assert time.monotonic() - started < 1.0, "the old client skipped 1xx until the deadline"
    await t.aclose()


async def test_a_few_informational_responses_are_still_skipped(hostile: StartHostile) -> None:
    async def behave(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 100 Continue\r\n\r\n" * 5 + OK)
        await w.drain()
        await asyncio.sleep(0.5)

    port = await hostile(behave)
    t = HttpTransport()
    response = await t.request(origin(port), "POST", "/hook", JSON, b"{}", total_timeout=5.0)
    assert (response.status, response.body) == (200, b"ok")
    await t.aclose()


async def test_slowloris_response_ends_at_the_deadline(hostile: StartHostile) -> None:
    async def behave(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        for byte in OK[:-1]:
            w.write(bytes([byte]))
            await w.drain()
            await asyncio.sleep(0.05)

    port = await hostile(behave)
    t = HttpTransport()
    started = time.monotonic()
    error = await attempt(t, port, limit=0.5)
    assert error.reason == "timeout"
    assert time.monotonic() - started < 1.0
    await t.aclose()


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + b"f" * 40 + b"\r\n",
            id="huge-chunk-size",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok",
            id="two-lengths",
        ),
        pytest.param(b"HTTP/1.1 2000 OK\r\n\r\n", id="bad-status"),
        pytest.param(b"\x16\x03\x01\x02\x00garbage\r\n\r\n", id="not-http"),
    ],
)
async def test_wrong_framing_is_a_protocol_error(hostile: StartHostile, answer: bytes) -> None:
    async def behave(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(answer)
        await w.drain()
        await asyncio.sleep(1)

    port = await hostile(behave)
    t = HttpTransport()
    error = await attempt(t, port)
    assert error.reason == "bad_response", error
    await t.aclose()


async def test_tls_garbage_is_a_tls_error(hostile: StartHostile, test_ca: ThrowawayCA) -> None:
    port = await hostile(streaming(b"", b"\x15\x03\x03garbage" * 4096), read_head=False)
    t = HttpTransport(ssl_context=test_ca.client_context())
    with pytest.raises(DeliveryError) as caught:
        await t.request(origin(port, tls=True), "POST", "/", JSON, b"{}", total_timeout=3.0)
    assert caught.value.reason in {"tls_error", "connect_error"}, caught.value
    await t.aclose()


@pytest.mark.slow
async def test_a_hostile_receiver_does_not_slow_a_healthy_one(
    hostile: StartHostile, receivers: StartReceiver
) -> None:
    """Other tenants' deliveries share the loop: their p99 must not see the flood."""
    port = await hostile(streaming(b"HTTP/1.1 200 OK\r\nX-Big: ", b"a" * 65536))
    healthy = await receivers()
    t = HttpTransport()

    async def one_healthy() -> float:
        started = time.perf_counter()
        response = await t.request(
            origin(healthy.port), "POST", "/hook", JSON, b"{}", total_timeout=5.0
        )
        assert response.status == 200
        return time.perf_counter() - started

    async def floods() -> None:
        for _ in range(10):
            await asyncio.gather(*(attempt(t, port) for _ in range(4)))

    flood = asyncio.get_running_loop().create_task(floods())
    latencies = []
    while not flood.done():
        latencies += await asyncio.gather(*(one_healthy() for _ in range(8)))
    await flood
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    assert len(latencies) >= 40
    # Without the head cap the healthy p99 was the attempt deadline (2.3 s):
    # the bound sits well below that and above a shared CI host's odd stall
    # (one batch of 8 at 194 ms once made this test fail at 0.1 s).
    assert p99 < 0.5, f"healthy p99 {p99 * 1000:.0f} ms beside a hostile receiver"
    await t.aclose()
