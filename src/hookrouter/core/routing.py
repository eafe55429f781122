"""Which endpoints an event goes to: pure matching of event types to filters.

An endpoint with no ``event_types`` receives every event of its tenant.
Otherwise each entry is an exact type or a glob (``invoice.*``, ``*.created``;
``*`` matches any run of characters, dots included), and an event whose
provider gave no type only reaches endpoints without a filter. Disabled
endpoints receive nothing. A tenant whose endpoints all take every type (the
usual case) has its answer kept with its routes, whatever the type. Other
results are memoised per (tenant, type) because a burst repeats the same few
types; the memo is bounded so a sender cannot grow it without limit by
inventing types.

An endpoint may also have a content filter (``core.filters``), applied after
the type match by ``route``: an event it does not pass gets no delivery for
that endpoint. Its cost stays off events whose routed endpoints have none:
the body is parsed only when one of them has a filter, once per event, and
only as far as the tenant's filters read it (``Projection``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from hookrouter.core.filters import NOT_PARSED, Filter, Projection, filter_endpoints

MEMO_LIMIT: Final = 10_000


@dataclass(frozen=True, slots=True)
class Route:
    """What routing needs of an endpoint."""

    endpoint_id: str
    tenant_id: str
    event_types: tuple[str, ...] | None = None
    enabled: bool = True
    filter: Filter | None = None


def compile_filter(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regex matching any of the glob ``patterns`` in full."""
    parts = ("|".join(".*".join(map(re.escape, p.split("*"))) for p in patterns)) or "(?!)"
    return re.compile(f"(?:{parts})")


def _compiled(routes: Iterable[Route]) -> list[tuple[str, re.Pattern[str] | None]]:
    return [
        (r.endpoint_id, None if r.event_types is None else compile_filter(r.event_types))
        for r in sorted(routes, key=lambda r: r.endpoint_id)
        if r.enabled
    ]


class RoutingTable:
    """Routing for a set of endpoints, replaced one tenant at a time on change."""

    __slots__ = ("_by_tenant", "_filters", "_memo", "_plain", "_projections")

    def __init__(self, routes: Iterable[Route]) -> None:
        by_tenant: dict[str, list[Route]] = {}
        for route in routes:
            by_tenant.setdefault(route.tenant_id, []).append(route)
        self._by_tenant: dict[str, list[tuple[str, re.Pattern[str] | None]]] = {}
        # Tenants whose enabled endpoints all take every type: their answer, fixed.
        # Not in the memo, which stops growing at MEMO_LIMIT: beyond that many busy
        # tenants, every event of the rest matched its routes again.
        self._plain: dict[str, tuple[str, ...]] = {}
        # Per tenant, its endpoints that have a content filter (tenants without any: absent).
        self._filters: dict[str, dict[str, Filter]] = {}
        # Per tenant with filters, a parser of the body paths they read (and no more).
        self._projections: dict[str, Projection] = {}
        for tenant_id, tenant_routes in by_tenant.items():
            self._set_tenant(tenant_id, tenant_routes)
        self._memo: dict[tuple[str, str | None], tuple[str, ...]] = {}

    def _set_tenant(self, tenant_id: str, routes: list[Route]) -> None:
        compiled = _compiled(routes)
        if compiled and all(pattern is None for _, pattern in compiled):
            self._plain[tenant_id] = tuple(endpoint_id for endpoint_id, _ in compiled)
            self._by_tenant.pop(tenant_id, None)
        elif compiled:
            self._by_tenant[tenant_id] = compiled
            self._plain.pop(tenant_id, None)
        else:
            self._by_tenant.pop(tenant_id, None)
            self._plain.pop(tenant_id, None)
        filters = {r.endpoint_id: r.filter for r in routes if r.filter is not None and r.enabled}
        if filters:
            self._filters[tenant_id] = filters
            self._projections[tenant_id] = Projection(filters.values())
        else:
            self._filters.pop(tenant_id, None)
            self._projections.pop(tenant_id, None)

    def replace_tenant(self, tenant_id: str, routes: Iterable[Route]) -> None:
        """Set every route of one tenant; costs that tenant's routes, not the table's.

        The memo is dropped whole (one reference, freed as lazily as it was
        built) rather than searched for the tenant's entries.
        """
        self._set_tenant(tenant_id, list(routes))
        if self._memo:
            self._memo = {}

    def route(
        self,
        tenant_id: str,
        event_type: str | None,
        body: bytes,
        headers: Mapping[str, str],
        document: Any = NOT_PARSED,
    ) -> tuple[str, ...]:
        """``match``, then each matched endpoint's content filter on the event.

        ``document`` is the body already parsed, when the caller has it.
        """
        endpoint_ids = self.match(tenant_id, event_type)
        filters = self._filters.get(tenant_id)
        if filters is None or not endpoint_ids:
            return endpoint_ids
        parse = self._projections[tenant_id].parse
        return filter_endpoints(
            filters, endpoint_ids, body, headers, document=document, parse=parse
        )

    def filter_of(self, tenant_id: str, endpoint_id: str) -> Filter | None:
        """An endpoint's content filter, as routing applies it."""
        return self._filters.get(tenant_id, {}).get(endpoint_id)

    def match(self, tenant_id: str, event_type: str | None) -> tuple[str, ...]:
        """Endpoint ids (sorted) that should receive an event of ``event_type``."""
        plain = self._plain.get(tenant_id)
        if plain is not None:
            return plain
        key = (tenant_id, event_type)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        result = tuple(
            endpoint_id
            for endpoint_id, pattern in self._by_tenant.get(tenant_id, ())
            if pattern is None or (event_type is not None and pattern.fullmatch(event_type))
        )
        if len(self._memo) < MEMO_LIMIT:
            self._memo[key] = result
        return result

    def __repr__(self) -> str:
        count = sum(len(v) for v in self._by_tenant.values())
        count += sum(len(v) for v in self._plain.values())
        tenants = len(self._by_tenant) + len(self._plain)
        return f"<RoutingTable tenants={tenants} endpoints={count}>"
