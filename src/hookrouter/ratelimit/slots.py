"""What a router remembers about one (tenant, scope) bucket between Redis calls. Sans-IO.

Theory of operation
-------------------
**Denial cache.** Every Redis answer says how long until ``need`` tokens
exist again (``retry_after``: after a denial, or after a grant that left
fewer than ``need``). Before then the bucket cannot hold ``need`` tokens:
tokens only grow by refill, and other routers only take. So until then the
router denies any request needing at least ``need`` on its own, with the
remaining wait as ``retry_after``. This is exact, not an estimate; it turns a
flood into about one Redis call per *grant*. The cache starts from the time
the request was *sent* (never later than Redis's decision), so it can only
expire early (costing a call), never deny a grantable request.

**Leases** (``lease = N`` > 0). A router takes up to ``N`` tokens from Redis in
one call (never more than the capacity) and spends them locally. When a local
grant leaves the supply at or below ``low_water``, it asks for the next lease
in the background, at most one request per bucket at a time, topping the
supply up to ``N``. A decision that finds too little supply waits for that
refill (or starts one), bounded by the decision timeout. While decisions
wait, newcomers queue behind them instead of taking the refill as it lands
(first come, first served; otherwise a waiter can lose every round).

**Precision bound.** Redis grants leases by the exact bucket rules, so over
any window the tokens leased out are at most what an exact bucket allows
(``capacity + rate x window``). Every local grant spends a leased token once,
so, summed over K router processes, grants in a window ≤ exact bucket grants
in that window + the supply the K routers held when it began. A router's
supply never exceeds ``max(N, cost)`` (refills top up to N), hence::

    grants(window) ≤ exact(window) + K · max(N, cost)

Leased tokens a router never spends (traffic stopped, process exited) are
lost: the error is an over-grant of at most K·N, or an under-grant.
While Redis is unavailable the failure policy, not this bound, applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hookrouter.ratelimit.bucket import Decision, Limit
from hookrouter.ratelimit.keys import BucketKeys


@dataclass(frozen=True, slots=True)
class LeasePlan:
    """``size`` tokens per lease (0 = exact: one Redis decision per request)."""

    size: int = 0
    low_water: int = 0

    def __post_init__(self) -> None:
        if self.size < 0 or not (0 <= self.low_water < max(self.size, 1)):
            raise ValueError(f"need size >= 0 and 0 <= low_water < size, got {self}")

    @property
    def enabled(self) -> bool:
        return self.size > 0


@dataclass(slots=True)
class Slot:
    """Local memory of one bucket: leased supply, denial cache, counters."""

    tenant: str
    scope: str
    keys: BucketKeys
    supply: float = 0.0
    refilling: bool = False
    waiters: int = 0  # decisions waiting for a lease: newcomers queue behind them
    denied_until: float = -math.inf
    denied_need: float = math.inf
    allowed: int = 0
    denied: int = 0
    policy_allowed: int = 0
    policy_denied: int = 0
    refills: int = 0
    leased: float = 0.0
    waits: int = 0  # decisions that found the supply short and waited for a lease


def decide_locally(slot: Slot, limit: Limit, cost: float, now: float) -> Decision | None:
    """Answer from the leased supply or the denial cache, or ``None`` (ask Redis)."""
    if slot.supply >= cost:
        slot.supply -= cost
        slot.allowed += 1
        return Decision(True, slot.supply, 0.0)
    if now < slot.denied_until and cost - slot.supply >= slot.denied_need:
        slot.denied += 1
        wait = slot.denied_until - now
        # Redis held denied_need - retry_after * rate tokens; estimate them now.
        in_redis = max(0.0, slot.denied_need - wait * limit.refill_per_second)
        return Decision(False, slot.supply + in_redis, wait)
    return None


def take_from_lease(slot: Slot, limit: Limit, cost: float, low_water: float) -> Decision | None:
    """The usual decision, which needs no clock: a grant from the leased supply.

    Only when nobody is queued and the supply stays above ``low_water``
    afterwards (no prefetch due); ``None`` for anything else, including a
    cost the bucket can never grant, and the caller takes the full path
    (validation, ``decide_locally``, the prefetch, Redis). It is the
    ingest's per-request call, kept here, compiled, for that reason.
    """
    if slot.waiters or not 0 < cost <= limit.capacity or slot.supply - cost <= low_water:
        return None
    slot.supply -= cost
    slot.allowed += 1
    return Decision(True, slot.supply, 0.0)


class LeaseBook:
    """A limiter's slots by ``(tenant, scope)``, with the per-request lease grant.

    ``take`` is ``take_from_lease`` behind the slot lookup, as a method of a
    compiled class: callers that hold the book (ingest admission) make the
    usual decision without an interpreted frame (the limiter's own
    ``try_acquire_nowait`` is interpreted Python). The limiter owns the
    slots; the book only reads them and spends supply the way
    ``take_from_lease`` does.
    """

    __slots__ = ("low_water", "slots")

    def __init__(self, low_water: float) -> None:
        self.slots: dict[tuple[str, str], Slot] = {}
        self.low_water = low_water

    def take(self, tenant_id: str, scope: str, limit: Limit, cost: float = 1.0) -> Decision | None:
        """A grant from the bucket's leased supply, or ``None``: ask the limiter."""
        slot = self.slots.get((tenant_id, scope))
        if slot is None:
            return None
        return take_from_lease(slot, limit, cost, self.low_water)


def refill_request(
    slot: Slot, plan: LeasePlan, limit: Limit, cost: float, *, now: float, demand: bool
) -> tuple[float, float] | None:
    """``(want, need)`` for the next lease, or ``None`` when none should be sent.

    ``demand``: a decision is waiting (supply < cost). Otherwise this is the
    low-water prefetch after a local grant.
    """
    if slot.refilling:
        return None
    target = max(min(float(plan.size), limit.capacity), cost)
    want = target - slot.supply
    if demand:
        return want, cost - slot.supply
    if slot.supply > plan.low_water or want <= 0 or now < slot.denied_until:
        return None
    # Ask for at least one more decision's worth, so an empty bucket comes
    # back as a denial with its retry_after (and fills the denial cache).
    return want, min(cost, want)


def apply_reply(
    slot: Slot, granted: float, retry_after: float, *, need: float, sent_at: float, lease: bool
) -> None:
    """Record a Redis answer: add a lease to the supply; remember when ``need`` is possible."""
    if granted > 0 and lease:
        slot.supply += granted
        slot.leased += granted
    if retry_after > 0:
        slot.denied_until = sent_at + retry_after
        slot.denied_need = need
    else:
        slot.denied_until = -math.inf
        slot.denied_need = math.inf
    if lease:
        slot.refilling = False
        slot.refills += 1


def exact_decision(slot: Slot, granted: float, tokens: float, retry_after: float) -> Decision:
    """The decision for a non-leased request from Redis's answer."""
    if granted > 0:
        slot.allowed += 1
        return Decision(True, tokens, 0.0)
    slot.denied += 1
    return Decision(False, tokens, retry_after)


# Retry-After for a request refused by on_redis_error = "deny": one second is
# the smallest Retry-After a client can be told, and about when a probe will
# have found out whether Redis is back (backoff capped at 2 s).
POLICY_DENY_RETRY_AFTER = 1.0


def policy_decision(slot: Slot, allow: bool) -> Decision:
    """The failure policy's answer (``degraded``), counted on the slot."""
    if allow:
        slot.policy_allowed += 1
        return Decision(True, slot.supply, 0.0, degraded=True)
    slot.policy_denied += 1
    return Decision(False, slot.supply, POLICY_DENY_RETRY_AFTER, degraded=True)
