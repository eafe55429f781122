"""The delivery ledger contract: what the delivery engine needs from a store.

Backend-neutral, like ``store/base.py``: each backend hands out its own
ledger through ``EventStore.delivery_ledger()``; the state machine every
ledger keeps is the table in ``store/lifecycle.py``.

Ordering guarantee every backend must give (the credit queues rely on it,
see ``flow/credits.py``): a ``page_pending`` call observes every ``record``,
``promote_due``, ``park_pending`` and ``resume_parked`` submitted before it.

References: a delivery is named by ``flow.credits.DeliveryRef`` (event id,
endpoint id). The credit queues on the ground floor order, hash and page by
it, and the ledger pages in that same order, so the contract uses their type
rather than a twin that every page-in would have to convert.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.lifecycle import DeliveryState

# What a delivery says its body is when the sender did not say.
DEFAULT_CONTENT_TYPE: Final = "application/json"


class Payload:
    """An event's body as delivered, with the media type it arrived with.

    A router relays what it was sent: a GitHub hook configured for form
    posts (``payload=<json>``) or Slack's interactivity forms must reach the
    endpoint as ``application/x-www-form-urlencoded``, not labelled JSON.
    """

    __slots__ = ("body", "content_type", "trace")

    def __init__(self, body: bytes, content_type: str | None, trace: str | None = None) -> None:
        self.body = body
        self.content_type = content_type or DEFAULT_CONTENT_TYPE
        # The ingest span's traceparent stored with the event (telemetry.tracing.TRACE_HEADER);
        # None when it was ingested untraced or the backend does not load it.
        self.trace = trace

    def __repr__(self) -> str:
        return f"Payload({len(self.body)} bytes, {self.content_type!r})"


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt of a delivery, as its history shows it."""

    attempt: int  # 1-based
    started_at: float
    duration_ms: float
    status_code: int | None  # None when no response arrived
    error: str | None  # reason code such as "timeout", "connect_refused"
    response_excerpt: str | None = None

    def __init__(  # noqa: PLR0917 (the dataclass signature, written out for mypyc)
        self,
        attempt: int,
        started_at: float,
        duration_ms: float,
        status_code: int | None,
        error: str | None,
        response_excerpt: str | None = None,
    ) -> None:
        object.__setattr__(self, "attempt", attempt)  # frozen: no plain assignment
        object.__setattr__(self, "started_at", started_at)
        object.__setattr__(self, "duration_ms", duration_ms)
        object.__setattr__(self, "status_code", status_code)
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "response_excerpt", response_excerpt)


@dataclass(frozen=True, slots=True)
class DeliveryWork:
    """What an attempt needs about one delivery (loaded only when not cached)."""

    ref: DeliveryRef
    tenant_id: str
    attempts: int  # attempts already made
    event_type: str | None
    payload: Payload


@dataclass(frozen=True, slots=True)
class OutcomeRecord:
    """The new durable state of one delivery after an attempt (or a decision not to try)."""

    ref: DeliveryRef
    state: DeliveryState
    attempts: int  # total attempts made so far (ignored when ``attempt`` is None)
    next_attempt_at: float | None
    status_code: int | None
    error: str | None
    at: float  # wall seconds
    attempt: AttemptRecord | None = None  # None when nothing was sent (e.g. parked)
    # True when the engine knows this delivery was its event's only one and it
    # was delivered: the event is then delivered, and the store may skip asking
    # whether it ended failed. False (the default) always asks.
    settles_event: bool = False
    # The delivery's tenant when the engine knows it (it always does): a store
    # may then write the record without looking the event up. None: look it up.
    tenant_id: str | None = None

    # Written out so that mypyc compiles it (see core.http1.Request).
    def __init__(  # noqa: PLR0917 (the dataclass's own signature)
        self,
        ref: DeliveryRef,
        state: DeliveryState,
        attempts: int,
        next_attempt_at: float | None,
        status_code: int | None,
        error: str | None,
        at: float,
        attempt: AttemptRecord | None = None,
        settles_event: bool = False,
        tenant_id: str | None = None,
    ) -> None:
        object.__setattr__(self, "ref", ref)  # frozen: no plain assignment
        object.__setattr__(self, "state", state)
        object.__setattr__(self, "attempts", attempts)
        object.__setattr__(self, "next_attempt_at", next_attempt_at)
        object.__setattr__(self, "status_code", status_code)
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "at", at)
        object.__setattr__(self, "attempt", attempt)
        object.__setattr__(self, "settles_event", settles_event)
        object.__setattr__(self, "tenant_id", tenant_id)

    def settling_event(self) -> OutcomeRecord:
        """This record, marked as its event's only delivery, delivered (see ``settles_event``)."""
        return OutcomeRecord(
            self.ref,
            self.state,
            self.attempts,
            self.next_attempt_at,
            self.status_code,
            self.error,
            self.at,
            self.attempt,
            settles_event=self.state is DeliveryState.DELIVERED,
            tenant_id=self.tenant_id,
        )


