"""Delivery routes of the admin API (added with ``AdminApi.route``).

::

    GET  /admin/v1/delivery[?tenant=&limit=]     counters, and per-tenant (and per-endpoint
                                                 lane) queue, credit and spill stats of the
                                                 tenants with the most work (or one tenant)
    GET  /admin/v1/breakers[?tripped=&tenant=&after=&until=&limit=]
                                                 endpoints' breaker states (in a cluster:
                                                 every node's, as owners wrote them)
    GET  /admin/v1/endpoints/{id}/health         recent success ratio, latency, breaker history
    POST /admin/v1/breakers/{endpoint}/reset     close a breaker now; parked work resumes
                                                 (in a cluster: on the tenant's owner)
    POST /admin/v1/replay[?dry_run=true]         make dead (or disabled) deliveries pending again

Replay body (every field optional; they combine with AND)::

    {"tenant": "acme", "endpoint": "orders", "event": "evt_...",
     "states": ["dead", "disabled"], "since": 1700000000, "until": 1700086400,
     "limit": 1000}

``since``/``until`` are Unix seconds of the event's arrival. The answer is
``{"matched": n}`` for a dry run, else ``{"replayed": n}`` (at most ``limit``,
so a bulk replay is a loop until fewer than ``limit`` come back; ``hookrouter
replay`` does that with a progress bar). A tenant's key replays only that
tenant's deliveries; naming another tenant's endpoint or event answers 404.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any, Protocol

import msgspec

from hookrouter.admin import schemas
from hookrouter.admin.api import AdminApi
from hookrouter.admin.operations import BadRequest, Call, Operation
from hookrouter.admin.paging import page_of
from hookrouter.core.http1 import Response
from hookrouter.delivery.breaker import BreakerStats
from hookrouter.delivery.engine import DeliveryEngine
from hookrouter.delivery.health import EndpointReport
from hookrouter.errors import NotFound
from hookrouter.store.base import DeliveryState, StoredBreaker
from hookrouter.store.ledger import ReplayFilter

MAX_REPLAY_BATCH = schemas.MAX_REPLAY_BATCH


Reset = Callable[[str], Awaitable[bool]]  # endpoint id -> it exists (cluster mode)


class SharedBreakers(Protocol):
    """Cluster mode's breakers of every node (``admin.cluster.ClusterAdmin``)."""

    async def breaker_page(
        self, wanted: WantedBreakers
    ) -> tuple[list[dict[str, Any]], str | None]: ...
    async def shared_breaker(self, endpoint_id: str) -> StoredBreaker | None: ...


def install(
    api: AdminApi,
    engine: DeliveryEngine,
    reset: Reset | None = None,
    shared: SharedBreakers | None = None,
) -> None:
    """Add the delivery routes to ``api``; ``reset``, ``shared``: cluster mode (``cluster``)."""
    routes = _Routes(api, engine, reset, shared)
    tag = "delivery"
    api.route(
        Operation(
            "GET",
            "/delivery",
            "Queue, credit and spill stats per tenant and endpoint lane",
            tag,
            response=schemas.Stats,
            query=schemas.DeliveryQuery,
            description=(
                "Counters, and the tenants holding the most queued or in-flight work "
                "(``limit``, most first; ``tenants_held`` counts all held), or one ``tenant``."
            ),
        ),
        routes.stats,
    )
    api.route(
        Operation(
            "GET",
            "/breakers",
            "Endpoints' breakers: all, the tripped ones, or one tenant's",
            tag,
            response=schemas.Breakers,
            query=schemas.BreakersQuery,
            description=(
                "A page by endpoint id (``limit``, default 100; ``next_after`` is the next "
                "page's ``after``); only endpoints with traffic or state hold a breaker."
            ),
        ),
        routes.breakers,
    )
    api.route(
        Operation(
            "GET",
            "/endpoints/{id}/health",
            "An endpoint's recent success ratio and latency, its breaker and its history",
            tag,
            access="tenant",
            response=schemas.EndpointHealth,
            description=(
                "From this node's delivery engine: attempts of the last 5 to 10 minutes, "
                "latency percentiles as bucket bounds, the breaker's last state changes."
            ),
        ),
        routes.health,
    )
    api.route(
        Operation(
            "POST",
            "/breakers/{id}/reset",
            "Close a breaker now; parked work resumes",
            tag,
            response=schemas.BreakerReset,
        ),
        routes.reset,
    )
    api.route(
        Operation(
            "POST",
            "/replay",
            "Make dead (or disabled) deliveries pending again",
            tag,
            access="tenant",
            response=schemas.ReplayResult,
            body=schemas.ReplayBody,
            query=schemas.ReplayQuery,
            description="A tenant's key replays that tenant's deliveries only.",
        ),
        routes.replay,
    )


