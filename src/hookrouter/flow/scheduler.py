"""Fair sharing of delivery capacity across tenants: deficit round robin.

Theory of operation
-------------------
The worker has ``free_slots`` outbound attempts it may start now; it asks
:meth:`FairScheduler.next_batch` which deliveries to start. Tenants are
visited in a fixed ring. On each visit a tenant's deficit grows by
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
        self._ring: list[str] = []
        self._queues: dict[str, CreditQueue] = {}
        self._weights: dict[str, int] = {}
        self._deficit: dict[str, int] = {}
        self._pos = 0
        self._started = 0
        self._rounds = 0

    def add(self, queue: CreditQueue, *, weight: int = 1) -> None:
        """Register (or re-weight) a tenant's queue."""
        if weight < 1:
            raise ValueError("weight must be >= 1")
        tenant = queue.tenant_id
        if tenant not in self._queues:
            self._ring.append(tenant)
            self._deficit[tenant] = 0
        self._queues[tenant] = queue
        self._weights[tenant] = weight

    def remove(self, tenant_id: str) -> None:
        if tenant_id not in self._queues:
            return
        index = self._ring.index(tenant_id)
        del self._ring[index]
        if index < self._pos:
            self._pos -= 1
        if self._pos >= len(self._ring):
            self._pos = 0
        del self._queues[tenant_id], self._weights[tenant_id], self._deficit[tenant_id]

    def queue(self, tenant_id: str) -> CreditQueue:
        return self._queues[tenant_id]

    def next_batch(self, free_slots: int) -> list[Work]:
        """Up to ``free_slots`` deliveries to start, shared fairly across tenants."""
        out: list[Work] = []
        idle_visits = 0  # consecutive visits that started nothing
        ring = self._ring
        while free_slots > len(out) and ring and idle_visits < len(ring):
            tenant = ring[self._pos]
            queue = self._queues[tenant]
            deficit = self._deficit[tenant]
            if deficit == 0:  # a fresh visit
                deficit = self.quantum * self._weights[tenant] if queue.has_ready() else 0
            want = min(deficit, free_slots - len(out))
            taken = queue.take(want) if want else []
            for ref in taken:
                out.append(TUPLE_NEW(Work, (tenant, ref)))  # Work(...) in C (credits)
            deficit -= len(taken)
            if len(taken) < want:
                deficit = 0  # empty or capped: DRR forfeits the rest of the deficit
            self._deficit[tenant] = deficit
            idle_visits = 0 if taken else idle_visits + 1
            if deficit == 0:  # visit over: next tenant
                self._pos += 1
                if self._pos == len(ring):
                    self._pos = 0
                    self._rounds += 1
        self._started += len(out)
        return out

    def stats(self) -> SchedulerStats:
        return SchedulerStats(len(self._ring), self._started, self._rounds)

    def __repr__(self) -> str:
        return (
            f"FairScheduler(tenants={len(self._ring)}, quantum={self.quantum}, "
            f"started={self._started})"
        )


__all__ = ["FairScheduler", "SchedulerStats", "Work"]
