"""Per-tenant rate limiting: token buckets in process or in Redis (standalone or Cluster).

Interface (what the ingest handler, the delivery worker and the config loader use)
---------------------------------------------------------------------------------
::

    Limit(capacity: float, refill_per_second: float)            # frozen dataclass
    Decision(allowed: bool, remaining: float, retry_after: float, degraded: bool = False)

    class RateLimiter(Protocol):                                 # base.py
        def try_acquire_nowait(tenant_id, scope, limit, cost=1.0) -> Decision | None
        def acquire(tenant_id, scope, limit, cost=1.0) -> Awaitable[Decision]
        async def close() -> None
        def stats() -> dict[str, Any]

    await decide(limiter, tenant_id, scope, limit, cost=1.0) -> Decision  # nowait, else acquire
    await wait_for_token(limiter, tenant_id, scope, limit, cost=1.0, *, max_wait,
                         sleep=asyncio.sleep) -> float | None
        # seconds waited; None when the grant would come later than max_wait
    retry_after_header(decision) -> str      # whole seconds, rounded up, >= 1

    RedisBucketLimiter extras: await check_health() -> bool   (PING now; for readiness)
                               await set_override(tenant_id, scope, Limit | None)
                               (a live per-tenant limit in Redis that every router obeys)

    parse_redis_config(table | None, path="redis") -> (RedisSettings | None, list[ConfigIssue])
    parse_limit(value, path) -> (Limit | None, list[ConfigIssue])
    build_limiter(settings: RedisSettings | None, clock=SYSTEM_CLOCK) -> RateLimiter

Usage: ingest calls ``limiter.try_acquire_nowait(...)`` first (local answers:
leased tokens, cached denials, the in-process bucket, Redis known down) and
awaits ``acquire`` only on ``None``; a denial becomes 429 with
``Retry-After: retry_after_header(decision)``. ``decision.degraded`` marks an
answer from ``on_redis_error`` (Redis did not answer within ``timeout_ms``).
``scope`` names a bucket within the tenant: ``"ingest"``, ``"src:<id>"``,
``"ep:<id>"``. Call everything from the event loop the limiter runs on, and
``close()`` the limiter on shutdown (its metrics are folded into the totals).

Delivery-side limits (an endpoint's rate) should not hold a delivery slot
while waiting: call :func:`decide` and, on a denial, reschedule the delivery
``decision.retry_after`` seconds later (:func:`wait_for_token` is the simple
form that sleeps in place).

Modules: ``bucket`` (pure maths, mirrored by ``token_bucket.lua``), ``keys``
(every Redis key name), ``scripts`` (script + Functions library from one
body), ``slots`` (leases and the denial cache, pure, with the precision
bound), ``health`` (Redis up/down state machine, pure), ``redis_calls``
(redis-py: batches, NOSCRIPT / lost-library recovery), ``redis_limiter``
(batching, deadlines, failure policy), ``local`` (in-process), ``config``,
``metrics``. ``RedisBucketLimiter`` is imported from ``redis_limiter``, not
from here: importing this package does not load redis-py.
"""

from __future__ import annotations

from hookrouter.ratelimit.base import RateLimiter, decide, wait_for_token
from hookrouter.ratelimit.bucket import Decision, Limit, retry_after_header
from hookrouter.ratelimit.config import (
    RedisSettings,
    build_limiter,
    parse_limit,
    parse_redis_config,
)
from hookrouter.ratelimit.local import LocalBucketLimiter

__all__ = [
    "Decision",
    "Limit",
    "LocalBucketLimiter",
    "RateLimiter",
    "RedisSettings",
    "build_limiter",
    "decide",
    "parse_limit",
    "parse_redis_config",
    "retry_after_header",
    "wait_for_token",
]
