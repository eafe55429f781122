"""The delivery engine: credit queues + fair scheduler + breakers + transport + ledger.

Theory of operation
-------------------
``event_committed`` (called by the ingest path once an event is durable)
offers each of its deliveries to the tenant's :class:`CreditQueue` (a lane
per endpoint, so endpoints never wait for each other); admitted ones keep the
event body in a small cache (bounded by the credits), spilled or evicted ones
stay in the store. ``_pump`` runs once per loop turn after anything
changed: it asks the :class:`FairScheduler` for as many deliveries as there
are free slots (``[delivery] workers``) and starts one attempt task each.

An attempt: endpoint gone -> disabled; breaker refuses -> parked; otherwise
resolve + SSRF-check the host (cached), sign, POST with the attempt deadline,
feed the breaker, classify with the retry policy, record the outcome (batched
into the next group commit) and return the credit. Returning credits may ask
for a page-in, which runs as a ledger query *after* the outcomes recorded
before it (the ledger's ordering guarantee), so nothing is delivered twice
because of paging.

Breaker transitions: OPEN parks the endpoint's queued deliveries (credits
return at once) and arms a timer for the cooldown; HALF_OPEN resumes
``half_open_probes`` parked deliveries as probes; CLOSED resumes all of them.
Retries: ``poll_retries`` switches due retries back to pending and offers
them. Both run from a background loop in production and are called directly
by tests that drive a ManualClock.

Crash safety: the store is the truth. A delivery is pending in the store
until its outcome is committed, so after ``kill -9`` everything unfinished is
paged in again at start (at least once; duplicates possible, never losses).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from hookrouter.delivery import metrics as delivery_metrics
from hookrouter.delivery.engine_core import EngineCore
from hookrouter.errors import StoreError
from hookrouter.store.base import OPEN_STATES
from hookrouter.store.ledger import ReplayFilter

log = logging.getLogger(__name__)

# How often the background loop promotes due retries and polls breakers. A
# quarter second keeps short test schedules ("1s") close to their nominal time
# at a cost of four indexed queries per second.
POLL_INTERVAL = 0.25
PROMOTE_LIMIT = 1000
_OPEN = frozenset(OPEN_STATES)
# Open-state counts (the backlog base, the parked gauge) come from a GROUP BY
# over the open deliveries: every 5 s is fresh enough for a dashboard and cheap
# for the read thread. Delivered rows are not counted: they pile up forever.
STATE_COUNTS_EVERY = 5.0


class DeliveryEngine(EngineCore):
    """Delivers committed events to tenant endpoints (see module docstring)."""

    async def start(self, *, background: bool = True) -> None:
        """Page in what the store holds (after a restart) and start the timers."""
        catalog = self._catalog()
        for endpoint in catalog.endpoints.values():  # breakers restart closed
            resumed = await self.resume_parked(endpoint.tenant, endpoint.id, None, requeue=False)
            if resumed:
                log.info("resumed %d parked deliveries of %s", resumed, endpoint.id)
        for backlog in await self._ledger.pending_endpoints():
            self.requeue(backlog)
        await self.refresh_counts()
        delivery_metrics.untrack(self._metrics)  # started twice: one series set
        self._metrics = delivery_metrics.track(self)
        if background:
            self._background = asyncio.get_running_loop().create_task(self._poll_forever())

    async def stop(self, grace: float) -> None:
        """Stop starting attempts; wait up to ``grace`` s for in-flight ones; flush outcomes.

        Attempts still running after the grace period are cancelled: their
        deliveries stay pending in the store and are retried after restart.
        """
        self._closing = True
        if self._background is not None:
            self._background.cancel()
        if self._in_flight:
            self._drained = asyncio.get_running_loop().create_future()
            await asyncio.wait([self._drained], timeout=grace)
        for attempt in list(self._active.values()):
            attempt.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks))
        with contextlib.suppress(StoreError):
            await self._ledger.record([])
        await self.transport.aclose()
        delivery_metrics.untrack(self._metrics)
        self._metrics = None

    async def replay(self, selection: ReplayFilter, limit: int = 10_000) -> int:
        """Make matching dead/disabled deliveries pending again and deliver them; how many."""
        total = 0
        for resumed in await self._ledger.replay(selection, limit):
            self.requeue(resumed)
            total += resumed.count
        return total

    async def count_replayable(self, selection: ReplayFilter) -> int:
        return await self._ledger.count_replayable(selection)

    def reset_breaker(self, endpoint_id: str) -> bool:
        """Operator override: close an endpoint's breaker and resume its parked work."""
        endpoint = self._catalog().endpoints.get(endpoint_id)
        if endpoint is None:
            return False
        transition = self.endpoints.breaker(endpoint_id).reset(self._clock.monotonic())
        self._on_transition(endpoint.tenant, transition)
        return True

    async def poll(self) -> None:
        """One round of timers: due retries, breaker cooldowns, stuck page-ins, idle sockets."""
        now = self._clock.time()
        for tenant_id, ref in await self._ledger.promote_due(now, PROMOTE_LIMIT):
            queue = self._queue(tenant_id)
            queue.offer(ref)
            self._forget_evicted(queue)
        mono = self._clock.monotonic()
        catalog = self._catalog()
        for endpoint_id, breaker in self.endpoints.breakers.items():
            endpoint = catalog.endpoints.get(endpoint_id)
            if endpoint is not None:
                self._on_transition(endpoint.tenant, breaker.poll(mono))
        for queue in self.queues.values():
            self._page(queue, queue.poll_page_in())
        self.transport.sweep()
        if mono - self._counts_at >= STATE_COUNTS_EVERY:
            self._counts_at = mono
            await self.refresh_counts()
        self._kick()

    async def refresh_counts(self) -> None:
        """Re-read per-tenant state counts (metrics and the backlog cap)."""
        counts = await self._ledger.state_counts(_OPEN)
        base: dict[str, int] = {}
        for (tenant, state), count in counts.items():
            if state in _OPEN:
                base[tenant] = base.get(tenant, 0) + count
        self.state_counts, self._backlog_base = counts, base
        self._opened.clear()
        self._closed.clear()

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(POLL_INTERVAL)
            try:
                await self.poll()
            except StoreError as exc:
                log.warning("delivery poll failed: %s", exc.message)

    def stats(self) -> dict[str, Any]:
        return {
            "in_flight": self._in_flight,
            "cached_bodies": len(self._cache),
            "tenants": {t: q.stats() for t, q in self.queues.items()},
            "lanes": {t: q.lane_stats() for t, q in self.queues.items()},
            "breakers": {
                e: b.stats(self._clock.monotonic()) for e, b in self.endpoints.breakers.items()
            },
            "transport": self.transport.stats(),
            "outcome_write_failures": self.outcome_write_failures,
            **self.counters,
        }

    @property
    def outcome_write_failures(self) -> int:
        """Outcome batches the store refused (each kept and written again later)."""
        return self._ledger.write_failures

    def __repr__(self) -> str:
        return (
            f"DeliveryEngine(tenants={len(self.queues)}, in_flight={self._in_flight}, "
            f"closing={self._closing})"
        )


__all__ = ["POLL_INTERVAL", "DeliveryEngine"]
