"""Delivery and breaker views show a bounded slice of a large router (issue 38).

With 20,000 tenants holding delivery state, ``GET /admin/v1/delivery`` built
every tenant's stats (docs/performance.md has the cost) and
``GET /admin/v1/breakers`` every breaker, and the console's overview asked
for both on each refresh. Now the delivery view shows the tenants with the
most work (``limit``) or one ``tenant``, and breakers come a page by
endpoint id at a time, by tenant or tripped only. One router in this process, real receiver;
functional, not timed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.e2e.conftest import put_stripe_tenants
from tests.e2e.test_lazy_tenant_state import delivered, post
from tests.support.delivery_servers import Received, Receiver, Reply
from tests.support.router import ADMIN_TOKEN, base_config

from hookrouter.config import parse_config
from hookrouter.runtime import Router

BUSY = 120  # tenants sent an event: more than the default page of 100
HUNG = "v9"  # its receiver never answers: its delivery stays in flight


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[Router, Receiver, str]]:
    """200 tenants ``v0``.. (metric series are process-wide: not the ``c`` of other tests)."""
    receiver = await Receiver().start()
    router = Router(parse_config(base_config(tmp_path / "data", 0)))
    host, port = await router.start()
    await put_stripe_tenants(router, 200, receiver.port, prefix="v")
    try:
        yield router, receiver, f"http://{host}:{port}"
    finally:
        await router.stop()
        await receiver.stop()


async def admin(url: str, path: str) -> Any:
    headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    async with aiohttp.ClientSession() as http, http.get(url + path, headers=headers) as r:
        assert r.status == 200, await r.text()
        return await r.json()


def hang_one(request: Received) -> Reply:
    return Reply(hang=request.path == f"/{HUNG}")


async def test_the_delivery_view_shows_the_busiest_tenants_and_counts_the_rest(
    world: tuple[Router, Receiver, str],
) -> None:
    _, receiver, url = world
    receiver.handler = hang_one
    for i in range(BUSY):
        assert await post(url, f"v{i}-in", f"evt_view_{i}") == 200
    await delivered(receiver, BUSY)  # the hung one arrived too, unanswered
    view = await admin(url, "/admin/v1/delivery")
    assert view["tenants_held"] == BUSY
    assert len(view["tenants"]) == 100  # the default page, not every tenant held
    assert next(iter(view["tenants"])) == HUNG  # the most work first
    assert list((await admin(url, "/admin/v1/delivery?limit=1"))["tenants"]) == [HUNG]
    one = await admin(url, "/admin/v1/delivery?tenant=v7")
    assert list(one["tenants"]) == ["v7"] and "v7-out" in one["tenants"]["v7"]["endpoints"]
    assert (await admin(url, "/admin/v1/delivery?tenant=v199"))["tenants"] == {}  # idle


async def test_breakers_by_tenant_and_tripped_only(
    world: tuple[Router, Receiver, str],
) -> None:
    _, receiver, url = world
    for i in range(10):
        assert await post(url, f"v{i}-in", f"evt_breaker_{i}") == 200
    await delivered(receiver, 10)
    every = (await admin(url, "/admin/v1/breakers"))["breakers"]
    assert {b["endpoint_id"] for b in every} == {f"v{i}-out" for i in range(10)}
    own = (await admin(url, "/admin/v1/breakers?tenant=v3"))["breakers"]
    assert [b["endpoint_id"] for b in own] == ["v3-out"]
    ranged = (await admin(url, "/admin/v1/breakers?after=v3-out&until=v6-out"))["breakers"]
    assert sorted(b["endpoint_id"] for b in ranged) == ["v4-out", "v5-out", "v6-out"]
    assert (await admin(url, "/admin/v1/breakers?tripped=true"))["breakers"] == []
    receiver.handler = failing_v4
    for n in range(12):  # past the breaker's 10 requests, every one failed
        assert await post(url, "v4-in", f"evt_failing_{n}") == 200
    for _ in range(500):  # it opens once half of at least 10 attempts failed
        tripped = (await admin(url, "/admin/v1/breakers?tripped=true"))["breakers"]
        if tripped:
            break
        await asyncio.sleep(0.02)
    assert [(b["endpoint_id"], b["state"]) for b in tripped] == [("v4-out", "open")]


async def test_breakers_come_a_page_at_a_time_in_id_order(
    world: tuple[Router, Receiver, str],
) -> None:
    _, receiver, url = world
    for i in range(BUSY):
        assert await post(url, f"v{i}-in", f"evt_paged_{i}") == 200
    await delivered(receiver, BUSY)
    first = await admin(url, "/admin/v1/breakers")
    assert len(first["breakers"]) == 100  # the default page, not every breaker held
    ids = [b["endpoint_id"] for b in first["breakers"]]
    assert ids == sorted(ids) and first["next_after"] == ids[-1]
    rest = await admin(url, f"/admin/v1/breakers?after={ids[-1]}&limit=1000")
    assert rest["next_after"] is None
    seen = ids + [b["endpoint_id"] for b in rest["breakers"]]
    assert seen == sorted(f"v{i}-out" for i in range(BUSY))
    small = await admin(url, "/admin/v1/breakers?limit=3&after=v5-out")
    assert [b["endpoint_id"] for b in small["breakers"]] == ["v50-out", "v51-out", "v52-out"]


def failing_v4(request: Received) -> Reply:
    return Reply(status=500 if request.path == "/v4" else 200)
