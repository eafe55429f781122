"""Token buckets in Redis, shared by every router process.

Theory of operation
-------------------
A decision first tries to answer locally (:mod:`~hookrouter.ratelimit.slots`:
leased supply, denial cache) in :meth:`RedisBucketLimiter.try_acquire_nowait`.
Otherwise it goes to Redis through the :class:`~.batcher.Batcher`, which
coalesces the calls of one loop turn into one round trip and answers each by
its deadline (``timeout``), whatever Redis does.

Health (:mod:`~.health`): a failed round trip marks Redis ``DOWN``; from then
decisions get the policy immediately, without touching the network, until a
probe (PING, scheduled with exponential backoff by the next decision that
finds one due) succeeds. Each fallback is counted by reason and logged at
most once per ``log_interval`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.log_throttle import LogThrottle
from hookrouter.ratelimit import metrics
from hookrouter.ratelimit.batcher import Batcher, Pending
from hookrouter.ratelimit.bucket import Decision, Limit, validate_cost
from hookrouter.ratelimit.health import HealthEvent, HealthMachine
from hookrouter.ratelimit.keys import bucket_keys, check_prefix, override_fields
from hookrouter.ratelimit.redis_calls import (
    BucketCall,
    BucketCaller,
    BucketReply,
    RedisUnavailable,
)
from hookrouter.ratelimit.slots import (
    LeaseBook,
    LeasePlan,
    Slot,
    apply_reply,
    decide_locally,
    exact_decision,
    policy_decision,
    refill_request,
)

log = logging.getLogger("hookrouter.ratelimit")

Policy = Literal["allow", "deny"]
EXACT = LeasePlan()  # no leases: one Redis decision per request (or cached denial)


@dataclass(slots=True)
class _Waiter:
    """A decision queued for the next lease; ``deadline`` in event-loop time."""

    cost: float
    limit: Limit
    deadline: float
    future: asyncio.Future[Decision]


class RedisBucketLimiter:
    """The :class:`~hookrouter.ratelimit.base.RateLimiter` backed by Redis (or Redis Cluster).

    Call its methods from the event loop that owns ``caller``'s client.
    """

    def __init__(
        self,
        caller: BucketCaller,
        *,
        clock: Clock = SYSTEM_CLOCK,
        lease: LeasePlan = EXACT,
        on_redis_error: Policy = "allow",
        timeout: float = 0.05,
        key_prefix: str = "",
        max_inflight: int = 4,
        log_interval: float = 10.0,
        rng: random.Random | None = None,
    ) -> None:
        check_prefix(key_prefix)
        self._caller = caller
        self._clock = clock
        self._plan = lease
        self._allow_on_error = on_redis_error == "allow"
        self._timeout = timeout
        self._prefix = key_prefix
        self._rng = rng or random.Random()
        # ``leases`` is public: ingest admission grants from it directly (compiled).
        self.leases = LeaseBook(lease.low_water)
        self._slots: dict[tuple[str, str], Slot] = self.leases.slots
        self._health = HealthMachine()
        self._log_throttle = LogThrottle(log_interval)
        self._batcher = Batcher(
            caller, self._settle, self._batch_done,
            clock=clock, timeout=timeout, max_inflight=max_inflight,
        )  # fmt: skip
        self._tasks: set[asyncio.Task[None]] = set()  # probes, connection resets
        self._queues: dict[tuple[str, str], deque[_Waiter]] = {}  # decisions waiting for a lease
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._errors: dict[str, int] = {
            "timeout": 0,
            "unavailable": 0,
            "redis_down": 0,
            "response": 0,
        }
        self._probes = 0
        self._closed = False
        metrics.track(self)

    def __repr__(self) -> str:
        return (
            f"RedisBucketLimiter({self._caller!r}, lease={self._plan.size}, "
            f"health={self._health.state.value}, slots={len(self._slots)}, "
            f"{self._batcher!r})"
        )

    # -- the RateLimiter interface -------------------------------------------------

    def try_acquire_nowait(
        self, tenant_id: str, scope: str, limit: Limit, cost: float = 1.0
    ) -> Decision | None:
        """Decide without waiting, or return ``None``: then ``await acquire(...)``."""
        decision = self.leases.take(tenant_id, scope, limit, cost)
        if decision is not None:
            return decision
        validate_cost(limit, cost)
        return self._nowait(self._slot(tenant_id, scope), limit, cost)

    def _nowait(self, slot: Slot, limit: Limit, cost: float) -> Decision | None:
        now = self._clock.monotonic()
        # While decisions wait for a lease, newcomers queue behind them (FIFO).
        decision = decide_locally(slot, limit, cost, now) if not slot.waiters else None
        if decision is not None:
            # Above the low-water mark no prefetch is due (refill_request agrees):
            # skip the call, since this runs for every request.
            plan = self._plan
            if decision.allowed and plan.enabled and slot.supply <= plan.low_water:
                self._maybe_prefetch(slot, limit, cost, now)
            return decision
        if not self._health.up:
            return self._fallback(slot, "redis_down", now)
        return None

    def acquire(
        self, tenant_id: str, scope: str, limit: Limit, cost: float = 1.0
    ) -> Awaitable[Decision]:
        """Decide, asking Redis if needed; never waits longer than ``timeout``.

        With leases the result is a plain future (no task per waiting decision).
        """
        validate_cost(limit, cost)
        slot = self._slot(tenant_id, scope)
        decision = self._nowait(slot, limit, cost)
        if decision is not None:
            done: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
            done.set_result(decision)
            return done
        if self._plan.enabled:
            return self._wait_for_lease(slot, limit, cost)
        return self._acquire_exact(slot, limit, cost)

    async def _acquire_exact(self, slot: Slot, limit: Limit, cost: float) -> Decision:
        reply = await self._batcher.submit(slot, self._call(slot, limit, cost, cost), lease=False)
        if isinstance(reply, str):
            return self._fallback(slot, reply, self._clock.monotonic())
        return exact_decision(slot, reply.granted, reply.tokens, reply.retry_after)

    async def close(self) -> None:
        """Answer everything pending with the policy, stop background work, close the client."""
        if self._closed:
            return
        self._closed = True
        await self._batcher.close()
        for key, queue in list(self._queues.items()):
            self._flush_waiters(self._slots[key], queue, "closed")
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._caller.close()
        metrics.retire(self)

    def stats(self) -> dict[str, Any]:
        """Counters and state for tests, ``/metrics`` and the admin API."""
        slots = self._slots.values()
        return {
            "backend": "redis",
            "topology": "cluster" if self._caller.cluster else "standalone",
            "mode": self._caller.mode,
            "lease": self._plan.size,
            "low_water": self._plan.low_water,
            "health": self._health.state.value,
            "slots": len(self._slots),
            "allowed": sum(s.allowed for s in slots),
            "denied": sum(s.denied for s in slots),
            "policy_allowed": sum(s.policy_allowed for s in slots),
            "policy_denied": sum(s.policy_denied for s in slots),
            "local_supply": sum(s.supply for s in slots),
            "lease_refills": sum(s.refills for s in slots),
            "leased_tokens": sum(s.leased for s in slots),
            "lease_waits": sum(s.waits for s in slots),
            "redis_calls": self._caller.round_trips,
            "redis_commands": self._caller.commands,
            "program_loads": self._caller.loads,
            "batches": self._batcher.batches,
            "largest_batch": self._batcher.largest_batch,
            "inflight_batches": self._batcher.inflight,
            "probes": self._probes,
            "errors": dict(self._errors),
        }

    # -- extras (not part of the RateLimiter protocol) ------------------------------

    @property
    def redis_up(self) -> bool:
        """Whether decisions go to Redis now (operator events poll it)."""
        return self._health.up

    async def check_health(self) -> bool:
        """Probe Redis now (PING) and update health. For readiness checks and tests."""
        self._health.on(HealthEvent.PROBE_START, self._clock.monotonic())
        return await self._probe()

    async def set_override(self, tenant_id: str, scope: str, limit: Limit | None) -> None:
        """Override (or with ``None`` clear) ``scope``'s limit for this tenant in Redis.

        Every router's next decision for that bucket uses it, whatever limit
        its own configuration passes.
        """
        keys = bucket_keys(tenant_id, scope, self._prefix)
        cap_field, rate_field = override_fields(scope)
        if limit is None:
            await self._caller.client.hdel(keys.limits, cap_field, rate_field)
        else:
            items = [cap_field, repr(limit.capacity), rate_field, repr(limit.refill_per_second)]
            await self._caller.client.hset(keys.limits, items=items)

    def metric_samples(self) -> Iterable[metrics.Sample]:
        for slot in self._slots.values():
            labels = (slot.tenant,)
            yield "decisions", (*labels, "allowed"), slot.allowed
            yield "decisions", (*labels, "denied"), slot.denied
            yield "decisions", (*labels, "policy_allowed"), slot.policy_allowed
            yield "decisions", (*labels, "policy_denied"), slot.policy_denied
            yield "lease_refills", (), slot.refills
            yield "leased_tokens", (), slot.leased
            yield "lease_waits", (), slot.waits
        for reason, count in self._errors.items():
            yield "errors", (reason,), count
        yield "redis_calls", (), self._caller.round_trips
        yield "redis_commands", (), self._caller.commands

    # -- leases ---------------------------------------------------------------------

    def _wait_for_lease(self, slot: Slot, limit: Limit, cost: float) -> asyncio.Future[Decision]:
        """Queue a decision behind the slot's earlier waiters until a lease serves it.

        A plain future in a per-slot FIFO, served by callbacks when a refill
        lands and bounded by one deadline timer per slot: no task per waiting
        decision. Under load a burst of requests arriving in one loop turn can
        empty a small lease before its refill returns; each of them then waits
        here, so this path must cost little more than the local one.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Decision] = loop.create_future()
        key = (slot.tenant, slot.scope)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        queue.append(_Waiter(cost, limit, loop.time() + self._timeout, future))
        slot.waiters += 1
        slot.waits += 1
        self._serve(slot, queue)
        return future

    def _serve(self, slot: Slot, queue: deque[_Waiter]) -> None:
        """Answer waiters in order while the supply or the denial cache can; then ask Redis."""
        now = self._clock.monotonic()
        granted: _Waiter | None = None
        while queue:
            waiter = queue[0]
            if not waiter.future.done():
                decision = decide_locally(slot, waiter.limit, waiter.cost, now)
                if decision is None:
                    break
                waiter.future.set_result(decision)
                if decision.allowed:
                    granted = waiter
            queue.popleft()
            slot.waiters -= 1
        if not queue:
            self._disarm(slot)
            if granted is not None:
                self._maybe_prefetch(slot, granted.limit, granted.cost, now)
            return
        head = queue[0]
        if not slot.refilling:
            if not self._health.up or self._closed:
                self._flush_waiters(slot, queue, "redis_down")
                return
            request = refill_request(slot, self._plan, head.limit, head.cost, now=now, demand=True)
            assert request is not None  # no refill in flight
            self._start_refill(slot, head.limit, *request)
        self._arm(slot, head.deadline)

    def _refill_landed(self, slot: Slot, outcome: BucketReply | BaseException | str) -> None:
        """A lease came back (or failed): serve the slot's waiters, or give them the policy."""
        queue = self._queues.get((slot.tenant, slot.scope))
        if not queue:
            return
        if isinstance(outcome, BucketReply):
            self._serve(slot, queue)
        else:
            self._flush_waiters(slot, queue, outcome if isinstance(outcome, str) else "response")

    def _flush_waiters(self, slot: Slot, queue: deque[_Waiter], reason: str) -> None:
        """Answer every waiter with the failure policy (Redis failed, timed out or is down)."""
        self._give_policy(slot, queue, reason, due_by=None)
        self._disarm(slot)

    def _give_policy(
        self, slot: Slot, queue: deque[_Waiter], reason: str, *, due_by: float | None
    ) -> None:
        """The policy answers the waiters at the head: all, or those due by ``due_by``."""
        now = self._clock.monotonic()
        # Deadlines grow along the queue (one timeout for all), so the due ones lead it.
        while queue and (due_by is None or queue[0].deadline <= due_by):
            waiter = queue.popleft()
            slot.waiters -= 1
            if not waiter.future.done():
                waiter.future.set_result(self._fallback(slot, reason, now))

    def _arm(self, slot: Slot, deadline: float) -> None:
        key = (slot.tenant, slot.scope)
        timer = self._timers.get(key)
        if timer is not None and timer.when() == deadline:
            return
        if timer is not None:
            timer.cancel()
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_at(deadline, self._expire_waiters, slot)

    def _disarm(self, slot: Slot) -> None:
        timer = self._timers.pop((slot.tenant, slot.scope), None)
        if timer is not None:
            timer.cancel()

    def _expire_waiters(self, slot: Slot) -> None:
        """The head's deadline passed: the policy answers every waiter that is due."""
        key = (slot.tenant, slot.scope)
        self._timers.pop(key, None)
        queue = self._queues.get(key)
        if not queue:
            return
        self._give_policy(slot, queue, "timeout", due_by=asyncio.get_running_loop().time())
        if queue:
            self._arm(slot, queue[0].deadline)

    def _maybe_prefetch(self, slot: Slot, limit: Limit, cost: float, now: float) -> None:
        if not self._health.up or self._closed:
            return
        request = refill_request(slot, self._plan, limit, cost, now=now, demand=False)
        if request is not None:
            self._start_refill(slot, limit, *request)

    def _start_refill(self, slot: Slot, limit: Limit, want: float, need: float) -> None:
        slot.refilling = True
        # Its outcome reaches the waiters through _settle, even when it comes late.
        self._batcher.submit(slot, self._call(slot, limit, want, need), lease=True)

    # -- outcomes from the batcher -----------------------------------------------------

    def _settle(
        self, entry: Pending, outcome: BucketReply | BaseException | str, sent_at: float
    ) -> None:
        """Apply what Redis did for one call, whether or not its waiters are still waiting."""
        if isinstance(outcome, BucketReply):
            apply_reply(
                entry.slot, outcome.granted, outcome.retry_after,
                need=entry.call.need, sent_at=sent_at, lease=entry.lease,
            )  # fmt: skip
        elif isinstance(outcome, BaseException):
            self._log("redis refused a rate-limit call", outcome)
        if entry.lease:
            entry.slot.refilling = False
            self._refill_landed(entry.slot, outcome)

    def _batch_done(self, error: BaseException | None) -> None:
        now = self._clock.monotonic()
        if error is None:
            self._health.on(HealthEvent.CALL_OK, now)
        elif isinstance(error, RedisUnavailable):
            was_up = self._health.up
            self._health.on(HealthEvent.CALL_FAILED, now, self._rng.random())
            if was_up:
                self._log("redis unavailable for rate limiting; applying on_redis_error", error)
                self._spawn(self._caller.drop_connections())
        else:
            log.exception("unexpected error in a rate-limit round trip", exc_info=error)

    # -- health and the failure policy ----------------------------------------------

    def _fallback(self, slot: Slot, reason: str, now: float) -> Decision:
        self._errors[reason] = self._errors.get(reason, 0) + 1
        if self._health.probe_due(now) and not self._closed:
            self._health.on(HealthEvent.PROBE_START, now)
            self._spawn(self._probe())
        return policy_decision(slot, self._allow_on_error)

    async def _probe(self) -> bool:
        """One PING after PROBE_START; any failure, even an unexpected one, ends the probe."""
        self._probes += 1
        was_up = self._health.up
        try:
            await asyncio.wait_for(self._caller.ping(), max(self._timeout, 0.5))
        except Exception as exc:
            self._health.on(HealthEvent.PROBE_FAILED, self._clock.monotonic(), self._rng.random())
            self._log("redis probe failed", exc)
            return False
        self._health.on(HealthEvent.PROBE_OK, self._clock.monotonic())
        if not was_up:
            log.info("redis reachable again; rate limiting resumes")
        return True

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _log(self, message: str, exc: BaseException) -> None:
        skipped = self._log_throttle.should_log(self._clock.monotonic())
        if skipped is not None:
            more = f" ({skipped} similar messages suppressed)" if skipped else ""
            log.warning("%s: %s%s", message, exc, more)

    # -- helpers ----------------------------------------------------------------------

    def _slot(self, tenant_id: str, scope: str) -> Slot:
        slot = self._slots.get((tenant_id, scope))
        if slot is None:
            keys = bucket_keys(tenant_id, scope, self._prefix)
            slot = self._slots[(tenant_id, scope)] = Slot(tenant_id, scope, keys)
        return slot

    @staticmethod
    def _call(slot: Slot, limit: Limit, want: float, need: float) -> BucketCall:
        return BucketCall(
            slot.keys, slot.scope, limit.capacity, limit.refill_per_second, want, need
        )
