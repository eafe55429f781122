"""Tenant endpoints for the delivery scenarios: a recording sink and a hanging one.

``python -m bench.reference.endpoints --port P --mode sink --log FILE``
answers every request 200 at once and appends ``<unix time> <event id>`` per
request to FILE (the first ``evt_b...`` id found in the body, i.e. the
provider event id the harness signed; ``-`` when none), flushed every
200 ms and on SIGTERM. The isolation scenario joins these lines with the
load generator's due times to get ingest-to-delivery latency per event.

``--mode hang`` accepts connections, reads whatever is sent and never
answers: the "endpoint that hangs" of the isolation scenario.

uvloop + httptools: one process answers tens of thousands of requests per
second, far above the rates these scenarios offer, so the sink is never the
bottleneck being measured.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import time
from pathlib import Path
from typing import IO, cast

import httptools

_ID = re.compile(rb"evt_b[0-9a-f]{16}[0-9]{12}")  # bench.signing.event_id
_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


class _Sink(asyncio.Protocol):
    def __init__(self, out: list[str]) -> None:
        self.out = out
        self.parser = httptools.HttpRequestParser(self)
        self.body: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        match = _ID.search(b"".join(self.body))
        self.body.clear()
        self.out.append(f"{time.time():.6f} {match.group().decode() if match else '-'}\n")
        assert self.transport is not None
        self.transport.write(_OK)


class _Hang(asyncio.Protocol):
    def data_received(self, data: bytes) -> None:
        pass  # read and never answer


async def serve(port: int, mode: str, log: Path | None) -> None:
    loop = asyncio.get_running_loop()
    out: list[str] = []
    fh: IO[str] | None = log.open("a") if log else None
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)

    def factory() -> asyncio.Protocol:
        return _Sink(out) if mode == "sink" else _Hang()

    server = await loop.create_server(factory, "127.0.0.1", port, backlog=4096)

    def flush() -> None:
        if fh is not None and out:
            fh.write("".join(out))
            fh.flush()
        out.clear()

    async def flusher() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.2)
            flush()

    task = loop.create_task(flusher())
    await stop.wait()
    task.cancel()
    server.close()
    flush()
    if fh is not None:
        fh.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.reference.endpoints")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=("sink", "hang"), default="sink")
    ap.add_argument("--log", type=Path)
    args = ap.parse_args(argv)
    try:
        import uvloop

        uvloop.run(serve(args.port, args.mode, args.log))
    except ImportError:  # pragma: no cover - uvloop is a router dependency
        asyncio.run(serve(args.port, args.mode, args.log))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def read_log(path: Path) -> dict[str, float]:
    """``{event id: first arrival time}`` from a sink log (duplicates keep the first)."""
    arrivals: dict[str, float] = {}
    try:
        text = path.read_text()
    except FileNotFoundError:
        return arrivals
    for line in text.splitlines():
        stamp, _, eid = line.partition(" ")
        if eid and eid != "-" and eid not in arrivals:
            arrivals[eid] = float(stamp)
    return arrivals
