"""What the cyclic collector keeps scanning once a router serves (issue 38).

A platform creates its tenants through the admin API long after start, and
each tenant's first event builds its runtime state: both live for hours. Left
in the collector's oldest generation, every full collection walked all of
them with the loop stopped (docs/performance.md, "The collector and a
catalog made through the admin API"). The router's ``HeapSettler`` freezes what each
collection keeps, on uvloop only: the standard loop's transports die in
reference cycles on Python 3.11. One router in this process, so its heap can
be looked at, on uvloop (``serve_loop``) unless a test says otherwise; real
HTTP on both sides, events signed by the stripe SDK.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.e2e.conftest import put_stripe_tenants, stripe_event
from tests.support.delivery_servers import Received, Receiver, Reply
from tests.support.router import STRIPE_SECRET, base_config
from tests.support.waiting import wait_until

from hookrouter.config import parse_config
from hookrouter.delivery import engine as engine_module
from hookrouter.runtime import Router

PREFIX = "heap"  # tenants heap0.. (metric series are process-wide)
ROTATED = "whsec_rotated_stripe_secret_0123456789abcdef"


def reply_by_tenant(request: Received) -> Reply:
    """Every outcome the engine handles: success, retry, timeout, a cut connection."""
    number = int(request.path.strip("/").removeprefix(PREFIX) or 0)
    kind = number % 4
    if kind == 0:
        return Reply(status=500)
    if kind == 1:
        return Reply(hang=True)
    if kind == 2:
        return Reply(raw=b"", close_after_raw=True)
    return Reply()


@pytest.fixture
def collector_restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    gc.collect()
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


@pytest.fixture
async def world(tmp_path: Path, collector_restored: None) -> AsyncIterator[tuple[Router, Receiver]]:
    receiver = await Receiver(reply_by_tenant).start()
    cfg = base_config(tmp_path / "data", 0)
    cfg["delivery"] |= {"timeout_seconds": 0.2, "retry_schedule": ["1s"]}
    router = Router(parse_config(cfg))
    await router.start()
    router.settle()  # as ``serve`` does once started
    try:
        yield router, receiver
    finally:
        await router.stop()
        await receiver.stop()


async def post_events(url: str, sources: list[str], per_source: int) -> list[int]:
    statuses = []
    async with aiohttp.ClientSession() as http:
        for n in range(per_source):
            for source in sources:
                body, headers = stripe_event(f"evt_{source}_{n}")
                async with http.post(f"{url}/in/{source}", data=body, headers=headers) as resp:
                    statuses.append(resp.status)
            bad_body, bad_headers = stripe_event(f"evt_forged_{n}", secret=ROTATED)
            async with http.post(f"{url}/in/{sources[0]}", data=bad_body, headers=bad_headers):
                pass
    return statuses


def url_of(router: Router) -> str:
    assert router.address is not None
    host, port = router.address
    return f"http://{host}:{port}"


async def open_and_close(router: Router, count: int) -> None:
    """Keep-alive connections to the ingress, open across a young collection, then closed."""
    assert router.address is not None
    host, port = router.address
    connections = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: router\r\n\r\n")
        await reader.readuntil(b"\r\n\r\n")
        connections.append(writer)
    gc.collect(0)  # with the settler, everything alive now is frozen
    for writer in connections:
        writer.close()
        await writer.wait_closed()
    connections.clear()
    await asyncio.sleep(0.1)  # the server side sees the close


def dead_but_frozen() -> list[Any]:
    """Objects kept only by frozen garbage cycles: what the settler would leak."""
    gc.collect()  # first everything the collector can still see
    gc.unfreeze()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.freeze()


def transports_in(objects: list[Any]) -> list[Any]:
    return [o for o in objects if "Transport" in type(o).__name__]


@pytest.mark.serve_loop
async def test_on_uvloop_closed_connections_leave_nothing_frozen(
    world: tuple[Router, Receiver],
) -> None:
    router, _ = world
    assert router.heap.declined is None and router.heap.stats()["settles"] == 0
    await open_and_close(router, 100)
    assert router.heap.settles > 0
    leaked = transports_in(dead_but_frozen())
    assert leaked == [], f"{len(leaked)} closed transports kept frozen: {leaked[:3]}"


async def test_the_standard_loop_keeps_the_collectors_default(
    world: tuple[Router, Receiver],
) -> None:
    """On Python 3.11 its transports die in cycles: frozen open, kept forever once closed."""
    router, _ = world
    assert router.heap.declined is not None  # said in stats()["heap"] and the log
    await open_and_close(router, 100)
    assert router.heap.settles == 0
    leaked = transports_in(dead_but_frozen())
    assert leaked == [], f"{len(leaked)} closed transports kept frozen: {leaked[:3]}"


@pytest.mark.serve_loop
async def test_tenants_made_through_the_admin_api_leave_the_collectors_view(
    world: tuple[Router, Receiver],
) -> None:
    router, receiver = world
    gc.collect(0)
    before = len(gc.get_objects())  # what a full collection would walk
    await put_stripe_tenants(router, 300, receiver.port, PREFIX)
    gc.collect(0)  # the young collection a growing heap soon runs by itself
    grown = len(gc.get_objects()) - before
    # Without the settler: several objects per tenant, for every later full
    # collection to walk again.
    assert grown < 300, f"{grown} more objects in the collector's view for 300 tenants"
    assert router.entities is not None
    sources = [
        s for s in router.entities.catalog.sources.values() if s.config.tenant.startswith(PREFIX)
    ]
    assert len(sources) == 300
    in_view = {id(o) for o in gc.get_objects()}
    assert not any(id(s) in in_view for s in sources)


@pytest.mark.serve_loop
async def test_a_settled_router_leaves_nothing_of_its_own_in_frozen_cycles(
    world: tuple[Router, Receiver], monkeypatch: pytest.MonkeyPatch
) -> None:
    router, receiver = world
    delivery = router.delivery
    assert delivery is not None and router.entities is not None
    # Freeze far more often than in service: a young collection every 200
    # allocations, so objects in flight are frozen at every step of the path.
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(200, older, oldest)
    monkeypatch.setattr(engine_module, "IDLE_RELEASE_SECONDS", 0.0)
    delivery.idle_tenants_kept = 0  # release idle tenants' state as soon as seen idle

    await put_stripe_tenants(router, 40, receiver.port, PREFIX)
    sources = [f"{PREFIX}{i}-in" for i in range(40)]
    statuses = await post_events(url_of(router), sources, 3)
    assert statuses.count(200) == len(statuses)
    for i in range(10):  # catalog churn: secrets rotated, tenants removed and added
        await router.entities.put(
            "source",
            {"id": f"{PREFIX}{i}-in", "tenant": f"{PREFIX}{i}", "provider": "stripe",
             "secrets": [ROTATED, STRIPE_SECRET]},
        )  # fmt: skip
        await router.entities.delete("endpoint", f"{PREFIX}{10 + i}-out")
        await router.entities.delete("source", f"{PREFIX}{10 + i}-in")
        await router.entities.delete("tenant", f"{PREFIX}{10 + i}")
    await put_stripe_tenants(router, 45, receiver.port, PREFIX)  # 40..44 are new
    await post_events(url_of(router), [f"{PREFIX}{i}-in" for i in range(40, 45)], 2)
    await asyncio.sleep(2.0)  # the 1 s retries and 0.2 s timeouts run
    await wait_until(lambda: not delivery.queues)  # then idle state is released
    released = len(delivery.queues)
    settles = router.heap.settles

    await router.stop()  # unfreezes: cycles that died frozen are garbage again
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        leaked: list[Any] = [o for o in gc.garbage if type(o).__module__.startswith("hookrouter")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert settles > 20, f"only {settles} freezes: the workload did not exercise the settler"
    assert released < 45, "idle tenants' state was never released"
    assert leaked == [], f"{len(leaked)} router objects died in frozen cycles: {leaked[:5]}"