def replay_filter(doc: Any) -> tuple[ReplayFilter, int]:
    """Validate a replay body; raises ``BadRequest`` naming the bad field."""
    try:
        body = msgspec.convert(doc, schemas.ReplayBody)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid replay body: {exc}") from exc
    return _selection(body), body.limit


def _selection(body: schemas.ReplayBody) -> ReplayFilter:
    return ReplayFilter(
        tenant_id=body.tenant,
        endpoint_id=body.endpoint,
        event_id=body.event,
        states=tuple(DeliveryState(s) for s in body.states),
        since=body.since,
        until=body.until,
    )


class _Routes:
    def __init__(
        self,
        api: AdminApi,
        engine: DeliveryEngine,
        reset: Reset | None,
        shared: SharedBreakers | None,
    ) -> None:
        self.api = api
        self.engine = engine
        self._reset = reset
        self._shared = shared

    async def stats(self, call: Call) -> Response:
        query: schemas.DeliveryQuery = call.query()
        engine = self.engine
        if query.tenant:
            held = engine.queues.get(query.tenant)
            chosen = [] if held is None else [held]
        else:
            chosen = engine.busiest(query.limit)
        tenants: dict[str, Any] = {}
        for queue in chosen:
            entry = dataclasses.asdict(queue.stats())
            entry["endpoints"] = {
                lane.endpoint_id: dataclasses.asdict(lane) for lane in queue.lane_stats()
            }
            tenants[queue.tenant_id] = entry
        stats = engine.summary()
        stats["transport"] = dataclasses.asdict(stats["transport"])
        return call.respond({**stats, "tenants": tenants})

    async def breakers(self, call: Call) -> Response:
        query: schemas.BreakersQuery = call.query()
        wanted = WantedBreakers(
            query.after or None,
            query.until or None,
            None if not query.tenant else self.api.endpoint_ids_of(query.tenant),
            query.tripped,
            query.limit,
        )
        if self._shared is not None:  # every node's: ours from memory, the others' as stored
            views, cursor = await self._shared.breaker_page(wanted)
            return call.respond(schemas.Breakers(views, cursor))
        # Only one page of views is built: all of them grew with the tenants holding
        # state (docs/performance.md).
        ids, cursor = held_page(self.engine, wanted)
        return call.respond(schemas.Breakers(local_views(self.engine, ids, wanted.tripped), cursor))

    async def health(self, call: Call) -> Response:
        endpoint = call.params["id"]
        self.api.require_owned(call.principal, "endpoint", endpoint)
        view = health_view(endpoint, self.engine.endpoint_health(endpoint))
        stored = None if self._shared is None else await self._shared.shared_breaker(endpoint)
        return call.respond(view if stored is None else with_stored_breaker(view, stored))

    async def reset(self, call: Call) -> Response:
        endpoint = call.params["id"]
        found = (
            await self._reset(endpoint)
            if self._reset is not None
            else self.engine.reset_breaker(endpoint)
        )
        if not found:
            raise NotFound(f"no endpoint named {endpoint!r}")
        return call.respond(schemas.BreakerReset(endpoint, "closed"))

    async def replay(self, call: Call) -> Response:
        body: schemas.ReplayBody = call.body()
        principal = call.principal
        if principal.tenant is not None:
            principal.require(body.tenant or principal.tenant, f"no tenant {body.tenant!r}")
            if body.endpoint is not None:
                self.api.require_owned(principal, "endpoint", body.endpoint)
            if body.event is not None:
                await self.api.require_event(principal, body.event)
            body = msgspec.structs.replace(body, tenant=principal.tenant)
        selection = _selection(body)
        if call.query().dry_run:
            count = await self.engine.count_replayable(selection)
            return call.respond(schemas.ReplayResult(matched=count))
        replayed = await self.engine.replay(selection, body.limit)
        return call.respond(schemas.ReplayResult(replayed=replayed))


