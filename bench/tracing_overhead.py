"""``python -m bench.tracing_overhead``: router CPU per event with tracing off, 1 %, 100 %.

A small same-run A/B/C, apart from the scenario harness: one router process
per round (rounds alternate between the modes), Stripe-signed events posted
by a few keep-alive client threads, delivered to a sink in this process
that answers 200, spans exported to an OTLP/HTTP sink here that discards
them. The figure is the router process's CPU time (user + system, all its
threads: the span exporter's included) from the first request to the last
delivery, divided by the events. Prints a table; writes nothing.

``--instructions`` counts instead: each router runs under Valgrind's
callgrind and the figure is the user-space instructions (all threads) per
event over the same window, after a warm-up. On a shared host the CPU time
of rounds seconds apart spreads by tens of percent; the count repeats
closely, so it is what shows a cost of a few percent.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import http.client
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import tomli_w

SECRET = "whsec_bench_tracing_overhead_secret"
# "0%": tracing on but nothing sampled, which isolates the unsampled path.
MODES: dict[str, float | None] = {"off": None, "0%": 0.0, "1%": 0.01, "100%": 1.0}
BASELINE = "baseline"  # another tree's source (--baseline-src), at --baseline-ratio
# Flush intervals of the span processor. Timed rounds keep the SDK's default
# (5 s) and last longer than it (scenario 12 sends 60,000 events). Under
# callgrind, 50 times slower, any timed flush exports batches far smaller than
# in real time; there only full batches (512 spans) are exported, as at
# production rates, and the steady-state figure at 1 % is derived from the
# per-span cost at 100 % (``steady_ratio``).
TIMED_EXPORT_MS = 5000  # the SDK default
COUNTED_EXPORT_MS = 3_600_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DeliverySink:
    """Answers every request 200 and counts them (HTTP/1.1 keep-alive, Content-Length)."""

    def __init__(self) -> None:
        self.count = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                self.count += 1
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def __enter__(self) -> DeliverySink:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


class SpanSink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


def _signed(index: int, run: str) -> tuple[bytes, dict[str, str]]:
    body = (
        f'{{"id":"evt_{run}_{index:08d}","object":"event","type":"invoice.paid",'
        f'"data":{{"object":{{"amount":{index}}}}}}}'
    ).encode()
    stamp = int(time.time())
    mac = hmac.new(SECRET.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return body, {"Stripe-Signature": f"t={stamp},v1={mac}", "Content-Type": "application/json"}


def _post_all(port: int, requests: list[tuple[bytes, dict[str, str]]]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for body, headers in requests:
        conn.request("POST", "/in/bench", body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status
    conn.close()


@dataclass(frozen=True)
class Setup:
    """What every round shares: the sinks, the load's shape, the baseline's source."""

    sink: DeliverySink
    otlp_port: int
    clients: int
    baseline_src: str | None = None
    baseline_ratio: float | None = None


@contextmanager
def _router(
    mode: str, setup: Setup, prefix: Sequence[str] = (), export_delay_ms: int = TIMED_EXPORT_MS
) -> Iterator[tuple[int, int]]:
    """A router in ``mode`` (``prefix``: e.g. valgrind), ready; yields (pid, port).

    ``export_delay_ms``: the span processor's flush interval (``OTEL_BSP_SCHEDULE_DELAY``).
    """
    work = Path(tempfile.mkdtemp(prefix="hr-trace-bench-"))
    port = _free_port()
    config: dict[str, Any] = {
        "server": {"listen": f"127.0.0.1:{port}"},
        "store": {"path": str(work / "data")},
        "delivery": {"allow_private_networks": True},
        "tenants": [{"id": "t"}],
        "sources": [{"id": "bench", "tenant": "t", "provider": "stripe", "secrets": [SECRET]}],
        "endpoints": [
            {"id": "sink", "tenant": "t", "url": f"http://127.0.0.1:{setup.sink.port}/",
             "secret": "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"},
        ],
    }  # fmt: skip
    ratio = setup.baseline_ratio if mode == BASELINE else MODES.get(mode)
    if ratio is not None:
        config["telemetry"] = {
            "otlp_endpoint": f"http://127.0.0.1:{setup.otlp_port}/v1/traces",
            "sample_ratio": ratio,
        }
    (work / "hr.toml").write_bytes(tomli_w.dumps(config).encode())
    env = {**os.environ, "OTEL_BSP_SCHEDULE_DELAY": str(export_delay_ms)}
    if mode == BASELINE and setup.baseline_src:
        env["PYTHONPATH"] = setup.baseline_src  # ahead of the editable install
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-m", "hookrouter", "serve", "--config", str(work / "hr.toml")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(work / "router.log").open("wb"),
    )
    try:
        _wait_ready(port, 600 if prefix else 20, work / "router.log")
        yield proc.pid, port
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(work, ignore_errors=True)


def _wait_ready(port: int, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(log.read_text())


def _send(port: int, events: int, setup: Setup, tag: str) -> None:
    """``events`` fresh events over ``setup.clients`` connections; returns once all delivered."""
    run = f"{tag}{time.monotonic_ns() % 10**9}"
    requests = [_signed(i, run) for i in range(events)]
    slices = [requests[i :: setup.clients] for i in range(setup.clients)]
    delivered_before = setup.sink.count
    with ThreadPoolExecutor(setup.clients) as pool:
        list(pool.map(lambda part: _post_all(port, part), slices))
    while setup.sink.count - delivered_before < events:
        time.sleep(0.01)


def one_round(mode: str, events: int, setup: Setup) -> float:
    """Router CPU microseconds per event for one run in ``mode``."""
    with _router(mode, setup) as (pid, port):
        router = psutil.Process(pid)
        before = router.cpu_times()
        _send(port, events, setup, mode.strip("%"))
        after = router.cpu_times()
    cpu = (after.user - before.user) + (after.system - before.system)
    return cpu / events * 1e6


KEEP_DUMPS = os.environ.get("TRACING_BENCH_KEEP")  # a directory: keep callgrind's dumps there


def count_round(mode: str, events: int, setup: Setup) -> float:
    """User-space instructions per event (callgrind, every thread) for one run in ``mode``.

    Deterministic where CPU time on a shared host is not: it shows what the
    code costs, not what the kernel or the neighbours add.
    """
    out = Path(tempfile.mkdtemp(prefix=f"hr-trace-cg-{mode.strip('%')}-", dir=KEEP_DUMPS))
    prefix = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
              f"--callgrind-out-file={out}/callgrind.%p"]  # fmt: skip
    try:
        with _router(mode, setup, prefix, COUNTED_EXPORT_MS) as (pid, port):
            _callgrind(pid, "--instr=on")
            _send(port, max(200, events // 5), setup, "warm")  # caches, pools, the exporter
            _callgrind(pid, "--zero")
            _send(port, events, setup, mode.strip("%"))
            _callgrind(pid, "--dump")
            dump = _wait_dump(out)
        found = re.search(r"^(?:totals|summary):\s+(\d+)", dump, re.MULTILINE)
        if found is None:
            raise RuntimeError(f"no totals in the callgrind dump in {out}")
        return int(found.group(1)) / events
    finally:
        if KEEP_DUMPS is None:
            shutil.rmtree(out, ignore_errors=True)


def _callgrind(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], capture_output=True, check=True)


def _wait_dump(out: Path) -> str:
    for _ in range(300):
        dumps = sorted(out.glob("callgrind.*"), key=lambda p: p.stat().st_mtime)
        if dumps and dumps[-1].stat().st_size:
            return dumps[-1].read_text(errors="replace")
        time.sleep(0.1)
    raise RuntimeError(f"callgrind wrote no dump in {out}")


def measure(
    rounds: int,
    events: int,
    clients: int,
    modes: list[str],
    baseline: tuple[str | None, float | None] = (None, None),
    progress: Callable[[str], None] = print,
    counter: Callable[[str, int, Setup], float] = one_round,
) -> dict[str, list[float]]:
    """``counter``'s figure per event, per mode, one entry per round (modes alternate)."""
    otlp = ThreadingHTTPServer(("127.0.0.1", 0), SpanSink)
    threading.Thread(target=otlp.serve_forever, daemon=True).start()
    results: dict[str, list[float]] = {mode: [] for mode in modes}
    try:
        with DeliverySink() as sink:
            setup = Setup(sink, otlp.server_address[1], clients, *baseline)
            for number in range(rounds):
                # Rotated each round: a host that speeds up or slows down during
                # the run then favours no mode by its place in the round.
                shift = number % len(modes)
                for mode in modes[shift:] + modes[:shift]:
                    figure = counter(mode, events, setup)
                    results[mode].append(figure)
                    progress(f"round {number + 1} {mode:>5}: {figure:10.1f} per event")
    finally:
        otlp.shutdown()
    return results


