"""Token buckets in Redis, shared by every router process.

Theory of operation
-------------------
A decision first tries to answer locally (:mod:`~hookrouter.ratelimit.slots`:
leased supply, denial cache) in :meth:`RedisBucketLimiter.try_acquire_nowait`.
Otherwise it joins the *open batch*: every call that arrives before the event
loop gets round to the flush callback (``call_soon``: the same loop turn)
goes to Redis in one round trip (:class:`~.redis_calls.BucketCaller`). Up to
``max_inflight`` batches travel at once; while they do, new calls gather in
the next batch, so batches grow with load instead of round trips.

Deadline: when a batch opens, a timer is armed for ``timeout`` seconds; on
expiry every unanswered call in it gets the failure policy. So no decision
waits longer than ``timeout``, whatever Redis or the network does; a reply
that arrives later still updates leases and the denial cache.

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
import time
from collections.abc import Iterable
from typing import Any, Literal

from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.ratelimit import metrics
from hookrouter.ratelimit.bucket import Decision, Limit, validate_cost
from hookrouter.ratelimit.health import HealthEvent, HealthMachine, LogThrottle
from hookrouter.ratelimit.keys import bucket_keys, check_prefix, override_fields
from hookrouter.ratelimit.redis_calls import (
    BucketCall,
    BucketCaller,
    BucketReply,
    Outcome,
    RedisUnavailable,
)
from hookrouter.ratelimit.slots import (
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


class _Entry:
    """One call waiting in a batch, and the future its decision(s) wait on."""

    __slots__ = ("call", "future", "lease", "slot")

    def __init__(self, slot: Slot, call: BucketCall, lease: bool, future: asyncio.Future[Any]):
        self.slot = slot
        self.call = call
        self.lease = lease
        self.future: asyncio.Future[BucketReply | str] = future


class _Batch:
    __slots__ = ("entries", "sent", "timer")

    def __init__(self) -> None:
        self.entries: list[_Entry] = []
        self.sent = False
        self.timer: asyncio.TimerHandle | None = None


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
        self._max_inflight = max_inflight
        self._rng = rng or random.Random()
        self._slots: dict[tuple[str, str], Slot] = {}
        self._health = HealthMachine()
        self._log_throttle = LogThrottle(log_interval)
        self._open: _Batch | None = None
        self._flush_scheduled = False
        self._inflight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._refill_futures: dict[tuple[str, str], asyncio.Future[BucketReply | str]] = {}
        self._errors: dict[str, int] = {
            "timeout": 0,
            "unavailable": 0,
            "redis_down": 0,
            "response": 0,
        }
        self._batches = 0
        self._largest_batch = 0
        self._probes = 0
        self._closed = False
        metrics.track(self)

    def __repr__(self) -> str:
        return (
            f"RedisBucketLimiter({self._caller!r}, lease={self._plan.size}, "
            f"health={self._health.state.value}, slots={len(self._slots)}, "
            f"inflight={self._inflight})"
        )

    # -- the RateLimiter interface -------------------------------------------------

    def try_acquire_nowait(
        self, tenant_id: str, scope: str, limit: Limit, cost: float = 1.0
    ) -> Decision | None:
        """Decide without waiting, or return ``None``: then ``await acquire(...)``."""
        validate_cost(limit, cost)
        return self._nowait(self._slot(tenant_id, scope), limit, cost)

    def _nowait(self, slot: Slot, limit: Limit, cost: float) -> Decision | None:
        now = self._clock.monotonic()
        decision = decide_locally(slot, limit, cost, now)
        if decision is not None:
            if decision.allowed and self._plan.enabled:
                self._maybe_prefetch(slot, limit, cost, now)
            return decision
        if not self._health.up:
            return self._fallback(slot, "redis_down", now)
        return None

    async def acquire(
        self, tenant_id: str, scope: str, limit: Limit, cost: float = 1.0
    ) -> Decision:
        """Decide, asking Redis if needed; never waits longer than ``timeout``."""
        validate_cost(limit, cost)
        slot = self._slot(tenant_id, scope)
        decision = self._nowait(slot, limit, cost)
        if decision is not None:
            return decision
        if self._plan.enabled:
            return await self._acquire_leased(slot, limit, cost)
        reply = await self._enqueue(slot, self._call(slot, limit, cost, cost), lease=False)
        if isinstance(reply, str):
            return self._fallback(slot, reply, self._clock.monotonic())
        return exact_decision(slot, reply.granted, reply.tokens, reply.retry_after)

    async def close(self) -> None:
        """Answer everything pending with the policy, stop background work, close the client."""
        if self._closed:
            return
        self._closed = True
        if self._open is not None:
            self._expire(self._open, "closed")
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
            "redis_calls": self._caller.round_trips,
            "redis_commands": self._caller.commands,
            "program_loads": self._caller.loads,
            "batches": self._batches,
            "largest_batch": self._largest_batch,
            "inflight_batches": self._inflight,
            "probes": self._probes,
            "errors": dict(self._errors),
        }

    # -- extras (not part of the RateLimiter protocol) ------------------------------

    async def check_health(self) -> bool:
        """Probe Redis now (PING); updates health. For readiness checks and tests."""
        now = self._clock.monotonic()
        self._health.on(HealthEvent.PROBE_START, now)
        self._probes += 1
        try:
            await asyncio.wait_for(self._caller.ping(), max(self._timeout, 0.5))
        except (RedisUnavailable, TimeoutError) as exc:
            self._health.on(HealthEvent.PROBE_FAILED, self._clock.monotonic(), self._rng.random())
            self._log("redis probe failed", exc)
            return False
        self._health.on(HealthEvent.PROBE_OK, self._clock.monotonic())
        return True

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
        for reason, count in self._errors.items():
            yield "errors", (reason,), count
        yield "redis_calls", (), self._caller.round_trips
        yield "redis_commands", (), self._caller.commands

    # -- leases ---------------------------------------------------------------------

    async def _acquire_leased(self, slot: Slot, limit: Limit, cost: float) -> Decision:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        key = (slot.tenant, slot.scope)
        # Other waiters of this router may spend a refill first; then the next
        # waiter asks again. Each round either grants, or ends in a denial the
        # cache remembers, or in the failure policy; the deadline bounds it.
        while (remaining := deadline - loop.time()) > 0:
            future = self._refill_futures.get(key)
            if future is None:
                now = self._clock.monotonic()
                request = refill_request(slot, self._plan, limit, cost, now=now, demand=True)
                assert request is not None  # no refill in flight
                future = self._start_refill(slot, limit, *request)
            try:
                reply = await asyncio.wait_for(asyncio.shield(future), remaining)
            except TimeoutError:
                break
            now = self._clock.monotonic()
            if isinstance(reply, str):
                return self._fallback(slot, reply, now)
            decision = decide_locally(slot, limit, cost, now)
            if decision is not None:
                if decision.allowed:
                    self._maybe_prefetch(slot, limit, cost, now)
                return decision
        return self._fallback(slot, "timeout", self._clock.monotonic())

    def _maybe_prefetch(self, slot: Slot, limit: Limit, cost: float, now: float) -> None:
        if not self._health.up or self._closed:
            return
        request = refill_request(slot, self._plan, limit, cost, now=now, demand=False)
        if request is not None:
            self._start_refill(slot, limit, *request)

    def _start_refill(
        self, slot: Slot, limit: Limit, want: float, need: float
    ) -> asyncio.Future[BucketReply | str]:
        slot.refilling = True
        future = self._enqueue(slot, self._call(slot, limit, want, need), lease=True)
        self._refill_futures[(slot.tenant, slot.scope)] = future
        return future

    # -- batching -------------------------------------------------------------------

    def _enqueue(
        self, slot: Slot, call: BucketCall, lease: bool
    ) -> asyncio.Future[BucketReply | str]:
        loop = asyncio.get_running_loop()
        batch = self._open
        if batch is None:
            batch = self._open = _Batch()
            batch.timer = loop.call_later(self._timeout, self._expire, batch)
        entry = _Entry(slot, call, lease, loop.create_future())
        batch.entries.append(entry)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return entry.future

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch = self._open
        if batch is None or self._inflight >= self._max_inflight:
            return  # a finishing batch flushes again
        self._open = None
        batch.sent = True
        self._inflight += 1
        self._batches += 1
        self._largest_batch = max(self._largest_batch, len(batch.entries))
        task = asyncio.get_running_loop().create_task(self._run(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: _Batch) -> None:
        sent_at = self._clock.monotonic()
        started = time.perf_counter()
        try:
            outcomes = await self._caller.run([e.call for e in batch.entries])
        except RedisUnavailable as exc:
            self._on_unavailable(exc, batch)
        except asyncio.CancelledError:
            self._resolve_all(batch)
            raise
        except Exception as exc:  # a bug or an unexpected redis-py error: answer, log
            self._log("unexpected rate-limit error", exc)
            self._resolve_all(batch)
        else:
            metrics.REDIS_SECONDS.observe(time.perf_counter() - started)
            self._health.on(HealthEvent.CALL_OK, self._clock.monotonic())
            for entry, outcome in zip(batch.entries, outcomes, strict=True):
                self._deliver(entry, outcome, sent_at)
        finally:
            self._inflight -= 1
            if batch.timer is not None:
                batch.timer.cancel()
            if self._open is not None and not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self._flush)

    def _deliver(self, entry: _Entry, outcome: Outcome, sent_at: float) -> None:
        if isinstance(outcome, BucketReply):
            call = entry.call
            apply_reply(
                entry.slot, outcome.granted, outcome.retry_after,
                need=call.need, sent_at=sent_at, lease=entry.lease,
            )  # fmt: skip
            reply: BucketReply | str = outcome
        else:
            self._log("redis refused a rate-limit call", outcome)
            reply = "response"
        self._end_refill(entry)
        if not entry.future.done():
            entry.future.set_result(reply)

    def _end_refill(self, entry: _Entry) -> None:
        if entry.lease:
            entry.slot.refilling = False
            key = (entry.slot.tenant, entry.slot.scope)
            if self._refill_futures.get(key) is entry.future:
                del self._refill_futures[key]

    def _expire(self, batch: _Batch, reason: str = "timeout") -> None:
        """The batch's deadline passed: answer what is still unanswered with ``reason``."""
        if self._open is batch:
            self._open = None  # never sent: nothing will answer it
        for entry in batch.entries:
            if not batch.sent:
                self._end_refill(entry)
            if not entry.future.done():
                entry.future.set_result(reason)

    def _resolve_all(self, batch: _Batch, reason: str = "unavailable") -> None:
        for entry in batch.entries:
            self._end_refill(entry)
            if not entry.future.done():
                entry.future.set_result(reason)

    # -- health and the failure policy ----------------------------------------------

    def _on_unavailable(self, exc: BaseException, batch: _Batch) -> None:
        now = self._clock.monotonic()
        was_up = self._health.up
        self._health.on(HealthEvent.CALL_FAILED, now, self._rng.random())
        self._resolve_all(batch)
        if was_up:
            self._log("redis unavailable for rate limiting; applying on_redis_error", exc)
            self._spawn(self._caller.drop_connections())

    def _fallback(self, slot: Slot, reason: str, now: float) -> Decision:
        self._errors[reason] = self._errors.get(reason, 0) + 1
        if self._health.probe_due(now) and not self._closed:
            self._health.on(HealthEvent.PROBE_START, now)
            self._spawn(self._probe())
        return policy_decision(slot, self._allow_on_error)

    async def _probe(self) -> None:
        self._probes += 1
        try:
            await asyncio.wait_for(self._caller.ping(), max(self._timeout, 0.5))
        except (RedisUnavailable, TimeoutError):
            self._health.on(HealthEvent.PROBE_FAILED, self._clock.monotonic(), self._rng.random())
        else:
            self._health.on(HealthEvent.PROBE_OK, self._clock.monotonic())
            log.info("redis reachable again; rate limiting resumes")

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
