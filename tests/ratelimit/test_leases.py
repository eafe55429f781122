"""Leases: Redis calls saved per 1,000 decisions, low-water prefetch, one refill at a time."""

from __future__ import annotations

import asyncio

from tests.support.redis_servers import RedisServer

from hookrouter.config.catalog import Catalog
from hookrouter.config.entities import SourceConfig, TenantConfig
from hookrouter.ingress.admission import RateLimitAdmission
from hookrouter.ratelimit import Limit, decide

from .conftest import build

ROOMY = Limit(1_000_000, 1_000_000)  # never denies: measures pure lease mechanics


async def _calls_per_1000(server: RedisServer, lease: int) -> tuple[int, int]:
    limiter = build(server.url, (), "script", lease=lease)
    try:
        for _ in range(1000):
            decision = await decide(limiter, "hot", "ingest", ROOMY)
            assert decision.allowed and not decision.degraded
        await asyncio.sleep(0)  # let a last prefetch land before counting
        stats = limiter.stats()
        return stats["redis_calls"], stats["redis_commands"]
    finally:
        await limiter.close()


async def test_lease_of_100_needs_50x_fewer_redis_calls(standalone_server: RedisServer) -> None:
    counts = {lease: await _calls_per_1000(standalone_server, lease) for lease in (0, 1, 10, 100)}
    print("redis (round trips, commands) per 1000 decisions by lease size:", counts)
    exact_calls = counts[0][0]
    assert exact_calls >= 1000  # one decision, one round trip
    assert counts[1][0] >= 500  # a lease of one token saves little
    assert counts[10][0] <= 150
    assert counts[100][0] * 50 <= exact_calls
    assert counts[100][1] <= 20


async def test_low_water_prefetch_keeps_decisions_local(standalone_server: RedisServer) -> None:
    limiter = build(standalone_server.url, (), "script", lease=100, low_water=50)
    try:
        assert (await decide(limiter, "hot", "ingest", ROOMY)).allowed  # first lease
        nowait = 0
        for _ in range(500):
            decision = limiter.try_acquire_nowait("hot", "ingest", ROOMY)
            if decision is None:
                decision = await limiter.acquire("hot", "ingest", ROOMY)
            else:
                nowait += 1
            assert decision.allowed
            # Requests arrive spaced out, as real traffic does: 50 of them (the
            # low-water mark) span far more than a loopback round trip.
            await asyncio.sleep(0.0005)
        # The next lease arrived before the supply ran out: (almost) nothing waited.
        assert nowait >= 495
        stats = limiter.stats()
        assert stats["lease_refills"] <= 12
    finally:
        await limiter.close()


async def test_concurrent_waiters_share_one_refill(standalone_server: RedisServer) -> None:
    limiter = build(standalone_server.url, (), "script", lease=50)
    try:
        decisions = await asyncio.gather(
            *(decide(limiter, "hot", "ingest", ROOMY) for _ in range(40))
        )
        assert all(d.allowed for d in decisions)
        # 40 waiters, one lease (plus the low-water prefetch it triggered).
        stats = limiter.stats()
        assert stats["redis_commands"] <= 2 and stats["lease_waits"] == 40
    finally:
        await limiter.close()


async def test_a_flood_on_a_leased_bucket_is_answered_locally(
    standalone_server: RedisServer,
) -> None:
    limiter = build(standalone_server.url, (), "script", lease=10)
    limit = Limit(5, 0.5)
    try:
        results = [await decide(limiter, "noisy", "ingest", limit) for _ in range(200)]
        assert sum(d.allowed for d in results) == 5
        denied = [d for d in results if not d.allowed]
        assert all(1.5 < d.retry_after <= 2.0 for d in denied)
        # One lease, then the denial cache: a handful of calls for 200 decisions.
        assert limiter.stats()["redis_commands"] <= 3
    finally:
        await limiter.close()


async def test_newcomers_queue_behind_waiting_decisions(standalone_server: RedisServer) -> None:
    limiter = build(standalone_server.url, (), "script", lease=10, low_water=0)
    try:
        assert (await decide(limiter, "hot", "ingest", ROOMY)).allowed  # lease of 10, 9 left
        for _ in range(8):
            assert limiter.try_acquire_nowait("hot", "ingest", ROOMY) is not None
        # One token left; a decision costing two waits for the next lease.
        waiter = asyncio.ensure_future(limiter.acquire("hot", "ingest", ROOMY, cost=2))
        await asyncio.sleep(0)
        # A newcomer may not take that token from under the waiter: it queues.
        assert limiter.try_acquire_nowait("hot", "ingest", ROOMY) is None
        assert (await waiter).allowed
        assert limiter.try_acquire_nowait("hot", "ingest", ROOMY) is not None
    finally:
        await limiter.close()


async def test_ingest_admission_spends_the_leases_the_limiter_holds(
    standalone_server: RedisServer,
) -> None:
    """The admission grants from the limiter's own lease book: same counts, same buckets."""
    tenant = TenantConfig("acme", rate_limit=Limit(100, 1))
    source = SourceConfig("stripe-in", "acme", "stripe", ("whsec_x",), rate_limit=Limit(80, 1))
    live = Catalog([tenant], [source], []).sources["stripe-in"]
    assert [scope for _, scope, _ in live.rate_checks] == ["ingest", "src:stripe-in"]
    limiter = build(standalone_server.url, (), "script", lease=20, low_water=5)
    admission = RateLimitAdmission(limiter)
    try:
        refusal = None
        answered = 0
        for _ in range(200):
            decision = admission.check(live)
            if isinstance(decision, asyncio.Future):
                decision = await decision
            if decision is not None:
                refusal = decision
                break
            answered += 1
        # The source's bucket (80) runs out first, whichever path granted.
        assert answered == 80
        assert refusal is not None and refusal.response.status == 429
        assert dict(refusal.response.headers)["retry-after"] == "1"
        slots = limiter.leases.slots
        assert slots[("acme", "src:stripe-in")].allowed == 80
        assert slots[("acme", "ingest")].allowed == 81  # the tenant's bucket granted the 81st
        assert limiter.stats()["redis_calls"] <= 20  # leases, not a call per request
    finally:
        await limiter.close()
