"""The limiter interface every backend implements, and helpers on top of it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from hookrouter.ratelimit.bucket import Decision, Limit


class RateLimiter(Protocol):
    """Token buckets keyed by ``(tenant_id, scope)``; each call passes the bucket's limit.

    ``scope`` names the bucket within the tenant: ``"ingest"``,
    ``"src:<source_id>"``, ``"ep:<endpoint_id>"``... A denial is a result
    (``Decision.allowed`` false, ``retry_after`` in seconds), never an exception.
    Methods must be called from the event loop the limiter runs on.
    """

    def try_acquire_nowait(
        self, tenant_id: str, scope: str, limit: Limit, cost: float = 1.0
    ) -> Decision | None:
        """Decide without waiting when possible; ``None`` means "await ``acquire``"."""
        ...

    def acquire(
        self, tenant_id: str, scope: str, limit: Limit, cost: float = 1.0
    ) -> Awaitable[Decision]:
        """Decide; waits at most the configured timeout (then the failure policy answers).

        An awaitable rather than a coroutine function, so a backend can hand
        out a plain future (cheaper than a task on the ingest hot path).
        """
        ...

    async def close(self) -> None:
        """Release connections and background tasks; idempotent."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters and state: decisions, Redis calls, errors, health."""
        ...


async def decide(
    limiter: RateLimiter, tenant_id: str, scope: str, limit: Limit, cost: float = 1.0
) -> Decision:
    """``try_acquire_nowait``, falling back to ``acquire``: the ingest hot path in one call."""
    decision = limiter.try_acquire_nowait(tenant_id, scope, limit, cost)
    if decision is None:
        decision = await limiter.acquire(tenant_id, scope, limit, cost)
    return decision


async def wait_for_token(
    limiter: RateLimiter,
    tenant_id: str,
    scope: str,
    limit: Limit,
    cost: float = 1.0,
    *,
    max_wait: float,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> float | None:
    """Wait until the bucket grants ``cost`` tokens; returns seconds waited, or ``None``.

    For limits that delay rather than reject (an endpoint's delivery rate).
    Gives up (``None``) when the next grant would come later than
    ``max_wait`` seconds from the start. ``sleep`` is injectable so tests can
    drive a manual clock. A caller that must not hold resources while waiting
    (a delivery slot, a credit) should instead call :func:`decide` and
    reschedule the work ``decision.retry_after`` seconds later.
    """
    waited = 0.0
    while True:
        decision = await decide(limiter, tenant_id, scope, limit, cost)
        if decision.allowed:
            return waited
        # A floor of 1 ms keeps a zero retry_after from spinning the loop.
        delay = max(decision.retry_after, 0.001)
        if waited + delay > max_wait:
            return None
        await sleep(delay)
        waited += delay
