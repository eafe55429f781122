"""The live set of tenants, sources (with their verifiers) and endpoints.

A ``Catalog`` is immutable: the admin API builds a new one after each change
and swaps it in, so the ingest path reads a consistent view without locks.
Verifiers are built once here, not per request (they precompute keys).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hookrouter.config.entities import EndpointConfig, SourceConfig, TenantConfig
from hookrouter.core.routing import Route, RoutingTable
from hookrouter.ratelimit.bucket import Limit
from hookrouter.verify.base import Verifier
from hookrouter.verify.registry import build_verifier

# One rate-limit check of an ingest request: (tenant id, bucket scope, limit).
RateCheck = tuple[str, str, Limit]


@dataclass(frozen=True, slots=True)
class LiveSource:
    config: SourceConfig
    tenant: TenantConfig
    verifier: Verifier
    # The buckets an ingest request must pass (``rate_checks``), spelled once
    # here rather than per request (ingress.admission). No default: a live
    # source built without them would skip its rate limits.
    rate_checks: tuple[RateCheck, ...]


def rate_checks(tenant: TenantConfig, source: SourceConfig) -> tuple[RateCheck, ...]:
    """The tenant's ``ingest`` bucket, then the source's ``src:<id>``: those with a limit."""
    checks: list[RateCheck] = []
    if tenant.rate_limit is not None:
        checks.append((tenant.id, "ingest", tenant.rate_limit))
    if source.rate_limit is not None:
        checks.append((tenant.id, f"src:{source.id}", source.rate_limit))
    return tuple(checks)


class Catalog:
    """Everything the hot path looks up, indexed for it."""

    __slots__ = ("endpoints", "routing", "sources", "tenants")

    def __init__(
        self,
        tenants: Iterable[TenantConfig],
        sources: Iterable[SourceConfig],
        endpoints: Iterable[EndpointConfig],
    ) -> None:
        self.tenants = {t.id: t for t in tenants}
        self.endpoints = {e.id: e for e in endpoints if e.tenant in self.tenants}
        self.sources = {
            s.id: LiveSource(
                s,
                self.tenants[s.tenant],
                build_verifier(s.provider, s.secrets, s.tolerance_seconds, s.options),
                rate_checks(self.tenants[s.tenant], s),
            )
            for s in sources
            if s.tenant in self.tenants
        }
        self.routing = RoutingTable(
            Route(e.id, e.tenant, e.event_types, e.enabled) for e in self.endpoints.values()
        )

    def __repr__(self) -> str:
        return (
            f"<Catalog tenants={len(self.tenants)} sources={len(self.sources)} "
            f"endpoints={len(self.endpoints)}>"
        )
