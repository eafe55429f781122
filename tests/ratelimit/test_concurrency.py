"""Many clients and several router processes against one cluster never over-grant.

Exact mode: grants never exceed what one bucket allows over the run.
Leases: grants never exceed that plus the supply routers hold (at most
K x lease), as documented in ``hookrouter.ratelimit.slots``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support.redis_servers import RedisClusterProcess

from hookrouter.ratelimit import Limit, decide
from hookrouter.ratelimit.keys import bucket_keys

from .conftest import build

WORKER = Path(__file__).with_name("flood_worker.py")


async def test_many_clients_in_one_process_never_over_grant(cluster: RedisClusterProcess) -> None:
    cluster.flushall()
    limit = Limit(50, 0.001)  # no meaningful refill during the test
    routers = [
        build(None, tuple(cluster.startup_nodes), mode) for mode in ("script", "function", "script")
    ]
    try:
        results = await asyncio.gather(
            *(decide(r, "acme", "ingest", limit) for _ in range(100) for r in routers)
        )
        assert sum(d.allowed for d in results) == 50
        assert not any(d.degraded for d in results)
    finally:
        for r in routers:
            await r.close()


def _redis_time(cluster: RedisClusterProcess, key: str) -> float:
    client = cluster.nodes[0].client()
    try:
        slot = client.execute_command("CLUSTER KEYSLOT", key)
        for node in cluster.nodes:
            c = node.client()
            owns = any(
                int(lo) <= slot <= int(hi)
                for lo, hi, *_ in c.execute_command("CLUSTER SLOTS")
                if str(_[0][1]) == str(node.port)
            )
            if owns:
                seconds, micros = c.time()
                c.close()
                return seconds + micros / 1e6
            c.close()
    finally:
        client.close()
    raise AssertionError("no node owns the slot")


def _run_workers(
    cluster: RedisClusterProcess, cfg: dict[str, Any], k: int
) -> tuple[list[dict[str, Any]], float]:
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(k)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        key = bucket_keys(cfg["tenant"], "ingest").bucket
        t0 = _redis_time(cluster, key)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        reports = []
        for p in procs:
            out, _ = p.communicate(timeout=30)
            reports.append(json.loads(out.strip().splitlines()[-1]))
        t1 = _redis_time(cluster, key)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return reports, t1 - t0


@pytest.mark.parametrize(("mode", "lease"), [("script", 0), ("function", 0), ("script", 10)])
def test_router_processes_stay_within_the_bound(
    cluster: RedisClusterProcess, mode: str, lease: int
) -> None:
    cluster.flushall()
    k = 3
    cfg = {
        "nodes": cluster.startup_nodes, "mode": mode, "lease": lease,
        "tenant": f"flood-{mode}-{lease}", "capacity": 20, "rate": 200.0, "duration": 0.5,
        "concurrency": 20,
    }  # fmt: skip
    reports, window = _run_workers(cluster, cfg, k)
    grants = sum(r["grants"] for r in reports)
    leased = sum(r["leased"] for r in reports)
    exact = cfg["capacity"] + cfg["rate"] * window  # what one exact bucket can grant in the window
    assert not any(r["degraded"] for r in reports)
    assert grants >= cfg["capacity"]  # they did flood
    if lease == 0:
        assert grants <= exact
    else:
        assert leased <= exact + 1e-6  # Redis hands out leases by the exact rules
        for r in reports:
            assert r["grants"] <= r["leased"] + 1e-6  # every local grant spends a leased token
            assert r["unspent"] <= lease
        assert grants <= exact + k * lease  # the documented bound