@dataclass(frozen=True, slots=True)
class Resumed:
    """Pending deliveries of one endpoint (made pending again, or found at start), the oldest."""

    tenant_id: str
    endpoint_id: str
    count: int
    oldest: DeliveryRef | None


@dataclass(frozen=True, slots=True)
class ReplayFilter:
    """Which finished deliveries ``replay`` makes pending again (all given fields must match)."""

    tenant_id: str | None = None
    endpoint_id: str | None = None
    event_id: str | None = None
    states: tuple[DeliveryState, ...] = (DeliveryState.DEAD,)
    since: float | None = None  # event received_at >= since (wall seconds)
    until: float | None = None  # event received_at < until


class DeliveryLedger(Protocol):
    """Durable delivery bookkeeping. Methods may raise ``StoreError`` subclasses."""

    # Outcome batches the store refused so far (each kept and written again later).
    write_failures: int

    async def page_pending(
        self, tenant_id: str, endpoint_id: str, after: DeliveryRef | None, limit: int
    ) -> list[DeliveryRef]:
        """Pending deliveries of one endpoint with ref >= ``after``, in ref (event id) order."""
        ...

    async def load(self, refs: Sequence[DeliveryRef]) -> list[DeliveryWork]:
        """Bodies and attempt counts; refs whose event is gone are left out."""
        ...

    def record(self, outcomes: Sequence[OutcomeRecord]) -> asyncio.Future[None]:
        """Queue outcomes for the next group commit; resolves once durable."""
        ...

    async def promote_due(self, now: float, limit: int) -> list[tuple[str, DeliveryRef]]:
        """Switch up to ``limit`` due retries to pending; (tenant, ref), oldest due first."""
        ...

    async def park_pending(self, tenant_id: str, endpoint_id: str, now: float, limit: int) -> int:
        """Switch up to ``limit`` pending deliveries of one endpoint to parked; how many."""
        ...

    async def resume_parked(
        self, tenant_id: str, endpoint_id: str, limit: int | None = None
    ) -> Resumed:
        """Switch parked deliveries of one endpoint (oldest first) back to pending."""
        ...

    async def replay(self, selection: ReplayFilter, limit: int = 10_000) -> list[Resumed]:
        """Make up to ``limit`` matching finished deliveries pending again; per endpoint.

        Raises ``ValueError`` when ``selection`` names a state the lifecycle
        does not replay from (``lifecycle.replayable``).
        """
        ...

    async def count_replayable(self, selection: ReplayFilter) -> int:
        """How many deliveries ``replay`` would pick up now (for progress reporting)."""
        ...

    async def pending_endpoints(self) -> list[Resumed]:
        """Pending deliveries per endpoint, with the oldest (to page in after a restart)."""
        ...

    async def state_counts(
        self, states: Collection[DeliveryState] | None = None
    ) -> dict[tuple[str, DeliveryState], int]:
        """(tenant, state) -> deliveries, for metrics and the admin API.

        ``states`` limits the count to those states (None: all). Delivered
        deliveries pile up forever, so a backend may have to read everything
        to count them; callers that only need open work should say so. A
        clustered backend counts given states only in the partitions this
        node holds (the tenants its engine runs), so that the nodes' figures
        add up; None counts every partition.
        """
        ...


__all__ = [
    "DEFAULT_CONTENT_TYPE",
    "AttemptRecord",
    "DeliveryLedger",
    "DeliveryRef",
    "DeliveryWork",
    "OutcomeRecord",
    "Payload",
    "ReplayFilter",
    "Resumed",
]
