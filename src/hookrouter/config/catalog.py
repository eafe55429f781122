"""The live set of tenants, sources (with their verifiers) and endpoints.

A ``Catalog`` changes one entity at a time (``put_*`` / ``remove_*``), in
place: the admin API applies each change on the event loop, with no await
inside it, so every reader on the loop sees the view before or after a
change, never half of one. A change costs the entity and its tenant's other
entities, not the catalog's size (rebuilding it per admin change made N
creates cost O(N^2)). Each change logs the tenants it touched under a rising
``version``, so the delivery engine re-applies limits for those tenants only
(``changed_since``). A source's verifier (precomputed keys) is built on its
first request and kept until the source changes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Final, TypeVar

from hookrouter.config.entities import EndpointConfig, SourceConfig, TenantConfig
from hookrouter.core.routing import Route, RouteEntry, RoutingTable
from hookrouter.flow.backlog import BacklogCount
from hookrouter.loop_metrics import CounterCell
from hookrouter.providers import sender_retries
from hookrouter.ratelimit.bucket import Limit
from hookrouter.verify.base import Verifier
from hookrouter.verify.registry import build_verifier
from hookrouter.verify.replay import default_window

_T = TypeVar("_T")

# Tenants of recent changes kept for ``changed_since``; a reader further behind
# than this re-reads everything it holds (rare: readers catch up every loop turn).
CHANGE_LOG: Final = 4096
_EMPTY: Final[Mapping[str, EndpointConfig]] = {}

# One rate-limit check of an ingest request: (tenant id, bucket scope, limit).
RateCheck = tuple[str, str, Limit]


class LiveSource:
    """A source as ingest sees it: its config, its tenant, its rate checks, its verifier.

    The verifier (precomputed keys) is built on the first request that needs
    it, not when the source is loaded: a router started with many stored
    tenants pays for the sources that receive traffic only. A plain class, not
    a frozen dataclass, so the compiled build keeps the cached verifier in a
    native attribute.
    """

    __slots__ = (
        "_verifier",
        "accepted",
        "backlog_count",
        "config",
        "max_backlog",
        "rate_checks",
        "replay_window",
        "route_entry",
        "route_version",
        "sender_retries",
        "source_id",
        "tenant",
        "tenant_id",
    )

    def __init__(
        self,
        config: SourceConfig,
        tenant: TenantConfig,
        verifier: Verifier | None,
        # The buckets an ingest request must pass (``rate_checks``), spelled once
        # here rather than per request (ingress.admission). No default: a live
        # source built without them would skip its rate limits.
        rate_checks: tuple[RateCheck, ...],
    ) -> None:
        self.config = config
        self.tenant = tenant
        # What ingest and admission read per event, held here: the source is
        # already in hand, and with events spread over many tenants each other
        # object read (the source's or tenant's config) is one more cache miss.
        self.tenant_id = config.tenant
        self.source_id = config.id
        self.max_backlog = tenant.max_backlog
        self.sender_retries = sender_retries(config.provider)
        window = config.replay_window
        # The replay guard's window in seconds; 0 is off.
        self.replay_window = (
            default_window(config.provider, config.options) if window is None else window
        )
        # The engine's count of the tenant's open deliveries, kept by admission
        # (``ingress.admission``) on first use; None: not asked yet.
        self.backlog_count: BacklogCount | None = None
        # Its tenant's routing entry and the routing table's version it was read
        # at (``routes``); 0 is no table's version.
        self.route_entry: RouteEntry = None
        self.route_version = 0
        self.rate_checks = rate_checks
        self._verifier = verifier  # None: built on first use
        # Ingest's count of its accepted events (``IngestMetrics.cell``), kept here
        # on first use so an event does not look its source up in the series again.
        self.accepted: CounterCell | None = None

    @property
    def verifier(self) -> Verifier:
        verifier = self._verifier
        if verifier is None:
            source = self.config
            verifier = build_verifier(
                source.provider,
                source.secrets,
                source.tolerance_seconds,
                source.options,
                checked=True,
            )
            self._verifier = verifier
        return verifier

    def routes(self, routing: RoutingTable) -> RouteEntry:
        """Its tenant's entry in ``routing``, looked up only when the table changed
        since this source last read it."""
        if self.route_version != routing.version:
            self.route_entry = routing.entry(self.config.tenant)
            self.route_version = routing.version
        return self.route_entry

    def under(self, tenant: TenantConfig) -> LiveSource:
        """This source under a changed tenant: the verifier depends on the source alone."""
        return LiveSource(self.config, tenant, self._verifier, rate_checks(tenant, self.config))

    @property
    def verifier_built(self) -> bool:
        """Whether a request has needed the verifier yet (tests observe laziness)."""
        return self._verifier is not None


def rate_checks(tenant: TenantConfig, source: SourceConfig) -> tuple[RateCheck, ...]:
    """The tenant's ``ingest`` bucket, then the source's ``src:<id>``: those with a limit."""
    checks: list[RateCheck] = []
    if tenant.rate_limit is not None:
        checks.append((tenant.id, "ingest", tenant.rate_limit))
    if source.rate_limit is not None:
        checks.append((tenant.id, f"src:{source.id}", source.rate_limit))
    return tuple(checks)


class Catalog:
    """Everything the hot path looks up, indexed for it, changed one entity at a time."""

    __slots__ = (
        "_endpoints_of",
        "_log",
        "_sources_of",
        "endpoints",
        "routing",
        "sources",
        "tenants",
        "version",
    )

    def __init__(
        self,
        tenants: Iterable[TenantConfig] = (),
        sources: Iterable[SourceConfig] = (),
        endpoints: Iterable[EndpointConfig] = (),
    ) -> None:
        self.tenants: dict[str, TenantConfig] = {t.id: t for t in tenants}
        self.endpoints: dict[str, EndpointConfig] = {}
        self.sources: dict[str, LiveSource] = {}
        self._endpoints_of: dict[str, dict[str, EndpointConfig]] = {}
        self._sources_of: dict[str, dict[str, SourceConfig]] = {}
        for e in endpoints:
            if e.tenant in self.tenants:
                self.endpoints[e.id] = e
                self._endpoints_of.setdefault(e.tenant, {})[e.id] = e
        for s in sources:
            if s.tenant in self.tenants:
                self.sources[s.id] = _live(self.tenants[s.tenant], s)
                self._sources_of.setdefault(s.tenant, {})[s.id] = s
        self.routing = RoutingTable(_route(e) for e in self.endpoints.values())
        self.version = 0
        self._log: deque[str] = deque(maxlen=CHANGE_LOG)

    # -- reading -----------------------------------------------------------
    def endpoints_of(self, tenant_id: str) -> Mapping[str, EndpointConfig]:
        """The endpoints of one tenant, by id (an index: no scan of all endpoints)."""
        return self._endpoints_of.get(tenant_id, _EMPTY)

    def sources_of(self, tenant_id: str) -> Mapping[str, SourceConfig]:
        return self._sources_of.get(tenant_id, {})

    def changed_since(self, version: int) -> set[str] | None:
        """Tenants touched by the changes after ``version``; None: too far back, assume all."""
        behind = self.version - version
        if behind <= 0:
            return set()
        if behind > len(self._log):
            return None
        log = self._log
        return {log[i] for i in range(len(log) - behind, len(log))}

    # -- changing, one entity at a time ------------------------------------
    def put_tenant(self, tenant: TenantConfig) -> None:
        """Add or replace a tenant; its sources' live views follow (they embed it)."""
        self.tenants[tenant.id] = tenant
        for source in self.sources_of(tenant.id).values():
            self.sources[source.id] = self.sources[source.id].under(tenant)
        self._changed(tenant.id)

    def remove_tenant(self, tenant_id: str) -> None:
        """Remove a tenant with its sources and endpoints."""
        if self.tenants.pop(tenant_id, None) is None:
            return
        for source_id in self._sources_of.pop(tenant_id, {}):
            del self.sources[source_id]
        endpoints = self._endpoints_of.pop(tenant_id, None)
        if endpoints:
            for endpoint_id in endpoints:
                del self.endpoints[endpoint_id]
            self.routing.replace_tenant(tenant_id, ())
        self._changed(tenant_id)

    def put_source(self, source: SourceConfig) -> None:
        """Add or replace a source; ignored (as at build) when its tenant is unknown."""
        self.remove_source(source.id)
        tenant = self.tenants.get(source.tenant)
        if tenant is None:
            return
        self.sources[source.id] = _live(tenant, source)
        self._sources_of.setdefault(source.tenant, {})[source.id] = source
        self._changed(source.tenant)

    def remove_source(self, source_id: str) -> None:
        live = self.sources.pop(source_id, None)
        if live is not None:
            tenant_id = live.config.tenant
            _discard(self._sources_of, tenant_id, source_id)
            self._changed(tenant_id)

    def put_endpoint(self, endpoint: EndpointConfig) -> None:
        """Add or replace an endpoint; ignored (as at build) when its tenant is unknown."""
        self.remove_endpoint(endpoint.id)
        if endpoint.tenant not in self.tenants:
            return
        self.endpoints[endpoint.id] = endpoint
        self._endpoints_of.setdefault(endpoint.tenant, {})[endpoint.id] = endpoint
        self._reroute(endpoint.tenant)

    def remove_endpoint(self, endpoint_id: str) -> None:
        endpoint = self.endpoints.pop(endpoint_id, None)
        if endpoint is not None:
            _discard(self._endpoints_of, endpoint.tenant, endpoint_id)
            self._reroute(endpoint.tenant)

    def _reroute(self, tenant_id: str) -> None:
        self.routing.replace_tenant(
            tenant_id, [_route(e) for e in self.endpoints_of(tenant_id).values()]
        )
        self._changed(tenant_id)

    def _changed(self, tenant_id: str) -> None:
        self.version += 1
        self._log.append(tenant_id)

    def __repr__(self) -> str:
        return (
            f"<Catalog tenants={len(self.tenants)} sources={len(self.sources)} "
            f"endpoints={len(self.endpoints)} version={self.version}>"
        )


def _live(tenant: TenantConfig, source: SourceConfig) -> LiveSource:
    return LiveSource(source, tenant, None, rate_checks(tenant, source))


def _route(endpoint: EndpointConfig) -> Route:
    return Route(
        endpoint.id, endpoint.tenant, endpoint.event_types, endpoint.enabled, endpoint.filter
    )


def _discard(index: dict[str, dict[str, _T]], tenant_id: str, entity_id: str) -> None:
    """Drop one entity from a per-tenant index, and the tenant's entry once empty."""
    items = index.get(tenant_id)
    if items is not None:
        items.pop(entity_id, None)
        if not items:
            del index[tenant_id]
