"""Fair sharing of delivery capacity across tenants: deficit round robin.

Theory of operation
-------------------
The worker has ``free_slots`` outbound attempts it may start now; it asks
:meth:`FairScheduler.next_batch` which deliveries to start. Tenants are
visited in a ring of those that may have work (the active list of DRR: a
tenant joins it when its queue gets ready work and leaves it when a visit
finds none, so a round costs the busy tenants only). On each visit a tenant's deficit grows by
``quantum * weight`` and it may take that many deliveries from its
:class:`~hookrouter.flow.credits.CreditQueue` (which applies the tenant's
``max_in_flight`` and per-endpoint limits). A tenant that could not use its
whole deficit (empty, or capped) loses the rest, as in DRR (Shreedhar and
Varghese, 1995), so idle tenants cannot bank credit and burst later. The ring
position survives between calls, so even ``free_slots == 1`` per call rotates
through the tenants.

Fairness property (tested): between two tenants that stay backlogged, the
number of deliveries started differs by at most ``quantum * max(weight)`` at
any point, whatever their queue lengths. So a tenant with a million queued
events cannot starve one with ten: the small tenant waits at most one round.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from hookrouter.flow.credits import TUPLE_NEW, CreditQueue, DeliveryRef


class Work(NamedTuple):
    """One delivery to start: which tenant's queue it came from, and its id."""

    tenant_id: str
    ref: DeliveryRef


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    tenants: int
    started_total: int
    rounds_total: int


class FairScheduler:
    """Deficit round robin over tenant credit queues. Pure: no I/O, no clock."""

    def __init__(self, *, quantum: int = 1) -> None:
        if quantum < 1:
            raise ValueError("quantum must be >= 1")
        self.quantum = quantum
        # The active list of DRR: tenants that may have ready work, the one
        # being visited at the head. A tenant found with nothing ready leaves
        # it and comes back (at the tail) when its queue calls ``wake``, so a
        # call costs the tenants with work, never every registered tenant.
        self._ring: deque[CreditQueue] = deque()
        # With events spread over many tenants, each per-tenant dict was another
        # cache miss per event: a tenant's weight, deficit and ring membership
        # live on its queue (``CreditQueue.drr_*``), reached once per wake and not
        # at all per visit, and a tenant's state is one object fewer to collect.
        self._entries: dict[str, CreditQueue] = {}
        # One bound method for every queue's ``on_ready`` (not one object per tenant).
        self._wake: Callable[[CreditQueue], None] = self._wake_queue
        self._round_left = 0  # visits left in the current round (for ``rounds_total``)
        self._started = 0
        self._rounds = 0

    def add(self, queue: CreditQueue, *, weight: int = 1) -> None:
        """Register (or re-weight) a tenant's queue."""
        if weight < 1:
            raise ValueError("weight must be >= 1")
        tenant = queue.tenant_id
        known = self._entries.get(tenant)
        if known is not queue:
            if known is not None:
                self.remove(tenant)
            self._entries[tenant] = queue
        queue.drr_weight = weight
        queue.on_ready = self._wake
        if queue.has_ready():
            self.wake(tenant)

    def wake(self, tenant_id: str) -> None:
        """The tenant may have work ready: make sure it is in the round."""
        queue = self._entries.get(tenant_id)
        if queue is not None and not queue.drr_in_ring:
            queue.drr_in_ring = True
            self._ring.append(queue)

    def _wake_queue(self, queue: CreditQueue) -> None:
        """``wake`` from the queue itself (its ``on_ready``): no lookup of its tenant.

        A registered queue is the one whose ``on_ready`` is set (``remove``
        clears it), so the queue in hand needs no check against ``_entries``.
        """
        if queue.on_ready is not None and not queue.drr_in_ring:
            queue.drr_in_ring = True
            self._ring.append(queue)

    def remove(self, tenant_id: str) -> None:
        queue = self._entries.pop(tenant_id, None)
        if queue is None:
            return
        queue.on_ready = None  # a released queue wakes nothing
        queue.drr_deficit = 0
        if queue.drr_in_ring:  # rare: callers remove tenants with nothing queued
            queue.drr_in_ring = False
            self._ring.remove(queue)

    def queue(self, tenant_id: str) -> CreditQueue:
        return self._entries[tenant_id]

    def __len__(self) -> int:
        return len(self._entries)

    def next_batch(self, free_slots: int) -> list[Work]:
        """Up to ``free_slots`` deliveries to start, shared fairly across tenants."""
        out: list[Work] = []
        idle_visits = 0  # consecutive visits that started nothing
        ring = self._ring
        while free_slots > len(out) and ring and idle_visits < len(ring):
            queue = ring[0]
            deficit = queue.drr_deficit
            if deficit == 0:  # a fresh visit
                if not queue.has_ready():  # nothing to do: out until it wakes again
                    ring.popleft()
                    queue.drr_in_ring = False
                    self._visited()
                    continue
                deficit = self.quantum * queue.drr_weight
            want = min(deficit, free_slots - len(out))
            taken = queue.take(want)
            tenant = queue.tenant_id
            for ref in taken:
                out.append(TUPLE_NEW(Work, (tenant, ref)))  # Work(...) in C (credits)
            deficit -= len(taken)
            if len(taken) < want:
                deficit = 0  # empty or capped: DRR forfeits the rest of the deficit
            queue.drr_deficit = deficit
            idle_visits = 0 if taken else idle_visits + 1
            if deficit == 0:  # visit over: next tenant
                ring.rotate(-1)
                self._visited()
        self._started += len(out)
        return out

    def _visited(self) -> None:
        """One visit over; a round is as many visits as tenants were in it when it began."""
        self._round_left -= 1
        if self._round_left <= 0:
            self._rounds += 1
            self._round_left = len(self._ring)

    def stats(self) -> SchedulerStats:
        return SchedulerStats(len(self._entries), self._started, self._rounds)

    def __repr__(self) -> str:
        return (
            f"FairScheduler(tenants={len(self._entries)}, quantum={self.quantum}, "
            f"started={self._started})"
        )


__all__ = ["FairScheduler", "SchedulerStats", "Work"]
