"""Outbound client cost: hookrouter's HttpTransport versus aiohttp, on this machine.

Usage: python -m bench.delivery.client_compare [--posts 20000] [--concurrency 64]

A sink server (uvloop + httptools, answers 204) runs in a child process so the
client's CPU (``time.process_time`` of this process) is the client alone. Each
client sends the same 1 KiB JSON POSTs over keep-alive with a fixed number in
flight. Prints posts/s and client CPU microseconds per post.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import time
from collections.abc import Awaitable, Callable

import httptools
import uvloop

BODY = b'{"type":"bench.event","data":"' + b"x" * 990 + b'"}'
REPLY = b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"


class _Sink(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport
        self.p = httptools.HttpRequestParser(self)

    def data_received(self, data: bytes) -> None:
        self.p.feed_data(data)

    def on_message_complete(self) -> None:
        self.t.write(REPLY)  # type: ignore[attr-defined]


def _serve(sock: socket.socket) -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Sink, sock=sock)
        await server.serve_forever()

    uvloop.run(main())


async def _drive(
    post: Callable[[], Awaitable[int]], posts: int, concurrency: int
) -> tuple[float, float]:
    for _ in range(200):  # warm up: connections, caches
        await post()
    remaining = posts

    async def lane() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            status = await post()
            assert status == 204, status

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return time.perf_counter() - wall, time.process_time() - cpu


async def bench_hookrouter(port: int, posts: int, concurrency: int) -> tuple[float, float]:
    from hookrouter.delivery.transport import HttpTransport, Origin

    transport = HttpTransport(max_connections_per_origin=concurrency)
    origin = Origin("http", "127.0.0.1", port, "127.0.0.1")
    headers = [("content-type", "application/json")]

    async def post() -> int:
        resp = await transport.request(origin, "POST", "/", headers, BODY, total_timeout=10)
        return resp.status

    try:
        return await _drive(post, posts, concurrency)
    finally:
        await transport.aclose()


async def bench_aiohttp(port: int, posts: int, concurrency: int) -> tuple[float, float]:
    import aiohttp

    url = f"http://127.0.0.1:{port}/"
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def post() -> int:
            async with session.post(
                url, data=BODY, headers={"content-type": "application/json"}
            ) as resp:
                await resp.read()
                return resp.status

        return await _drive(post, posts, concurrency)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--posts", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    server = multiprocessing.get_context("fork").Process(target=_serve, args=(sock,), daemon=True)
    server.start()
    try:
        for name, fn in (
            ("hookrouter HttpTransport", bench_hookrouter),
            ("aiohttp", bench_aiohttp),
        ):
            wall, cpu = uvloop.run(fn(port, args.posts, args.concurrency))
            print(
                f"{name:26s} {args.posts / wall:9,.0f} posts/s  "
                f"{cpu / args.posts * 1e6:6.1f} us client CPU/post"
            )
    finally:
        server.terminate()
        server.join()


if __name__ == "__main__":
    main()
