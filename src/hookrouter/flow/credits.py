"""Per-tenant credit queue: bounded memory, non-blocking admission, spill and page-in.

Theory of operation
-------------------
Each tenant owns one :class:`CreditQueue` whose capacity is its credit
budget (``queue_capacity``). A credit is held by every delivery the queue
knows about: queued *or* in flight. It returns only when the delivery leaves
(:meth:`CreditQueue.finish`: delivered, scheduled for a later retry, parked,
dead-lettered, disabled). So memory per tenant is bounded by its capacity,
whatever its endpoints do.

The queue holds :class:`DeliveryRef` ids only; the store holds bodies and
the truth. Inside it each endpoint has a *lane*: its own FIFO, spill state
and page-in cursor, so the endpoints of one tenant never wait behind each
other (a slow or hung endpoint's backlog is its own).

:meth:`offer` never blocks: with no credit left in the delivery's lane the
delivery is *spilled*, i.e. it simply stays ``pending`` in the store, and the
lane enters spill mode. In spill mode every later offer to that lane spills
too, so that its spilled work is served first (oldest first, per the store's
order).

Sharing between lanes
---------------------
*Credits*: each active lane (holding credits or spilling) may hold up to an
even share of the capacity (``capacity // active lanes``, at least 1); one
endpoint alone may use all of it. When another lane becomes active and the
tenant is full, queued (never in-flight) refs of lanes above their share are
*evicted*: dropped from memory, newest first, exactly as if they had spilled
(their lane's cursor is pulled back to them). They are still pending in the
store, so nothing is lost; the engine forgets their cached bodies
(:meth:`CreditQueue.take_evicted`).

*Slots*: the tenant's ``max_in_flight`` caps its attempts in flight. With
several endpoints configured (``endpoint_count``), a lane may take a slot
only while it is under its share, ``ceil(max_in_flight / lanes with queued
work)``; a lane with work while no sibling has any may use all but one slot,
so a sibling that gets work always finds a slot, even while the first
endpoint hangs until its attempts time out. An explicit per-endpoint limit
replaces the share for that endpoint.

Before lanes, a fast sibling's deliveries were paced by a slow endpoint of
the same tenant (figures in docs/performance.md, "Flow control").

Paging back in follows "decide synchronously, return the work": when enough
credits are free for a lane (a quarter of its share, or the lane is idle) the
queue returns a :class:`PageIn` request ("up to ``limit`` pending deliveries
of this tenant's endpoint, in event id order, starting *at* ``after``"), the shell
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

Store obligations for this to be exact (the delivery engine keeps them):

* a delivery is ``pending`` in the store before it is offered (a due retry
  or a resumed park is switched back to pending first);
* a page query sees every state change submitted before it (the worker
  submits an outcome before it issues the page-in that outcome's credit
  allowed; the ledger contract promises this order), so a
  finished delivery is never paged in again. Deliveries that finish *while*
  a page is being read may still be listed by it; the queue remembers them
  until the answer arrives and skips them;
* a delivery is pending from its commit, which a page may see before the
  commit's own offer arrives; the engine names such events
  (``paged_in``'s ``offers_due``) and the page passes over them, else the
  page's attempt could finish before the offer admitted the delivery again;
* on start, :meth:`mark_backlog` puts each lane with pending work in spill
  mode, its cursor at its oldest pending delivery.

Page-ins are per lane: a :class:`PageIn` names its endpoint, and everything
above holds per lane (cursor, spill mode, the refs that left during a read).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from mypy_extensions import mypyc_attr

# Largest page requested from the store at once: bounds one query's latency
# so page-ins interleave with group commits instead of stalling them.
MAX_PAGE: Final = 1000


class DeliveryRef(NamedTuple):
    """Identity of one (event, endpoint) delivery. A tuple: cheap to hash on every delivery."""

    event_id: str
    endpoint_id: str


# A NamedTuple's constructor is a generated *interpreted* ``__new__``: one
# Python frame per ref (twice per delivery with ``Work``).
# ``tuple.__new__`` with the class builds the same object in C (the
# scheduler's ``Work`` too).
TUPLE_NEW: Final = tuple.__new__


def new_ref(event_id: str, endpoint_id: str) -> DeliveryRef:
    """``DeliveryRef(event_id, endpoint_id)`` without the interpreted constructor (hot paths)."""
    ref: DeliveryRef = TUPLE_NEW(DeliveryRef, (event_id, endpoint_id))
    return ref


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
    """Work for the shell: read up to ``limit`` pending deliveries of one endpoint from ``after``.

    ``after`` is inclusive; ``None`` means from the endpoint's oldest pending delivery.
    """

    tenant_id: str
    endpoint_id: str
    after: DeliveryRef | None
    limit: int
    token: int = field(compare=False)


NO_PAGES: Final[tuple[PageIn, ...]] = ()
_NO_REFS: Final[frozenset[DeliveryRef]] = frozenset()


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
    evicted_total: int
    lanes: int  # endpoints this queue has seen work for


# Nothing it reaches refers back to it: the collector need not track it (heap.py).
@mypyc_attr(acyclic=True)
class _Lane:
    """One endpoint's part of a tenant queue: its FIFO, spill mode and page-in cursor."""

    __slots__ = (
        "active",
        "cursor",
        "endpoint_id",
        "held",
        "in_flight",
        "left_during_page",
        "paused",
        "pending",
        "pulled_back",
        "queue",
        "spilled",
        "spilled_during_page",
        "spilling",
    )

    def __init__(self, endpoint_id: str) -> None:
        self.endpoint_id = endpoint_id
        # Made for its first queued ref and dropped when it empties: an idle lane
        # keeps no container for the cyclic collector to traverse.
        self.queue: deque[DeliveryRef] | None = None
        self.held = 0  # queued + in flight
        self.in_flight = 0
        self.active = False  # holds credits or is spilling (counted in the shares)
        self.paused = False  # its endpoint's breaker is open: no page-ins, no share
        self.spilling = False
        self.spilled = 0
        self.cursor: DeliveryRef | None = None
        self.pending: PageIn | None = None
        self.spilled_during_page = False
        self.pulled_back: DeliveryRef | None = None  # smallest ref spilled during a read
        # Refs that left while a page was being read: the read may predate their
        # outcome and still list them as pending, so they must not come back.
        # Made on the first such ref (``left_during_read``): most lanes never page
        # in, and every container a first event leaves behind feeds the cyclic collector.
        self.left_during_page: set[DeliveryRef] | None = None

    def left_during_read(self) -> set[DeliveryRef]:
        """The refs that left while the outstanding read runs (made on first use)."""
        left = self.left_during_page
        if left is None:
            left = self.left_during_page = set()
        return left

    def pull_back(self, ref: DeliveryRef | None) -> None:
        """Make sure the scan will reach ``ref`` (None: rescan from the oldest)."""
        if self.pending is not None:
            self.spilled_during_page = True
            if self.pulled_back is None or ref is None or ref < self.pulled_back:
                self.pulled_back = ref if ref is not None else DeliveryRef("", "")
        if self.cursor is not None and (ref is None or ref < self.cursor):
            self.cursor = ref

    def spill(self, ref: DeliveryRef | None) -> None:
        """``ref`` waits in the store (None: unknown ones, rescan from the oldest)."""
        if not self.spilling:
            self.spilling = True
            self.cursor = ref  # nothing older is spilled: start the scan right here
        self.pull_back(ref)

    def take_pulled_back(self, cursor: DeliveryRef | None) -> DeliveryRef | None:
        """The cursor after a read, pulled back by what spilled during it."""
        pulled, self.pulled_back = self.pulled_back, None
        if pulled is not None and (cursor is None or pulled < cursor):
            return pulled if pulled.event_id else None
        return cursor


