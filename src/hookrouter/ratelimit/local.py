"""In-process token buckets: the limiter when the config has no ``[redis]`` section.

Exact for one router process (several processes each get the whole limit).
Uses :mod:`~hookrouter.ratelimit.bucket` with the clock's monotonic time, so
tests drive it with a ``ManualClock``. Every decision is synchronous:
``try_acquire_nowait`` never returns ``None``.

Idle buckets are forgotten the way Redis's ``PEXPIRE`` forgets them: a bucket
whose refill would have made it full again is dropped (absent means full), in
a sweep run at most every ``sweep_interval`` seconds of clock time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.ratelimit import metrics
from hookrouter.ratelimit.bucket import BucketState, Decision, Limit, idle_ttl, take, validate_cost


class _Bucket:
    __slots__ = ("allowed", "denied", "expires_at", "state")

    def __init__(self) -> None:
        self.state: BucketState | None = None
        self.expires_at = 0.0
        self.allowed = 0
        self.denied = 0


class LocalBucketLimiter:
    """The :class:`~hookrouter.ratelimit.base.RateLimiter` kept in this process's memory."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, sweep_interval: float = 60.0) -> None:
        self._clock = clock
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._sweep_interval = sweep_interval
        self._next_sweep = clock.monotonic() + sweep_interval
        self._forgotten = 0
        # Counts of buckets already swept, per tenant, so metrics never go backwards.
        self._swept_counts: dict[tuple[str, str], int] = {}
        metrics.track(self)

    def __repr__(self) -> str:
        return f"LocalBucketLimiter(buckets={len(self._buckets)}, clock={self._clock!r})"

    def try_acquire_nowait(
        self, tenant_id: str, scope: str, limit: Limit, cost: float = 1.0
    ) -> Decision:
        """Decide now (never ``None``)."""
        validate_cost(limit, cost)
        now = self._clock.monotonic()
        if now >= self._next_sweep:
            self.sweep(now)
        key = (tenant_id, scope)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket()
        result = take(bucket.state, limit, now, cost, cost)
        if result.state is None:
            bucket.denied += 1
            return Decision(False, result.tokens, result.retry_after)
        bucket.state = result.state
        bucket.expires_at = now + idle_ttl(limit, result.tokens)
        bucket.allowed += 1
        return Decision(True, result.tokens, 0.0)

    async def acquire(
        self, tenant_id: str, scope: str, limit: Limit, cost: float = 1.0
    ) -> Decision:
        """Same as :meth:`try_acquire_nowait`."""
        return self.try_acquire_nowait(tenant_id, scope, limit, cost)

    def sweep(self, now: float) -> int:
        """Forget buckets that have refilled completely by ``now``; returns how many."""
        idle = [k for k, b in self._buckets.items() if b.expires_at <= now]
        for key in idle:
            bucket = self._buckets.pop(key)
            for result, count in (("allowed", bucket.allowed), ("denied", bucket.denied)):
                counted = (key[0], result)
                self._swept_counts[counted] = self._swept_counts.get(counted, 0) + count
        self._forgotten += len(idle)
        self._next_sweep = now + self._sweep_interval
        return len(idle)

    async def close(self) -> None:
        metrics.retire(self)

    def stats(self) -> dict[str, Any]:
        buckets = self._buckets.values()
        swept = self._swept_counts
        return {
            "backend": "local",
            "buckets": len(self._buckets),
            "forgotten": self._forgotten,
            "allowed": sum(b.allowed for b in buckets)
            + sum(v for (_, r), v in swept.items() if r == "allowed"),
            "denied": sum(b.denied for b in buckets)
            + sum(v for (_, r), v in swept.items() if r == "denied"),
        }

    def metric_samples(self) -> Iterable[metrics.Sample]:
        for (tenant, result), count in self._swept_counts.items():
            yield "decisions", (tenant, result), count
        for (tenant, _scope), bucket in self._buckets.items():
            yield "decisions", (tenant, "allowed"), bucket.allowed
            yield "decisions", (tenant, "denied"), bucket.denied
