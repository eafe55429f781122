"""``python -m bench.tracing_overhead``: router CPU per event with tracing off, 1 %, 100 %.

A small same-run A/B/C, apart from the scenario harness: one router process
per round (rounds alternate between the modes), Stripe-signed events posted
by a few keep-alive client threads, delivered to a sink in this process
that answers 200, spans exported to an OTLP/HTTP sink here that discards
them. The figure is the router process's CPU time (user + system, all its
threads: the span exporter's included) from the first request to the last
delivery, divided by the events. Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import tomli_w

SECRET = "whsec_bench_tracing_overhead_secret"
MODES: dict[str, float | None] = {"off": None, "1%": 0.01, "100%": 1.0}
BASELINE = "baseline"  # another tree's source (--baseline-src), at --baseline-ratio


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


def one_round(
    mode: str,
    events: int,
    clients: int,
    sink: DeliverySink,
    otlp_port: int,
    baseline_src: str | None = None,
    baseline_ratio: float | None = None,
) -> float:
    """Router CPU microseconds per event for one run in ``mode``."""
    work = Path(tempfile.mkdtemp(prefix="hr-trace-bench-"))
    port = _free_port()
    config: dict[str, Any] = {
        "server": {"listen": f"127.0.0.1:{port}"},
        "store": {"path": str(work / "data")},
        "delivery": {"allow_private_networks": True},
        "tenants": [{"id": "t"}],
        "sources": [{"id": "bench", "tenant": "t", "provider": "stripe", "secrets": [SECRET]}],
        "endpoints": [
            {"id": "sink", "tenant": "t", "url": f"http://127.0.0.1:{sink.port}/",
             "secret": "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"},
        ],
    }  # fmt: skip
    ratio = baseline_ratio if mode == BASELINE else MODES.get(mode)
    if ratio is not None:
        config["telemetry"] = {
            "otlp_endpoint": f"http://127.0.0.1:{otlp_port}/v1/traces",
            "sample_ratio": ratio,
        }
    (work / "hr.toml").write_bytes(tomli_w.dumps(config).encode())
    env = dict(os.environ)
    if mode == BASELINE and baseline_src:
        env["PYTHONPATH"] = baseline_src  # ahead of the editable install
    proc = subprocess.Popen(
        [sys.executable, "-m", "hookrouter", "serve", "--config", str(work / "hr.toml")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(work / "router.log").open("wb"),
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError((work / "router.log").read_text())
        run = f"{mode.strip('%')}{time.monotonic_ns() % 10**9}"
        requests = [_signed(i, run) for i in range(events)]
        slices = [requests[i::clients] for i in range(clients)]
        router = psutil.Process(proc.pid)
        before = router.cpu_times()
        delivered_before = sink.count
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(lambda part: _post_all(port, part), slices))
        while sink.count - delivered_before < events:
            time.sleep(0.01)
        after = router.cpu_times()
        cpu = (after.user - before.user) + (after.system - before.system)
        return cpu / events * 1e6
    finally:
        proc.terminate()
        proc.wait(20)
        shutil.rmtree(work, ignore_errors=True)


def measure(
    rounds: int,
    events: int,
    clients: int,
    modes: list[str],
    baseline: tuple[str | None, float | None] = (None, None),
    progress: Callable[[str], None] = print,
) -> dict[str, list[float]]:
    """µs of router CPU per event, per mode, one entry per round (modes alternate)."""
    otlp = ThreadingHTTPServer(("127.0.0.1", 0), SpanSink)
    threading.Thread(target=otlp.serve_forever, daemon=True).start()
    results: dict[str, list[float]] = {mode: [] for mode in modes}
    try:
        with DeliverySink() as sink:
            for number in range(rounds):
                for mode in modes:
                    cost = one_round(mode, events, clients, sink, otlp.server_address[1], *baseline)
                    results[mode].append(cost)
                    progress(f"round {number + 1} {mode:>5}: {cost:8.1f} us/event")
    finally:
        otlp.shutdown()
    return results


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
    args = parser.parse_args()
    modes = [*([BASELINE] if args.baseline_src else []), *MODES]
    compiled = os.environ.get("HOOKROUTER_COMPILE", "1") != "0"
    results = measure(
        args.rounds,
        args.events,
        args.clients,
        modes,
        (args.baseline_src, args.baseline_ratio),
        lambda line: print(line, flush=True),
    )
    base = statistics.median(results["off"])
    print(f"\nrouter CPU per event (ingest + delivery), median of {args.rounds} rounds,")
    print(f"{args.events} events per round, HOOKROUTER_COMPILE={'1' if compiled else '0'}")
    print("| tracing | µs/event (median) | range | vs off (medians) | vs off (per round) |")
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
