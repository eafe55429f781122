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


class RoutingTable:
    """Immutable routing for a set of endpoints; build a new one on change."""

    __slots__ = ("_by_tenant", "_memo")

    def __init__(self, routes: Iterable[Route]) -> None:
        by_tenant: dict[str, list[tuple[str, re.Pattern[str] | None]]] = {}
        for route in sorted(routes, key=lambda r: r.endpoint_id):
            if not route.enabled:
                continue
            pattern = None if route.event_types is None else compile_filter(route.event_types)
            by_tenant.setdefault(route.tenant_id, []).append((route.endpoint_id, pattern))
        self._by_tenant = by_tenant
        self._memo: dict[tuple[str, str | None], tuple[str, ...]] = {}

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
