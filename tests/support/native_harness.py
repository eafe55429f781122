"""Drive the C batch transport from a test: a tiny server on its own loop.

``TransportServer`` runs one ``hookrouter._native._engine.Engine`` on an
asyncio loop in a background thread (the engine is created on that thread:
io_uring rings set up with SINGLE_ISSUER accept submissions only from their
creator), so test bodies can use plain blocking sockets or their own loop.
The responder decides what to answer; no HTTP parser is involved, only a
request terminator, because these tests are about byte mechanics.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable
from typing import Any

from hookrouter._native import engine as native

REQUEST_END = b"\r\n\r\n"


class Responder:
    """Echo: every byte received goes back; EOF closes."""

    def on_data(self, srv: TransportServer, conn: int, data: bytes) -> None:
        srv.send(conn, data)

    def on_eof(self, srv: TransportServer, conn: int) -> None:
        srv.engine.close(conn)


class FixedResponder(Responder):
    """One numbered response per request (``GET ...\\r\\n\\r\\n``), in order.

    The body is ``b"<n>:"`` padded to ``body_size`` with a byte pattern, so a
    client can check order and integrity. ``close_after`` closes after that
    many responses (like ``Connection: close``).
    """

    def __init__(self, body_size: int = 16, close_after: int | None = None) -> None:
        self.body_size = body_size
        self.close_after = close_after
        self.pending: dict[int, bytes] = collections.defaultdict(bytes)
        self.served: dict[int, int] = collections.defaultdict(int)

    def on_data(self, srv: TransportServer, conn: int, data: bytes) -> None:
        buf = self.pending[conn] + data
        while (end := buf.find(REQUEST_END)) >= 0:
            buf = buf[end + len(REQUEST_END) :]
            n = self.served[conn]
            self.served[conn] = n + 1
            srv.send(conn, response_for(n, self.body_size))
            if self.close_after is not None and n + 1 >= self.close_after:
                srv.engine.close(conn)
                break
        self.pending[conn] = buf

    def on_eof(self, srv: TransportServer, conn: int) -> None:
        srv.engine.close(conn)


def body_for(n: int, size: int) -> bytes:
    head = f"{n}:".encode()
    pattern = bytes(range(97, 123)) * (size // 26 + 1)
    return (head + pattern)[: max(size, len(head))]


def response_for(n: int, size: int) -> bytes:
    body = body_for(n, size)
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


class TransportServer:
    """An Engine on a loop thread; records events; stop() tears it all down."""

    def __init__(self, backend: str, responder: Responder | None = None, **kwargs: Any) -> None:
        assert native is not None
        self.backend = backend
        self.responder = responder or Responder()
        self.kwargs = kwargs
        self.kinds: collections.Counter[int] = collections.Counter()
        self.closed: dict[int, str] = {}
        self.accepted: list[int] = []
        self.data: dict[int, bytearray] = collections.defaultdict(bytearray)
        self.high_water_hits = 0
        self.drained = 0
        self.final_events: list[Any] = []
        self.errors: list[BaseException] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.engine: Any = None

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> int:
        self._thread.start()
        self.call(self._open)
        return int(self.call(lambda: self.engine.sockname()[1]))

    def _open(self) -> None:
        assert native is not None
        self.engine = native.Engine(self.backend, "127.0.0.1", 0, **self.kwargs)
        self._loop.add_reader(self.engine.fileno(), self._ready)

    def stop(self) -> dict[str, Any]:
        def _stop() -> dict[str, Any]:
            self._loop.remove_reader(self.engine.fileno())
            stats: dict[str, Any] = self.engine.stats()
            self.final_events = self.engine.shutdown()
            for kind, conn, payload in self.final_events:
                self._record(kind, conn, payload)
            return stats

        stats = self.call(_stop)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
        if self.errors:
            raise self.errors[0]
        return stats

    def call(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Run ``fn`` on the loop thread (where the engine lives) and return its result.

        Like any code that touches the engine outside a poll turn, it ends with
        ``flush()`` so queued work (io_uring SQEs) reaches the kernel, and
        schedules a poll when events were produced outside a turn.
        """

        async def run() -> Any:
            result = fn()
            if self.engine is not None and self.engine_running():
                self.engine.flush()
                if self.engine.has_pending():  # e.g. CLOSED after a sweep
                    self._loop.call_soon(self._ready)
            return result

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def engine_running(self) -> bool:
        return "running=1" in repr(self.engine)

    # -- the loop turn ------------------------------------------------------------
    def send(self, conn: int, data: bytes) -> None:
        if self.engine.send(conn, data):
            self.high_water_hits += 1

    def _record(self, kind: int, conn: int, payload: Any) -> None:
        assert native is not None
        self.kinds[kind] += 1
        if kind == native.ACCEPTED:
            self.accepted.append(conn)
        elif kind == native.CLOSED:
            assert conn not in self.closed, "CLOSED twice for one connection"
            self.closed[conn] = payload
        elif kind == native.DRAINED:
            self.drained += 1

    def _ready(self) -> None:
        assert native is not None
        try:
            for kind, conn, payload in self.engine.poll(256):
                self._record(kind, conn, payload)
                if kind == native.DATA:
                    self.data[conn] += payload
                    self.responder.on_data(self, conn, payload)
                elif kind == native.EOF:
                    self.responder.on_eof(self, conn)
            self.engine.flush()
            if self.engine.has_pending():
                self._loop.call_soon(self._ready)
        except BaseException as exc:  # surfaced by stop()
            self.errors.append(exc)
            raise

    def stats(self) -> dict[str, Any]:
        return dict(self.call(self.engine.stats))

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Poll ``predicate`` on the loop thread until true (no fixed sleeps)."""
        import time

        deadline = time.monotonic() + timeout
        while not self.call(predicate):
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not reached in {timeout}s: {self.stats()}")
            time.sleep(0.005)