def steady_ratio(results: dict[str, list[float]], ratio: float = 0.01) -> float:
    """Per round, the unsampled path plus ``ratio`` of a sampled event's extra cost.

    ``0%`` costs what every event pays with tracing on; ``100%`` minus ``0%``
    is what sampling one event adds, its spans' export at full batches included.
    """
    per_round = [
        (unsampled + ratio * (sampled - unsampled)) / off
        for off, unsampled, sampled in zip(
            results["off"], results["0%"], results["100%"], strict=True
        )
    ]
    return statistics.median(per_round)


def paired_ratio(results: dict[str, list[float]], mode: str, reference: str = "off") -> float:
    """Median over rounds of ``mode``'s cost over ``reference``'s in the same round."""
    return statistics.median(a / b for a, b in zip(results[mode], results[reference], strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument(
        "--baseline-src",
        default=None,
        help="a src/ directory of another tree (e.g. `git archive main`): adds a baseline"
        " round with that source",
    )
    parser.add_argument(
        "--baseline-ratio",
        type=float,
        default=None,
        help="the baseline's sample_ratio (default: tracing off)",
    )
    parser.add_argument(
        "--modes", nargs="+", choices=list(MODES), default=list(MODES), help="modes to run"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count user-space instructions per event under callgrind instead of CPU time",
    )
    args = parser.parse_args()
    modes = [*([BASELINE] if args.baseline_src else []), *args.modes]
    compiled = os.environ.get("HOOKROUTER_COMPILE", "1") != "0"
    results = measure(
        args.rounds,
        args.events,
        args.clients,
        modes,
        (args.baseline_src, args.baseline_ratio),
        lambda line: print(line, flush=True),
        count_round if args.instructions else one_round,
    )
    base = statistics.median(results["off"])
    what = "instructions" if args.instructions else "CPU µs"
    print(f"\nrouter {what} per event (ingest + delivery), median of {args.rounds} rounds,")
    print(f"{args.events} events per round, HOOKROUTER_COMPILE={'1' if compiled else '0'}")
    print(f"| tracing | {what}/event (median) | range | vs off (medians) | vs off (per round) |")
    print("|---|---|---|---|---|")
    for mode, costs in results.items():
        median = statistics.median(costs)
        print(
            f"| {mode} | {median:.1f} | {min(costs):.1f}-{max(costs):.1f} "
            f"| {(median / base - 1) * 100:+.1f} % "
            f"| {(paired_ratio(results, mode) - 1) * 100:+.1f} % |"
        )


if __name__ == "__main__":
    main()
