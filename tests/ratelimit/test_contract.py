"""The token-bucket contract on standalone Redis and a 3-master cluster, script and function.

Time here is Redis's own clock (the script reads TIME), so a few tests wait
real refill intervals (at most ~0.6 s each); none waits for a timeout.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from hookrouter.ratelimit import Limit, decide
from hookrouter.ratelimit.bucket import BucketState, take
from hookrouter.ratelimit.keys import bucket_keys
from hookrouter.ratelimit.redis_calls import BucketCall, BucketCaller, BucketReply

from .conftest import LimiterFactory, Target

LIMIT = Limit(capacity=10, refill_per_second=5)


def _call(
    tenant: str, scope: str, limit: Limit, want: float, need: float | None = None
) -> BucketCall:
    return BucketCall(
        bucket_keys(tenant, scope), scope, limit.capacity, limit.refill_per_second,
        want, want if need is None else need,
    )  # fmt: skip


async def _raw(caller: BucketCaller, call: BucketCall) -> BucketReply:
    (reply,) = await caller.run([call])
    assert isinstance(reply, BucketReply), reply
    return reply


async def test_burst_yields_exactly_capacity(limiter_factory: LimiterFactory) -> None:
    limiter = limiter_factory()
    decisions = await asyncio.gather(*(decide(limiter, "acme", "ingest", LIMIT) for _ in range(30)))
    assert sum(d.allowed for d in decisions) == 10
    denied = [d for d in decisions if not d.allowed]
    # The 11th token is ~0.2 s away (1 token at 5/s), less what refilled during the burst.
    assert all(0.17 < d.retry_after <= 0.2 for d in denied), denied
    assert not any(d.degraded for d in decisions)
    stats = limiter.stats()
    assert stats["allowed"] == 10 and stats["denied"] == 20
    # Concurrent decisions shared round trips instead of paying one each.
    assert stats["redis_calls"] < 30 and stats["largest_batch"] > 1


async def test_grants_follow_the_refill_rate_under_flood(limiter_factory: LimiterFactory) -> None:
    limiter = limiter_factory()
    started = time.monotonic()
    granted = 0
    while time.monotonic() - started < 0.6:
        batch = await asyncio.gather(*(decide(limiter, "acme", "ingest", LIMIT) for _ in range(5)))
        granted += sum(d.allowed for d in batch)
        await asyncio.sleep(0.005)
    elapsed = time.monotonic() - started
    # Burst of 10, then 5/s; a grant can lag the refill by one polling interval.
    assert 10 + int(elapsed * 5) - 1 <= granted <= 10 + elapsed * 5 + 1
    # The denial cache answered most of the flood without Redis.
    stats = limiter.stats()
    assert stats["redis_commands"] < (stats["allowed"] + stats["denied"]) / 2


async def test_retry_after_is_accurate_to_a_few_ms(target: Target) -> None:
    caller = BucketCaller(target.client(), target.mode)
    try:
        for _ in range(10):
            assert (await _raw(caller, _call("acme", "ingest", LIMIT, 1))).granted == 1
        t_a = time.perf_counter()
        first = await _raw(caller, _call("acme", "ingest", LIMIT, 1))
        t_b = time.perf_counter()
        assert first.granted == 0 and 0.17 < first.retry_after <= 0.2
        await asyncio.sleep(first.retry_after - 0.05)
        t_c = time.perf_counter()
        second = await _raw(caller, _call("acme", "ingest", LIMIT, 1))
        t_d = time.perf_counter()
        assert second.granted == 0
        # Redis's clock moved between t_c - t_b and t_d - t_a from one decision to the
        # next; retry_after must shrink by exactly that (2 ms for clock granularity).
        assert first.retry_after - (t_d - t_a) - 0.002 <= second.retry_after
        assert second.retry_after <= first.retry_after - (t_c - t_b) + 0.002
        await asyncio.sleep(second.retry_after + 0.003)
        assert (await _raw(caller, _call("acme", "ingest", LIMIT, 1))).granted == 1
    finally:
        await caller.close()


async def test_fractional_tokens_survive_as_strings(target: Target) -> None:
    caller = BucketCaller(target.client(), target.mode)
    slow = Limit(10, 0.01)  # refill is negligible even if the box stalls between calls
    try:
        reply = await _raw(caller, _call("acme", "ingest", slow, 9.75))
        assert reply.granted == 9.75
        assert reply.tokens == pytest.approx(0.25, abs=0.01)  # not truncated to 0
        stored = await caller.client.hget(bucket_keys("acme", "ingest").bucket, "tokens")
        assert float(stored) == pytest.approx(0.25, abs=0.01)
        reply = await _raw(caller, _call("acme", "ingest", slow, 0.25))
        assert reply.granted == 0.25
        assert 0 <= reply.tokens < 0.001
    finally:
        await caller.close()


async def test_lua_matches_the_pure_bucket(target: Target) -> None:
    """Each grant stores exactly what bucket.take computes from the last state and Redis's ts."""
    caller = BucketCaller(target.client(), target.mode)
    key = bucket_keys("acme", "mirror").bucket
    limit = Limit(7.5, 3.25)
    try:
        state: BucketState | None = None
        for want, need in [(2, 1), (3.5, 0.5), (1, 1), (0.3, 0.3), (5, 0.1), (1, 1)]:
            reply = await _raw(caller, _call("acme", "mirror", limit, want, need))
            tokens, ts = (float(v) for v in await caller.client.hmget(key, "tokens", "ts"))
            if reply.granted:
                expected = take(state, limit, ts, want, need)
                assert (reply.granted, reply.tokens) == (expected.granted, expected.tokens)
                assert tokens == expected.tokens
                state = BucketState(tokens, ts)
    finally:
        await caller.close()


