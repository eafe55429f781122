"""Delivery state scales with the tenants that have work, not with the catalog (issue 38).

Functional, not timed: each test observes what the engine touches (catalog
scans, store queries, scheduler visits, runtime state) with many idle tenants
beside a few busy ones.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import gc
import ipaddress
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from tests.support.router import free_port

from hookrouter.clock import ManualClock
from hookrouter.config.catalog import Catalog
from hookrouter.config.delivery import DeliverySettings
from hookrouter.config.durations import RetrySchedule
from hookrouter.config.entities import EndpointConfig, TenantConfig
from hookrouter.delivery import endpoints as endpoints_module
from hookrouter.delivery import engine as engine_module
from hookrouter.delivery import metrics as delivery_metrics
from hookrouter.delivery.endpoints import EndpointTable, SharedOrigins
from hookrouter.delivery.engine import DeliveryEngine
from hookrouter.flow.credits import CreditQueue, DeliveryRef
from hookrouter.flow.scheduler import FairScheduler
from hookrouter.ids import new_event_id
from hookrouter.store.base import NewEvent
from hookrouter.store.ledger import DeliveryLedger
from hookrouter.store.sqlite import SqliteStore
from hookrouter.store.sqlite.ledger import SqliteLedger

from .conftest import StartReceiver
from .test_worker import until

if TYPE_CHECKING:
    from tests.support.delivery_servers import Receiver

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()
TENANTS = 300


class CountingDict(dict[str, Any]):
    """A dict that counts full walks (values/items/keys/iteration): catalog scans."""

    scans = 0

    def values(self) -> Any:
        CountingDict.scans += 1
        return super().values()

    def items(self) -> Any:
        CountingDict.scans += 1
        return super().items()

    def keys(self) -> Any:
        CountingDict.scans += 1
        return super().keys()

    def __iter__(self) -> Any:
        CountingDict.scans += 1
        return super().__iter__()


@dataclasses.dataclass
class World:
    store: SqliteStore
    ledger: DeliveryLedger
    clock: ManualClock
    catalog: Catalog
    engines: list[DeliveryEngine]
    last_ms: int = 0
    receiver: Receiver | None = None  # where every endpoint points

    async def engine(self, **settings: Any) -> DeliveryEngine:
        engine = DeliveryEngine(
            lambda: self.catalog,
            self.ledger,
            DeliverySettings(allow_private_networks=True, timeout_seconds=2.0, **settings),
            clock=self.clock,
        )
        self.engines.append(engine)
        await engine.start(background=False)
        return engine

    async def send(self, engine: DeliveryEngine, tenant: str, endpoint: str) -> None:
        self.clock.advance(0.001)
        self.last_ms = max(self.last_ms + 1, int(self.clock.time() * 1000))
        event = NewEvent(
            event_id=new_event_id(self.last_ms),
            tenant_id=tenant,
            source_id="src",
            provider_event_id=None,
            event_type="invoice.paid",
            received_at=self.clock.time(),
            headers={},
            body=b'{"type":"invoice.paid"}',
            endpoint_ids=(endpoint,),
        )
        await self.store.append(event)
        engine.event_committed(event)


@pytest.fixture
async def world(tmp_path: Path, receivers: StartReceiver) -> AsyncIterator[World]:
    clock = ManualClock(wall=time.time())  # receivers check signature timestamps
    store = SqliteStore(tmp_path / "data", clock=clock)
    await store.open()
    r = await receivers()
    url = f"http://127.0.0.1:{r.port}/hook"
    catalog = Catalog(
        [TenantConfig(f"t{i}") for i in range(TENANTS)],
        [],
        [EndpointConfig(f"e{i}", f"t{i}", url, SECRET) for i in range(TENANTS)],
    )
    w = World(store, SqliteLedger(store), clock, catalog, [], receiver=r)
    yield w
    for engine in w.engines:
        await engine.stop(grace=1.0)
    await store.close()


def delivered(engine: DeliveryEngine) -> int:
    return engine.counters["delivered"]


async def test_endpoint_change_relimits_its_tenant_without_scanning_the_catalog(
    world: World,
) -> None:
    engine = await world.engine()
    for i in range(5):
        await world.send(engine, f"t{i}", f"e{i}")
    await until(lambda: delivered(engine) == 5, "5 deliveries")
    # From here on, every walk over all endpoints or tenants is counted.
    world.catalog.endpoints = CountingDict(world.catalog.endpoints)
    world.catalog.tenants = CountingDict(world.catalog.tenants)
    CountingDict.scans = 0
    endpoint = world.catalog.endpoints["e1"]
    world.catalog.put_endpoint(dataclasses.replace(endpoint, max_in_flight=2))
    await world.send(engine, "t1", "e1")  # the next pump picks the change up
    await until(lambda: delivered(engine) == 6, "the 6th delivery")
    assert engine.queues["t1"].endpoint_limits == {"e1": 2}
    assert engine.queues["t2"].endpoint_limits is None  # no endpoint of its own capped
    assert CountingDict.scans == 0, "a change must not walk every tenant or endpoint"


class CountingGets(dict[str, Any]):
    """A dict that counts single-key lookups: catalog reads per attempt."""

    gets = 0

    def get(self, key: str, default: Any = None) -> Any:
        CountingGets.gets += 1
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        CountingGets.gets += 1
        return super().__getitem__(key)


async def test_attempts_of_a_built_endpoint_do_not_look_it_up_in_the_catalog(
    world: World,
) -> None:
    engine = await world.engine()
    await world.send(engine, "t1", "e1")
    await until(lambda: delivered(engine) == 1, "the first delivery")
    world.catalog.endpoints = CountingGets(world.catalog.endpoints)
    CountingGets.gets = 0
    for _ in range(5):
        await world.send(engine, "t1", "e1")
    await until(lambda: delivered(engine) == 6, "5 more deliveries")
    assert CountingGets.gets == 0, "the runtime is current until the catalog names its tenant"


async def test_an_endpoint_change_reaches_its_built_runtime(
    world: World, receivers: StartReceiver
) -> None:
    engine = await world.engine()
    await world.send(engine, "t1", "e1")
    await until(lambda: delivered(engine) == 1, "the first delivery")
    breaker = engine.endpoints.breakers["e1"]
    moved = await receivers()
    endpoint = world.catalog.endpoints["e1"]
    world.catalog.put_endpoint(
        dataclasses.replace(endpoint, url=f"http://127.0.0.1:{moved.port}/hook")
    )
    await world.send(engine, "t1", "e1")
    await until(lambda: delivered(engine) == 2, "the second delivery")
    assert len(moved.requests) == 1, "the new URL, not the runtime's old one"
    assert engine.endpoints.breakers["e1"] is breaker, "an edit keeps the breaker"
    # A tenant's own retry schedule reaches the runtimes of its endpoints too.
    schedule = RetrySchedule((7.0, 11.0))
    world.catalog.put_tenant(
        dataclasses.replace(world.catalog.tenants["t1"], retry_schedule=schedule)
    )
    await world.send(engine, "t1", "e1")
    await until(lambda: delivered(engine) == 3, "the third delivery")
    runtime = engine.endpoints.get(world.catalog, "e1")
    assert runtime is not None and runtime.policy.schedule == schedule


class CountingLedger:
    """The ledger with its ``resume_parked`` calls counted (the compiled class's are read-only)."""

    def __init__(self, inner: DeliveryLedger) -> None:
        self._inner = inner
        self.calls: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def resume_parked(self, tenant_id: str, endpoint_id: str, limit: int) -> Any:
        self.calls.append((tenant_id, endpoint_id))
        return await self._inner.resume_parked(tenant_id, endpoint_id, limit)


async def test_start_asks_the_store_nothing_per_idle_tenant(world: World) -> None:
    counting = CountingLedger(world.ledger)
    calls = counting.calls
    world.ledger = counting  # type: ignore[assignment]
    engine = await world.engine()
    assert calls == [], "nothing is parked: no query per endpoint at start"
    assert engine.queues == {}
    assert engine.endpoints.breakers == {}
    assert engine.scheduler.stats().tenants == 0
    await world.send(engine, "t7", "e7")
    await until(lambda: delivered(engine) == 1, "1 delivery")
    assert set(engine.queues) == {"t7"}
    assert set(engine.endpoints.breakers) == {"e7"}


async def three_idle_tenants(world: World, kept: int | None = None) -> DeliveryEngine:
    """An engine whose tenants t0-t2 each had one delivery and were then seen idle."""
    engine = await world.engine() if kept is None else await world.engine(idle_tenants_kept=kept)
    for i in range(3):
        await world.send(engine, f"t{i}", f"e{i}")
    await until(lambda: delivered(engine) == 3 and engine.idle(), "3 deliveries")
    await engine.poll()  # first seen idle
    assert set(engine.queues) == {"t0", "t1", "t2"}, "a short pause keeps the queue"
    return engine


async def test_idle_tenants_keep_their_state_under_the_bound(world: World) -> None:
    engine = await three_idle_tenants(world)
    world.clock.advance(engine_module.IDLE_RELEASE_SECONDS * 10)
    await engine.poll()
    assert set(engine.queues) == {"t0", "t1", "t2"}, "3 queues are far under the bound"
    assert set(engine.endpoints.breakers) == {"e0", "e1", "e2"}


async def test_idle_queues_beyond_the_bound_are_released(world: World) -> None:
    engine = await three_idle_tenants(world, kept=2)
    world.clock.advance(engine_module.IDLE_RELEASE_SECONDS + 1)
    await engine.poll()
    assert len(engine.queues) == 2, "released down to the bound, no further"
    assert set(engine.endpoints.breakers) == {f"e{t[1:]}" for t in engine.queues}
    summary = engine.summary()  # what an operator tunes the bound by (and /metrics)
    assert (summary["tenant_states_made"], summary["tenant_states_released"]) == (3, 1)
    assert summary["tenants_held"] == 2


async def test_an_idle_tenant_queue_is_released_after_a_while(world: World) -> None:
    engine = await three_idle_tenants(world, kept=0)
    world.clock.advance(engine_module.IDLE_RELEASE_SECONDS + 1)
    await engine.poll()
    assert engine.queues == {}
    assert engine.scheduler.stats().tenants == 0
    assert engine.endpoints.breakers == {} and len(engine.endpoints) == 0, "runtimes go too"
    # What the console shows of an endpoint stays while the endpoint exists.
    assert engine.endpoint_health("e1").health.attempts == 1
    await world.send(engine, "t1", "e1")  # comes back on its next event
    await until(lambda: delivered(engine) == 4, "a 4th delivery")
    assert set(engine.endpoints.breakers) == {"e1"}
    assert (engine.tenant_states_made, engine.tenant_states_released) == (4, 3)


async def test_a_tenant_back_from_its_idle_release_keeps_its_parsed_url_and_keys(
    world: World,
) -> None:
    engine = await three_idle_tenants(world, kept=0)
    signer = engine.endpoints.get(world.catalog, "e1").signer  # type: ignore[union-attr]
    world.clock.advance(engine_module.IDLE_RELEASE_SECONDS + 1)
    await engine.poll()
    assert len(engine.endpoints) == 0, "the runtimes were released"
    assert engine.endpoints.prepared_count() == 3, "what their configs yield stays"
    await world.send(engine, "t1", "e1")
    await until(lambda: delivered(engine) == 4, "a 4th delivery")
    runtime = engine.endpoints.get(world.catalog, "e1")
    assert runtime is not None and runtime.signer is signer, "the key schedule was not redone"


async def test_an_endpoint_changed_while_released_is_signed_with_its_new_secret(
    world: World,
) -> None:
    engine = await three_idle_tenants(world, kept=0)
    world.clock.advance(engine_module.IDLE_RELEASE_SECONDS + 1)
    await engine.poll()
    rotated = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    old = world.catalog.endpoints["e1"]
    world.catalog.put_endpoint(dataclasses.replace(old, secret=rotated))
    await world.send(engine, "t0", "e0")  # any pump applies the change
    await until(lambda: delivered(engine) == 4, "a 4th delivery")
    assert engine.endpoints.prepared_count() == 2, "the old secret's signer is not kept"
    await world.send(engine, "t1", "e1")
    await until(lambda: delivered(engine) == 5, "a 5th delivery")
    assert world.receiver is not None
    last = world.receiver.requests[-1]
    Webhook(rotated).verify(last.body, last.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(last.body, last.headers)


async def test_removing_a_tenant_releases_its_state(world: World) -> None:
    engine = await world.engine()
    for tenant, endpoint in (("t3", "e3"), ("t4", "e4")):
        await world.send(engine, tenant, endpoint)
    await until(lambda: delivered(engine) == 2 and engine.idle(), "2 deliveries")
    assert ("t3", "delivered") in engine.outcome_counts
    world.catalog.remove_endpoint("e3")
    world.catalog.remove_tenant("t3")
    await world.send(engine, "t4", "e4")  # any pump applies the change
    await until(lambda: delivered(engine) == 3, "a 3rd delivery")
    assert "t3" not in engine.queues
    assert "e3" not in engine.endpoints.breakers and "e3" not in engine.endpoints.health
    assert not [key for key in engine.outcome_counts if key[0] == "t3"]
    assert ("t3",) not in delivery_metrics.LATENCY._cells
    assert "t4" in engine.queues and "e4" in engine.endpoints.breakers


def test_scheduler_visits_only_tenants_with_work() -> None:
    scheduler = FairScheduler()
    visits = 0
    queues = [CreditQueue(f"t{i}", 100) for i in range(2000)]
    for queue in queues:
        scheduler.add(queue)
        original = queue.has_ready

        def counted(original: Callable[[], bool] = original) -> bool:
            nonlocal visits
            visits += 1
            return original()

        try:
            queue.has_ready = counted  # type: ignore[method-assign]
        except AttributeError:  # compiled CreditQueue: no instance attributes
            pytest.skip("needs the interpreted CreditQueue")
    busy = queues[5]
    for n in range(20):
        busy.offer(DeliveryRef(f"evt_{n:04d}", "ep"))
    for _ in range(20):
        [work] = scheduler.next_batch(1)
        busy.finish(work.ref)
    assert visits <= 40, f"{visits} visits for 20 deliveries of one busy tenant"


async def test_tenant_series_are_bounded(world: World) -> None:
    engine = await world.engine()
    engine.series_limit = 2
    for i in range(4):
        await world.send(engine, f"t{i}", f"e{i}")
    await until(lambda: delivered(engine) == 4, "4 deliveries")
    tenants = {tenant for tenant, _ in engine.outcome_counts}
    assert tenants == {"t0", "t1", delivery_metrics.OTHER_TENANTS}
    assert engine.outcome_counts[(delivery_metrics.OTHER_TENANTS, "delivered")].value == 2


async def test_the_latency_histogram_labels_fewer_tenants_than_the_counters(world: World) -> None:
    """16 series a tenant: its own, smaller bound keeps the metric near the others' size."""
    engine = await world.engine()
    engine.series_limit, engine.latency_limit = 3, 1
    for i in range(4):
        await world.send(engine, f"h{i}", f"e{i}")
    await until(lambda: delivered(engine) == 4, "4 deliveries")
    counted = {tenant for tenant, _ in engine.outcome_counts}
    assert counted == {"h0", "h1", "h2", delivery_metrics.OTHER_TENANTS}
    own = {values[0] for values, _ in delivery_metrics.LATENCY.cells()} & {"h0", "h1", "h2"}
    assert len(own) == 1  # the first to be delivered (any of the counted three)
    assert delivery_metrics.LATENCY.peek(delivery_metrics.OTHER_TENANTS) is not None


def test_endpoints_with_one_retry_schedule_share_its_policy() -> None:
    """A first event per endpoint builds no policy of its own when the schedule is shared."""
    url = "http://127.0.0.1:9/hook"
    own = RetrySchedule((1.0, 2.0))
    catalog = Catalog(
        [TenantConfig("t")],
        (),
        [
            EndpointConfig("a", "t", url, SECRET),
            EndpointConfig("b", "t", url, SECRET),
            EndpointConfig("c", "t", url, SECRET, retry_schedule=own),
        ],
    )
    settings = DeliverySettings(allow_private_networks=True)
    table = EndpointTable(settings)
    a, b, c = (table.get(catalog, e) for e in ("a", "b", "c"))
    assert a is not None and b is not None and c is not None
    assert a.policy is b.policy
    assert a.policy.schedule == settings.retry_schedule
    assert c.policy.schedule == own


def test_endpoints_at_one_place_share_its_origin_until_the_address_changes() -> None:
    """A first attempt at a host other endpoints already use makes no origin of its own."""
    catalog = Catalog(
        [TenantConfig("t"), TenantConfig("u")],
        (),
        [
            EndpointConfig("a", "t", "http://hooks.example:8080/a", SECRET),
            EndpointConfig("b", "u", "http://hooks.example:8080/b?x=1", SECRET),
            EndpointConfig("c", "u", "http://hooks.example:8081/c", SECRET),
        ],
    )
    table = EndpointTable(DeliverySettings(allow_private_networks=True))
    a, b, c = (table.get(catalog, e) for e in ("a", "b", "c"))
    assert a is not None and b is not None and c is not None
    address = ipaddress.ip_address("192.0.2.7")
    assert b.origin(address) is a.origin(address)
    assert c.origin(address) is not a.origin(address)  # another port, another pool
    assert c.origin(address).port == 8081
    # The resolver's next lookup (a new address object, maybe another address) is dialled.
    moved = ipaddress.ip_address("192.0.2.8")
    assert b.origin(moved).address == "192.0.2.8"
    assert a.origin(moved) is b.origin(moved)
    assert len(table.origins) == 2


def test_shared_origins_keep_the_places_in_use_past_their_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More places than the bound: the least recently used goes, a busy one stays shared."""
    monkeypatch.setattr(endpoints_module, "ORIGINS_KEPT", 4)
    origins = SharedOrigins()
    address = ipaddress.ip_address("192.0.2.7")
    busy = origins.get("http", "busy.example", 80, address)
    for n in range(20):  # a stream of endpoints at hosts of their own
        origins.get("http", f"h{n}.example", 80, address)
        assert origins.get("http", "busy.example", 80, address) is busy
    assert len(origins) == 4
    assert ("http", "busy.example", 80) in origins
    assert ("http", "h0.example", 80) not in origins
    assert origins.evicted == 17


class CountedLookups(dict[str, Any]):
    """A dict that counts its single-key reads and membership tests."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.reads = 0

    def get(self, key: Any, default: Any = None) -> Any:
        self.reads += 1
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.reads += 1
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.reads += 1
        return super().__contains__(key)


class CountedSet(set[str]):
    reads = 0

    def __contains__(self, key: object) -> bool:
        self.reads += 1
        return super().__contains__(key)


async def test_a_warm_event_looks_its_tenant_up_once(world: World) -> None:
    if not engine_module.__file__.endswith(".py"):
        # Compiled code reads a dict through the C API, past a subclass's methods.
        pytest.skip("needs the interpreted engine")
    engine = await world.engine()
    await world.send(engine, "t1", "e1")
    await until(lambda: delivered(engine) == 1 and engine.idle(), "the first delivery")
    # Every per-tenant and per-endpoint dict an event used to read, counted: a
    # warm event reaches what it needs of them through its tenant's record.
    table, latency = engine.endpoints, delivery_metrics.LATENCY
    cells = latency._cells
    counted = {
        "breakers": CountedLookups(table.breakers),
        "health": CountedLookups(table.health),
        "runtimes": CountedLookups(table._runtimes),
        "backlog": CountedLookups(engine._backlog),
        "queues": CountedLookups(engine.queues),
        "scheduler": CountedLookups(engine.scheduler._entries),
        "latency": CountedLookups(cells),
        "outcomes": CountedLookups(engine.outcome_counts),
    }
    table.breakers, table.health = counted["breakers"], counted["health"]
    table._runtimes, engine._backlog = counted["runtimes"], counted["backlog"]
    engine.queues, engine.scheduler._entries = counted["queues"], counted["scheduler"]
    latency._cells = counted["latency"]  # type: ignore[assignment]
    engine.outcome_counts = counted["outcomes"]
    labelled = engine.labelled = CountedSet(engine.labelled)
    records = engine._tenants = CountedLookups(engine._tenants)
    try:
        for _ in range(5):
            await world.send(engine, "t1", "e1")
            await until(engine.idle, "the delivery")
    finally:
        latency._cells = cells
    assert delivered(engine) == 6
    assert {name: d.reads for name, d in counted.items() if d.reads} == {}
    assert labelled.reads == 0
    assert records.reads == 5, "one lookup per event: its tenant's record"


async def test_a_released_tenant_record_leaves_its_backlog_count(world: World) -> None:
    closed = free_port()  # nothing listens: each attempt fails, the delivery stays open
    endpoint = world.catalog.endpoints["e1"]
    world.catalog.put_endpoint(dataclasses.replace(endpoint, url=f"http://127.0.0.1:{closed}/hook"))
    engine = await world.engine()
    engine.use_ownership(lambda tenant: True)
    await world.send(engine, "t1", "e1")
    await until(lambda: engine.counters["retried"] == 1 and engine.idle(), "a failed attempt")
    assert engine.backlog("t1") == 1
    engine.use_ownership(lambda tenant: tenant != "t1")
    engine.ownership_changed()  # the tenant's queue and record go
    assert "t1" not in engine.queues
    assert engine.backlog("t1") == 1, "its open delivery is still counted"
    engine.use_ownership(lambda tenant: True)
    await world.send(engine, "t1", "e1")  # a new record takes the count over
    assert engine.backlog("t1") == 2


def backlog_admission(world: World, engine: DeliveryEngine, max_backlog: int) -> Any:
    """Admission in front of ``engine`` for tenant t1, with a Stripe source (a sender
    that retries, so a full backlog is shed) and ``max_backlog``."""
    from hookrouter.config.entities import SourceConfig
    from hookrouter.ingress.admission import BacklogAdmission

    world.catalog.put_tenant(TenantConfig("t1", max_backlog=max_backlog))
    world.catalog.put_source(SourceConfig("s1", "t1", "stripe", ("whsec_test",)))
    return BacklogAdmission(engine.backlog, world.clock, backlog_count=engine.backlog_count)


async def failing_deliveries(world: World, engine: DeliveryEngine, count: int) -> None:
    failed = engine.counters["retried"] + count
    for _ in range(count):
        await world.send(engine, "t1", "e1")
    await until(lambda: engine.counters["retried"] == failed and engine.idle(), "failed attempts")


async def test_admission_reads_a_warm_tenants_backlog_without_a_lookup(world: World) -> None:
    if not engine_module.__file__.endswith(".py"):
        pytest.skip("needs the interpreted engine (compiled code reads dicts past a subclass)")
    closed = free_port()  # nothing listens: each attempt fails, the delivery stays open
    endpoint = world.catalog.endpoints["e1"]
    world.catalog.put_endpoint(dataclasses.replace(endpoint, url=f"http://127.0.0.1:{closed}/hook"))
    engine = await world.engine()
    admission = backlog_admission(world, engine, max_backlog=3)
    await failing_deliveries(world, engine, 2)
    live = world.catalog.sources["s1"]
    assert admission.check(live) is None  # 2 < 3, and the engine's count is kept
    records = engine._tenants = CountedLookups(engine._tenants)
    backlogs = engine._backlog = CountedLookups(engine._backlog)
    for _ in range(5):
        assert admission.check(live) is None
    await failing_deliveries(world, engine, 3)
    shed = admission.check(live)
    assert shed is not None and not isinstance(shed, asyncio.Future)
    assert shed.reason == "backlog_full"
    assert records.reads == 3 and backlogs.reads == 0, "the engine's own lookups only"


async def test_admission_lets_go_of_a_released_tenant_count(world: World) -> None:
    closed = free_port()
    endpoint = world.catalog.endpoints["e1"]
    world.catalog.put_endpoint(dataclasses.replace(endpoint, url=f"http://127.0.0.1:{closed}/hook"))
    engine = await world.engine()
    engine.use_ownership(lambda tenant: True)
    admission = backlog_admission(world, engine, max_backlog=3)
    await failing_deliveries(world, engine, 2)
    live = world.catalog.sources["s1"]
    assert admission.check(live) is None  # 2 < 3: the count it read is kept
    queue = engine.queues["t1"]
    engine.use_ownership(lambda tenant: tenant != "t1")
    engine.ownership_changed()  # the tenant's record is released, its count kept
    holders = [type(r).__name__ for r in gc.get_referrers(queue)]
    assert "_Tenant" not in holders, "the released record (and its queue) is freed"
    engine.use_ownership(lambda tenant: True)
    await world.send(engine, "t1", "e1")  # a new record takes the count over: 3
    shed = admission.check(live)
    assert shed is not None and not isinstance(shed, asyncio.Future), "the released count said 2"
    assert shed.reason == "backlog_full"