def health_view(endpoint: str, report: EndpointReport) -> schemas.EndpointHealth:
    health, breaker, offset = report.health, report.breaker, report.wall_offset
    opened = None if breaker is None or breaker.opened_at is None else breaker.opened_at + offset
    return schemas.EndpointHealth(
        endpoint=endpoint,
        window_seconds=round(health.window_seconds, 1),
        attempts=health.attempts,
        successes=health.successes,
        success_ratio=health.success_ratio,
        p50_ms=health.p50_ms,
        p99_ms=health.p99_ms,
        breaker="closed" if breaker is None else breaker.state.value,
        breaker_opened_at=opened,
        breaker_times_opened=0 if breaker is None else breaker.times_opened,
        breaker_history=[
            schemas.BreakerChange(t.at + offset, t.before.value, t.after.value, t.signal.value)
            for t in report.history
        ],
    )


@dataclasses.dataclass(frozen=True, slots=True)
class WantedBreakers:
    """Which breakers a ``GET /breakers`` asks for: an id range, a tenant's, the tripped; a page."""

    after: str | None
    until: str | None
    of_tenant: Collection[str] | None
    tripped: bool
    limit: int

    def among(self, endpoint_ids: Iterable[str]) -> Iterable[str]:
        """The wanted of ``endpoint_ids``; all of them, unfiltered, when nothing narrows."""
        if self.after is None and self.until is None and self.of_tenant is None:
            return endpoint_ids
        return filter(self.keeps, endpoint_ids)

    def keeps(self, endpoint_id: str) -> bool:
        return (
            (self.after is None or endpoint_id > self.after)
            and (self.until is None or endpoint_id <= self.until)
            and (self.of_tenant is None or endpoint_id in self.of_tenant)
        )


def held_page(
    engine: DeliveryEngine, wanted: WantedBreakers, keep: Callable[[str], bool] | None = None
) -> tuple[list[str], str | None]:
    """A page of the endpoint ids whose breakers the engine holds (and ``keep`` keeps).

    The tripped are polled until they close: a short list, whatever the catalog.
    """
    held = wanted.among(engine.tripped if wanted.tripped else engine.endpoints.breakers)
    return page_of(held if keep is None else filter(keep, held), None, wanted.limit)


def local_views(engine: DeliveryEngine, ids: Iterable[str], tripped: bool) -> list[dict[str, Any]]:
    """The engine's breakers of ``ids`` as ``GET /breakers`` shows them, in the order given."""
    offset = engine.wall_offset()
    return [
        local_view(s, offset)
        for s in engine.breaker_stats(ids).values()
        if not tripped or s.state.value != "closed"
    ]


def local_view(stats: BreakerStats, wall_offset: float) -> dict[str, Any]:
    """A breaker of this node's engine as ``GET /breakers`` shows it (wall-clock times)."""
    view: dict[str, Any] = {**dataclasses.asdict(stats), "state": stats.state.value}
    if stats.opened_at is not None:
        view["opened_at"] = stats.opened_at + wall_offset
    return view


def with_stored_breaker(
    view: schemas.EndpointHealth, stored: StoredBreaker
) -> schemas.EndpointHealth:
    """``view`` with the breaker as the endpoint's owner (another node) last wrote it."""
    return msgspec.structs.replace(
        view,
        breaker=stored.state,
        breaker_opened_at=stored.opened_at,
        breaker_times_opened=stored.times_opened,
        breaker_history=[schemas.BreakerChange(*change) for change in stored.history],
    )


__all__ = [
    "MAX_REPLAY_BATCH",
    "SharedBreakers",
    "WantedBreakers",
    "health_view",
    "held_page",
    "install",
    "local_view",
    "local_views",
    "replay_filter",
    "with_stored_breaker",
]
