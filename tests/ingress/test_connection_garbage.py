"""A closed connection is freed at once, not left in a cycle for the collector.

The llhttp parser holds its connection's callbacks, and the connection holds
the parser: left alone, every closed connection waited for a cyclic
collection, and those collections (tens of ms with a large heap) paused the
loop under load (docs/performance.md).
"""

from __future__ import annotations

import asyncio

from tests.support.cyclic_garbage import cyclic_garbage

from hookrouter.core.http1 import Request, Response
from hookrouter.ingress.asyncio_engine import AsyncioEngine
from hookrouter.ingress.server import HttpServer
from hookrouter.ingress.session import Reply

# Chunked, so llhttp parses it (the one-call C parser takes only whole
# requests with a Content-Length), which is what makes the cycle.
CHUNKED = b"POST /in HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"


class OkApp:
    def handle(self, request: Request, reply: Reply) -> None:
        reply(Response(200, b"ok", content_type="text/plain"))


async def _one_request(host: str, port: int) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(CHUNKED)
    head = await reader.readuntil(b"\r\n\r\n")
    await reader.readexactly(2)
    writer.close()
    await writer.wait_closed()
    return head


async def test_closed_connections_leave_nothing_for_the_cyclic_collector() -> None:
    server = HttpServer(OkApp())
    engine = AsyncioEngine()
    host, port = await engine.start(server, "127.0.0.1", 0)
    try:
        with cyclic_garbage() as garbage:
            heads = [await _one_request(host, port) for _ in range(20)]
            for _ in range(200):  # the server sees each close a loop turn or two later
                if not server.sessions:
                    break
                await asyncio.sleep(0.005)
        assert all(h.startswith(b"HTTP/1.1 200") for h in heads)
        assert not server.sessions
        assert garbage["ServerConnection"] == 0, garbage
        assert garbage["HttpRequestParser"] == 0, garbage
    finally:
        await engine.stop()