@dataclass(frozen=True, slots=True)
class LaneStats:
    """One endpoint's part of a tenant queue, for the admin API and metrics."""

    endpoint_id: str
    credits_used: int
    queued: int
    in_flight: int
    spilled: int
    spilling: bool


class CreditQueue:
    """One tenant's bounded queue of delivery ids, a lane per endpoint. Pure: no I/O, no clock."""

    def __init__(
        self,
        tenant_id: str,
        capacity: int,
        *,
        max_in_flight: int | None = None,
        endpoint_limits: dict[str, int] | None = None,
        endpoint_count: int = 1,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.tenant_id = tenant_id
        self.capacity = capacity
        self.max_in_flight = max_in_flight
        # None while no endpoint has a cap of its own (the usual case): the check
        # per attempt then reads no dict of this tenant's.
        self.endpoint_limits: dict[str, int] | None = (
            dict(endpoint_limits) if endpoint_limits else None
        )
        # Endpoints the tenant has configured: with more than one, slots are shared.
        self.endpoint_count = endpoint_count
        # Refs evicted since the shell last looked (``take_evicted``): made on the
        # first eviction, since every container a queue keeps feeds the collector.
        self._evicted: list[DeliveryRef] | None = None
        # Called with this queue when work may have become ready (a lane got its
        # first queued ref, or a slot came back): the scheduler visits only
        # tenants that may have work (``FairScheduler.add`` sets it). The queue,
        # not its tenant id, so the scheduler need not look the tenant up.
        self.on_ready: Callable[[CreditQueue], None] | None = None
        # The fair scheduler's record of this tenant (``FairScheduler``: weight,
        # deficit, place in its ring), kept here rather than in an object of its own.
        self.drr_weight = 1
        self.drr_deficit = 0
        self.drr_in_ring = False
        self._lanes: dict[str, _Lane] = {}
        # The lane used last: most tenants have one endpoint, so most events find
        # theirs here and never read the dict (lanes are never removed).
        self._last: _Lane | None = None
        # Endpoints with queued work, round robin. A list, not a deque: it holds
        # the tenant's endpoints at most, and even an empty deque allocates a
        # whole block. None while empty, and ``_held`` the shared empty set while
        # nothing is held: an idle queue keeps no container the collector tracks.
        self._ready: list[str] | None = None
        self._spilling: dict[str, _Lane] = {}  # lanes in spill mode (insertion ordered)
        # Queued + in flight, every lane; changed through ``_holding``.
        self._held: set[DeliveryRef] | frozenset[DeliveryRef] = _NO_REFS
        self._active = 0  # lanes that hold credits or spill
        self._paused = 0  # lanes paused by an open breaker
        self._queued = 0
        self._in_flight = 0
        self._tokens = 0
        self._peak = 0
        self._admitted_total = 0
        self._spilled_total = 0
        self._paged_in_total = 0
        self._evicted_total = 0

    # -- lanes and shares --------------------------------------------------
    def _lane(self, endpoint_id: str) -> _Lane:
        lane = self._find(endpoint_id)
        if lane is None:
            lane = self._last = self._lanes[endpoint_id] = _Lane(endpoint_id)
        return lane

    def _find(self, endpoint_id: str) -> _Lane | None:
        lane = self._last
        if lane is not None and lane.endpoint_id == endpoint_id:
            return lane
        lane = self._lanes.get(endpoint_id)
        if lane is not None:
            self._last = lane
        return lane

    def _refresh(self, lane: _Lane) -> None:
        """Keep the count of active lanes (the divisor of the credit share) exact."""
        active = (lane.held > 0 or lane.spilling) and not lane.paused
        if active != lane.active:
            lane.active = active
            self._active += 1 if active else -1

    def _share(self, lane: _Lane) -> int:
        """Credits ``lane`` may hold: an even split among the active lanes, itself included."""
        lanes = self._active if lane.active else self._active + 1
        return max(1, self.capacity // lanes)

    def _over_share(self, lane: _Lane) -> Iterator[tuple[_Lane, int]]:
        """Other lanes with queued refs above their share, and by how much.

        The share is every active lane's once ``lane`` counts as active.
        """
        share = self._share(lane)
        for other in self._lanes.values():
            if other is not lane and other.queue and other.held > share:
                yield other, other.held - share

    def _evictable(self, lane: _Lane) -> int:
        """Queued refs of other lanes above their share: the room ``lane`` may claim."""
        return sum(min(excess, len(other.queue or ())) for other, excess in self._over_share(lane))

    def _room(self, lane: _Lane) -> bool:
        """One free credit for ``lane``, evicting a queued ref above another lane's share."""
        if len(self._held) < self.capacity:
            return True
        victim: _Lane | None = None
        most = 0
        for other, excess in self._over_share(lane):
            if excess > most:
                victim, most = other, excess
        if victim is None:
            return False
        self._evict(victim)
        return True

    def _evict(self, lane: _Lane) -> None:
        """Drop ``lane``'s newest queued ref from memory: it waits in the store instead."""
        queue = lane.queue
        assert queue is not None  # a victim has queued refs (``_over_share``)
        ref = queue.pop()
        if not queue:
            self._unready(lane)
        self._holding().discard(ref)
        lane.held -= 1
        self._queued -= 1
        self._spill_into(lane, ref)
        if self._evicted is None:
            self._evicted = []
        self._evicted.append(ref)
        self._evicted_total += 1

    def take_evicted(self) -> Sequence[DeliveryRef]:
        """Refs evicted since the last call: the shell forgets their bodies."""
        evicted, self._evicted = self._evicted, None
        return () if evicted is None else evicted

    def _holding(self) -> set[DeliveryRef]:
        """``_held`` to change: a set of the queue's own while it holds anything."""
        held = self._held
        if isinstance(held, frozenset):
            held = self._held = set()
        return held

    def _unready(self, lane: _Lane) -> None:
        """``lane`` has no queued ref left: out of the ring, its FIFO dropped."""
        lane.queue = None
        ready = self._ready
        if ready is not None:
            ready.remove(lane.endpoint_id)
            if not ready:
                self._ready = None

    # -- admission ---------------------------------------------------------
    def offer(self, ref: DeliveryRef) -> Admission:
        """Admit ``ref`` if its lane has a credit and nothing older is spilled. Never blocks.

        ``ref`` must already be ``pending`` in the store (see the module docstring).
        May evict queued refs of other lanes (:meth:`take_evicted`).
        """
        if ref in self._held:
            return ADMITTED
        lane = self._lane(ref.endpoint_id)
        if lane.spilling or lane.paused:
            return self._spill(lane, ref, "backlog")
        if lane.held >= self._share(lane) or not self._room(lane):
            return self._spill(lane, ref, "no_credit")
        self._admit(lane, ref)
        return ADMITTED

    def _spill(self, lane: _Lane, ref: DeliveryRef, reason: str) -> Spilled:
        self._spill_into(lane, ref)
        self._spilled_total += 1
        return Spilled(reason)

    def _spill_into(self, lane: _Lane, ref: DeliveryRef | None) -> None:
        lane.spill(ref)
        lane.spilled += 1
        self._spilling[lane.endpoint_id] = lane
        self._refresh(lane)

    def _admit(self, lane: _Lane, ref: DeliveryRef) -> None:
        held = self._held
        if isinstance(held, frozenset):  # ``_holding`` inlined: once per delivery
            held = self._held = set()
        held.add(ref)
        queue = lane.queue
        if queue is None:
            queue = lane.queue = deque()
            ready = self._ready
            if ready is None:
                self._ready = [lane.endpoint_id]
            else:
                ready.append(lane.endpoint_id)
            if self.on_ready is not None:
                self.on_ready(self)
        queue.append(ref)
        lane.held += 1
        self._refresh(lane)
        self._queued += 1
        self._admitted_total += 1
        self._peak = max(self._peak, len(self._held))

    # -- taking work -------------------------------------------------------
    def has_ready(self) -> bool:
        """Cheap hint: something is queued and the tenant is under its in-flight cap."""
        return bool(self._ready) and (
            self.max_in_flight is None or self._in_flight < self.max_in_flight
        )

    def _slot_cap(self, endpoint_id: str, contenders: int) -> int | None:
        """How many attempts one endpoint may have in flight now (None: no own cap)."""
        limits = self.endpoint_limits
        if limits is not None:
            limit = limits.get(endpoint_id)
            if limit is not None:
                return limit
        cap = self.max_in_flight
        if cap is None or cap < 2 or self.endpoint_count < 2:
            return None
        if contenders >= 2:
            return -(-cap // contenders)  # ceil: the shares add up to at least the cap
        return cap - 1  # alone: keep a slot for a sibling that gets work

    def take(self, n: int) -> list[DeliveryRef]:
        """Move up to ``n`` queued refs to in flight, round robin across endpoints.

        Respects ``max_in_flight`` and the endpoints' slot shares or limits;
        returns fewer (maybe none) when those or the queue run out.
        """
        if self.max_in_flight is not None:
            n = min(n, self.max_in_flight - self._in_flight)
        out: list[DeliveryRef] = []
        ready = self._ready
        if ready is None:
            return out
        blocked: list[str] = []
        contenders = len(ready)
        while len(out) < n and ready:
            endpoint = ready.pop(0)
            lane = self._find(endpoint)
            assert lane is not None  # a ready endpoint has a lane
            cap = self._slot_cap(endpoint, contenders)
            if cap is not None and lane.in_flight >= cap:
                blocked.append(endpoint)
                continue
            queue = lane.queue
            assert queue is not None  # a ready lane has queued refs
            out.append(queue.popleft())
            lane.in_flight += 1
            if queue:
                ready.append(endpoint)
            else:
                lane.queue = None
        if blocked:
            ready.extend(blocked)
        elif not ready:
            self._ready = None
        self._queued -= len(out)
        self._in_flight += len(out)
        return out

    def finish(self, ref: DeliveryRef) -> Sequence[PageIn]:
        """An in-flight delivery left the queue; its credit returns. Maybe page-ins."""
        held = self._held
        if isinstance(held, frozenset) or ref not in held:  # the shared empty one holds none
            raise KeyError(f"{ref} is not held by tenant {self.tenant_id!r}")
        held.discard(ref)
        if not held:
            self._held = _NO_REFS
        lane = self._find(ref.endpoint_id)
        assert lane is not None  # a held ref's lane stays
        if lane.pending is not None:
            lane.left_during_read().add(ref)
        lane.held -= 1
        lane.in_flight -= 1
        self._in_flight -= 1
        self._refresh(lane)
        if self._ready and self.on_ready is not None:  # a slot came back for queued work
            self.on_ready(self)
        return self.poll_page_in() if self._spilling else NO_PAGES

    def drain_endpoint(self, endpoint_id: str) -> list[DeliveryRef]:
        """Remove every *queued* ref of one endpoint (its breaker opened: park them).

        Their credits return at once; in-flight refs stay until ``finish``.
        """
        lane = self._lanes.get(endpoint_id)
        if lane is None or not lane.queue:
            return []
        refs = list(lane.queue)
        self._unready(lane)
        held = self._holding()
        held.difference_update(refs)
        if not held:
            self._held = _NO_REFS
        if lane.pending is not None:
            lane.left_during_read().update(refs)
        lane.held -= len(refs)
        self._queued -= len(refs)
        self._refresh(lane)
        return refs

    def pause(self, endpoint_id: str) -> list[DeliveryRef]:
        """The endpoint's breaker opened: drop its queued refs (returned, to park them).

        Until :meth:`unpause` its lane asks for no page-in and takes no share of
        the credits; new offers spill (they stay pending, the cursor covers them).
        """
        lane = self._lane(endpoint_id)
        if not lane.paused:
            lane.paused = True
            self._paused += 1
        self._refresh(lane)
        return self.drain_endpoint(endpoint_id)

    def unpause(self, endpoint_id: str) -> Sequence[PageIn]:
        """The endpoint's breaker lets work through again: page its spilled work back in."""
        lane = self._lanes.get(endpoint_id)
        if lane is None or not lane.paused:
            return NO_PAGES
        lane.paused = False
        self._paused -= 1
        self._refresh(lane)
        return self.poll_page_in()

    # -- spill and page-in -------------------------------------------------
    def mark_backlog(
        self, endpoint_id: str, count: int = 0, oldest: DeliveryRef | None = None
    ) -> Sequence[PageIn]:
        """The store holds pending work of an endpoint this queue has not seen.

        (Restart, resume, replay.) ``oldest`` is the smallest such ref when
        known; None rescans the endpoint from its oldest.
        """
        lane = self._lane(endpoint_id)
        self._spill_into(lane, oldest)
        lane.spilled += count - 1  # _spill_into counted one
        return self.poll_page_in()

    def poll_page_in(self) -> Sequence[PageIn]:
        """Page-in requests for spilling lanes with none outstanding and enough free credits."""
        if not self._spilling:
            return NO_PAGES
        requests: list[PageIn] = []
        for lane in self._spilling.values():
            request = self._poll_lane(lane)
            if request is not None:
                requests.append(request)
        return requests

    def _poll_lane(self, lane: _Lane) -> PageIn | None:
        if lane.pending is not None or lane.paused:
            return None
        share = self._share(lane)
        free = share - lane.held
        tenant_free = self.capacity - len(self._held)
        if tenant_free < free:  # the tenant is the limit: count what eviction frees
            free = min(free, tenant_free + self._evictable(lane))
        # A quarter of the share amortises one store query over many deliveries
        # while keeping the lane mostly full; an idle lane pages in at once so
        # a small endpoint never waits.
        if free <= 0 or (free < max(1, share // 4) and lane.held):
            return None
        self._tokens += 1
        # +1: the row at the (inclusive) cursor comes back too.
        limit = min(free, MAX_PAGE) + 1
        lane.pending = PageIn(self.tenant_id, lane.endpoint_id, lane.cursor, limit, self._tokens)
        return lane.pending

    def _pending_lane(self, request: PageIn) -> _Lane:
        lane = self._lanes.get(request.endpoint_id)
        if lane is None or request is not lane.pending:
            raise ValueError("paged_in() for a request that is not outstanding")
        return lane

    def paged_in(
        self,
        request: PageIn,
        rows: Sequence[DeliveryRef],
        offers_due: AbstractSet[str] = frozenset(),
    ) -> Sequence[PageIn]:
        """The refs answering ``request``, in event id order. May evict (:meth:`take_evicted`).

        Rows of events in ``offers_due`` are passed over: each will be offered
        (admitted, or spilled, which pulls the cursor back to it).
        """
        lane = self._pending_lane(request)
        lane.pending = None
        left, lane.left_during_page = lane.left_during_page or _NO_REFS, None
        if lane.paused:  # its breaker opened during the read: the rows stay for later
            lane.spilled_during_page = False
            lane.cursor = lane.take_pulled_back(lane.cursor)
            return self.poll_page_in()
        cursor = request.after
        admitted = 0
        consumed = 0
        for ref in rows:
            # ``_admit`` may replace the set
            if ref not in self._held and ref not in left and ref.event_id not in offers_due:
                if lane.held >= self._share(lane) or not self._room(lane):
                    break
                self._admit(lane, ref)
                admitted += 1
            cursor = ref
            consumed += 1
        lane.cursor = lane.take_pulled_back(cursor)
        self._paged_in_total += admitted
        lane.spilled = max(0, lane.spilled - admitted)
        exhausted = consumed == len(rows) and len(rows) < request.limit
        if exhausted and not lane.spilled_during_page:
            lane.spilling = False
            lane.spilled = 0
            del self._spilling[lane.endpoint_id]
            self._refresh(lane)
        lane.spilled_during_page = False
        return self.poll_page_in()

    def abort_page_in(self, request: PageIn) -> None:
        """The shell could not run ``request`` (store error); it will be asked again."""
        lane = self._lanes.get(request.endpoint_id)
        if lane is not None and request is lane.pending:
            lane.pending = None
            lane.left_during_page = None
            lane.spilled_during_page = False
            lane.cursor = lane.take_pulled_back(lane.cursor)

    # -- introspection -----------------------------------------------------
    def holds(self, ref: DeliveryRef) -> bool:
        return ref in self._held

    def is_spilling(self) -> bool:
        """Some lane has work waiting in the store (it pages in as credits free up)."""
        return bool(self._spilling)

    def is_idle(self) -> bool:
        """Holds nothing, spills nothing, pauses no lane: dropping it loses no state.

        (Only its counters, which a new queue starts again from zero.)
        """
        return not self._held and not self._spilling and not self._paused

    def open_work(self) -> int:
        """Deliveries queued or in flight: what an operator's view orders tenants by."""
        return self._queued + self._in_flight

    def queued_refs(self) -> Iterable[DeliveryRef]:
        for lane in self._lanes.values():
            if lane.queue:
                yield from lane.queue

    def stats(self) -> CreditStats:
        return CreditStats(
            tenant_id=self.tenant_id,
            capacity=self.capacity,
            credits_used=len(self._held),
            queued=self._queued,
            in_flight=self._in_flight,
            spilled=sum(lane.spilled for lane in self._spilling.values()),
            spilling=bool(self._spilling),
            peak_used=self._peak,
            admitted_total=self._admitted_total,
            spilled_total=self._spilled_total,
            paged_in_total=self._paged_in_total,
            evicted_total=self._evicted_total,
            lanes=len(self._lanes),
        )

    def lane_stats(self) -> list[LaneStats]:
        """Per endpoint: credits, queue, attempts in flight, spill state."""
        return [
            LaneStats(
                lane.endpoint_id,
                lane.held,
                len(lane.queue or ()),
                lane.in_flight,
                lane.spilled,
                lane.spilling,
            )
            for lane in self._lanes.values()
        ]

    def __repr__(self) -> str:
        return (
            f"CreditQueue({self.tenant_id!r}, used={len(self._held)}/{self.capacity}, "
            f"queued={self._queued}, in_flight={self._in_flight}, lanes={len(self._lanes)}, "
            f"spilling={len(self._spilling)})"
        )


__all__ = [
    "ADMITTED",
    "MAX_PAGE",
    "NO_PAGES",
    "Admission",
    "Admitted",
    "CreditQueue",
    "CreditStats",
    "DeliveryRef",
    "LaneStats",
    "PageIn",
    "Spilled",
]
