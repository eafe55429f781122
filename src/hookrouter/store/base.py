"""The durable store contract, independent of any backend.

Theory of operation
-------------------
The store is the truth; in-memory queues only hold ids. ``append`` is the
hot path: it returns a future that resolves once the commit holding the event
has returned from the backend (synced to disk), so the
ingress handler sends its 2xx only after the event is durable. Appends that
arrive together share one commit (group commit).

An event is stored together with the list of endpoints it routes to, in the
same transaction, so "acknowledged" always implies "its deliveries exist"
(pending until an outcome says otherwise) and a crash can never lose the
fan-out. How a backend keeps each delivery's state is its own business (it
may write a delivery's own record lazily, on its first change).

Deduplication: ``(source_id, provider_event_id)`` is unique. A second append
with the same pair, in a later batch or in the same one, resolves to
``AppendResult(original_id, duplicate=True)`` and writes nothing. Events
without a provider id are never deduplicated.

Tenants, sources, endpoints and tenants' API keys are stored as validated
JSON documents (``Entity``); validation belongs above the store, not in it.

Backends are listed in ``store/backends.py``, each a package of its own. Keep
backend details (SQL, file paths, subjects) out of this module.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from hookrouter.errors import StoreUnavailable
from hookrouter.store.ledger import AttemptRecord, DeliveryLedger
from hookrouter.store.lifecycle import FINAL_STATES, OPEN_STATES, DeliveryState
from hookrouter.store.retention import Cutoffs, PruneResult
from hookrouter.store.sessions import SessionTable

# ``api_key``: a tenant's admin API key (its hash, never the key; ``admin.keys``).
EntityKind = Literal["tenant", "source", "endpoint", "api_key"]


# How long a failed event commit keeps /readyz at 503 when nothing commits
# after it: store_full's Retry-After, so an idle router re-checks at the pace
# senders are told to come back.
EVENT_FAILURE_MEMORY: Final = 30.0


def check_events_committing(failed_at: float | None, last_error: object, now: float) -> None:
    """Refuse readiness while the last event commit failed less than
    ``EVENT_FAILURE_MEMORY`` seconds ago (``failed_at``, monotonic; None once
    one succeeded). Forgotten after that: with the load balancer sending
    nothing, no event commit could clear it, and the next traffic tells again.
    """
    if failed_at is not None and now - failed_at < EVENT_FAILURE_MEMORY:
        raise StoreUnavailable(f"event commits are failing ({last_error})", reason="store_failing")


class EventStatus(enum.StrEnum):
    """Lifecycle of an event, derived from its deliveries."""

    PENDING = "pending"  # at least one delivery not yet final
    DELIVERED = "delivered"  # every delivery succeeded
    FAILED = "failed"  # at least one delivery dead-lettered or disabled, none pending
    UNROUTED = "unrouted"  # no endpoint matched when it arrived


# Not frozen: built once or twice per request, and a frozen dataclass is
# measurably slower to construct; treat instances as immutable.
@dataclass(slots=True)
class NewEvent:
    """An event to append. ``event_id`` is assigned by the caller (time-ordered)."""

    event_id: str
    tenant_id: str
    source_id: str
    provider_event_id: str | None
    event_type: str | None
    received_at: float  # wall seconds
    headers: dict[str, str]
    body: bytes
    endpoint_ids: tuple[str, ...] = ()  # one delivery row each, same transaction

    # Written out: mypyc leaves a dataclass's generated __init__ interpreted,
    # several times slower than a compiled one (mypyc/mypyc#817).
    def __init__(  # noqa: PLR0917 (the dataclass's own signature)
        self,
        event_id: str,
        tenant_id: str,
        source_id: str,
        provider_event_id: str | None,
        event_type: str | None,
        received_at: float,
        headers: dict[str, str],
        body: bytes,
        endpoint_ids: tuple[str, ...] = (),
    ) -> None:
        self.event_id = event_id
        self.tenant_id = tenant_id
        self.source_id = source_id
        self.provider_event_id = provider_event_id
        self.event_type = event_type
        self.received_at = received_at
        self.headers = headers
        self.body = body
        self.endpoint_ids = endpoint_ids


# Not frozen: built once or twice per request, and a frozen dataclass is
# measurably slower to construct; treat instances as immutable.
@dataclass(slots=True)
class AppendResult:
    """The stored event's id: the appended one, or the original it duplicates."""

    event_id: str
    duplicate: bool

    def __init__(self, event_id: str, duplicate: bool) -> None:  # compiled (see NewEvent)
        self.event_id = event_id
        self.duplicate = duplicate


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    event_id: str
    endpoint_id: str
    state: DeliveryState
    attempts: int
    next_attempt_at: float | None
    last_status_code: int | None
    last_error: str | None
    updated_at: float
    history: tuple[AttemptRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class EventRecord:
    event_id: str
    tenant_id: str
    source_id: str
    provider_event_id: str | None
    event_type: str | None
    received_at: float
    status: EventStatus
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    deliveries: tuple[DeliveryRecord, ...] = ()


# Not frozen, __init__ written out (as NewEvent's): a start-up reads one per
# stored tenant, source and endpoint; treat instances as immutable.
@dataclass(slots=True)
class Entity:
    kind: EntityKind
    id: str
    tenant_id: str | None  # None for tenants themselves
    doc: dict[str, Any]
    updated_at: float

    def __init__(
        self,
        kind: EntityKind,
        id: str,
        tenant_id: str | None,
        doc: dict[str, Any],
        updated_at: float,
    ) -> None:
        self.kind = kind
        self.id = id
        self.tenant_id = tenant_id
        self.doc = doc
        self.updated_at = updated_at


ChangeAction = Literal["put", "delete", "command"]


@dataclass(frozen=True, slots=True)
class StoredChange:
    """One entry of a shared store's change feed (cluster mode), in the order stored.

    ``put``: an entity stored (``kind``, ``id``, ``doc``); ``delete``: one
    deleted; ``command``: an operator command (``kind`` its name, ``id`` its
    target) for whichever node it concerns, such as a breaker reset.
    """

    version: int
    action: ChangeAction
    kind: str
    id: str
    doc: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StoredBreaker:
    """An endpoint's breaker as its tenant's owner last wrote it (cluster mode).

    Times are wall seconds. ``history``: the last transitions, newest first,
    each (at, before, after, signal).
    """

    endpoint_id: str
    tenant_id: str
    state: str
    opened_at: float | None
    times_opened: int
    node: str
    changed_at: float
    history: tuple[tuple[float, str, str, str], ...]


@dataclass(frozen=True, slots=True)
class BreakerRange:
    """Which stored breakers a page reads: ids past ``after`` (up to ``until``), in id order.

    ``endpoints`` narrows to those ids (one tenant's), ``tripped`` to breakers
    not closed, and rows of the ``skip`` partitions (the reader's own, which
    it shows from memory) are left out by the query rather than after it.
    """

    after: str | None = None
    until: str | None = None
    endpoints: Sequence[str] | None = None
    tripped: bool = False
    skip: Sequence[int] = ()


@dataclass(frozen=True, slots=True)
class StatSeries:
    """One backend-specific series (name without the ``hookrouter_store_`` prefix)."""

    name: str
    kind: Literal["counter", "gauge"]
    help: str
    value: float


@dataclass(frozen=True, slots=True)
class StoreStats:
    """What every backend counts about its appends and commits, for metrics."""

    appends: int = 0  # events handed to the store
    pending_appends: int = 0  # appends waiting for their commit
    commits: int = 0  # commits (event batches and write jobs)
    events_per_commit_last: int = 0
    commit_seconds_last: float = 0.0
    commit_seconds_peak: float = 0.0
    duplicates: int = 0  # appends answered as duplicates
    failed_appends: int = 0  # appends whose commit failed
    failing: bool = False  # the last commit failed
    pruned_events: int = 0  # finished events deleted by retention
    # Whatever else the backend measures (its files, its indexes), already in series form.
    backend: tuple[StatSeries, ...] = ()


AppendDone = Callable[[AppendResult | None, BaseException | None], None]
"""``done(result, error)`` for ``EventStore.append_then``: exactly one of them is None."""


class EventStore(Protocol):
    """What every store backend offers. All methods may raise ``StoreError`` subclasses."""

    async def open(self) -> None:
        """Create or migrate the schema and start background work (commit thread)."""
        ...

    async def close(self) -> None:
        """Flush pending appends, stop background work, release files."""
        ...

    def append(self, event: NewEvent) -> asyncio.Future[AppendResult]:
        """Queue ``event`` for the next group commit; resolves once it is durable.

        Called on the event-loop thread. The future fails with
        ``StoreUnavailable`` if the commit holding the event failed (then
        nothing of that batch was stored). ``append`` itself raises at once,
        without a future, ``StoreUnavailable`` when the store is not open and
        ``StoreSaturated`` when too many appends wait for a commit. Appending
        an event whose key was already stored, even the very same event,
        resolves to ``AppendResult(original_id, duplicate=True)``.
        """
        ...

    def append_then(self, event: NewEvent, done: AppendDone) -> None:
        """Like ``append``, but call ``done(result, None)`` or ``done(None, error)`` once.

        Called on the event-loop thread, and ``done`` is called there too, as
        soon as the commit holding the event returned: no future, and no wait
        for the loop's next turn. The ingest path answers its sender from it.
        Raises at once as ``append`` does.
        """
        ...

    async def get_event(self, event_id: str, *, with_body: bool = False) -> EventRecord | None:
        """One event with its deliveries and their attempt history."""
        ...

    async def find_event(self, source_id: str, provider_event_id: str) -> str | None:
        """The id of the event ``source_id`` sent with this provider event id, or None.

        The deduplication key: "did we get Stripe's evt_123?" without knowing our id.
        """
        ...

    async def list_events(
        self,
        *,
        tenant_id: str | None = None,
        status: EventStatus | None = None,
        limit: int = 100,
        before: str | None = None,
    ) -> list[EventRecord]:
        """Newest first; ``before`` is an event id cursor (exclusive). No bodies."""
        ...

    async def list_entities(self, kind: EntityKind) -> list[Entity]: ...

    async def put_entity(self, entity: Entity) -> None:
        """Insert or replace."""
        ...

    async def replace_entity(self, entity: Entity) -> bool:
        """Replace an entity that exists; False, and nothing written, when it does not.

        For writes that must never bring back an entity deleted meanwhile (by
        another node, say), such as an API key's last-used time.
        """
        ...

    async def delete_entity(self, kind: EntityKind, entity_id: str) -> bool:
        """True when something was deleted."""
        ...

    async def ping(self) -> None:
        """Raise ``StoreUnavailable`` if the store cannot serve (used by /readyz)."""
        ...

    async def prune(
        self, cutoffs: Cutoffs, *, after: str | None = None, scan_limit: int = 1000
    ) -> PruneResult:
        """One batch of a retention pass (``store.retention``).

        Looks at up to ``scan_limit`` events received before the latest cutoff,
        oldest first after the event id ``after``, and deletes those whose
        deliveries are all finished and whose kind's cutoff they are past, with
        their deliveries and attempts. Never deletes an event with an open
        delivery. The result says where the next batch resumes.
        """
        ...

    def stats(self) -> dict[str, Any]:
        """Everything the backend counts, free-form (the router's debug stats, tests)."""
        ...

    def counters(self) -> StoreStats | None:
        """The typed counters metrics export; None while the store is not open."""
        ...

    def delivery_ledger(self) -> DeliveryLedger | None:
        """This store's delivery ledger (one per store), or None if the backend has none yet."""
        ...

    def session_table(self) -> SessionTable | None:
        """Where console sessions live when several routers share this store, else None."""
        ...

    def removal_hint(self, kind: EntityKind, entity_id: str) -> str:
        """How an operator deletes a stored entity by hand, with the router stopped.

        For an entity no config file can declare (its id is invalid), which
        the admin API cannot address either: the start-up error quotes it.
        """
        ...


__all__: Sequence[str] = (
    "FINAL_STATES",
    "OPEN_STATES",
    "AppendDone",
    "AppendResult",
    "AttemptRecord",
    "BreakerRange",
    "ChangeAction",
    "DeliveryRecord",
    "DeliveryState",
    "Entity",
    "EntityKind",
    "EventRecord",
    "EventStatus",
    "EventStore",
    "NewEvent",
    "StatSeries",
    "StoreStats",
    "StoredBreaker",
    "StoredChange",
)
