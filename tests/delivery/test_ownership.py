"""Cluster mode's hook in the engine: a node delivers only the tenants it owns.

``use_ownership`` is what the lease loop feeds (store/postgres/cluster.py);
here ownership is a set the test flips, over the real SQLite ledger and a
real receiver, to show each place the engine asks.
"""

from __future__ import annotations

from tests.delivery.test_worker import Harness, h, idle, until, url

from hookrouter.store.base import DeliveryState

from .conftest import StartReceiver

__all__ = ["h"]  # the fixture, shared with test_worker


async def test_only_owned_tenants_are_delivered_and_a_lost_one_is_dropped(
    h: Harness, receivers: StartReceiver
) -> None:
    r = await receivers()
    for tenant in ("acme", "globex"):
        h.tenant(tenant)
        h.endpoint(f"{tenant}-ep", url(r, f"/{tenant}"), tenant=tenant)
    owned = {"acme"}
    engine = await h.engine(start=False)
    engine.use_ownership(owned.__contains__)
    await engine.start(background=False)

    acme = await h.ingest(engine, ("acme-ep",), tenant="acme")
    globex = await h.ingest(engine, ("globex-ep",), tenant="globex")
    await until(lambda: len(r.requests) == 1, "the owned tenant delivered")
    await idle(engine)
    assert [q.path for q in r.requests] == ["/acme"]
    assert (await h.state(globex))[1] == [DeliveryState.PENDING]  # left for its owner
    assert "globex" not in engine.queues

    # The lease moves: acme is lost, globex taken; the node's scan requeues what it now owns.
    owned.clear()
    owned.add("globex")
    engine.ownership_changed()
    for found in await h.ledger.pending_endpoints():
        engine.requeue(found)
    await until(lambda: len(r.requests) == 2, "the taken tenant delivered")
    later = await h.ingest(engine, ("acme-ep",), tenant="acme")
    await idle(engine)
    assert [q.path for q in r.requests] == ["/acme", "/globex"]
    assert (await h.state(acme))[1] == [DeliveryState.DELIVERED]
    assert (await h.state(later))[1] == [DeliveryState.PENDING]


async def test_work_queued_when_the_lease_lapses_is_not_attempted(
    h: Harness, receivers: StartReceiver
) -> None:
    """Ownership checked again when an attempt would start: queued work is dropped, not sent."""
    r = await receivers()
    h.tenant("acme", max_in_flight=1)
    h.endpoint("acme-ep", url(r, "/acme"))
    owned = {"acme"}
    engine = await h.engine(start=False)
    engine.use_ownership(owned.__contains__)
    await engine.start(background=False)
    ids = await h.burst(engine, [("acme", ("acme-ep",))] * 5)  # queued, the pump not run yet
    owned.clear()  # the lease lapses before the pump runs: nothing may start
    await idle(engine)
    assert r.requests == []
    assert engine.not_owned >= 1 and "acme" not in engine.queues
    states = [(await h.state(e))[1] for e in ids]
    assert states == [[DeliveryState.PENDING]] * 5
