"""Admin changes update the live catalog one entity at a time (issues 33 item 12 and 38).

Functional, not timed: a change must not rebuild what it did not touch, which
is observed by counting verifier constructions (a rebuild makes one per
source of the catalog) and the tenants a change names in the catalog's log.
"""

from __future__ import annotations

import pytest
from tests.admin.conftest import ENDPOINT_SECRET, STRIPE, TENANTS, add_tenant

from hookrouter.admin.entities import Conflict, EntityService
from hookrouter.config import catalog as catalog_module
from hookrouter.config.catalog import Catalog
from hookrouter.config.entities import TenantConfig


def built(catalog: Catalog) -> set[str]:
    """Sources whose verifier exists (built on a source's first request)."""
    return {source_id for source_id, live in catalog.sources.items() if live.verifier_built}


async def test_one_change_rebuilds_only_what_it_touches(service: EntityService) -> None:
    catalog = service.catalog
    assert built(catalog) == set(), "no source has had a request: no verifier yet"
    await add_tenant(service, TENANTS)  # a new customer: tenant, source, endpoint
    await service.put(
        "endpoint",
        {
            "id": "e3",
            "tenant": "t3",
            "url": "https://other.example.com/",
            "secret": ENDPOINT_SECRET,
        },
    )
    await service.delete("endpoint", "e5")
    assert built(catalog) == set(), "changes build no verifier"
    assert service.catalog is catalog, "changed in place, not rebuilt"
    assert catalog.endpoints["e3"].url == "https://other.example.com/"
    assert catalog.routing.match("t3", "invoice.paid") == ("e3",)
    assert catalog.routing.match("t5", "invoice.paid") == ()
    assert catalog.routing.match(f"t{TENANTS}", "x") == (f"e{TENANTS}",)
    assert len(catalog.sources) == TENANTS + 1


async def test_tenant_update_refreshes_only_its_sources(service: EntityService) -> None:
    catalog = service.catalog
    verifier = catalog.sources["s9"].verifier  # as the first request to s9 would
    untouched = catalog.sources["s8"]
    await service.put(
        "tenant", {"id": "t9", "rate_limit": {"capacity": 10, "refill_per_second": 10}}
    )
    live = catalog.sources["s9"]
    assert live.tenant.rate_limit is not None and live.rate_checks
    assert live.verifier is verifier, "a tenant change keeps its sources' verifiers"
    assert catalog.sources["s8"] is untouched
    assert built(catalog) == {"s9"}


async def test_source_change_replaces_its_verifier(service: EntityService) -> None:
    catalog = service.catalog
    before = catalog.sources["s2"].verifier
    other = "whsec_test_other_secret_0123456789abcdef"
    await service.put(
        "source", {"id": "s2", "tenant": "t2", "provider": "stripe", "secrets": [other]}
    )
    live = catalog.sources["s2"]
    assert not live.verifier_built, "built again on the next request, from the new secrets"
    assert live.verifier is not before
    assert live.config.secrets == (other,)


async def test_a_change_names_its_tenant(service: EntityService) -> None:
    catalog = service.catalog
    version = catalog.version
    await service.put("tenant", {"id": "t1", "queue_capacity": 50})
    await service.delete("source", "s2")
    assert catalog.changed_since(version) == {"t1", "t2"}
    assert catalog.changed_since(catalog.version) == set()
    assert catalog.changed_since(catalog.version - catalog_module.CHANGE_LOG - 1) is None


async def test_deleting_a_tenant_in_use_is_refused_then_allowed(service: EntityService) -> None:
    with pytest.raises(Conflict, match="still has sources: s4"):
        await service.delete("tenant", "t4")
    await service.delete("source", "s4")
    with pytest.raises(Conflict, match="still has endpoints: e4"):
        await service.delete("tenant", "t4")
    await service.delete("endpoint", "e4")
    await service.delete("tenant", "t4")
    assert "t4" not in service.catalog.tenants
    assert service.catalog.routing.match("t4", None) == ()


def test_catalog_built_whole_matches_one_built_by_changes() -> None:
    whole = Catalog([TenantConfig("a"), TenantConfig("b")], [], [])
    stepwise = Catalog((), (), ())
    stepwise.put_tenant(TenantConfig("a"))
    stepwise.put_tenant(TenantConfig("b"))
    assert whole.tenants == stepwise.tenants
    stepwise.remove_tenant("a")
    assert set(stepwise.tenants) == {"b"}
    assert stepwise.changed_since(0) == {"a", "b"}


async def test_a_source_routes_with_its_tenants_entry_until_routing_changes(
    service: EntityService,
) -> None:
    """Ingest keeps its tenant's routing entry with the source (no lookup among all
    tenants per event); any change to routing makes the next event read it again."""

    def route(event_type: str) -> tuple[str, ...]:
        catalog = service.catalog
        live = catalog.sources["s1"]
        return catalog.routing.route_entry(live.routes(catalog.routing), "t1", event_type, b"", {})

    assert route("invoice.paid") == ("e1",)
    assert route("customer.created") == ("e1",)
    await service.put(
        "endpoint",
        {
            "id": "e1-invoices",
            "tenant": "t1",
            "url": "https://hooks.example.com/invoices",
            "secret": ENDPOINT_SECRET,
            "event_types": ["invoice.*"],
        },
    )
    assert route("invoice.paid") == ("e1", "e1-invoices")
    assert route("customer.created") == ("e1",)
    await service.put(
        "endpoint",
        {
            "id": "e1",
            "tenant": "t1",
            "url": "https://hooks.example.com/in",
            "secret": ENDPOINT_SECRET,
            "enabled": False,
        },
    )
    assert route("customer.created") == ()
    await service.put("tenant", {"id": "t1", "max_backlog": 50})  # a new live source
    assert route("invoice.paid") == ("e1-invoices",)


def test_a_source_reads_its_routing_entry_once_per_version() -> None:
    from hookrouter.config.entities import EndpointConfig, SourceConfig
    from hookrouter.core import routing as routing_module

    if not routing_module.__file__.endswith(".py"):
        pytest.skip(
            "needs the interpreted routing table (compiled code reads dicts past a subclass)"
        )

    class Counted(dict[str, object]):
        reads = 0

        def get(self, key: str, default: object = None) -> object:
            Counted.reads += 1
            return super().get(key, default)

    catalog = Catalog(
        [TenantConfig("t1"), TenantConfig("t2")],
        [SourceConfig("s1", "t1", "stripe", (STRIPE,))],
        [
            EndpointConfig(f"e{i}", f"t{i}", "https://h.example.com/", ENDPOINT_SECRET)
            for i in (1, 2)
        ],
    )
    routing = catalog.routing
    routing._tenants = Counted(routing._tenants)  # type: ignore[assignment]
    live = catalog.sources["s1"]
    for _ in range(5):
        assert routing.route_entry(live.routes(routing), "t1", None, b"", {}) == ("e1",)
    assert Counted.reads == 1
    catalog.put_endpoint(EndpointConfig("e2", "t2", "https://h.example.com/2", ENDPOINT_SECRET))
    assert routing.route_entry(live.routes(routing), "t1", None, b"", {}) == ("e1",)
    assert Counted.reads == 2, "another tenant's change: read once again, then kept"
