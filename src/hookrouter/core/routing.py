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

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from hookrouter.core.filters import NOT_PARSED, Filter, Projection, filter_endpoints

MEMO_LIMIT: Final = 10_000
# Versions of routing tables, unique across tables: a holder of an entry read
# from one table never mistakes another table's version for its own.
_VERSIONS: Final = itertools.count(1)


# Not frozen, __init__ written out: a start-up builds one per stored endpoint,
# and a frozen dataclass's generated __init__ stays interpreted under mypyc
# (mypyc/mypyc#817). Treat instances as immutable.
@dataclass(slots=True)
class Route:
    """What routing needs of an endpoint."""

    endpoint_id: str
    tenant_id: str
    event_types: tuple[str, ...] | None = None
    enabled: bool = True
    filter: Filter | None = None

    def __init__(
        self,
        endpoint_id: str,
        tenant_id: str,
        event_types: tuple[str, ...] | None = None,
        enabled: bool = True,
        filter: Filter | None = None,
    ) -> None:
        self.endpoint_id = endpoint_id
        self.tenant_id = tenant_id
        self.event_types = event_types
        self.enabled = enabled
        self.filter = filter


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


class _Routes:
    """A tenant whose routing needs more than its endpoint ids: type patterns or filters."""

    __slots__ = ("compiled", "filters", "plain", "projection")

    def __init__(
        self,
        compiled: list[tuple[str, re.Pattern[str] | None]],
        plain: tuple[str, ...] | None,
        filters: dict[str, Filter],
        projection: Projection | None,
    ) -> None:
        self.compiled = compiled
        self.plain = plain  # every enabled endpoint takes every type: the answer, fixed
        self.filters = filters  # its endpoints that have a content filter
        self.projection = projection  # a parser of the body paths those read (and no more)


# What the table holds for one tenant: its answer itself (endpoint ids, when
# every endpoint takes every type), its routes, or None (nothing routed).
RouteEntry: TypeAlias = "tuple[str, ...] | _Routes | None"


class RoutingTable:
    """Routing for a set of endpoints, replaced one tenant at a time on change.

    ``version`` changes with every change: a caller that keeps a tenant's
    entry (``entry``) with the version it read it at may route with it
    (``route_entry``) while the version is unchanged, and skip the lookup.
    """

    __slots__ = ("_memo", "_tenants", "version")

    def __init__(self, routes: Iterable[Route]) -> None:
        by_tenant: dict[str, list[Route]] = {}
        for route in routes:
            by_tenant.setdefault(route.tenant_id, []).append(route)
        # One entry per tenant with enabled routes, so an event looks its tenant up
        # once (with events spread over many tenants, each lookup is a likely cache
        # miss). Tenants whose enabled endpoints all take every type and have no
        # content filter (the usual case) map to their answer itself, a tuple:
        # no object of their own. Not in the memo, which stops growing at
        # MEMO_LIMIT: beyond that many busy tenants, every event of the rest
        # matched its routes again.
        self._tenants: dict[str, tuple[str, ...] | _Routes] = {}
        for tenant_id, tenant_routes in by_tenant.items():
            self._set_tenant(tenant_id, tenant_routes)
        self._memo: dict[tuple[str, str | None], tuple[str, ...]] = {}
        self.version = next(_VERSIONS)

    def _set_tenant(self, tenant_id: str, routes: list[Route]) -> None:
        compiled = _compiled(routes)
        filters = {r.endpoint_id: r.filter for r in routes if r.filter is not None and r.enabled}
        plain = (
            tuple(endpoint_id for endpoint_id, _ in compiled)
            if compiled and all(pattern is None for _, pattern in compiled)
            else None
        )
        if plain is not None and not filters:
            self._tenants[tenant_id] = plain
        elif compiled or filters:
            projection = Projection(filters.values()) if filters else None
            self._tenants[tenant_id] = _Routes(compiled, plain, filters, projection)
        else:
            self._tenants.pop(tenant_id, None)

    def replace_tenant(self, tenant_id: str, routes: Iterable[Route]) -> None:
        """Set every route of one tenant; costs that tenant's routes, not the table's.

        The memo is dropped whole (one reference, freed as lazily as it was
        built) rather than searched for the tenant's entries.
        """
        self._set_tenant(tenant_id, list(routes))
        self.version = next(_VERSIONS)
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
        return self.route_entry(
            self._tenants.get(tenant_id), tenant_id, event_type, body, headers, document=document
        )

    def entry(self, tenant_id: str) -> RouteEntry:
        """What the table holds for a tenant, for ``route_entry`` at this ``version``."""
        return self._tenants.get(tenant_id)

    def route_entry(
        self,
        entry: RouteEntry,
        tenant_id: str,
        event_type: str | None,
        body: bytes,
        headers: Mapping[str, str],
        *,
        document: Any = NOT_PARSED,
    ) -> tuple[str, ...]:
        """``route`` with the tenant's ``entry`` already in hand (read at this version)."""
        if entry is None:
            return ()
        if isinstance(entry, tuple):
            return entry
        endpoint_ids = self._match(tenant_id, entry, event_type)
        filters = entry.filters
        if not filters or not endpoint_ids or entry.projection is None:
            return endpoint_ids
        parse = entry.projection.parse
        return filter_endpoints(
            filters, endpoint_ids, body, headers, document=document, parse=parse
        )

    def filter_of(self, tenant_id: str, endpoint_id: str) -> Filter | None:
        """An endpoint's content filter, as routing applies it."""
        entry = self._tenants.get(tenant_id)
        return None if entry is None or isinstance(entry, tuple) else entry.filters.get(endpoint_id)

    def match(self, tenant_id: str, event_type: str | None) -> tuple[str, ...]:
        """Endpoint ids (sorted) that should receive an event of ``event_type``."""
        entry = self._tenants.get(tenant_id)
        if entry is None:
            return ()
        if isinstance(entry, tuple):
            return entry
        return self._match(tenant_id, entry, event_type)

    def _match(self, tenant_id: str, entry: _Routes, event_type: str | None) -> tuple[str, ...]:
        plain = entry.plain
        if plain is not None:
            return plain
        key = (tenant_id, event_type)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        result = tuple(
            endpoint_id
            for endpoint_id, pattern in entry.compiled
            if pattern is None or (event_type is not None and pattern.fullmatch(event_type))
        )
        if len(self._memo) < MEMO_LIMIT:
            self._memo[key] = result
        return result

    def __repr__(self) -> str:
        count = sum(
            len(v) if isinstance(v, tuple) else len(v.compiled) for v in self._tenants.values()
        )
        return f"<RoutingTable tenants={len(self._tenants)} endpoints={count}>"
