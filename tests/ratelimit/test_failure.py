"""Redis failures: lost programs are reloaded; an unreachable or stuck Redis gets the policy, fast.

Each test here owns its redis-server (it stops, restarts or pauses it). The
probe schedule runs on a ManualClock, so "time passes" is a clock advance;
only real I/O (a restart, a paused process) is waited for.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable

import pytest
from tests.support.redis_servers import RedisClusterProcess, RedisServer

from hookrouter.clock import ManualClock
from hookrouter.ratelimit import Decision, Limit, decide
from hookrouter.ratelimit.redis_limiter import RedisBucketLimiter

from .conftest import LimiterFactory, Target, build

LIMIT = Limit(1000, 1000)
ROOMY = Limit(1_000_000, 1_000_000)  # never denies


async def _until(predicate: Callable[[], bool], what: str, limit: float = 5.0) -> None:
    """Let the loop run real I/O (a probe) until ``predicate`` holds."""
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def _timed(coro: Awaitable[object]) -> float:
    started = time.perf_counter()
    await coro
    return time.perf_counter() - started


async def test_script_reloaded_after_script_flush(
    limiter_factory: LimiterFactory, target: Target
) -> None:
    limiter = limiter_factory()
    assert (await decide(limiter, "acme", "ingest", LIMIT)).allowed
    loads = limiter.stats()["program_loads"]
    if target.topology == "cluster":
        for c in limiter._caller.client.get_primaries():  # every node forgets
            await limiter._caller.client.execute_command(
                "SCRIPT FLUSH" if target.mode == "script" else "FUNCTION FLUSH", target_nodes=c
            )
    elif target.mode == "script":
        await limiter._caller.client.script_flush()
    else:
        await limiter._caller.client.function_flush()
    decisions = await asyncio.gather(*(decide(limiter, "acme", "ingest", LIMIT) for _ in range(5)))
    assert all(d.allowed and not d.degraded for d in decisions)
    assert limiter.stats()["program_loads"] == loads + 1


@pytest.mark.parametrize("mode", ["script", "function"])
async def test_program_survives_a_real_restart(own_server: RedisServer, mode: str) -> None:
    # What is tested is the reload, not its speed: a reconnect plus a program
    # load can pass the default timeout on a loaded 2-core box.
    limiter = build(own_server.url, (), mode, timeout=5.0)  # type: ignore[arg-type]
    try:
        assert (await decide(limiter, "acme", "ingest", LIMIT)).allowed
        own_server.stop()
        own_server.start()  # same port, empty: no scripts, no functions
        decision = await decide(limiter, "acme", "ingest", LIMIT)
        assert decision.allowed and not decision.degraded
        assert limiter.stats()["health"] == "up"
    finally:
        await limiter.close()


@pytest.mark.parametrize("policy", ["allow", "deny"])
async def test_stopped_redis_gets_the_policy_fast_and_recovers(
    own_server: RedisServer, policy: str
) -> None:
    clock = ManualClock()
    limiter = build(own_server.url, (), "script", clock=clock, timeout=0.2, on_redis_error=policy)  # type: ignore[arg-type]
    try:
        assert (await decide(limiter, "acme", "ingest", LIMIT)).allowed
        own_server.stop()
        first = await decide(limiter, "acme", "ingest", LIMIT)  # finds out: connection refused
        assert first.degraded and first.allowed is (policy == "allow")
        if policy == "deny":
            assert first.retry_after == 1.0
        assert limiter.stats()["health"] == "down"
        calls = limiter.stats()["redis_calls"]
        # While down: answered at once, without touching the network.
        elapsed = [await _timed(decide(limiter, "acme", "ingest", LIMIT)) for _ in range(200)]
        elapsed.sort()
        assert elapsed[len(elapsed) // 2] < 0.001  # no network round trip
        assert elapsed[-1] < 0.1  # not even the 0.2 s timeout, despite a loaded box
        assert limiter.stats()["redis_calls"] == calls
        assert limiter.stats()["errors"]["redis_down"] == 200
        own_server.start()
        clock.advance(3.0)  # past the probe backoff (capped at 2 s)
        assert (await decide(limiter, "acme", "ingest", LIMIT)).degraded  # triggers the probe
        await _until(lambda: limiter.stats()["health"] == "up", "probe")
        after = await decide(limiter, "acme", "ingest", LIMIT)
        assert after.allowed and not after.degraded
    finally:
        await limiter.close()


async def test_failed_probe_backs_off(own_server: RedisServer) -> None:
    clock = ManualClock()
    limiter = build(own_server.url, (), "script", clock=clock, timeout=0.2)
    try:
        own_server.stop()
        await decide(limiter, "acme", "ingest", LIMIT)
        clock.advance(0.2)  # past the first backoff (50 ms x jitter < 1.5)
        await decide(limiter, "acme", "ingest", LIMIT)
        await _until(
            lambda: limiter.stats()["probes"] == 1 and limiter.stats()["health"] == "down", "probe"
        )
        probes = limiter.stats()["probes"]
        clock.advance(0.04)  # the second backoff is at least 50 ms: no probe yet
        await decide(limiter, "acme", "ingest", LIMIT)
        await asyncio.sleep(0.01)
        assert limiter.stats()["probes"] == probes
    finally:
        await limiter.close()


async def _twenty_decisions_while_stopped(
    server: RedisServer, limiter: RedisBucketLimiter, limit: Limit
) -> tuple[list[Decision], float]:
    """20 concurrent decisions while Redis is SIGSTOPped (accepts nothing, answers
    nothing); returns them and the seconds they took. Redis resumes afterwards."""
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        started = time.perf_counter()
        decisions = await asyncio.gather(
            *(decide(limiter, "acme", "ingest", limit) for _ in range(20))
        )
        return list(decisions), time.perf_counter() - started
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)


async def test_stuck_redis_never_holds_a_decision_past_the_timeout(own_server: RedisServer) -> None:
    limiter = build(own_server.url, (), "script", timeout=0.05, socket_timeout=5.0)
    try:
        assert (await decide(limiter, "acme", "ingest", LIMIT)).allowed
        decisions, waited = await _twenty_decisions_while_stopped(own_server, limiter, LIMIT)
        assert all(d.degraded and d.allowed for d in decisions)
        assert 0.04 < waited < 0.25
        assert limiter.stats()["errors"]["timeout"] == 20
        # The late reply still arrives; Redis is healthy and decisions are real again.
        await _until(lambda: limiter.stats()["inflight_batches"] == 0, "late reply")
        decision = await decide(limiter, "acme", "ingest", LIMIT)
        assert decision.allowed and not decision.degraded
    finally:
        await limiter.close()


async def test_stuck_redis_answers_lease_waiters_by_their_deadline(own_server: RedisServer) -> None:
    limiter = build(
        own_server.url, (), "script", lease=10, low_water=0, timeout=0.05, socket_timeout=5.0
    )
    try:
        for _ in range(10):  # the first lease, spent to the last token
            assert (await decide(limiter, "acme", "ingest", ROOMY)).allowed
        decisions, waited = await _twenty_decisions_while_stopped(own_server, limiter, ROOMY)
        # Every waiter got the policy (allow) by its own deadline, none hung.
        assert all(d.degraded and d.allowed for d in decisions)
        assert 0.04 < waited < 0.25
        stats = limiter.stats()
        # The first lease was waited for too.
        assert stats["lease_waits"] == 1 + 20 and stats["errors"]["timeout"] == 20
        await _until(lambda: limiter.stats()["inflight_batches"] == 0, "late reply")
        decision = await decide(limiter, "acme", "ingest", ROOMY)
        assert decision.allowed and not decision.degraded
    finally:
        await limiter.close()


async def test_leased_supply_is_spent_while_redis_is_down(own_server: RedisServer) -> None:
    clock = ManualClock()
    limiter: RedisBucketLimiter = build(
        own_server.url, (), "script", clock=clock, lease=10, low_water=0, on_redis_error="deny"
    )
    try:
        assert (await decide(limiter, "acme", "ingest", LIMIT)).allowed  # leases 10, spends 1
        own_server.stop()
        local = [limiter.try_acquire_nowait("acme", "ingest", LIMIT) for _ in range(9)]
        assert all(d is not None and d.allowed and not d.degraded for d in local)
        after = await decide(limiter, "acme", "ingest", LIMIT)
        assert after.degraded and not after.allowed
    finally:
        await limiter.close()


async def test_cluster_keeps_answering_after_flush_of_all_nodes(
    cluster: RedisClusterProcess,
) -> None:
    cluster.flushall()
    limiter = build(None, tuple(cluster.startup_nodes), "function")
    try:
        decisions = await asyncio.gather(
            *(decide(limiter, f"t{i}", "ingest", LIMIT) for i in range(30))
        )
        assert all(d.allowed and not d.degraded for d in decisions)
    finally:
        await limiter.close()


async def test_outage_mid_run_keeps_answering_and_recovers(own_server: RedisServer) -> None:
    """Traffic never stops: during the outage every decision still comes back quickly."""
    limiter = build(own_server.url, (), "script", timeout=0.05)
    latencies: list[tuple[float, bool]] = []  # (seconds, degraded)
    stop = asyncio.Event()

    async def traffic() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            decision = await decide(limiter, "acme", "ingest", LIMIT)
            latencies.append((time.perf_counter() - started, decision.degraded))
            await asyncio.sleep(0.002)

    task = asyncio.create_task(traffic())
    try:
        await _until(lambda: len(latencies) > 20, "traffic")
        await asyncio.to_thread(own_server.stop)  # the loop keeps serving meanwhile
        await _until(lambda: limiter.stats()["health"] == "down", "outage noticed")
        during = len(latencies)
        await _until(lambda: len(latencies) > during + 50, "traffic during the outage")
        await asyncio.to_thread(own_server.start)
        await _until(lambda: limiter.stats()["health"] == "up", "recovery")
        recovered = len(latencies)
        await _until(lambda: len(latencies) > recovered + 20, "traffic after recovery")
    finally:
        stop.set()
        await task
        await limiter.close()
    assert (
        max(seconds for seconds, _ in latencies) < 0.05 + 0.05
    )  # timeout + slack on a shared 2-core box
    assert all(degraded for _, degraded in latencies[during : during + 50])
    assert not any(degraded for _, degraded in latencies[recovered + 1 :])
    assert limiter.stats()["errors"]["redis_down"] >= 50
