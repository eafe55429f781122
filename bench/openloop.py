"""Open-loop (fixed-rate) load: latency at a given offered rate, corrected for coordinated omission.

wrk is closed-loop: when the server stalls, wrk stops sending, so the stall
hides behind a handful of slow samples ("coordinated omission"). wrk2 fixes
that but is not packaged in Debian, so this is a small uvloop + httptools
client doing what wrk2 does:

* request ``i`` is *due* at ``t0 + i / rate`` (rounded down to the 1 ms
  tick that releases it), whatever happened before;
* due requests go out on an idle keep-alive connection, or wait in a FIFO
  backlog when all ``connections`` are busy;
* latency is measured from the *due* time, not from when the request could
  actually be written, so time spent waiting for a connection (because the
  server was slow to answer earlier requests) counts against the server.

The client's own scheduling slack (the event loop's timers have 1 ms
resolution) is reported as ``send_lag``: the delay between due time and the
write when a connection was free. It is the floor under every latency this
client reports; the report prints it next to the figures.

Run as ``python -m bench.openloop --set DIR --url URL --rate R --duration D``;
it prints one JSON line (a :class:`bench.wrk.LoadResult`) and, with
``--records FILE``, saves per-request wall-clock times (for joins with the
delivery sink's log).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import httptools

from bench import signing
from bench.stats import percentiles
from bench.wrk import LoadResult

_PCTS = (50, 75, 90, 99, 99.9, 99.99)
# Requests are released in 1 ms batches: the event loop's timers have 1 ms
# resolution, and waking more often only spins the client's CPU (which the
# server under test needs on a 2-core machine).
TICK_S = 0.001


class _Conn(asyncio.Protocol):
    def __init__(self, client: Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.current = -1  # request index in flight, -1 when idle
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport: cast, don't check.
        self.transport = cast(asyncio.Transport, transport)
        self.client.conns.append(self)
        self.client.on_idle(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_message_complete(self) -> None:
        index, self.current = self.current, -1
        self.client.on_response(self, index, self.parser.get_status_code())

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.client.on_lost(self)

    def send(self, index: int, data: bytes) -> None:
        assert self.transport is not None
        self.current = index
        self.transport.write(data)


class Client:
    """Sends ``rate`` requests/s for ``duration`` s over up to ``connections`` connections."""

    def __init__(
        self,
        host: str,
        port: int,
        requests: Iterator[bytes],
        *,
        rate: float,
        duration: float,
        connections: int,
        warmup: float = 0.0,
        drain_timeout: float = 10.0,
    ) -> None:
        self.host, self.port = host, port
        self.rate, self.duration, self.warmup = rate, duration, warmup
        self.connections = connections
        self.drain_timeout = drain_timeout
        self.total = int(rate * (duration + warmup))
        # Built before the clock starts: assembling a request in Python would
        # spend a share of the load generator's core inside the run.
        self.payloads = list(itertools.islice(requests, self.total))
        if len(self.payloads) < self.total:
            raise ValueError(f"request set too small: {len(self.payloads)} < {self.total}")
        # Plain lists on the hot path: a numpy scalar store costs more than a list store.
        self.due = [0.0] * self.total
        self.sent = [0.0] * self.total
        self.done = [0.0] * self.total
        self.status = [0] * self.total
        self.immediate = [False] * self.total  # sent at its tick, not from the backlog
        self.scheduled = 0
        self.finished = 0
        self.errors = 0
        self.backlog: collections.deque[int] = collections.deque()
        self.idle: list[_Conn] = []
        self.conns: list[_Conn] = []
        self.live = 0
        self.max_backlog = 0
        self.t0 = 0.0
        self.all_done: asyncio.Future[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- connection events -------------------------------------------------
    def on_idle(self, conn: _Conn) -> None:
        if self.backlog:
            self._send(conn, self.backlog.popleft())
        else:
            self.idle.append(conn)

    def on_response(self, conn: _Conn, index: int, status: int) -> None:
        self.done[index] = time.monotonic()
        self.status[index] = status
        self._finish_one()
        self.on_idle(conn)

    def on_lost(self, conn: _Conn) -> None:
        self.live -= 1
        if conn in self.idle:
            self.idle.remove(conn)
        if conn.current >= 0:
            self.status[conn.current] = -1
            self.done[conn.current] = time.monotonic()
            self.errors += 1
            self._finish_one()
        if self.scheduled < self.total and self.loop is not None:
            self.loop.create_task(self._connect())

    def _finish_one(self) -> None:
        self.finished += 1
        if self.finished >= self.total and self.all_done and not self.all_done.done():
            self.all_done.set_result(None)

    # -- sending -------------------------------------------------------------
    def _send(self, conn: _Conn, index: int) -> None:
        self.sent[index] = time.monotonic()
        conn.send(index, self.payloads[index])

    def _tick(self) -> None:
        assert self.loop is not None
        now = time.monotonic()
        tick = int((now - self.t0) / TICK_S)  # ticks that have begun
        upto = min(self.total, int((tick + 1) * TICK_S * self.rate))
        while self.scheduled < upto:
            index = self.scheduled
            # Due at the start of the tick it falls in; a late timer is charged as latency.
            self.due[index] = self.t0 + int(index / self.rate / TICK_S) * TICK_S
            self.scheduled += 1
            if self.idle:
                self._send(self.idle.pop(), index)
                self.immediate[index] = True
            else:
                self.backlog.append(index)
        self.max_backlog = max(self.max_backlog, len(self.backlog))
        if self.scheduled < self.total:
            next_tick = self.t0 + (tick + 1) * TICK_S
            self.loop.call_later(max(0.0, next_tick - time.monotonic()), self._tick)

    async def _connect(self) -> None:
        assert self.loop is not None
        try:
            await self.loop.create_connection(lambda: _Conn(self), self.host, self.port)
            self.live += 1
        except OSError:
            self.errors += 1

    async def run(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.all_done = self.loop.create_future()
        await asyncio.gather(*(self._connect() for _ in range(self.connections)))
        if self.live == 0:
            raise ConnectionError(f"cannot connect to {self.host}:{self.port}")
        self.t0 = time.monotonic() + 0.01
        self.loop.call_later(0.01, self._tick)
        end = self.t0 + self.duration + self.warmup + self.drain_timeout
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.all_done, timeout=max(1.0, end - time.monotonic()))
        for conn in self.conns:
            if conn.transport is not None and not conn.closed:
                conn.transport.close()
        await asyncio.sleep(0)  # let the transports finish closing

    # -- results ------------------------------------------------------------
    def result(self) -> dict[str, Any]:
        """Summary over the measured window (requests due after the warm-up)."""
        first = int(self.warmup * self.rate)
        latency_ms: list[float] = []
        lag_ms: list[float] = []
        statuses: collections.Counter[str] = collections.Counter()
        answered = 0
        first_done, last_done = float("inf"), 0.0
        for i in range(first, self.scheduled):
            if self.done[i] <= 0:
                continue
            answered += 1
            first_done, last_done = min(first_done, self.done[i]), max(last_done, self.done[i])
            statuses[str(self.status[i])] += 1
            if self.status[i] > 0:
                latency_ms.append((self.done[i] - self.due[i]) * 1000.0)
                # The client's own lag: only requests that found a free connection at
                # their tick (one that waited in the backlog waited for the server).
                if self.immediate[i]:
                    lag_ms.append((self.sent[i] - self.due[i]) * 1000.0)
        lat = percentiles(latency_ms, _PCTS)
        lat.update(
            mean=sum(latency_ms) / len(latency_ms) if latency_ms else 0.0,
            max=max(latency_ms, default=0.0),
        )
        lag = percentiles(lag_ms, (50, 99))
        return {
            "requests": answered,
            "duration_s": self.duration,
            "latency_ms": lat,
            "errors": {
                "connection": self.errors,
                "incomplete": self.scheduled - first - answered,
            },
            "statuses": dict(statuses),
            "extra": {
                "offered_rps": self.rate,
                "send_lag_p50_ms": lag.get("p50", 0.0),
                "send_lag_p99_ms": lag.get("p99", 0.0),
                "max_backlog": self.max_backlog,
                # Longer than the window when the server fell behind the offered rate:
                # the window's requests were then answered (and decided) over this span.
                "answer_span_s": max(0.0, last_done - first_done) if answered else 0.0,
            },
        }

    def save_records(self, path: Path) -> None:
        """Per-request ``index due done status`` lines, times as wall-clock seconds."""
        offset = time.time() - time.monotonic()
        with path.open("w") as fh:
            for i in range(self.scheduled):
                done = self.done[i] + offset if self.done[i] > 0 else 0.0
                fh.write(f"{i} {self.due[i] + offset:.6f} {done:.6f} {self.status[i]}\n")


def run(
    url: str,
    request_set: signing.RequestSet,
    *,
    rate: float,
    duration_s: float,
    connections: int = 64,
    warmup_s: float = 0.0,
    records: Path | None = None,
    log: Path | None = None,
) -> LoadResult:
    """Run the client in its own process (its CPU stays out of ours) and return its result."""
    argv = [
        sys.executable,
        "-m",
        "bench.openloop",
        "--set",
        str(request_set.directory),
        "--url",
        url,
        "--rate",
        f"{rate:g}",
        "--duration",
        f"{duration_s:g}",
        "--warmup",
        f"{warmup_s:g}",
        "--connections",
        str(connections),
    ]
    if records is not None:
        argv += ["--records", str(records)]
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=root)
    assert proc.stdout is not None
    with proc.stdout:
        out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = out.decode(errors="replace")
    if log is not None:
        with log.open("a") as fh:
            fh.write(" ".join(argv) + "\n" + text + "\n")
    if proc.returncode != 0:
        raise RuntimeError(f"open-loop client failed ({proc.returncode}):\n{text[-2000:]}")
    for line in text.splitlines():
        if line.startswith("BENCH-JSON "):
            data = json.loads(line[len("BENCH-JSON ") :])
            break
    else:
        raise RuntimeError(f"no result from the open-loop client:\n{text[-2000:]}")
    return LoadResult(
        requests=data["requests"],
        duration_s=data["duration_s"],
        latency_ms=data["latency_ms"],
        errors=data["errors"],
        statuses=data["statuses"],
        client_cpu_s=usage.ru_utime + usage.ru_stime,
        extra=data["extra"],
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.openloop", description=__doc__)
    ap.add_argument("--set", required=True, type=Path, help="request set directory")
    ap.add_argument("--url", required=True)
    ap.add_argument("--rate", required=True, type=float)
    ap.add_argument("--duration", required=True, type=float)
    ap.add_argument("--warmup", type=float, default=0.0)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--records", type=Path)
    args = ap.parse_args(argv)
    url = urlsplit(args.url)
    request_set = signing.load(args.set)
    client = Client(
        url.hostname or "127.0.0.1",
        url.port or 80,
        signing.iter_requests(request_set),
        rate=args.rate,
        duration=args.duration,
        connections=args.connections,
        warmup=args.warmup,
    )
    if client.total > request_set.count:
        print(f"request set too small: {request_set.count} < {client.total}", file=sys.stderr)
        return 2
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a router dependency
        runner = asyncio.run
    runner(client.run())
    if args.records:
        client.save_records(args.records)
    print("BENCH-JSON " + json.dumps(client.result()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
