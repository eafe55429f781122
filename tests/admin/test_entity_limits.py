"""Admin clients cannot grow the catalog without bound (issue 33 item 12).

Each limit is lowered for the test; what is checked is that a create past
it is refused with 409 limit_reached, that replacing an existing entity is
not a create, and that one tenant's count does not touch another's.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hookrouter.admin import entities as entities_module
from hookrouter.admin.entities import EntityService, LimitReached
from hookrouter.clock import ManualClock
from hookrouter.store.sqlite import SqliteStore

STRIPE = "whsec_test_stripe_secret_0123456789abcdef"
ENDPOINT_SECRET = "whsec_" + "YmVuY2gtc3RhbmRhcmQtd2ViaG9va3Mtc2VjcmV0IQ=="


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[EntityService]:
    clock = ManualClock(wall=time.time())
    store = SqliteStore(tmp_path / "data", clock=clock)
    await store.open()
    yield EntityService(store, clock)
    await store.close()


def endpoint(endpoint_id: str, tenant: str) -> dict[str, object]:
    return {"id": endpoint_id, "tenant": tenant, "url": "https://hooks.example.com/in",
            "secret": ENDPOINT_SECRET}  # fmt: skip


async def test_endpoints_per_tenant_are_capped(
    service: EntityService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(entities_module, "MAX_ENDPOINTS_PER_TENANT", 2)
    for tenant in ("acme", "globex"):
        await service.put("tenant", {"id": tenant})
    await service.put("endpoint", endpoint("a1", "acme"))
    await service.put("endpoint", endpoint("a2", "acme"))
    with pytest.raises(LimitReached, match="tenant 'acme' has 2 endpoints") as err:
        await service.put("endpoint", endpoint("a3", "acme"))
    assert (err.value.status, err.value.reason) == (409, "limit_reached")
    assert "a3" not in service.catalog.endpoints
    await service.put("endpoint", {**endpoint("a2", "acme"), "url": "https://h.example.com/2"})
    await service.put("endpoint", endpoint("g1", "globex"))  # another tenant's own count


async def test_sources_per_tenant_and_tenants_are_capped(
    service: EntityService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(entities_module, "MAX_SOURCES_PER_TENANT", 1)
    monkeypatch.setattr(entities_module, "MAX_TENANTS", 2)
    await service.put("tenant", {"id": "acme"})
    await service.put("tenant", {"id": "globex"})
    with pytest.raises(LimitReached, match="the router has 2 tenants"):
        await service.put("tenant", {"id": "initech"})
    source = {"id": "s1", "tenant": "acme", "provider": "stripe", "secrets": [STRIPE]}
    await service.put("source", source)
    with pytest.raises(LimitReached, match="tenant 'acme' has 1 sources"):
        await service.put("source", {**source, "id": "s2"})
