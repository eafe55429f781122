"""Token bucket arithmetic, sans-IO.

Theory of operation
-------------------
A bucket holds up to ``capacity`` tokens and gains ``refill_per_second``
tokens per second. Its whole state is two numbers, ``tokens`` and the time
``ts`` they were last computed; a missing state means a full bucket. A request
names what it *needs* (the least it can use, the decision's cost) and what it
*wants* (the most it will take: equal to ``need`` for an exact decision, a
whole lease for a router process that spends tokens locally):

1. refill: ``tokens = min(capacity, tokens + (now - ts) * rate)``; time never
   runs backwards (a negative elapsed, e.g. after a failover to a server
   whose clock is behind, counts as zero);
2. grant ``min(want, tokens)`` when ``tokens >= need``, else grant nothing;
   either way report ``retry_after = max(0, need - tokens) / rate`` for the
   tokens left: the time until ``need`` tokens exist if nobody else takes any
   (for a denial, when to retry; after a grant, when the same request could
   next succeed);
3. a denial writes nothing (the refilled state is implied by the old one), so
   a flood costs reads only;
4. a key may be forgotten once it would have refilled to ``capacity``:
   :func:`idle_ttl` is that time, and a forgotten key is a full bucket, so
   expiry never changes a decision.

``token_bucket.lua`` runs exactly these rules inside Redis with Redis's own
``TIME``; :class:`~hookrouter.ratelimit.local.LocalBucketLimiter` runs them in
process. Tests hold both to this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limit:
    """A token bucket: bursts of up to ``capacity``, sustained ``refill_per_second``."""

    capacity: float
    refill_per_second: float

    def __post_init__(self) -> None:
        # Zero or negative values would divide by zero in retry_after and ttl;
        # configs are validated by config.parse_limit, this guards code callers.
        if not (self.capacity > 0 and self.refill_per_second > 0):
            raise ValueError(f"capacity and refill_per_second must be > 0, got {self}")
        if not (math.isfinite(self.capacity) and math.isfinite(self.refill_per_second)):
            raise ValueError(f"capacity and refill_per_second must be finite, got {self}")


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to one request for tokens.

    ``remaining``: tokens left after this decision (for a leased limiter, the
    local supply). ``retry_after``: seconds until the request could succeed
    (0 when allowed). ``degraded``: the decision came from ``on_redis_error``
    because Redis could not answer in time, not from a bucket.
    """

    allowed: bool
    remaining: float
    retry_after: float
    degraded: bool = False

    # Written out: mypyc leaves a dataclass's generated __init__ interpreted
    # (mypyc/mypyc#817; docs/engines.md, "Compiled hot paths").
    def __init__(
        self, allowed: bool, remaining: float, retry_after: float, degraded: bool = False
    ) -> None:
        object.__setattr__(self, "allowed", allowed)  # frozen: no plain assignment
        object.__setattr__(self, "remaining", remaining)
        object.__setattr__(self, "retry_after", retry_after)
        object.__setattr__(self, "degraded", degraded)


@dataclass(frozen=True, slots=True)
class BucketState:
    """Tokens in a bucket at time ``ts`` (seconds, same clock as ``now``)."""

    tokens: float
    ts: float


@dataclass(frozen=True, slots=True)
class Take:
    """Result of :func:`take`: what was granted and the state to store.

    ``state`` is ``None`` when nothing must be written (a denial).
    """

    granted: float
    tokens: float
    retry_after: float
    state: BucketState | None


def refill(state: BucketState | None, limit: Limit, now: float) -> float:
    """Tokens in the bucket at ``now``."""
    if state is None:
        return limit.capacity
    elapsed = max(0.0, now - state.ts)
    return min(limit.capacity, state.tokens + elapsed * limit.refill_per_second)


def take(state: BucketState | None, limit: Limit, now: float, want: float, need: float) -> Take:
    """Take between ``need`` and ``want`` tokens at ``now``, or nothing."""
    tokens = refill(state, limit, now)
    new_state = None
    granted = 0.0
    if tokens >= need:
        granted = min(want, tokens)
        tokens -= granted
        new_state = BucketState(tokens, now)
    retry_after = (need - tokens) / limit.refill_per_second if tokens < need else 0.0
    return Take(granted, tokens, retry_after, new_state)


def idle_ttl(limit: Limit, tokens: float) -> float:
    """Seconds after which a bucket holding ``tokens`` is full again, and may be forgotten."""
    return max(0.0, limit.capacity - tokens) / limit.refill_per_second


def idle_ttl_ms(limit: Limit, tokens: float) -> int:
    """:func:`idle_ttl` in whole milliseconds, rounded up, at least 1 (as PEXPIRE gets it)."""
    return max(1, math.ceil(idle_ttl(limit, tokens) * 1000))


def validate_cost(limit: Limit, cost: float) -> None:
    """Reject costs a bucket can never grant (they would be denied forever)."""
    if not (0 < cost <= limit.capacity):
        raise ValueError(f"cost must be in (0, capacity={limit.capacity}], got {cost}")


def retry_after_header(decision: Decision) -> str:
    """``Retry-After`` value for a denial: whole seconds, rounded up, at least 1."""
    # The epsilon keeps float noise (2.0000000000000004 s) from adding a whole second.
    return str(max(1, math.ceil(decision.retry_after - 1e-9)))
