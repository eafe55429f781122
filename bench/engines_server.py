"""A bare server per ingress engine, for measuring the transport alone.

``python -m bench.engines_server ENGINE MODE [--notify eventfd|ring|thread]``

* MODE ``session``: the shared HttpServer + session layer with an app that
  answers ``200 {}`` at once (the "bare path": parse, route, 2xx), on the
  ``asyncio`` (uvloop), ``epoll`` or ``io_uring`` engine.
* MODE ``raw``: the C transport alone with a fixed response per request
  (requests end at a blank line; wrk's GETs), to count syscalls per request
  with no HTTP parsing in the way. ``--notify thread`` runs the engine in its
  own thread, handing each batch to the loop and taking the answers back
  (the alternative to the eventfd the issue asks to measure).

Prints ``READY <port>`` when listening; runs until SIGTERM/SIGINT, then
prints the engine stats as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import signal
import sys
import threading
from typing import Any

import uvloop

from hookrouter._native import engine as native
from hookrouter.core.http1 import Request, Response
from hookrouter.ingress.engine import create_engine
from hookrouter.ingress.server import HttpServer
from hookrouter.ingress.session import Reply

FIXED = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


class OkApp:
    def handle(self, request: Request, reply: Reply) -> None:
        reply(Response(200, b"{}"))


def _count_requests(pending: dict[int, bytes], cid: int, data: bytes) -> int:
    buf = pending.get(cid, b"") + data
    n = buf.count(b"\r\n\r\n")
    pending[cid] = buf[buf.rfind(b"\r\n\r\n") + 4 :] if n else buf
    return n


def _respond(eng: Any, events: list[Any], pending: dict[int, bytes]) -> None:
    assert native is not None
    for kind, cid, payload in events:
        if kind == native.DATA:
            for _ in range(_count_requests(pending, cid, payload)):
                eng.send(cid, FIXED)
        elif kind == native.EOF:
            eng.close(cid)
        elif kind == native.CLOSED:
            pending.pop(cid, None)


async def raw_eventfd(backend: str, port: int, notify: str, stop: asyncio.Event) -> dict[str, Any]:
    assert native is not None
    loop = asyncio.get_running_loop()
    eng = native.Engine(backend, "127.0.0.1", port, notify=notify, max_conns=8192)
    pending: dict[int, bytes] = {}

    def ready() -> None:
        _respond(eng, eng.poll(512), pending)
        eng.flush()
        if eng.has_pending():
            loop.call_soon(ready)

    loop.add_reader(eng.fileno(), ready)
    print("READY", eng.sockname()[1], flush=True)
    await stop.wait()
    loop.remove_reader(eng.fileno())
    stats: dict[str, Any] = eng.stats()
    eng.shutdown()
    return stats


async def raw_thread(backend: str, port: int, stop: asyncio.Event) -> dict[str, Any]:
    """Engine thread polls (blocking, GIL released) and hands batches to the loop."""
    assert native is not None
    loop = asyncio.get_running_loop()
    answers: queue.SimpleQueue[list[tuple[int, int, Any]] | None] = queue.SimpleQueue()
    result: dict[str, Any] = {}
    started = threading.Event()
    pending: dict[int, bytes] = {}

    class Recorder:  # the loop side records sends; the engine thread performs them
        def __init__(self) -> None:
            self.ops: list[tuple[int, int, Any]] = []

        def send(self, cid: int, data: bytes) -> None:
            self.ops.append((0, cid, data))

        def close(self, cid: int) -> None:
            self.ops.append((1, cid, None))

    def on_batch(events: list[Any]) -> None:
        rec = Recorder()
        _respond(rec, events, pending)
        answers.put(rec.ops)

    def engine_thread() -> None:
        assert native is not None
        eng = native.Engine(backend, "127.0.0.1", port, max_conns=8192)
        result["port"] = eng.sockname()[1]
        started.set()
        while not stop.is_set():
            events = eng.poll(512, -1, 100)
            if not events:
                continue
            loop.call_soon_threadsafe(on_batch, events)
            ops = answers.get()
            for op, cid, data in ops or ():
                if op == 0:
                    eng.send(cid, data)
                else:
                    eng.close(cid)
            eng.flush()
        result["stats"] = eng.stats()
        eng.shutdown()

    t = threading.Thread(target=engine_thread, daemon=True)
    t.start()
    started.wait()
    print("READY", result["port"], flush=True)
    await stop.wait()
    t.join(5)
    return dict(result.get("stats", {}))


async def session(engine_name: str, port: int, notify: str, stop: asyncio.Event) -> dict[str, Any]:
    server = HttpServer(OkApp())
    options: dict[str, Any] = {"notify": notify} if engine_name == "io_uring" else {}
    engine = create_engine(engine_name, **options)
    _host, bound = await engine.start(server, "127.0.0.1", port)
    server.start()
    print("READY", bound, flush=True)
    await stop.wait()
    stats = engine.stats()
    await engine.stop()
    server.stop()
    return stats


async def main(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.mode == "session":
        stats = await session(args.engine, args.port, args.notify, stop)
    elif args.notify == "thread":
        stats = await raw_thread(args.engine, args.port, stop)
    else:
        stats = await raw_eventfd(args.engine, args.port, args.notify, stop)
    print(json.dumps(stats, default=str), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", choices=["asyncio", "epoll", "io_uring"])
    parser.add_argument("mode", choices=["session", "raw"])
    parser.add_argument("--notify", default="eventfd", choices=["eventfd", "ring", "thread"])
    parser.add_argument("--port", type=int, default=0)
    uvloop.install()
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