async def test_denial_writes_nothing(target: Target) -> None:
    caller = BucketCaller(target.client(), target.mode)
    key = bucket_keys("acme", "ingest").bucket
    try:
        await _raw(caller, _call("acme", "ingest", LIMIT, 10))
        before = await caller.client.hgetall(key)
        assert (await _raw(caller, _call("acme", "ingest", LIMIT, 5))).granted == 0
        assert await caller.client.hgetall(key) == before
    finally:
        await caller.close()


async def test_idle_keys_expire_once_they_would_be_full(target: Target) -> None:
    caller = BucketCaller(target.client(), target.mode)
    try:
        await _raw(caller, _call("acme", "ingest", LIMIT, 1))
        # One token short of full at 5/s: gone after 200 ms.
        ttl = await caller.client.pttl(bucket_keys("acme", "ingest").bucket)
        assert 100 < ttl <= 200
        fast = Limit(2, 1000)
        await _raw(caller, _call("acme", "fast", fast, 2))
        key = bucket_keys("acme", "fast").bucket
        assert await caller.client.pttl(key) <= 2  # (-2 if already gone)
        await asyncio.sleep(0.02)
        assert await caller.client.exists(key) == 0
        # A forgotten bucket is a full bucket.
        assert (await _raw(caller, _call("acme", "fast", fast, 2))).granted == 2
    finally:
        await caller.close()


async def test_override_in_second_key_applies(limiter_factory: LimiterFactory) -> None:
    limiter = limiter_factory()
    await limiter.set_override("acme", "ingest", Limit(2, 0.001))
    decisions = await asyncio.gather(*(decide(limiter, "acme", "ingest", LIMIT) for _ in range(5)))
    assert sum(d.allowed for d in decisions) == 2
    # Other tenants and scopes keep the configured limit.
    others = await asyncio.gather(*(decide(limiter, "beta", "ingest", LIMIT) for _ in range(5)))
    assert all(d.allowed for d in others)


async def test_leases_in_one_process_are_exact(limiter_factory: LimiterFactory) -> None:
    limiter = limiter_factory(lease=10)
    limit = Limit(25, 0.001)
    results = [await decide(limiter, "acme", "ingest", limit) for _ in range(40)]
    assert sum(d.allowed for d in results) == 25
    stats = limiter.stats()
    assert stats["leased_tokens"] == pytest.approx(25, abs=0.01)
    assert stats["lease_refills"] <= 5
    # Tenants are independent.
    assert (await decide(limiter, "beta", "ingest", limit)).allowed


async def test_tenants_and_scopes_are_isolated(limiter_factory: LimiterFactory) -> None:
    limiter = limiter_factory()
    flood = await asyncio.gather(*(decide(limiter, "noisy", "ingest", LIMIT) for _ in range(50)))
    quiet = await asyncio.gather(*(decide(limiter, "quiet", "ingest", LIMIT) for _ in range(10)))
    other_scope = await decide(limiter, "noisy", "src:stripe", LIMIT)
    assert sum(d.allowed for d in flood) == 10
    assert all(d.allowed for d in quiet)
    assert other_scope.allowed
