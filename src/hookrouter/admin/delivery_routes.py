"""Delivery routes of the admin API (added with ``AdminApi.route``).

::

    GET  /admin/v1/delivery                      per-tenant (and per-endpoint lane) queue,
                                                 credit and spill stats, counters
    GET  /admin/v1/breakers                      every endpoint's breaker state
    POST /admin/v1/breakers/{endpoint}/reset     close a breaker now; parked work resumes
    POST /admin/v1/replay[?dry_run=true]         make dead (or disabled) deliveries pending again

Replay body (every field optional; they combine with AND)::

    {"tenant": "acme", "endpoint": "orders", "event": "evt_...",
     "states": ["dead", "disabled"], "since": 1700000000, "until": 1700086400,
     "limit": 1000}

``since``/``until`` are Unix seconds of the event's arrival. The answer is
``{"matched": n}`` for a dry run, else ``{"replayed": n}`` (at most ``limit``,
so a bulk replay is a loop until fewer than ``limit`` come back; ``hookrouter
replay`` does that with a progress bar).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from hookrouter.admin.api import AdminApi, BadRequest, parse_json_body, query_params
from hookrouter.core.http1 import Request, Response
from hookrouter.delivery.engine import DeliveryEngine
from hookrouter.errors import NotFound
from hookrouter.ingress.ops import json_response
from hookrouter.store.base import DeliveryState
from hookrouter.store.ledger import ReplayFilter

MAX_REPLAY_BATCH = 10_000
_REPLAYABLE = {DeliveryState.DEAD.value, DeliveryState.DISABLED.value}


def install(api: AdminApi, engine: DeliveryEngine) -> None:
    """Add the delivery routes to ``api``."""
    routes = _Routes(engine)
    api.route("GET", r"/delivery", routes.stats)
    api.route("GET", r"/breakers", routes.breakers)
    api.route("POST", r"/breakers/(?P<id>[^/]+)/reset", routes.reset)
    api.route("POST", r"/replay", routes.replay)


def replay_filter(doc: Any) -> tuple[ReplayFilter, int]:
    """Validate a replay body; raises ``BadRequest`` naming the bad field."""
    if not isinstance(doc, dict):
        raise BadRequest("replay body must be a JSON object")
    unknown = set(doc) - {"tenant", "endpoint", "event", "states", "since", "until", "limit"}
    if unknown:
        raise BadRequest(f"unknown replay field(s): {', '.join(sorted(unknown))}")
    for key in ("tenant", "endpoint", "event"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            raise BadRequest(f"{key} must be a string")
    states = doc.get("states", ["dead"])
    if not isinstance(states, list) or not states or not set(states) <= _REPLAYABLE:
        raise BadRequest('states must be a non-empty list of "dead" and/or "disabled"')
    for key in ("since", "until"):
        value = doc.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise BadRequest(f"{key} must be Unix seconds")
    limit = doc.get("limit", 1000)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_REPLAY_BATCH:
        raise BadRequest(f"limit must be an integer from 1 to {MAX_REPLAY_BATCH}")
    selection = ReplayFilter(
        tenant_id=doc.get("tenant"),
        endpoint_id=doc.get("endpoint"),
        event_id=doc.get("event"),
        states=tuple(DeliveryState(s) for s in states),
        since=doc.get("since"),
        until=doc.get("until"),
    )
    return selection, limit


class _Routes:
    def __init__(self, engine: DeliveryEngine) -> None:
        self.engine = engine

    async def stats(self, request: Request, m: re.Match[str]) -> Response:
        stats = self.engine.stats()
        tenants = {t: dataclasses.asdict(s) for t, s in stats.pop("tenants").items()}
        for tenant, lanes in stats.pop("lanes").items():
            tenants[tenant]["endpoints"] = {
                lane.endpoint_id: dataclasses.asdict(lane) for lane in lanes
            }
        stats.pop("breakers")
        stats["transport"] = dataclasses.asdict(stats["transport"])
        return json_response(200, {**stats, "tenants": tenants})

    async def breakers(self, request: Request, m: re.Match[str]) -> Response:
        states = [
            {**dataclasses.asdict(s), "state": s.state.value}
            for s in self.engine.stats()["breakers"].values()
        ]
        return json_response(200, {"breakers": states})

    async def reset(self, request: Request, m: re.Match[str]) -> Response:
        if not self.engine.reset_breaker(m["id"]):
            raise NotFound(f"no endpoint named {m['id']!r}")
        return json_response(200, {"endpoint": m["id"], "state": "closed"})

    async def replay(self, request: Request, m: re.Match[str]) -> Response:
        selection, limit = replay_filter(parse_json_body(request) if request.body else {})
        if query_params(request).get("dry_run") in ("1", "true"):
            return json_response(200, {"matched": await self.engine.count_replayable(selection)})
        return json_response(200, {"replayed": await self.engine.replay(selection, limit)})


__all__ = ["MAX_REPLAY_BATCH", "install", "replay_filter"]
