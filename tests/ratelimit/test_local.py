"""The in-process limiter (no [redis] section), driven by a ManualClock; wait_for_token."""

from __future__ import annotations

import pytest

from hookrouter.clock import ManualClock
from hookrouter.ratelimit import Limit, LocalBucketLimiter, decide, wait_for_token

LIMIT = Limit(10, 5)


async def test_burst_then_refill_rate_with_exact_retry_after() -> None:
    clock = ManualClock()
    limiter = LocalBucketLimiter(clock)
    decisions = [limiter.try_acquire_nowait("acme", "ingest", LIMIT) for _ in range(12)]
    assert [d.allowed for d in decisions] == [True] * 10 + [False] * 2
    assert decisions[-1].retry_after == pytest.approx(0.2)
    clock.advance(0.1)
    half = limiter.try_acquire_nowait("acme", "ingest", LIMIT)
    assert not half.allowed and half.retry_after == pytest.approx(0.1)
    assert half.remaining == pytest.approx(0.5)  # fractions are kept
    clock.advance(0.1)
    assert limiter.try_acquire_nowait("acme", "ingest", LIMIT).allowed
    # Over 10 s of steady demand: exactly rate x time more grants (1/64 s steps
    # are exact in binary floating point, so no rounding blurs the count).
    grants = 0
    for _ in range(640):
        clock.advance(1 / 64)
        grants += limiter.try_acquire_nowait("acme", "ingest", LIMIT).allowed
    assert grants == 50
    assert (await limiter.acquire("beta", "ingest", LIMIT)).allowed  # tenants are separate
    assert limiter.stats()["allowed"] == 10 + 1 + 50 + 1


async def test_idle_buckets_are_forgotten_when_full_again() -> None:
    clock = ManualClock()
    limiter = LocalBucketLimiter(clock, sweep_interval=1.0)
    for tenant in ("a", "b", "c"):
        limiter.try_acquire_nowait(tenant, "ingest", LIMIT)  # 9 left: full again after 0.2 s
    for _ in range(10):
        limiter.try_acquire_nowait("busy", "ingest", LIMIT)  # empty: full again after 2 s
    clock.advance(1.0)
    limiter.try_acquire_nowait("d", "ingest", LIMIT)  # triggers the sweep
    stats = limiter.stats()
    assert stats["forgotten"] == 3 and stats["buckets"] == 2
    assert stats["allowed"] == 14  # counts survive the sweep
    # A forgotten bucket is a full one.
    assert all(limiter.try_acquire_nowait("a", "ingest", LIMIT).allowed for _ in range(10))


async def test_wait_for_token_waits_the_retry_after() -> None:
    clock = ManualClock()
    limiter = LocalBucketLimiter(clock)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    for _ in range(10):
        await decide(limiter, "acme", "ep:1", LIMIT)
    waited = await wait_for_token(limiter, "acme", "ep:1", LIMIT, max_wait=1.0, sleep=sleep)
    assert waited == pytest.approx(0.2) and slept == [pytest.approx(0.2)]
    # Three tokens at 5/s are 0.6 s away: more than max_wait gives up without sleeping.
    assert (
        await wait_for_token(limiter, "acme", "ep:1", Limit(10, 5), 3, max_wait=0.5, sleep=sleep)
        is None
    )
    assert len(slept) == 1


async def test_costs_beyond_capacity_are_rejected() -> None:
    limiter = LocalBucketLimiter(ManualClock())
    with pytest.raises(ValueError):
        limiter.try_acquire_nowait("acme", "ingest", LIMIT, cost=11)
