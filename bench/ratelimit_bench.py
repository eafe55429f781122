"""Rate-limiter benchmark: decisions/s and client CPU per decision, beside redis-benchmark.

On demand, not a test::

    .venv/bin/python bench/ratelimit_bench.py [--decisions 20000] [--concurrency 50]
        [--url redis://127.0.0.1:6379/0] [--cluster] [--markdown]

Without ``--url`` it starts its own redis-server (persistence off) on a free
port, and with ``--cluster`` also a 3-master Redis Cluster, using the test
helpers in ``tests/support/redis_servers.py``. For each configuration it runs
the router's own client (``RedisBucketLimiter``) with ``concurrency`` tasks
deciding in a loop the way the ingest handler does (``try_acquire_nowait``,
then ``await acquire`` on ``None``), over 64 tenants whose limit is never
reached, and reports:

* decisions/s (wall clock) and client CPU µs per decision (``time.process_time``
  of this process: redis-py, asyncio and the limiter itself);
* Redis server CPU µs per decision (utime + stime of the redis-server process);
* Redis round trips and script/function calls per 1,000 decisions.

In the same run ``redis-benchmark`` executes EVALSHA of the same script (50
connections, without and with pipelining), the server's ceiling for this
script without any Python client in the way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.support.redis_servers

from tests.support.redis_servers import redis_cluster, redis_server  # noqa: E402

from hookrouter.ratelimit import Limit  # noqa: E402
from hookrouter.ratelimit.keys import bucket_keys  # noqa: E402
from hookrouter.ratelimit.redis_calls import BucketCaller, Mode, make_client  # noqa: E402
from hookrouter.ratelimit.redis_limiter import RedisBucketLimiter  # noqa: E402
from hookrouter.ratelimit.scripts import PROGRAM  # noqa: E402
from hookrouter.ratelimit.slots import LeasePlan  # noqa: E402

ROOMY = Limit(1e12, 1e12)  # never denies: the cost of deciding, not of denying
TENANTS = [f"tenant-{i}" for i in range(64)]


@dataclass
class Row:
    name: str
    decisions: int
    seconds: float
    client_cpu: float
    server_cpu: float
    round_trips: int
    commands: int

    def cells(self) -> list[str]:
        per_k = 1000 / self.decisions
        return [
            self.name,
            f"{self.decisions / self.seconds:,.0f}",
            f"{self.client_cpu / self.decisions * 1e6:.1f}" if self.client_cpu >= 0 else "-",
            f"{self.server_cpu / self.decisions * 1e6:.1f}" if self.server_cpu >= 0 else "-",
            f"{self.round_trips * per_k:.1f}",
            f"{self.commands * per_k:.1f}",
        ]


HEADERS = ["configuration", "decisions/s", "client CPU µs/decision", "Redis CPU µs/decision",
           "round trips /1k", "script calls /1k"]  # fmt: skip


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


async def _worker(limiter: RedisBucketLimiter, count: int, offset: int) -> None:
    for i in range(count):
        tenant = TENANTS[(offset + i) % len(TENANTS)]
        decision = limiter.try_acquire_nowait(tenant, "ingest", ROOMY)
        if decision is None:
            decision = await limiter.acquire(tenant, "ingest", ROOMY)
        elif i % 64 == 63:
            await asyncio.sleep(0)  # a handler yields between requests; let prefetches land
        if not decision.allowed or decision.degraded:
            # Redis did not answer within the timeout: report it, do not hide it.
            print(f"warning: degraded decision {decision}: {limiter.stats()['errors']}")


async def _measure(
    name: str, url: str | None, nodes: tuple[str, ...], mode: Mode, lease: int,
    decisions: int, concurrency: int, server_pids: list[int],
) -> Row:  # fmt: skip
    caller = BucketCaller(make_client(url, nodes, 2.0), mode)
    limiter = RedisBucketLimiter(caller, lease=LeasePlan(lease, lease // 4), timeout=1.0)
    try:
        await _worker(limiter, 200, 0)  # warm up: connections, program load, first leases
        base_trips, base_cmds = caller.round_trips, caller.commands
        per_task = decisions // concurrency
        cpu0, srv0, t0 = time.process_time(), _cpu(server_pids), time.perf_counter()
        await asyncio.gather(*(_worker(limiter, per_task, i * 7) for i in range(concurrency)))
        seconds = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        srv = _cpu(server_pids) - srv0 if server_pids else -1.0
        done = per_task * concurrency
        return Row(name, done, seconds, cpu, srv, caller.round_trips - base_trips,
                   caller.commands - base_cmds)  # fmt: skip
    finally:
        await limiter.close()


def _redis_benchmark(port: int, pipeline: int, requests: int, server_pids: list[int]) -> Row:
    client = make_client(f"redis://127.0.0.1:{port}/0", (), 2.0)

    async def load() -> None:
        await client.script_load(PROGRAM.script)
        await client.aclose()

    asyncio.run(load())
    keys = bucket_keys("bench", "x").as_list()
    cmd = ["redis-benchmark", "-p", str(port), "-n", str(requests), "-c", "50",
           "-P", str(pipeline), "--csv",
           "EVALSHA", PROGRAM.script_sha, "2", *keys, "1e12", "1e12", "1", "1", "x"]  # fmt: skip
    srv0 = _cpu(server_pids)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    srv = _cpu(server_pids) - srv0
    rps = float(out.strip().splitlines()[-1].split(",")[1].strip('"'))
    # Report redis-benchmark's own rate; its client CPU is not the router's, so "-".
    return Row(f"redis-benchmark EVALSHA -c50 -P{pipeline}", requests, requests / rps, -1, srv,
               requests // pipeline, requests)  # fmt: skip


def _print(rows: list[Row], markdown: bool) -> None:
    table = [HEADERS] + [r.cells() for r in rows]
    if markdown:
        print("| " + " | ".join(table[0]) + " |")
        print("|" + "|".join("---" for _ in table[0]) + "|")
        for row in table[1:]:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for row in table:
        print(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )


@contextlib.contextmanager
def _servers(
    args: argparse.Namespace,
) -> Iterator[tuple[str, int | None, list[int], tuple[str, ...], list[int]]]:
    with contextlib.ExitStack() as stack:
        if args.url:
            url, port, pids = args.url, None, []
        else:
            server = stack.enter_context(redis_server())
            assert server.proc is not None
            url, port, pids = server.url, server.port, [server.proc.pid]
        nodes: tuple[str, ...] = ()
        cluster_pids: list[int] = []
        if args.cluster:
            cluster = stack.enter_context(redis_cluster())
            nodes = tuple(cluster.startup_nodes)
            cluster_pids = [n.proc.pid for n in cluster.nodes if n.proc is not None]
        yield url, port, pids, nodes, cluster_pids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decisions", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--url", help="use this Redis instead of starting one")
    parser.add_argument("--cluster", action="store_true", help="also measure a 3-master cluster")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    n, c = args.decisions, args.concurrency
    rows: list[Row] = []
    with _servers(args) as (url, port, pids, nodes, cluster_pids):
        configs = [
            ("script, sequential (c=1)", "script", 0, max(n // 10, 1000), 1),
            (f"script, pipelined (c={c})", "script", 0, n, c),
            (f"function, pipelined (c={c})", "function", 0, n, c),
            *(
                (f"script, lease {lease} (c={c})", "script", lease, n * 5 if lease > 1 else n, c)
                for lease in (1, 10, 100)
            ),
            (f"function, lease 100 (c={c})", "function", 100, n * 5, c),
        ]
        for name, mode, lease, count, conc in configs:
            rows.append(asyncio.run(_measure(name, url, (), mode, lease, count, conc, pids)))  # type: ignore[arg-type]
        if nodes:
            for name, mode, lease, count, conc in configs[1:]:
                rows.append(
                    asyncio.run(
                        _measure(
                            f"cluster {name}", None, nodes, mode, lease, count, conc, cluster_pids
                        )
                    )
                )  # type: ignore[arg-type]
        if port is not None:
            for pipeline in (1, 16):
                rows.append(_redis_benchmark(port, pipeline, 100_000, pids))
    _print(rows, args.markdown)


if __name__ == "__main__":
    main()
