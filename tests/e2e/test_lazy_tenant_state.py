"""Idle tenants hold no runtime state; a tenant's first event builds it (issue 38).

One router in this process (so its state can be looked at) with many
tenants created through its entity service as a platform does on sign-up;
events are signed by the stripe SDK and posted over HTTP, deliveries go to a
real receiver. Functional, not timed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.e2e.conftest import put_stripe_tenants, stripe_event
from tests.support.delivery_servers import Receiver
from tests.support.router import STRIPE_SECRET, base_config

from hookrouter.config import parse_config
from hookrouter.ingress.ingest_metrics import INGEST_REQUESTS
from hookrouter.runtime import Router

TENANTS = 200
NEW_SECRET = "whsec_rotated_stripe_secret_0123456789abcdef"


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[Router, Receiver, str]]:
    receiver = await Receiver().start()
    router = Router(parse_config(base_config(tmp_path / "data", 0)))
    host, port = await router.start()
    await put_stripe_tenants(router, TENANTS, receiver.port)
    try:
        yield router, receiver, f"http://{host}:{port}"
    finally:
        await router.stop()
        await receiver.stop()


async def post(url: str, source: str, event_id: str, secret: str = STRIPE_SECRET) -> int:
    body, headers = stripe_event(event_id, secret=secret)
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{url}/in/{source}", data=body, headers=headers) as response,
    ):
        return response.status


async def delivered(receiver: Receiver, count: int) -> None:
    for _ in range(500):
        if len(receiver.requests) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{len(receiver.requests)} of {count} deliveries arrived")


def runtime_tenants(router: Router) -> set[str]:
    """Tenants with delivery state (a credit queue) or a built verifier."""
    assert router.delivery is not None and router.entities is not None
    built = {
        live.config.tenant
        for live in router.entities.catalog.sources.values()
        if live.verifier_built
    }
    return set(router.delivery.queues) | built


async def test_a_tenant_gets_runtime_state_on_its_first_event(
    world: tuple[Router, Receiver, str],
) -> None:
    router, receiver, url = world
    assert runtime_tenants(router) == set(), "idle tenants: no verifier, no queue"
    assert not any(key[0] == "c7-in" for key in INGEST_REQUESTS._cells), "no series yet"

    assert await post(url, "c7-in", "evt_first") == 200
    await delivered(receiver, 1)
    assert runtime_tenants(router) == {"c7"}
    assert receiver.requests[0].path == "/c7"
    assert router.delivery is not None
    assert set(router.delivery.endpoints.breakers) <= {"c7-out"}, "no breaker for idle endpoints"


async def test_a_source_change_rebuilds_its_verifier(world: tuple[Router, Receiver, str]) -> None:
    router, receiver, url = world
    entities = router.entities
    assert entities is not None
    assert await post(url, "c3-in", "evt_before") == 200
    assert entities.catalog.sources["c3-in"].verifier_built

    await entities.put(
        "source", {"id": "c3-in", "tenant": "c3", "provider": "stripe", "secrets": [NEW_SECRET]}
    )
    assert not entities.catalog.sources["c3-in"].verifier_built
    assert await post(url, "c3-in", "evt_old_secret") == 401, "the old secret no longer verifies"
    assert await post(url, "c3-in", "evt_new_secret", secret=NEW_SECRET) == 200
    await delivered(receiver, 2)
    assert runtime_tenants(router) == {"c3"}


async def test_removing_a_tenant_releases_its_runtime_state(
    world: tuple[Router, Receiver, str],
) -> None:
    router, receiver, url = world
    entities, delivery = router.entities, router.delivery
    assert entities is not None and delivery is not None
    assert await post(url, "c5-in", "evt_c5") == 200
    await delivered(receiver, 1)
    for _ in range(200):  # the attempt's credit returns just after the receiver answers
        if delivery.idle():
            break
        await asyncio.sleep(0.01)
    assert "c5" in delivery.queues

    await entities.delete("endpoint", "c5-out")
    await entities.delete("source", "c5-in")
    await entities.delete("tenant", "c5")
    assert await post(url, "c6-in", "evt_c6") == 200  # a pump turn applies the change
    await delivered(receiver, 2)
    assert "c5" not in delivery.queues
    assert "c5-out" not in delivery.endpoints.breakers
    assert "c5" not in delivery.labelled
    assert runtime_tenants(router) == {"c6"}


async def test_the_console_sampler_reads_counters_not_per_tenant_stats(
    world: tuple[Router, Receiver, str],
) -> None:
    """A reading costs the same with 20,000 tenants holding work as with one."""
    router, receiver, url = world
    console = router.console
    assert console is not None
    for tenant in ("c1", "c2"):
        assert await post(url, f"{tenant}-in", f"evt_{tenant}") == 200
    await delivered(receiver, 2)
    called: list[str] = []
    real_call = console.gateway.call

    async def spy(principal: Any, actor: str, method: str, path: str, **kw: Any) -> Any:
        called.append(path)
        return await real_call(principal, actor, method, path, **kw)

    console.gateway.call = spy  # type: ignore[method-assign]
    for _ in range(200):  # the outcome is counted once the attempt has finished
        reading = await console.sampler.sample()
        if reading.delivery.get("delivered") == 2:
            break
        await asyncio.sleep(0.01)
    assert reading.delivery["delivered"] == 2
    assert "/delivery" not in called, "GET /delivery builds every tenant queue's stats"
