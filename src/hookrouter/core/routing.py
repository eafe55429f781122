"""Which endpoints an event goes to: pure matching of event types to filters.

An endpoint with no ``event_types`` receives every event of its tenant.
Otherwise each entry is an exact type or a glob (``invoice.*``, ``*.created``;
``*`` matches any run of characters, dots included), and an event whose
provider gave no type only reaches endpoints without a filter. Disabled
endpoints receive nothing. Results are memoised per (tenant, type) because
a burst repeats the same few types; the memo is bounded so a sender cannot
grow it without limit by inventing types.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

MEMO_LIMIT: Final = 10_000


@dataclass(frozen=True, slots=True)
class Route:
    """What routing needs of an endpoint."""

    endpoint_id: str
    tenant_id: str
    event_types: tuple[str, ...] | None = None
    enabled: bool = True


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

    __slots__ = ("_by_tenant", "_memo")

    def __init__(self, routes: Iterable[Route]) -> None:
        by_tenant: dict[str, list[Route]] = {}
        for route in routes:
            by_tenant.setdefault(route.tenant_id, []).append(route)
        self._by_tenant: dict[str, list[tuple[str, re.Pattern[str] | None]]] = {}
        for tenant_id, tenant_routes in by_tenant.items():
            compiled = _compiled(tenant_routes)
            if compiled:
                self._by_tenant[tenant_id] = compiled
        self._memo: dict[tuple[str, str | None], tuple[str, ...]] = {}

    def replace_tenant(self, tenant_id: str, routes: Iterable[Route]) -> None:
        """Set every route of one tenant; costs that tenant's routes, not the table's.

        The memo is dropped whole (one reference, freed as lazily as it was
        built) rather than searched for the tenant's entries.
        """
        compiled = _compiled(routes)
        if compiled:
            self._by_tenant[tenant_id] = compiled
        else:
            self._by_tenant.pop(tenant_id, None)
        if self._memo:
            self._memo = {}

    def match(self, tenant_id: str, event_type: str | None) -> tuple[str, ...]:
        """Endpoint ids (sorted) that should receive an event of ``event_type``."""
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
        return f"<RoutingTable tenants={len(self._by_tenant)} endpoints={count}>"
