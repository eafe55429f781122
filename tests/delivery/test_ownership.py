"""Cluster mode's hooks in the engine: a node delivers only the tenants it owns.

``use_ownership`` is what the lease loop feeds (store/postgres/cluster.py);
here ownership is a set the test flips, over the real SQLite ledger and a
real receiver, to show each place the engine asks.
"""

from __future__ import annotations

from typing import Any, cast

from tests.delivery.test_worker import Harness, h, idle, until, url

from hookrouter.config.delivery import DeliverySettings
from hookrouter.delivery.engine import DeliveryEngine
from hookrouter.store.base import DeliveryState
from hookrouter.store.ledger import DeliveryLedger
from hookrouter.store.sqlite.ledger import SqliteLedger

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


class _FailsOnce:
    """The real ledger, except that the first page-in fails as a broken connection can."""

    def __init__(self, ledger: SqliteLedger) -> None:
        self._ledger = ledger
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    async def page_pending(self, *args: Any) -> Any:
        if not self.failed:
            self.failed = True
            raise RuntimeError("cannot switch to state 12; another operation is in progress")
        return await self._ledger.page_pending(*args)


async def test_a_page_in_failing_unexpectedly_does_not_wedge_its_lane(
    h: Harness, receivers: StartReceiver
) -> None:
    """Seen on a database failover: the lane's page-in died and it never asked again."""
    r = await receivers()
    h.tenant(queue_capacity=3, max_in_flight=1)
    h.endpoint("slow", url(r))
    ledger = _FailsOnce(h.ledger)
    engine = DeliveryEngine(
        h.catalog,
        cast(DeliveryLedger, ledger),
        DeliverySettings(allow_private_networks=True, timeout_seconds=2.0),
        clock=h.clock,
    )
    h.engines.append(engine)
    await engine.start(background=False)
    await h.burst(engine, [("acme", ("slow",))] * 20)  # 17 spilled: paged in later
    await until(lambda: ledger.failed and engine.idle(), "the failed page-in over")
    await engine.poll()  # the timer's body: asks the spilling lane again
    await until(lambda: len(r.requests) == 20, "every delivery, after the failure")
