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
Retries: ``poll`` switches due retries back to pending and offers
them. Both run from a background loop in production and are called directly
by tests that drive a ManualClock.

Cluster mode (``use_ownership``): a node delivers only the tenants whose
partition it leases; every place that would start or queue work asks
``owns`` first, and ``ownership_changed`` drops the tenants it lost (their
work stays pending in the store for the new owner). A single node sets no
``owns`` and pays one ``is None`` test per event.

Crash safety: the store is the truth. A delivery is pending in the store
until its outcome is committed, so after ``kill -9`` everything unfinished is
paged in again at start (at least once; duplicates possible, never losses).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import random
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, Final

from mypy_extensions import mypyc_attr

from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.config.catalog import Catalog
from hookrouter.config.delivery import DeliverySettings
from hookrouter.config.telemetry import LABELLED_LATENCY_TENANTS, LABELLED_TENANTS
from hookrouter.delivery import metrics as delivery_metrics
from hookrouter.delivery.attempt import Attempt, Attempter
from hookrouter.delivery.body_budget import BodyBudget
from hookrouter.delivery.breaker import BreakerState, BreakerStats, CircuitBreaker, Transition
from hookrouter.delivery.endpoints import EndpointRuntime, EndpointTable
from hookrouter.delivery.health import EndpointHealth, EndpointReport
from hookrouter.delivery.listener import CommitListener
from hookrouter.delivery.metrics import Tracked
from hookrouter.delivery.outcomes import outcome_record
from hookrouter.delivery.policy import Park
from hookrouter.delivery.resolver import Resolver
from hookrouter.delivery.ssrf import DestinationPolicy
from hookrouter.delivery.transport import HttpTransport
from hookrouter.errors import StoreError
from hookrouter.flow.backlog import BacklogCount
from hookrouter.flow.credits import ADMITTED, CreditQueue, DeliveryRef, PageIn, new_ref
from hookrouter.flow.scheduler import FairScheduler, Work
from hookrouter.ids import event_id_time_ms
from hookrouter.loop_metrics import CounterCell, HistogramCell
from hookrouter.ratelimit import RateLimiter
from hookrouter.store.base import FINAL_STATES, OPEN_STATES, DeliveryState, NewEvent
from hookrouter.store.ledger import DeliveryLedger, OutcomeRecord, Payload, ReplayFilter, Resumed
from hookrouter.telemetry.logs import context
from hookrouter.telemetry.tracing import TRACE_HEADER, Tracing

log = logging.getLogger(__name__)

# Parked deliveries resumed (or pending ones parked) per write job: one job for
# all of them held the writer (on the default design, the event loop) for as
# long as the backlog was big and grew memory with it; in chunks, ingest
# commits go on between them and memory stays flat.
RESUME_CHUNK = 1_000
# How often the background loop promotes due retries and polls breakers. A
# quarter second keeps short test schedules ("1s") close to their nominal time
# at a cost of four indexed queries per second.
POLL_INTERVAL = 0.25
PROMOTE_LIMIT = 1000
_OPEN = frozenset(OPEN_STATES)
# Open-state counts (the backlog base, the parked gauge) come from counts the
# store keeps per tenant and state (no scan of the open deliveries): every 5 s
# is fresh enough for a dashboard. Delivered rows are not counted.
STATE_COUNTS_EVERY = 5.0
# Tenant queues checked per poll for release once idle: a slice per turn, so
# a poll costs the same with ten tenants or a hundred thousand.
SWEEP_PER_POLL = 256
# A queue found idle is released when the sweep finds it idle again at least
# this long after: a tenant with steady traffic keeps its queue (and its series).
IDLE_RELEASE_SECONDS = 60.0
# An event announced by ``event_appending`` whose append never settled (a
# path that neither committed nor said it was not stored) would be passed
# over by every page-in: after this long it is paged in, and logged.
OFFER_DUE_SECONDS = 60.0
# Outcome counter names by delivery state (keys are the StrEnum members' values).
OUTCOME_NAMES: Final[dict[str, str]] = {
    "delivered": "delivered",
    "retry": "retried",
    "dead": "dead",
    "disabled": "disabled",
    "parked": "parked",
    "pending": "retried",
}


# Nothing it reaches refers back to it: the collector need not track it (heap.py).
@mypyc_attr(acyclic=True)
class _Tenant:
    """What an event's path needs of its tenant, reached by one lookup of the tenant.

    With events spread over thousands of tenants, each per-tenant dict an
    event consulted (backlog, queue, body bytes, series label, latency cell,
    and per endpoint its runtime, breaker and health) was another entry no
    longer in the CPU's caches (docs/performance.md, "Scale in tenants"). A
    tenant with work has one of these (``DeliveryEngine._tenants``), made
    with its queue and released with it; a cached event body points at it,
    so an attempt's end finds it without a lookup. ``live`` turns False when
    it is released: a holder of a released record looks the tenant up again.
    """

    __slots__ = (
        "backlog",
        "body_bytes",
        "delivered",
        "label",
        "latency",
        "live",
        "queue",
        "runtime",
        "runtime_id",
        "tenant_id",
    )

    def __init__(self, tenant_id: str, queue: CreditQueue, backlog: int) -> None:
        self.tenant_id = tenant_id
        self.queue = queue
        # Open deliveries at the last count + opened - closed since (``backlog``);
        # tenants without a record keep theirs in ``DeliveryEngine._backlog``.
        self.backlog = BacklogCount(backlog)
        self.body_bytes = 0  # bytes of its bodies in the cache (``BodyBudget``)
        self.label: str | None = None  # its series label (``_series``); None: ask again
        self.latency: HistogramCell | None = None  # the latency cell of ``label``
        self.delivered: CounterCell | None = None  # its "delivered" count under ``label``
        self.live = True
        # The runtime of the endpoint it last delivered to (one slot, not a
        # dict: most tenants have one endpoint, and every container a tenant
        # keeps feeds the cyclic collector). Cleared whenever the endpoint
        # table may drop or replace this tenant's runtimes (``_sync_limits``).
        self.runtime: EndpointRuntime | None = None
        self.runtime_id = ""


