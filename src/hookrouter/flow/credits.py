"""Per-tenant credit queue: bounded memory, non-blocking admission, spill and page-in.

Theory of operation
-------------------
Each tenant owns one :class:`CreditQueue` whose capacity is its credit
budget (``queue_capacity``). A credit is held by every delivery the queue
knows about: queued *or* in flight. It returns only when the delivery leaves
(:meth:`CreditQueue.finish`: delivered, scheduled for a later retry, parked,
dead-lettered, disabled). So memory per tenant is bounded by its capacity,
whatever its endpoint does.

The queue holds :class:`DeliveryRef` ids only; the store holds bodies and
the truth. :meth:`offer` never blocks: with no credit left the delivery is
*spilled*, i.e. it simply stays ``pending`` in the store, and the queue enters
spill mode. In spill mode every later offer spills too, so that spilled work
is served first (oldest first, per the store's order).

Paging back in follows "decide synchronously, return the work": when enough
credits are free (a quarter of the capacity, or the queue is idle) the queue
returns a :class:`PageIn` request ("up to ``limit`` pending deliveries of this
tenant, in (event id, endpoint id) order, starting *at* ``after``"), the shell
runs it against the store and hands the refs to :meth:`paged_in`. Refs the
queue already holds are skipped, so re-reading is harmless; ``limit`` is one
more than the free credits because the row at the cursor itself comes back.

The cursor is the last ref consumed, pulled *back* by any spilled ref that
sorts before it. That keeps the scan exact even though event ids are not
strictly increasing in commit order (ids made in the same millisecond are
ordered by their random part; a due retry or a resumed park re-enters with an
old id): every pending ref not in memory is at or after the cursor. Spill
mode ends only when a page came back short *and* nothing spilled while it was
being read; otherwise the next page is requested.

Store obligations for this to be exact (the delivery worker keeps them):

* a delivery is ``pending`` in the store before it is offered (a due retry
  or a resumed park is switched back to pending first);
* a page query sees every state change submitted before it (the worker
  submits an outcome before it issues the page-in that outcome's credit
  allowed; the SQLite ledger runs both on its one writer, in order), so a
  finished delivery is never paged in again. Deliveries that finish *while*
  a page is being read may still be listed by it; the queue remembers them
  until the answer arrives and skips them;
* on start, :meth:`mark_backlog` puts the queue in spill mode with cursor
  ``None`` so everything pending is paged in.

Within a tenant, queued work is kept per endpoint and taken round robin
across endpoints, honouring the tenant's ``max_in_flight`` and optional
per-endpoint limits, so one busy endpoint does not block its siblings.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple

# Largest page requested from the store at once: bounds one query's latency
# (SQLite reads ~1k indexed rows in about a millisecond) so page-ins interleave
# with group commits instead of stalling them.
MAX_PAGE: Final = 1000


class DeliveryRef(NamedTuple):
    """Identity of one (event, endpoint) delivery. A tuple: cheap to hash at 15k/s."""

    event_id: str
    endpoint_id: str


@dataclass(frozen=True, slots=True)
class Admitted:
    """The delivery took a credit and is queued in memory."""


@dataclass(frozen=True, slots=True)
class Spilled:
    """No credit (or older work is spilled): the delivery stays pending in the store."""

    reason: str  # "no_credit" | "backlog"


ADMITTED: Final = Admitted()
Admission = Admitted | Spilled


@dataclass(frozen=True, slots=True)
class PageIn:
    """Work for the shell: read up to ``limit`` pending deliveries from ``after`` on.

    ``after`` is inclusive; ``None`` means from the tenant's oldest pending delivery.
    """

    tenant_id: str
    after: DeliveryRef | None
    limit: int
    token: int = field(compare=False)


@dataclass(frozen=True, slots=True)
class CreditStats:
    tenant_id: str
    capacity: int
    credits_used: int
    queued: int
    in_flight: int
    spilled: int  # known deliveries waiting in the store (lower bound after a restart)
    spilling: bool
    peak_used: int
    admitted_total: int
    spilled_total: int
    paged_in_total: int


class CreditQueue:
    """One tenant's bounded queue of delivery ids. Pure: no I/O, no clock."""

    def __init__(
        self,
        tenant_id: str,
        capacity: int,
        *,
        max_in_flight: int | None = None,
        endpoint_limits: dict[str, int] | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.tenant_id = tenant_id
        self.capacity = capacity
        self.max_in_flight = max_in_flight
        self.endpoint_limits: dict[str, int] = dict(endpoint_limits or {})
        self._queues: dict[str, deque[DeliveryRef]] = {}
        self._ready: deque[str] = deque()  # endpoints with queued work, round robin
        self._held: set[DeliveryRef] = set()  # queued + in flight
        self._queued = 0
        self._in_flight = 0
        self._ep_in_flight: dict[str, int] = {}
        self._spilling = False
        self._spilled = 0
        self._cursor: DeliveryRef | None = None
        self._pending: PageIn | None = None
        self._spilled_during_page = False
        self._pulled_back: DeliveryRef | None = None  # smallest ref spilled during a read
        # Refs that left while a page was being read: the read may predate their
        # outcome and still list them as pending, so they must not come back.
        self._left_during_page: set[DeliveryRef] = set()
        self._tokens = 0
        self._peak = 0
        self._admitted_total = 0
        self._spilled_total = 0
        self._paged_in_total = 0

    # -- admission -------------------------------------------------------
    @property
    def free_credits(self) -> int:
        return max(0, self.capacity - len(self._held))

    def offer(self, ref: DeliveryRef) -> Admission:
        """Admit ``ref`` if a credit is free and nothing older is spilled. Never blocks.

        ``ref`` must already be ``pending`` in the store (see the module docstring).
        """
        if ref in self._held:
            return ADMITTED
        if self._spilling or len(self._held) >= self.capacity:
            return self._spill(ref, "backlog" if self._spilling else "no_credit")
        self._admit(ref)
        return ADMITTED

    def _spill(self, ref: DeliveryRef | None, reason: str) -> Spilled:
        if not self._spilling:
            self._spilling = True
            self._cursor = ref  # nothing older is spilled: start the scan right here
        self._spilled += 1
        self._spilled_total += 1
        self._pull_back(ref)
        return Spilled(reason)

    def _pull_back(self, ref: DeliveryRef | None) -> None:
        """Make sure the scan will reach ``ref`` (None: rescan from the oldest)."""
        if self._pending is not None:
            self._spilled_during_page = True
            if self._pulled_back is None or ref is None or ref < self._pulled_back:
                self._pulled_back = ref if ref is not None else DeliveryRef("", "")
        if self._cursor is not None and (ref is None or ref < self._cursor):
            self._cursor = ref

    def _admit(self, ref: DeliveryRef) -> None:
        if ref in self._held:
            return
        self._held.add(ref)
        queue = self._queues.get(ref.endpoint_id)
        if queue is None:
            queue = self._queues[ref.endpoint_id] = deque()
            self._ready.append(ref.endpoint_id)
        queue.append(ref)
        self._queued += 1
        self._admitted_total += 1
        self._peak = max(self._peak, len(self._held))

    # -- taking work -----------------------------------------------------
    def has_ready(self) -> bool:
        """Cheap hint: something is queued and the tenant is under its in-flight cap."""
        return bool(self._ready) and (
            self.max_in_flight is None or self._in_flight < self.max_in_flight
        )

    def take(self, n: int) -> list[DeliveryRef]:
        """Move up to ``n`` queued refs to in flight, round robin across endpoints.

        Respects ``max_in_flight`` and the per-endpoint limits; returns fewer
        (maybe none) when those or the queue run out.
        """
        if self.max_in_flight is not None:
            n = min(n, self.max_in_flight - self._in_flight)
        out: list[DeliveryRef] = []
        blocked: list[str] = []
        while len(out) < n and self._ready:
            endpoint = self._ready.popleft()
            limit = self.endpoint_limits.get(endpoint)
            if limit is not None and self._ep_in_flight.get(endpoint, 0) >= limit:
                blocked.append(endpoint)
                continue
            queue = self._queues[endpoint]
            out.append(queue.popleft())
            self._ep_in_flight[endpoint] = self._ep_in_flight.get(endpoint, 0) + 1
            if queue:
                self._ready.append(endpoint)
            else:
                del self._queues[endpoint]
        self._ready.extend(blocked)
        self._queued -= len(out)
        self._in_flight += len(out)
        return out

    def finish(self, ref: DeliveryRef) -> PageIn | None:
        """An in-flight delivery left the queue; its credit returns. Maybe returns a page-in."""
        if ref not in self._held:
            raise KeyError(f"{ref} is not held by tenant {self.tenant_id!r}")
        self._held.discard(ref)
        if self._pending is not None:
            self._left_during_page.add(ref)
        self._in_flight -= 1
        left = self._ep_in_flight[ref.endpoint_id] - 1
        if left:
            self._ep_in_flight[ref.endpoint_id] = left
        else:
            del self._ep_in_flight[ref.endpoint_id]
        return self.poll_page_in()

    def drain_endpoint(self, endpoint_id: str) -> list[DeliveryRef]:
        """Remove every *queued* ref of one endpoint (its breaker opened: park them).

        Their credits return at once; in-flight refs stay until ``finish``.
        """
        queue = self._queues.pop(endpoint_id, None)
        if not queue:
            return []
        self._ready.remove(endpoint_id)
        refs = list(queue)
        self._held.difference_update(refs)
        if self._pending is not None:
            self._left_during_page.update(refs)
        self._queued -= len(refs)
        return refs

    # -- spill and page-in -----------------------------------------------
    def mark_backlog(self, count: int = 0, oldest: DeliveryRef | None = None) -> PageIn | None:
        """The store holds pending work this queue has not seen (restart, resume, replay).

        ``oldest`` is the smallest such ref when known; None rescans from the oldest.
        """
        if not self._spilling:
            self._spilling = True
            self._cursor = oldest
        self._spilled += count
        self._pull_back(oldest)
        return self.poll_page_in()

    def poll_page_in(self) -> PageIn | None:
        """A page-in request if spilling, none outstanding, and enough credits are free."""
        if not self._spilling or self._pending is not None:
            return None
        free = self.free_credits
        # A quarter of the budget amortises one store query over many
        # deliveries while keeping the queue mostly full; an idle queue pages
        # in at once so a small tenant never waits.
        if free == 0 or (free < max(1, self.capacity // 4) and self._held):
            return None
        self._tokens += 1
        # +1: the row at the (inclusive) cursor comes back too.
        limit = min(free, MAX_PAGE) + 1
        self._pending = PageIn(self.tenant_id, self._cursor, limit, self._tokens)
        return self._pending

    def paged_in(self, request: PageIn, rows: Sequence[DeliveryRef]) -> PageIn | None:
        """The refs answering ``request``, in (event id, endpoint id) order."""
        if request is not self._pending:
            raise ValueError("paged_in() for a request that is not outstanding")
        self._pending = None
        left, self._left_during_page = self._left_during_page, set()
        cursor = request.after
        admitted = 0
        consumed = 0
        for ref in rows:
            if ref not in self._held and ref not in left:
                if len(self._held) >= self.capacity:
                    break
                self._admit(ref)
                admitted += 1
            cursor = ref
            consumed += 1
        pulled, self._pulled_back = self._pulled_back, None
        if pulled is not None and (cursor is None or pulled < cursor):
            cursor = pulled if pulled.event_id else None
        self._cursor = cursor
        self._paged_in_total += admitted
        self._spilled = max(0, self._spilled - admitted)
        exhausted = consumed == len(rows) and len(rows) < request.limit
        if exhausted and not self._spilled_during_page:
            self._spilling = False
            self._spilled = 0
        self._spilled_during_page = False
        return self.poll_page_in()

    def abort_page_in(self, request: PageIn) -> None:
        """The shell could not run ``request`` (store error); it will be asked again."""
        if request is self._pending:
            self._pending = None
            self._left_during_page.clear()
            self._spilled_during_page = False
            pulled, self._pulled_back = self._pulled_back, None
            if pulled is not None and (self._cursor is None or pulled < self._cursor):
                self._cursor = pulled if pulled.event_id else None

    # -- introspection ---------------------------------------------------
    def holds(self, ref: DeliveryRef) -> bool:
        return ref in self._held

    def queued_refs(self) -> Iterable[DeliveryRef]:
        for queue in self._queues.values():
            yield from queue

    def stats(self) -> CreditStats:
        return CreditStats(
            tenant_id=self.tenant_id,
            capacity=self.capacity,
            credits_used=len(self._held),
            queued=self._queued,
            in_flight=self._in_flight,
            spilled=self._spilled,
            spilling=self._spilling,
            peak_used=self._peak,
            admitted_total=self._admitted_total,
            spilled_total=self._spilled_total,
            paged_in_total=self._paged_in_total,
        )

    def __repr__(self) -> str:
        return (
            f"CreditQueue({self.tenant_id!r}, used={len(self._held)}/{self.capacity}, "
            f"queued={self._queued}, in_flight={self._in_flight}, spilled={self._spilled}, "
            f"spilling={self._spilling})"
        )


__all__ = [
    "ADMITTED",
    "MAX_PAGE",
    "Admission",
    "Admitted",
    "CreditQueue",
    "CreditStats",
    "DeliveryRef",
    "PageIn",
    "Spilled",
]
