"""The rate limiter's measurements: the router's own client, and redis-benchmark beside it.

Used by the ``ratelimit`` scenario (``bench/scenarios/ratelimit.py``), which
runs them against its own redis-server and 3-master cluster and writes the
tables; run it with ``python -m bench ratelimit``.

The client is the router's: a :class:`RedisBucketLimiter` over a
:class:`BucketCaller`, on uvloop as ``hookrouter serve`` runs it.
:data:`CONCURRENCY` tasks decide in a loop the way the ingest handler does
(``try_acquire_nowait``, then ``await acquire`` on ``None``) over 64 tenants
whose limit is never reached, so a :class:`Sample` is the cost of *deciding*,
not of denying:

* decisions and wall-clock seconds, after a warm-up that is not counted
  (connections, program load, every tenant's first lease);
* client CPU: CPU time of the *thread* running the event loop
  (``time.thread_time``), so the harness's progress display is not counted;
* Redis CPU: utime + stime of the given redis-server processes;
* round trips and script/function calls, from the caller's counters.

:func:`redis_benchmark` sends EVALSHA of the same script with the same
arguments from ``redis-benchmark``: the server's rate for this script with a C
client, and that client's CPU (the rusage of the finished child).
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import resource
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from bench import procs
from hookrouter.ratelimit import Limit
from hookrouter.ratelimit.keys import bucket_keys
from hookrouter.ratelimit.redis_calls import BucketCaller, Mode, make_client
from hookrouter.ratelimit.redis_limiter import RedisBucketLimiter
from hookrouter.ratelimit.scripts import PROGRAM
from hookrouter.ratelimit.slots import LeasePlan

ROOMY = Limit(1e12, 1e12)  # never denies: the cost of deciding, not of denying
TENANTS = tuple(f"tenant-{i}" for i in range(64))
CONCURRENCY = 50  # the "50 concurrent tasks" figure
WARM_UP = 200  # sequential decisions: every tenant's first lease, the program loaded
# A deadline far above any round trip here: a scheduling hiccup on the shared
# 2-core machine must not turn into policy answers. Degraded answers are counted.
DECISION_TIMEOUT_S = 1.0
SOCKET_TIMEOUT_S = 2.0


@dataclass
class Sample:
    """One measured run of one configuration."""

    decisions: int
    seconds: float
    client_cpu_s: float
    server_cpu_s: float
    round_trips: int
    calls: int
    degraded: int = 0

    def metric(self, name: str) -> float | None:
        """``rate``, ``client_us``, ``server_us``, ``trips_k`` or ``calls_k`` (per 1,000)."""
        if not self.decisions or self.seconds <= 0:
            return None
        per = {
            "rate": self.decisions / self.seconds,
            "client_us": self.client_cpu_s / self.decisions * 1e6,
            "server_us": self.server_cpu_s / self.decisions * 1e6,
            "trips_k": self.round_trips * 1000 / self.decisions,
            "calls_k": self.calls * 1000 / self.decisions,
        }
        return per[name]


# -- the router's client ---------------------------------------------------------------


async def _decide(limiter: RedisBucketLimiter, count: int, offset: int) -> int:
    """``count`` decisions as the ingest handler makes them; returns how many were degraded."""
    degraded = 0
    for i in range(count):
        tenant = TENANTS[(offset + i) % len(TENANTS)]
        decision = limiter.try_acquire_nowait(tenant, "ingest", ROOMY)
        if decision is None:
            decision = await limiter.acquire(tenant, "ingest", ROOMY)
        elif i % 64 == 63:
            await asyncio.sleep(0)  # a handler yields between requests; let prefetches land
        if not decision.allowed or decision.degraded:
            degraded += 1
    return degraded


async def _measure(
    caller: BucketCaller, lease: int, decisions: int, server_pids: Sequence[int]
) -> Sample:
    plan = LeasePlan(lease, lease // 4)  # low water: the config's default (lease // 4)
    limiter = RedisBucketLimiter(caller, lease=plan, timeout=DECISION_TIMEOUT_S)
    try:
        await _decide(limiter, WARM_UP, 0)
        trips0, calls0 = caller.round_trips, caller.commands
        per_task = max(1, decisions // CONCURRENCY)
        cpu0, srv0, t0 = time.thread_time(), procs.cpu_seconds(server_pids), time.perf_counter()
        degraded = await asyncio.gather(
            *(_decide(limiter, per_task, i * 7) for i in range(CONCURRENCY))
        )
        seconds = time.perf_counter() - t0
        return Sample(
            decisions=per_task * CONCURRENCY,
            seconds=seconds,
            client_cpu_s=time.thread_time() - cpu0,
            server_cpu_s=procs.cpu_seconds(server_pids) - srv0,
            round_trips=caller.round_trips - trips0,
            calls=caller.commands - calls0,
            degraded=sum(degraded),
        )
    finally:
        await limiter.close()


def _runner() -> asyncio.Runner:
    """An event loop like ``hookrouter serve`` uses: uvloop when installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def measure_client(
    mode: Mode,
    lease: int,
    decisions: int,
    server_pids: Sequence[int],
    *,
    url: str | None = None,
    cluster_nodes: Sequence[str] = (),
) -> Sample:
    """About ``decisions`` decisions (``lease`` 0 = exact) against ``url`` or ``cluster_nodes``."""
    caller = BucketCaller(make_client(url, cluster_nodes, SOCKET_TIMEOUT_S), mode)
    with _runner() as runner:
        return runner.run(_measure(caller, lease, decisions, server_pids))


# -- redis-benchmark, the reference -----------------------------------------------------


def parse_rps(csv_text: str) -> float:
    """Requests per second from ``redis-benchmark --csv`` output (the last test's row)."""
    rows = list(csv.DictReader(line for line in csv_text.splitlines() if line.strip()))
    if not rows or not rows[-1].get("rps"):
        raise ValueError(f"no rps in redis-benchmark output: {csv_text[:200]!r}")
    return float(rows[-1]["rps"])


def redis_benchmark(
    tool: str, port: int, *, pipeline: int, requests: int, server_pids: Sequence[int]
) -> Sample:
    """EVALSHA of the bucket script from ``redis-benchmark`` (:data:`CONCURRENCY` connections)."""
    with contextlib.closing(redis.Redis(port=port, socket_timeout=SOCKET_TIMEOUT_S)) as client:
        client.script_load(PROGRAM.script)
    keys = bucket_keys("bench", "x").as_list()
    # The arguments of BucketCall.args(): capacity, rate, want, need, scope.
    argv = [tool, "-h", "127.0.0.1", "-p", str(port), "-n", str(requests),
            "-c", str(CONCURRENCY), "-P", str(pipeline), "--csv",
            "EVALSHA", PROGRAM.script_sha, "2", *keys, "1e12", "1e12", "1", "1", "x"]  # fmt: skip
    # The child's CPU: RUSAGE_CHILDREN grows by what each waited-for child used.
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    srv0 = procs.cpu_seconds(server_pids)
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=300).stdout
    srv = procs.cpu_seconds(server_pids) - srv0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    trips = -(-requests // pipeline)  # ceil: the last pipeline may be short
    return Sample(requests, requests / parse_rps(out), cpu, srv, trips, requests)