# Nothing it reaches refers back to it: the collector need not track it (heap.py).
@mypyc_attr(acyclic=True)
class _Cached:
    """A committed event's payload, kept while credit queues hold its deliveries.

    A plain class, not a dataclass: mypyc leaves the ``__init__`` that
    ``dataclasses`` generates interpreted (one Python frame per event).
    """

    __slots__ = ("holders", "payload", "received_at", "sole", "tenant")

    def __init__(
        self,
        payload: Payload | None,
        holders: int,
        sole: bool,
        received_at: float,
        tenant: _Tenant,
    ) -> None:
        self.payload = payload  # None: over the body budget, read from the store
        self.tenant = tenant
        self.holders = holders  # deliveries of this event held by credit queues
        self.sole = sole  # the event has this one delivery only
        self.received_at = received_at  # wall seconds (the latency histogram's start)


# Compiled with mypyc (setup.py). No interpreted subclasses: a native class
# calls its own methods (_pump, _begin, _release, ... several per event)
# through its vtable, an interpreted subclass by name.
class DeliveryEngine(CommitListener):
    """Delivers committed events to tenant endpoints (see the module docstring)."""

    def __init__(
        self,
        catalog: Callable[[], Catalog],
        ledger: DeliveryLedger,
        settings: DeliverySettings,
        *,
        transport: HttpTransport | None = None,
        resolver: Resolver | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._catalog = catalog
        self._ledger = ledger
        self.settings = settings
        self.resume_chunk = RESUME_CHUNK  # parked deliveries resumed per write job
        self._clock = clock
        self._rand = rand
        # One origin may use every worker slot (a single big tenant), so the
        # per-origin pool never makes an attempt wait for a connection.
        self.transport = transport or HttpTransport(
            connect_timeout=settings.connect_timeout_seconds,
            max_connections_per_origin=settings.workers,
            max_idle=settings.workers,
            clock=clock,
        )
        policy, _ = DestinationPolicy.parse(
            settings.allow_private_networks, settings.allowlist, "delivery.allowlist"
        )
        self.resolver = resolver or Resolver(policy, clock=clock)
        self.endpoints = EndpointTable(settings)
        self._attempter = Attempter(
            self.transport, self.resolver, clock, rand, settings.timeout_seconds
        )
        self.scheduler = FairScheduler()
        self.queues: dict[str, CreditQueue] = {}
        self._tenants: dict[str, _Tenant] = {}  # the same tenants as ``queues``: their records
        self._cache: dict[str, _Cached] = {}
        self.bodies = BodyBudget(settings.body_cache_bytes, settings.body_cache_tenant_bytes)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._active: dict[DeliveryRef, Attempt] = {}
        self._drained: asyncio.Future[None] | None = None  # set by stop(), resolved at 0
        self._in_flight = 0
        self._pump_scheduled = False
        self._closing = False
        # The catalog object and version whose limits the queues carry: a change
        # re-applies limits for the tenants it names only (``_sync_limits``).
        self._limits_from: Catalog | None = None
        self._limits_version = 0
        self.limits_applied = 0  # tenant queues (re)limited: observable by tests
        # Queues that may want a page-in (a lane spilling), breakers that are
        # not closed, and every queue in turn for release when idle: what the
        # periodic poll walks instead of every tenant.
        self._spill_watch: set[str] = set()
        # Events appended here whose own offer (``event_committed``) is still to
        # come: a page-in that lists one leaves it to that offer, or it would be
        # attempted twice once the page's attempt had finished.
        # Event id -> (when announced, monotonic; its tenant; its endpoints).
        self._offers_due: dict[str, tuple[float, str, tuple[str, ...]]] = {}
        self.tripped: dict[str, str] = {}  # endpoint id -> tenant id
        self._sweep: deque[CreditQueue] = deque()
        self._idle_since: dict[str, float] = {}  # tenant -> when the sweep first saw it idle
        # Idle queues are released only while more than this many are held: state is
        # bounded by a count, so tenants with sparse traffic stay warm below it instead
        # of rebuilding their runtimes on every event (docs/performance.md).
        self.idle_tenants_kept = settings.idle_tenants_kept
        self.tenant_states_made = 0  # tenant records built (first work, or back from release)
        self.tenant_states_released = 0  # released by the idle sweep (not removals)
        self._background: asyncio.Task[None] | None = None
        self.counters = {"delivered": 0, "retried": 0, "dead": 0, "disabled": 0, "parked": 0}
        # (tenant label, outcome) -> count, for metrics; a cell, so a tenant's record
        # can hold its "delivered" one (``_count_outcome``).
        self.outcome_counts: dict[tuple[str, str], CounterCell] = {}
        self.labelled: set[str] = set()  # tenants with series of their own (``_series``)
        self.series_limit = LABELLED_TENANTS  # [telemetry]: use_series_limits
        # Tenants with a latency histogram of their own (a smaller set: 16 series each).
        self.latency_labelled: set[str] = set()
        self.latency_limit = LABELLED_LATENCY_TENANTS
        self._latency = delivery_metrics.LATENCY
        self.state_counts: dict[tuple[str, DeliveryState], int] = {}  # refreshed by poll()
        self._counts_at = float("-inf")
        # Backlog per tenant = open deliveries at the last count + opened - closed
        # since, for tenants without a record (``_Tenant.backlog`` for the others).
        self._backlog: dict[str, int] = {}
        self._metrics: Tracked | None = None  # the scrape collector's handle (start)
        self._breaker_listeners: tuple[Callable[[str, Transition], None], ...] = ()
        # Cluster mode: whether this node may deliver a tenant now (its lease);
        # None on a single node, where every check below is skipped.
        self._owns: Callable[[str], bool] | None = None
        self.not_owned = 0  # attempts not started: the tenant's lease was not (or no longer) ours
        self._dead_listener: Callable[[str, str], None] | None = None

    def backlog(self, tenant_id: str) -> int:
        """Undelivered deliveries of a tenant (pending, retrying, parked); approximate.

        Ingest admission reads it per event through ``backlog_count``
        (``ingress.admission.BacklogAdmission``).
        """
        count = self.backlog_count(tenant_id)
        return max(0, count if isinstance(count, int) else count.open)

    def backlog_count(self, tenant_id: str) -> BacklogCount | int:
        """A tenant's open-delivery count while it has work (``flow.backlog.BacklogCount``;
        a holder may keep it until ``live`` turns False); else the number itself, as
        last counted (may be below zero until the next count)."""
        tenant = self._tenants.get(tenant_id)
        return self._backlog.get(tenant_id, 0) if tenant is None else tenant.backlog

    def in_flight_events(self) -> list[tuple[str, str]]:
        """(tenant, event id) of each attempt in progress: the lag series reads it per scrape."""
        return [(a.runtime.tenant_id, ref.event_id) for ref, a in list(self._active.items())]

    def on_breaker_transition(self, callback: Callable[[str, Transition], None]) -> None:
        """Also call ``callback(tenant_id, transition)`` after each breaker state change."""
        self._breaker_listeners = (*self._breaker_listeners, callback)

    def on_dead_letter(self, callback: Callable[[str, str], None] | None) -> None:
        """Call ``callback(tenant_id, endpoint_id)`` for each delivery that goes dead."""
        self._dead_listener = callback

    def use_tracing(self, tracing: Tracing | None) -> None:
        """Trace each attempt (``[telemetry]``); None: tracing off."""
        self._attempter.tracing = tracing

    def use_series_limits(self, tenants: int, latency_tenants: int) -> None:
        """How many tenants get metric series of their own (``[telemetry]``), set
        before the first delivery: a tenant once labelled keeps its label."""
        self.series_limit = tenants
        self.latency_limit = latency_tenants

    def use_limiter(self, limiter: RateLimiter | None) -> None:
        """The limiter that endpoints' ``rate_limit`` buckets live in (shared with ingest)."""
        self._attempter.limiter = limiter

    def on_endpoint_gone(self, callback: Callable[[str], None] | None) -> None:
        """Call ``callback(endpoint_id)`` when a 410 Gone disables an endpoint."""
        self._attempter.on_gone = callback

    def use_ownership(self, owns: Callable[[str], bool] | None) -> None:
        """Cluster mode: deliver only tenants ``owns`` says this node holds the lease of."""
        self._owns = owns

    def ownership_changed(self) -> None:
        """Leases moved: drop the tenants no longer owned (their work stays in the store)."""
        owns = self._owns
        if owns is None:
            return
        for tenant_id in [t for t in self.queues if not owns(t)]:
            self._disown(tenant_id)
        self._kick()

    def _disown(self, tenant_id: str) -> None:
        """Forget a tenant's queued work; attempts in flight finish (their outcomes are fenced)."""
        queue = self.queues.get(tenant_id)
        if queue is None:
            return
        for ref in list(queue.queued_refs()):
            self._forget_body(ref)
        self._drop_queue(queue)

    def event_appending(self, event: NewEvent) -> None:
        """``CommitListener``: until its offer, page-ins leave this event out."""
        if event.endpoint_ids:
            due = (self._clock.monotonic(), event.tenant_id, event.endpoint_ids)
            self._offers_due[event.event_id] = due

    def event_not_stored(self, event: NewEvent) -> None:
        """``CommitListener``: no offer is coming for this event."""
        self._offers_due.pop(event.event_id, None)

    def event_committed(self, event: NewEvent) -> None:
        """``CommitListener``: offer each delivery of a freshly committed event."""
        if not event.endpoint_ids:
            return
        self._offers_due.pop(event.event_id, None)
        if self._closing:
            return
        tenant_id = event.tenant_id
        owns = self._owns
        if owns is not None and not owns(tenant_id):
            return  # its owner pages it in when notified
        tenant = self._tenant(tenant_id)
        tenant.backlog.open += len(event.endpoint_ids)
        queue = tenant.queue
        held = 0
        for endpoint_id in event.endpoint_ids:
            ref = new_ref(event.event_id, endpoint_id)
            runtime = tenant.runtime
            breaker: CircuitBreaker | None
            if runtime is not None and tenant.runtime_id == endpoint_id:
                breaker = runtime.breaker
            else:
                breaker = self.endpoints.breakers.get(endpoint_id)
            if breaker is not None and breaker.state is BreakerState.OPEN:
                self._park_now(tenant, ref)  # takes no credit and no slot
            elif queue.offer(ref) is ADMITTED:
                held += 1
        if queue.is_spilling():
            self._spill_watch.add(tenant_id)
        self._forget_evicted(queue)
        if held:
            sole = len(event.endpoint_ids) == 1
            payload = None
            size = len(event.body)
            if self.bodies.admit(tenant.body_bytes, size):
                tenant.body_bytes += size
                headers = event.headers
                payload = Payload(
                    event.body, headers.get("content-type"), headers.get(TRACE_HEADER)
                )
            cached = _Cached(payload, held, sole, event.received_at, tenant)
            self._cache[event.event_id] = cached
            self._kick()

    def _park_now(self, tenant: _Tenant, ref: DeliveryRef) -> None:
        """Park a new delivery for an endpoint whose breaker is open; resumed on close."""
        park = Park("breaker_open")
        tenant_id = tenant.tenant_id
        record = outcome_record(ref, park, 0, None, self._clock.time(), tenant_id=tenant_id)
        self._ledger.record([record])
        self._count_outcome(tenant_id, record, None, tenant)

    def _queue(self, tenant_id: str) -> CreditQueue:
        """The tenant's queue, made on its first work (idle tenants have none)."""
        return self._tenant(tenant_id).queue

    def _tenant(self, tenant_id: str) -> _Tenant:
        """The tenant's record and queue, made on its first work (idle tenants have none)."""
        tenant = self._tenants.get(tenant_id)
        if tenant is None:
            catalog = self._catalog()
            config = catalog.tenants.get(tenant_id)
            capacity = config.queue_capacity if config else 1000
            queue = CreditQueue(tenant_id, capacity)
            tenant = _Tenant(tenant_id, queue, self._backlog.pop(tenant_id, 0))
            self._tenants[tenant_id] = tenant
            self.tenant_states_made += 1
            self.queues[tenant_id] = queue
            tenant.label = self._series(tenant_id)  # its series are labelled from its first work
            self._limit(queue, catalog)
            self.scheduler.add(queue)
            self._sweep.append(queue)
        return tenant

    def _runtime(
        self, tenant: _Tenant | None, catalog: Catalog, endpoint_id: str
    ) -> EndpointRuntime | None:
        """``EndpointTable.get``, through the tenant's record when it holds that endpoint's."""
        if tenant is None or not tenant.live:
            return self.endpoints.get(catalog, endpoint_id)
        runtime = tenant.runtime
        if runtime is None or tenant.runtime_id != endpoint_id:
            runtime = self.endpoints.get(catalog, endpoint_id)
            if runtime is not None:
                tenant.runtime, tenant.runtime_id = runtime, endpoint_id
        return runtime

    def _sync_limits(self, catalog: Catalog) -> None:
        """Bring queue limits in line with the catalog: only the tenants changed since last time.

        A different catalog object (tests swap whole catalogs) re-limits every
        queue held, which is every tenant with work, never every tenant.
        """
        changed = (
            None
            if catalog is not self._limits_from
            else catalog.changed_since(self._limits_version)
        )
        self._limits_from, self._limits_version = catalog, catalog.version
        if changed is None:
            for tenant in list(self._tenants.values()):
                tenant.runtime = None  # the refresh may drop or replace it
                self._limit(tenant.queue, catalog)
            self.endpoints.refresh_all(catalog)
            return
        for tenant_id in changed:
            held = self._tenants.get(tenant_id)
            if held is not None:
                held.runtime = None  # the refresh below may drop or replace it
                self._limit(held.queue, catalog)
            if tenant_id not in catalog.tenants:
                self._forget_tenant(tenant_id)
            else:
                self.endpoints.refresh(catalog, tenant_id)

    def _synced_catalog(self) -> Catalog:
        """The live catalog, its changes applied (limits, runtimes) before anything reads them."""
        catalog = self._catalog()
        if catalog.version != self._limits_version or catalog is not self._limits_from:
            self._sync_limits(catalog)
        return catalog

    def _limit(self, queue: CreditQueue, catalog: Catalog) -> None:
        """One tenant's in-flight caps from the catalog: costs that tenant's endpoints."""
        self.limits_applied += 1
        tenant_id = queue.tenant_id
        tenant = catalog.tenants.get(tenant_id)
        if tenant is not None:
            queue.capacity = tenant.queue_capacity
            queue.max_in_flight = tenant.max_in_flight
        endpoints = catalog.endpoints_of(tenant_id)
        queue.endpoint_count = len(endpoints) or 1
        queue.endpoint_limits = {
            e.id: e.max_in_flight for e in endpoints.values() if e.max_in_flight
        } or None
        self.scheduler.wake(tenant_id)  # a raised cap may free queued work

    def _forget_tenant(self, tenant_id: str) -> None:
        """The tenant was removed: release its runtime state (its queue once it drains)."""
        tenant = self._tenants.get(tenant_id)
        if tenant is not None:
            if tenant.queue.is_idle():
                self._drop_queue(tenant.queue)
            else:  # it drains first; what it holds of the removed tenant goes now
                tenant.backlog.open = 0
                tenant.label = tenant.latency = tenant.delivered = tenant.runtime = None
        for outcome in OUTCOME_NAMES.values():
            self.outcome_counts.pop((tenant_id, outcome), None)
        for state in DeliveryState:
            self.state_counts.pop((tenant_id, state), None)
        self._backlog.pop(tenant_id, None)
        if tenant_id in self.labelled:  # its label frees up for a later tenant
            self.labelled.discard(tenant_id)
        if tenant_id in self.latency_labelled:
            self.latency_labelled.discard(tenant_id)
            self._latency.remove(tenant_id)
        for endpoint_id in self.endpoints.prune(tenant_id, {}):
            self.tripped.pop(endpoint_id, None)

    def _drop_queue(self, queue: CreditQueue) -> None:
        tenant_id = queue.tenant_id
        tenant = self._tenants.get(tenant_id)
        if tenant is not None and tenant.queue is queue:
            del self._tenants[tenant_id]
            del self.queues[tenant_id]
            tenant.live = False
            tenant.runtime = None
            tenant.backlog.live = False
            if tenant.backlog.open:  # its open deliveries are still counted
                self._backlog[tenant_id] = tenant.backlog.open
            self.scheduler.remove(tenant_id)
            self._spill_watch.discard(tenant_id)
            self._idle_since.pop(tenant_id, None)
            if tenant_id not in self.tripped.values():
                # Its endpoints' runtimes and closed breakers go with the queue (rebuilt
                # on the next event); a breaker not closed stays, polled until it is.
                self.endpoints.prune(tenant_id, {}, idle=True)

    def _kick(self) -> None:
        if not self._pump_scheduled and not self._closing:
            self._pump_scheduled = True
            self.transport.running_loop().call_soon(self._pump)  # the same loop, cached

    def _pump(self) -> None:
        self._pump_scheduled = False
        if self._closing:
            return
        catalog = self._synced_catalog()
        free = self.settings.workers - self._in_flight
        if free <= 0:
            return
        batch = self.scheduler.next_batch(free)
        if not batch:
            return
        self._in_flight += len(batch)
        missing = []
        for work in batch:
            cached = self._cache.get(work.ref.event_id)
            if cached is None or cached.payload is None:
                missing.append(work)
            else:
                self._begin(work, cached.payload, 0, catalog, cached.tenant)
        if missing:
            self._spawn(self._load_and_attempt(missing))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _load_and_attempt(self, batch: list[Work]) -> None:
        try:
            loaded = {w.ref: w for w in await self._ledger.load([w.ref for w in batch])}
        except StoreError as exc:
            log.warning("cannot load deliveries, retrying later: %s", exc.message)
            for work in batch:  # the credit returns; they are still pending in the store
                self._release(work, None)
                queue = self._queue(work.tenant_id)
                self._page(queue, queue.mark_backlog(work.ref.endpoint_id, 1, work.ref))
            return
        catalog = self._synced_catalog()  # it may have changed during the read
        for work in batch:
            item = loaded.get(work.ref)
            # Event deleted meanwhile (nothing to deliver), or stopping (it stays pending).
            if item is None or self._closing:
                self._release(work, None)
            else:
                self._begin(work, item.payload, item.attempts, catalog, None)

    def _begin(
        self,
        work: Work,
        payload: Payload,
        attempts_before: int,
        catalog: Catalog,
        tenant: _Tenant | None,
    ) -> None:
        """Start one attempt; ``tenant``: the record its cached body names, if any."""
        ref = work.ref
        owns = self._owns
        if owns is not None and not owns(work.tenant_id):
            # The lease cannot cover this attempt: leave it pending for whoever holds it.
            self.not_owned += 1
            self._disown(work.tenant_id)
            self._release(work, None)
            return
        hooks = (partial(self._on_transition, work.tenant_id), partial(self._finished, work))
        try:
            runtime = self._runtime(tenant, catalog, ref.endpoint_id)
            attempt = self._attempter.begin(runtime, ref, payload, attempts_before, hooks)
        except Exception:
            log.exception(
                "delivery attempt for %s failed unexpectedly",
                ref,
                extra=context(
                    event_id=ref.event_id, tenant=work.tenant_id, endpoint=ref.endpoint_id
                ),
            )
            self._finished(work, None)
            return
        if attempt is not None:  # in progress (decisions made at once returned None)
            self._active[ref] = attempt

    def _finished(self, work: Work, record: OutcomeRecord | None) -> None:
        """``Finish`` hook: the attempt is over (None: abandoned, still pending)."""
        self._active.pop(work.ref, None)
        self._release(work, record)

    def _release(self, work: Work, record: OutcomeRecord | None) -> None:
        """The attempt is over: record its outcome, return the credit, maybe page in."""
        self._in_flight -= 1
        if self._in_flight == 0 and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        cached = self._cache.get(work.ref.event_id)
        tenant = None if cached is None else cached.tenant
        if tenant is None or not tenant.live:
            tenant = self._tenants.get(work.tenant_id)
        if record is not None:
            if cached is not None and cached.sole and record.state is DeliveryState.DELIVERED:
                # The event's only delivery: the store need not check whether the
                # event ended failed.
                record = record.settling_event()
            self._ledger.record([record])
            arrived = cached.received_at if cached is not None else None
            self._count_outcome(work.tenant_id, record, arrived, tenant)
            if record.state in FINAL_STATES:
                if tenant is not None:
                    tenant.backlog.open -= 1
                else:
                    backlog = self._backlog
                    backlog[work.tenant_id] = backlog.get(work.tenant_id, 0) - 1
        if cached is not None:
            self._drop_holder(work.ref.event_id, cached)
        queue = None if tenant is None else tenant.queue
        if queue is not None and queue.holds(work.ref):  # not when its tenant was disowned
            requests = queue.finish(work.ref)
            if requests:
                self._page(queue, requests)
        self._kick()

    def _page(self, queue: CreditQueue, requests: Sequence[PageIn]) -> None:
        """Run a queue's page-in requests; forget the bodies of refs it evicted."""
        if queue.is_spilling():
            self._spill_watch.add(queue.tenant_id)
        self._forget_evicted(queue)
        if not self._closing:
            for request in requests:
                self._spawn(self._run_page(queue, request))

    async def _run_page(self, queue: CreditQueue, request: PageIn) -> None:
        try:
            refs = await self._ledger.page_pending(
                request.tenant_id, request.endpoint_id, request.after, request.limit
            )
        except StoreError as exc:
            log.warning("page-in for %s failed: %s", request.endpoint_id, exc.message)
            queue.abort_page_in(request)
            return  # the poll loop asks again
        except Exception:
            # Whatever failed, the request must not stay outstanding: the lane
            # would never page in again and its deliveries would wait forever.
            log.exception("page-in for %s failed unexpectedly", request.endpoint_id)
            queue.abort_page_in(request)
            return
        self._page(queue, queue.paged_in(request, refs, self._offers_due.keys()))
        self._kick()

    def _forget_evicted(self, queue: CreditQueue) -> None:
        """Refs the queue dropped from memory (they wait in the store): release their bodies."""
        for ref in queue.take_evicted():
            self._forget_body(ref)

    def _on_transition(self, tenant_id: str, transition: Transition | None) -> None:
        if transition is None:
            return
        self.endpoints.remember(transition)
        log.info(
            "breaker %s: %s -> %s (%s)",
            transition.endpoint_id,
            transition.before.value,
            transition.after.value,
            transition.signal.value,
            extra=context(tenant=tenant_id, endpoint=transition.endpoint_id),
        )
        for listener in self._breaker_listeners:
            listener(tenant_id, transition)
        queue = self._queue(tenant_id)
        endpoint_id = transition.endpoint_id
        if transition.after is BreakerState.CLOSED:
            self.tripped.pop(endpoint_id, None)
        else:  # polled until it closes again
            self.tripped[endpoint_id] = tenant_id
        if transition.after is BreakerState.OPEN:
            # Spilled work of the endpoint is parked in the store in bulk, and its
            # lane is paused (no page-ins, no share of the credits): paging its
            # deliveries in only to load each one and park it on its own was a
            # burst of wasted loop time right when the breaker opened.
            # Spawned first: its write job then runs before the page-in below.
            # The lane's queued refs are pending in the store too: that bulk job
            # parks them with the rest (an outcome record each only lengthened
            # the opening's transaction, which runs on the loop).
            self._spawn(self.park_spilled(tenant_id, endpoint_id))
            drained = queue.pause(endpoint_id)
            if drained:
                for ref in drained:
                    self._forget_body(ref)
                self._page(queue, queue.poll_page_in())
        elif transition.after is BreakerState.HALF_OPEN:
            self._page(queue, queue.unpause(endpoint_id))
            probes = self.endpoints.breaker(endpoint_id).config.half_open_probes
            self._spawn(self.resume_parked(tenant_id, endpoint_id, probes))
        elif transition.after is BreakerState.CLOSED:
            self._page(queue, queue.unpause(endpoint_id))
            self._spawn(self.resume_parked(tenant_id, endpoint_id, None))

    async def park_spilled(self, tenant_id: str, endpoint_id: str) -> int:
        """Pending -> parked in the store for an endpoint whose breaker is open.

        ``resume_chunk`` per write job; stops as soon as the breaker is no longer
        open (a resume may already be under way). Deliveries in flight or queued
        meanwhile are pending in the store too; parking them is harmless: an
        attempt's outcome overwrites the state, and the queue parks what it
        still holds when the attempter refuses it. Returns how many were parked.
        """
        done = 0
        while self._breaker_open(endpoint_id) and not self._closing:
            count = await self._ledger.park_pending(
                tenant_id, endpoint_id, self._clock.time(), self.resume_chunk
            )
            done += count
            if count < self.resume_chunk:
                break
        if done:
            self._count_parked(tenant_id, done)
            log.info(
                "parked %d spilled deliveries of %s (breaker open)",
                done,
                endpoint_id,
                extra=context(tenant=tenant_id, endpoint=endpoint_id),
            )
        return done

    def _count_outcome(
        self,
        tenant_id: str,
        record: OutcomeRecord,
        arrived: float | None = None,
        tenant: _Tenant | None = None,
    ) -> None:
        """Count one outcome; a delivery also feeds the latency histogram.

        Here, compiled, rather than in ``delivery.metrics``: it runs once per
        attempt. ``arrived``: when the event arrived (wall seconds), known
        while its body is cached; otherwise it is read from the event id.
        ``tenant``: the tenant's record when the caller has it (its label,
        latency cell and last runtime spare lookups by tenant and endpoint).
        """
        state = record.state
        outcome = OUTCOME_NAMES[state]  # a StrEnum member hashes as its value
        self.counters[outcome] += 1
        attempt = record.attempt
        endpoint_id = record.ref.endpoint_id
        if attempt is not None:  # the endpoint was tried (not a decision such as parking)
            success = state is DeliveryState.DELIVERED
            runtime = None if tenant is None else tenant.runtime
            if runtime is not None and tenant is not None and tenant.runtime_id == endpoint_id:
                runtime.health.observe(success, attempt.duration_ms, record.at)
            else:
                self.endpoints.observe(endpoint_id, success, attempt.duration_ms, record.at)
        if state is DeliveryState.DEAD and self._dead_listener is not None:
            self._dead_listener(tenant_id, endpoint_id)
        label = None if tenant is None else tenant.label
        if label is None:
            label = self._series(tenant_id)
            if tenant is not None:
                tenant.label, tenant.latency, tenant.delivered = label, None, None
        if state is DeliveryState.DELIVERED and tenant is not None:
            count = tenant.delivered
            if count is None:
                count = tenant.delivered = self._outcome_cell(label, outcome)
            count.inc()
        else:
            self._outcome_cell(label, outcome).inc()
        if state is DeliveryState.DELIVERED:
            if arrived is None:  # the body was paged in: the id carries the arrival ms
                arrived = event_id_time_ms(record.ref.event_id) / 1000
            cell = None if tenant is None else tenant.latency
            if cell is None:
                cell = self._latency.labels(self._latency_label(label))
                if tenant is not None:
                    tenant.latency = cell
            cell.observe(max(0.0, record.at - arrived))

    def _count_parked(self, tenant_id: str, count: int) -> None:
        """Count deliveries parked in bulk (one by one, ``_count_outcome`` does it)."""
        self.counters["parked"] += count
        self._outcome_cell(self._series(tenant_id), "parked").inc(count)

    def _outcome_cell(self, label: str, outcome: str) -> CounterCell:
        key = (label, outcome)
        cell = self.outcome_counts.get(key)
        if cell is None:
            cell = self.outcome_counts[key] = CounterCell()
        return cell

    def _series(self, tenant_id: str) -> str:
        """The tenant label of its series: its own for the first tenants, then one shared.

        Prometheus servers struggle past ~10k series per metric: beyond
        ``series_limit`` tenants, later ones are counted under
        ``OTHER_TENANTS`` (sticky, so every counter stays monotonic).
        """
        labelled = self.labelled
        if tenant_id in labelled:
            return tenant_id
        if len(labelled) < self.series_limit:
            labelled.add(tenant_id)
            return tenant_id
        return delivery_metrics.OTHER_TENANTS

    def _latency_label(self, label: str) -> str:
        """The label of a tenant's latency histogram: its own for the first ``latency_limit``."""
        labelled = self.latency_labelled
        if label in labelled:
            return label
        if label != delivery_metrics.OTHER_TENANTS and len(labelled) < self.latency_limit:
            labelled.add(label)
            return label
        return delivery_metrics.OTHER_TENANTS

    def _forget_body(self, ref: DeliveryRef) -> None:
        cached = self._cache.get(ref.event_id)
        if cached is not None:
            self._drop_holder(ref.event_id, cached)

    def _drop_holder(self, event_id: str, cached: _Cached) -> None:
        """One queued delivery of the event is gone; the last one frees its body."""
        cached.holders -= 1
        if cached.holders <= 0:
            del self._cache[event_id]
            if cached.payload is not None:
                size = len(cached.payload.body)
                self.bodies.release(size)
                cached.tenant.body_bytes -= size

    async def resume_parked(
        self, tenant_id: str, endpoint_id: str, limit: int | None, *, requeue: bool = True
    ) -> int:
        """Parked -> pending, at most ``limit`` (None: all), ``resume_chunk`` per write job.

        Each chunk is paged in as it is resumed (``requeue``); stops early when
        the endpoint's breaker opened again meanwhile (the rest stays parked).
        Returns how many were resumed.
        """
        done = 0
        while limit is None or done < limit:
            size = self.resume_chunk
            chunk = size if limit is None else min(size, limit - done)
            resumed = await self._ledger.resume_parked(tenant_id, endpoint_id, chunk)
            done += resumed.count
            if requeue:
                self.requeue(resumed)
            if resumed.count < chunk or self._breaker_open(endpoint_id):
                break
        return done

    def _breaker_open(self, endpoint_id: str) -> bool:
        breaker = self.endpoints.breakers.get(endpoint_id)
        return breaker is not None and breaker.state is BreakerState.OPEN

    def requeue(self, resumed: Resumed) -> None:
        """Deliveries became pending again in the store (resume, replay): page them in."""
        owns = self._owns
        if owns is not None and not owns(resumed.tenant_id):
            return  # the owner finds them (its catch-up scan)
        if resumed.count:
            queue = self._queue(resumed.tenant_id)
            self._page(
                queue, queue.mark_backlog(resumed.endpoint_id, resumed.count, resumed.oldest)
            )
            self._kick()

    def idle(self) -> bool:
        """Nothing running, nothing scheduled, nothing queued in memory."""
        return (
            self._in_flight == 0
            and not self._tasks
            and not self._pump_scheduled
            and all(q.stats().queued == 0 for q in self.queues.values())
        )

    # -- the operational surface: start/stop, timers, replay, stats ----------

    async def start(self, *, background: bool = True) -> None:
        """Page in what the store holds (after a restart) and start the timers."""
        catalog = self._catalog()
        # Breakers restart closed: parked work resumes. Only tenants the counts
        # show with parked deliveries are asked (a query per endpoint of every
        # tenant made start-up grow with the catalog).
        await self.refresh_counts()
        owns = self._owns  # cluster mode: other nodes' tenants are theirs to resume
        parked = sorted(
            t
            for (t, state) in self.state_counts
            if state is DeliveryState.PARKED and (owns is None or owns(t))
        )
        resumed_any = False
        for tenant_id in parked:
            for endpoint in list(catalog.endpoints_of(tenant_id).values()):
                resumed = await self.resume_parked(tenant_id, endpoint.id, None, requeue=False)
                if resumed:
                    resumed_any = True
                    log.info("resumed %d parked deliveries of %s", resumed, endpoint.id)
        for backlog in await self._ledger.pending_endpoints():
            self.requeue(backlog)
        if resumed_any:
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

    def wall_offset(self) -> float:
        """Add to a breaker's (monotonic) times for wall seconds."""
        return self._clock.time() - self._clock.monotonic()

    def breaker_stats(self, endpoint_ids: Iterable[str] | None = None) -> dict[str, BreakerStats]:
        """The breakers this engine holds, by endpoint: all, or those of ``endpoint_ids``."""
        now = self._clock.monotonic()
        held = self.endpoints.breakers
        if endpoint_ids is None:
            return {e: b.stats(now) for e, b in held.items()}
        return {e: b.stats(now) for e in endpoint_ids if (b := held.get(e)) is not None}

    def breaker(self, endpoint_id: str) -> BreakerStats | None:
        """One endpoint's breaker; None before its first attempt."""
        breaker = self.endpoints.breakers.get(endpoint_id)
        return None if breaker is None else breaker.stats(self._clock.monotonic())

    def endpoint_health(self, endpoint_id: str) -> EndpointReport:
        """The endpoint's recent attempts, its breaker and the breaker's history."""
        wall, mono = self._clock.time(), self._clock.monotonic()
        health = self.endpoints.health.get(endpoint_id) or EndpointHealth()
        breaker = self.endpoints.breakers.get(endpoint_id)
        return EndpointReport(
            health=health.stats(wall),
            breaker=None if breaker is None else breaker.stats(mono),
            history=tuple(reversed(self.endpoints.history.get(endpoint_id, ()))),
            wall_offset=wall - mono,
        )

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
        owns = self._owns
        for tenant_id, ref in await self._ledger.promote_due(now, PROMOTE_LIMIT):
            if owns is not None and not owns(tenant_id):
                continue  # pending now: the partition's next owner pages it in
            queue = self._queue(tenant_id)
            queue.offer(ref)
            self._forget_evicted(queue)
        mono = self._clock.monotonic()
        catalog = self._catalog()
        for endpoint_id, tenant_id in list(self.tripped.items()):
            breaker = self.endpoints.breakers.get(endpoint_id)
            if breaker is None:  # its endpoint was removed
                del self.tripped[endpoint_id]
            elif endpoint_id in catalog.endpoints:
                self._on_transition(tenant_id, breaker.poll(mono))
        for tenant_id in list(self._spill_watch):
            spilling = self.queues.get(tenant_id)
            if spilling is None or not spilling.is_spilling():
                self._spill_watch.discard(tenant_id)
            else:
                self._page(spilling, spilling.poll_page_in())
        self._sweep_idle()
        if self._offers_due:
            self._forget_stale_offers(mono)
        self.transport.sweep()
        if mono - self._counts_at >= STATE_COUNTS_EVERY:
            self._counts_at = mono
            await self.refresh_counts()
        self._kick()

    def _forget_stale_offers(self, now: float) -> None:
        """Page in events whose announced append never settled (a bug if there are any)."""
        due = self._offers_due
        stale = []
        for event_id, (since, _, _) in due.items():  # insertion order is time order
            if now - since < OFFER_DUE_SECONDS:
                break
            stale.append(event_id)
        for event_id in stale:
            _, tenant_id, endpoint_ids = due.pop(event_id)
            for endpoint_id in endpoint_ids:
                self.requeue(Resumed(tenant_id, endpoint_id, 1, new_ref(event_id, endpoint_id)))
        if stale:
            log.error(
                "%d appended events were never reported committed or not stored (e.g. %s); "
                "paged in",
                len(stale),
                stale[0],
            )

    def _sweep_idle(self) -> None:
        """Release a slice of the idle queues while more than ``idle_tenants_kept`` are held."""
        sweep, since, queues = self._sweep, self._idle_since, self.queues
        now = self._clock.monotonic()
        for _ in range(min(SWEEP_PER_POLL, len(sweep))):
            queue = sweep.popleft()
            tenant_id = queue.tenant_id
            if queues.get(tenant_id) is not queue:
                continue  # dropped already (its tenant was removed)
            if not queue.is_idle():
                since.pop(tenant_id, None)
            elif (
                now - since.setdefault(tenant_id, now) >= IDLE_RELEASE_SECONDS
                and len(queues) > self.idle_tenants_kept
            ):
                self._drop_queue(queue)
                self.tenant_states_released += 1
                continue
            sweep.append(queue)

    async def refresh_counts(self) -> None:
        """Re-read per-tenant state counts (metrics and the backlog cap)."""
        counts = await self._ledger.state_counts(_OPEN)
        base: dict[str, int] = {}
        for (tenant, state), count in counts.items():
            if state in _OPEN:
                base[tenant] = base.get(tenant, 0) + count
        # The fresh count replaces the tally of deliveries opened and closed since the last.
        for tenant_id, record in self._tenants.items():
            record.backlog.open = base.pop(tenant_id, 0)
        self.state_counts, self._backlog = counts, base

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(POLL_INTERVAL)
            try:
                await self.poll()
            except StoreError as exc:
                log.warning("delivery poll failed: %s", exc.message)

    def stats(self) -> dict[str, Any]:
        """Everything, every held tenant and breaker included (tests; see ``summary``)."""
        return {
            **self.summary(),
            "tenants": {t: q.stats() for t, q in self.queues.items()},
            "lanes": {t: q.lane_stats() for t, q in self.queues.items()},
            "breakers": self.breaker_stats(),
        }

    def summary(self) -> dict[str, Any]:
        """The engine's totals, without a line per tenant or endpoint: its cost is fixed."""
        return {
            "in_flight": self._in_flight,
            "cached_bodies": len(self._cache),
            "offers_due": len(self._offers_due),
            "body_cache": self.bodies.stats(),
            "tenants_held": len(self.queues),
            "tenant_states_made": self.tenant_states_made,
            "tenant_states_released": self.tenant_states_released,
            "transport": self.transport.stats(),
            "outcome_write_failures": self.outcome_write_failures,
            "not_owned": self.not_owned,
            **self.counters,
        }

    def busiest(self, limit: int) -> list[CreditQueue]:
        """The ``limit`` held queues with the most work queued or in flight, most first.

        One pass with a cheap key over the held queues, instead of the stats of
        each: with many tenants holding state, building all their stats held
        the loop for long (measured in docs/performance.md).
        """
        return heapq.nlargest(limit, self.queues.values(), key=CreditQueue.open_work)

    @property
    def outcome_write_failures(self) -> int:
        """Outcome batches the store refused (each kept and written again later)."""
        return self._ledger.write_failures

    def __repr__(self) -> str:
        return (
            f"DeliveryEngine(tenants={len(self.queues)}, in_flight={self._in_flight}, "
            f"closing={self._closing})"
        )


__all__ = ["POLL_INTERVAL", "RESUME_CHUNK", "DeliveryEngine"]
