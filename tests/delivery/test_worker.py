"""The delivery engine end to end: real SQLite store, real receivers on 127.0.0.1.

Retry timing is driven by a ManualClock (``engine.poll()`` is the timer's
body); waiting is only ever for real I/O to finish, never for a timeout.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import sqlite3
import statistics
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from standardwebhooks.webhooks import Webhook
from tests.support.delivery_servers import Received, Receiver, Reply
from tests.support.redis_servers import redis_server

from hookrouter.clock import ManualClock
from hookrouter.config.catalog import Catalog
from hookrouter.config.delivery import BreakerSettings, DeliverySettings
from hookrouter.config.durations import RetrySchedule
from hookrouter.config.entities import EndpointConfig, TenantConfig
from hookrouter.delivery import engine as engine_module
from hookrouter.delivery.engine import DeliveryEngine
from hookrouter.errors import StoreUnavailable
from hookrouter.flow.credits import DeliveryRef
from hookrouter.ids import new_event_id
from hookrouter.metrics import REGISTRY, render
from hookrouter.ratelimit import Limit, LocalBucketLimiter
from hookrouter.ratelimit.redis_calls import BucketCaller, make_client
from hookrouter.ratelimit.redis_limiter import RedisBucketLimiter
from hookrouter.store.base import DeliveryState, EventStatus, NewEvent
from hookrouter.store.ledger import DeliveryWork, OutcomeRecord, ReplayFilter, Resumed
from hookrouter.store.sqlite import SqliteStore
from hookrouter.store.sqlite.ledger import SqliteLedger

from .conftest import StartReceiver

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()


@dataclass
class Harness:
    store: SqliteStore
    ledger: SqliteLedger
    clock: ManualClock
    tenants: list[TenantConfig] = field(default_factory=list)
    endpoints: list[EndpointConfig] = field(default_factory=list)
    engines: list[DeliveryEngine] = field(default_factory=list)
    sent: int = 0
    announced_at: float = 0.0
    last_ms: int = 0

    def catalog(self) -> Catalog:
        return Catalog(self.tenants, [], self.endpoints)

    def tenant(self, tenant_id: str = "acme", **kw: Any) -> None:
        self.tenants.append(TenantConfig(tenant_id, **kw))

    def endpoint(self, endpoint_id: str, url: str, tenant: str = "acme", **kw: Any) -> None:
        self.endpoints.append(EndpointConfig(endpoint_id, tenant, url, SECRET, **kw))

    async def engine(self, *, start: bool = True, **settings: Any) -> DeliveryEngine:
        settings.setdefault("allow_private_networks", True)
        settings.setdefault("timeout_seconds", 2.0)
        engine = DeliveryEngine(
            self.catalog, self.ledger, DeliverySettings(**settings), clock=self.clock
        )
        self.engines.append(engine)
        if start:
            await engine.start(background=False)
        return engine

    async def ingest(
        self, engine: DeliveryEngine | None, endpoints: tuple[str, ...], tenant: str = "acme"
    ) -> str:
        [event_id] = await self.burst(engine, [(tenant, endpoints)])
        return event_id

    async def burst(
        self, engine: DeliveryEngine | None, specs: list[tuple[str, tuple[str, ...]]]
    ) -> list[str]:
        """Commit all events first, then announce them together, as a burst arrives."""
        events = [self._event(tenant, endpoints) for tenant, endpoints in specs]
        await asyncio.gather(*(self.store.append(e) for e in events))
        self.announced_at = time.monotonic()  # "acknowledged": ack-to-delivery starts here
        if engine is not None:
            for event in events:
                engine.event_committed(event)
        return [e.event_id for e in events]

    def _event(self, tenant: str, endpoints: tuple[str, ...]) -> NewEvent:
        self.sent += 1
        # One event per millisecond, counted in integers (float sums of 0.001 can
        # land two events in one millisecond, whose ids then sort randomly).
        self.clock.advance(0.001)
        self.last_ms = max(self.last_ms + 1, int(self.clock.time() * 1000))
        return NewEvent(
            event_id=new_event_id(self.last_ms),
            tenant_id=tenant,
            source_id="src",
            provider_event_id=None,
            event_type="invoice.paid",
            received_at=self.clock.time(),
            headers={},
            body=b'{"type":"invoice.paid","n":%d}' % self.sent,
            endpoint_ids=endpoints,
        )

    async def state(self, event_id: str) -> tuple[EventStatus, list[DeliveryState]]:
        await self.ledger.record([])  # outcomes queued so far are durable
        record = await self.store.get_event(event_id)
        assert record is not None
        return record.status, [d.state for d in record.deliveries]


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    clock = ManualClock(wall=time.time())  # receivers check signature timestamps
    store = SqliteStore(tmp_path / "data", clock=clock)
    await store.open()
    harness = Harness(store, SqliteLedger(store), clock)
    yield harness
    for engine in harness.engines:
        await engine.stop(grace=1.0)
    await store.close()


async def until(cond: Callable[[], bool], what: str, limit: float = 2.5) -> None:
    """Wait for real I/O (not a timeout) to make ``cond`` true."""
    for _ in range(int(limit / 0.005)):
        if cond():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


async def idle(engine: DeliveryEngine) -> None:
    await until(engine.idle, "engine idle")


def url(r: Receiver, path: str = "/hook") -> str:
    return f"http://127.0.0.1:{r.port}{path}"


async def test_delivers_signed_events_and_records_them(
    h: Harness, receivers: StartReceiver
) -> None:
    r = await receivers()
    h.tenant()
    h.endpoint("orders", url(r, "/hook?x=1"))
    engine = await h.engine()
    ids = [await h.ingest(engine, ("orders",)) for _ in range(3)]
    await until(lambda: len(r.requests) == 3, "3 deliveries")
    await idle(engine)
    for req in r.requests:
        assert req.path == "/hook?x=1"
        Webhook(SECRET).verify(req.body, req.headers)  # raises if the signature is wrong
    assert sorted(q.headers["webhook-id"] for q in r.requests) == sorted(ids)  # concurrent
    status, states = await h.state(ids[0])
    assert (status, states) == (EventStatus.DELIVERED, [DeliveryState.DELIVERED])
    record = await h.store.get_event(ids[0])
    assert record is not None and record.deliveries[0].history[0].status_code == 200
    assert engine.stats()["delivered"] == 3 and engine.stats()["cached_bodies"] == 0


async def test_retry_follows_the_schedule_on_the_manual_clock(
    h: Harness, receivers: StartReceiver
) -> None:
    answers = iter([500, 500, 200])
    r = await receivers(lambda req: Reply(status=next(answers)))
    h.tenant()
    h.endpoint("orders", url(r), retry_schedule=RetrySchedule((1.0, 10.0)))
    engine = await h.engine()
    event_id = await h.ingest(engine, ("orders",))
    await until(lambda: len(r.requests) == 1, "first attempt")
    await idle(engine)
    await h.ledger.record([])  # the outcome is durable
    record = await h.store.get_event(event_id)
    assert record is not None
    delivery = record.deliveries[0]
    assert delivery.state is DeliveryState.RETRY and delivery.attempts == 1
    assert delivery.next_attempt_at is not None
    assert 0.8 <= delivery.next_attempt_at - h.clock.time() <= 1.2  # 1 s +/- 20 %
    await engine.poll()  # not due yet
    await idle(engine)
    assert len(r.requests) == 1
    h.clock.advance(1.25)
    await engine.poll()
    await until(lambda: len(r.requests) == 2, "second attempt")
    await idle(engine)
    h.clock.advance(5)
    await engine.poll()
    await idle(engine)
    assert len(r.requests) == 2, "the 10 s step must not fire after 5 s"
    h.clock.advance(7.5)  # 12.5 s after the 2nd attempt: past 10 s + 20 %
    await engine.poll()
    await until(lambda: len(r.requests) == 3, "third attempt")
    await idle(engine)
    assert await h.state(event_id) == (EventStatus.DELIVERED, [DeliveryState.DELIVERED])


async def test_dead_letter_then_replay(h: Harness, receivers: StartReceiver) -> None:
    healthy = False
    r = await receivers(lambda req: Reply(status=200 if healthy else 502))
    h.tenant()
    h.endpoint("orders", url(r), retry_schedule=RetrySchedule((1.0,)))
    engine = await h.engine()
    event_id = await h.ingest(engine, ("orders",))
    await until(lambda: len(r.requests) == 1, "first attempt")
    await idle(engine)
    h.clock.advance(2)
    await engine.poll()
    await until(lambda: len(r.requests) == 2, "last attempt")
    await idle(engine)
    assert await h.state(event_id) == (EventStatus.FAILED, [DeliveryState.DEAD])
    healthy = True
    assert await engine.replay(ReplayFilter(event_id=event_id)) == 1
    await until(lambda: len(r.requests) == 3, "replayed attempt")
    await idle(engine)
    assert await h.state(event_id) == (EventStatus.DELIVERED, [DeliveryState.DELIVERED])


async def test_410_disables_the_endpoint(h: Harness, receivers: StartReceiver) -> None:
    r = await receivers(lambda req: Reply(status=410))
    h.tenant()
    h.endpoint("gone", url(r))
    engine = await h.engine()
    first = await h.ingest(engine, ("gone",))
    await until(lambda: len(r.requests) == 1, "attempt")
    await idle(engine)
    second = await h.ingest(engine, ("gone",))
    await idle(engine)
    assert len(r.requests) == 1, "no more requests to a 410 endpoint"
    for event_id in (first, second):
        assert await h.state(event_id) == (EventStatus.FAILED, [DeliveryState.DISABLED])


async def test_retry_after_on_429_is_honoured(h: Harness, receivers: StartReceiver) -> None:
    r = await receivers(lambda req: Reply(status=429, headers=[("retry-after", "120")]))
    h.tenant()
    h.endpoint("busy", url(r))
    engine = await h.engine()
    event_id = await h.ingest(engine, ("busy",))
    await until(lambda: len(r.requests) == 1, "attempt")
    await idle(engine)
    await h.ledger.record([])
    record = await h.store.get_event(event_id)
    assert record is not None and record.deliveries[0].next_attempt_at == h.clock.time() + 120


async def test_breaker_parks_then_probes_then_resumes(h: Harness, receivers: StartReceiver) -> None:
    healthy = False
    r = await receivers(lambda req: Reply(status=200 if healthy else 503))
    h.tenant()
    h.endpoint("flaky", url(r))
    breaker = BreakerSettings(
        failure_ratio=0.5, window_seconds=30, min_requests=2, cooldown_seconds=5
    )
    engine = await h.engine(breaker=breaker)
    for _ in range(2):
        await h.ingest(engine, ("flaky",))
        await idle(engine)
    assert engine.stats()["breakers"]["flaky"].state.value == "open"
    admitted = engine.stats()["tenants"]["acme"].admitted_total
    parked = [await h.ingest(engine, ("flaky",)) for _ in range(5)]
    await idle(engine)
    assert len(r.requests) == 2, "an open breaker sends nothing"
    assert engine.stats()["tenants"]["acme"].admitted_total == admitted, "no credit, no slot"
    for event_id in parked:
        assert (await h.state(event_id))[1] == [DeliveryState.PARKED]
    assert engine.stats()["tenants"]["acme"].credits_used == 0, "parked work holds no credit"
    healthy = True
    h.clock.advance(5)
    await engine.poll()  # cooldown over: half-open, one parked delivery is the probe
    # 2 failed attempts (the 2nd tripped the breaker and was parked) + the probe
    # + the other 5 parked ones resumed once the probe closed the breaker.
    await until(lambda: len(r.requests) >= 8, "all parked deliveries resumed")
    await idle(engine)
    assert engine.stats()["breakers"]["flaky"].state.value == "closed"
    for event_id in parked:
        assert await h.state(event_id) == (EventStatus.DELIVERED, [DeliveryState.DELIVERED])
    # The endpoint's health: every attempt made, and the breaker's history, newest first.
    report = engine.endpoint_health("flaky")
    health = report.health
    assert health.attempts == len(r.requests) and health.attempts - health.successes == 2
    assert report.health.p99_ms is not None
    assert [(t.before.value, t.after.value, t.signal.value) for t in report.history] == [
        ("half_open", "closed", "probe_succeeded"),
        ("open", "half_open", "cooldown_elapsed"),
        ("closed", "open", "trip"),
    ]


async def test_spill_keeps_memory_bounded_and_order(h: Harness, receivers: StartReceiver) -> None:
    order: list[bytes] = []

    def handler(req: Received) -> Reply:
        order.append(req.body)
        return Reply(status=204, body=b"")

    r = await receivers(handler)
    h.tenant(queue_capacity=3, max_in_flight=1)
    h.endpoint("slow", url(r))
    engine = await h.engine()
    await h.burst(engine, [("acme", ("slow",))] * 40)
    assert engine.stats()["tenants"]["acme"].spilled == 37
    await until(lambda: len(order) >= 40, "all 40 delivered")
    await idle(engine)
    stats = engine.stats()["tenants"]["acme"]
    assert stats.peak_used <= 3 and not stats.spilling
    assert stats.admitted_total == 40, "each delivery is admitted exactly once"
    assert order == [b'{"type":"invoice.paid","n":%d}' % i for i in range(1, 41)]


async def test_restart_delivers_what_was_committed_but_not_delivered(
    h: Harness, receivers: StartReceiver
) -> None:
    r = await receivers()
    h.tenant()
    h.endpoint("orders", url(r))
    ids = [await h.ingest(None, ("orders",)) for _ in range(5)]  # "crashed" before delivery
    engine = await h.engine()
    await until(lambda: len(r.requests) == 5, "recovered deliveries")
    await idle(engine)
    assert sorted(q.headers["webhook-id"] for q in r.requests) == sorted(ids)


async def _stored_unsettled(
    h: Harness, receivers: StartReceiver
) -> tuple[Receiver, DeliveryEngine, NewEvent]:
    """An event announced to the engine and stored; its commit not yet reported."""
    r = await receivers()
    h.tenant()
    h.endpoint("orders", url(r))
    engine = await h.engine()
    event = h._event("acme", ("orders",))
    engine.event_appending(event)
    await h.store.append(event)
    return r, engine, event


async def test_an_event_paged_in_before_its_own_offer_is_delivered_once(
    h: Harness, receivers: StartReceiver
) -> None:
    """A page may list an event this node committed before the commit's listener ran.

    Seen in cluster mode (a work notice from another node pages the lane in
    between): the page delivered the event, then the late offer admitted it
    again, and the receiver got it twice a few ms apart.
    """
    r, engine, event = await _stored_unsettled(h, receivers)  # not yet reported
    ref = DeliveryRef(event.event_id, "orders")
    engine.requeue(Resumed("acme", "orders", 1, ref))  # e.g. another node's notice
    await idle(engine)
    engine.event_committed(event)
    await idle(engine)
    await until(lambda: len(r.requests) >= 1, "the delivery")
    await h.state(event.event_id)  # every outcome written, nothing left to run
    await idle(engine)
    assert [q.headers["webhook-id"] for q in r.requests] == [event.event_id]
    assert await h.state(event.event_id) == (EventStatus.DELIVERED, [DeliveryState.DELIVERED])


async def test_an_event_not_stored_is_not_held_back_from_pages(
    h: Harness, receivers: StartReceiver
) -> None:
    """A failed or duplicate append says so: nothing waits for an offer that never comes."""
    r, engine, event = await _stored_unsettled(h, receivers)
    engine.event_not_stored(event)  # as if its commit had failed after the write landed
    engine.requeue(Resumed("acme", "orders", 1, DeliveryRef(event.event_id, "orders")))
    await until(lambda: len(r.requests) == 1, "the paged delivery")
    await idle(engine)
    assert engine.stats()["delivered"] == 1


async def test_an_append_never_settled_is_paged_in_after_a_while(
    h: Harness, receivers: StartReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    """A path that announced an append and never settled it must not strand the event."""
    r, engine, event = await _stored_unsettled(h, receivers)  # never reported
    engine.requeue(Resumed("acme", "orders", 1, DeliveryRef(event.event_id, "orders")))
    await idle(engine)
    assert r.requests == [] and engine.stats()["offers_due"] == 1  # passed over, as due
    h.clock.advance(engine_module.OFFER_DUE_SECONDS)
    await engine.poll()
    await until(lambda: len(r.requests) == 1, "the stranded delivery")
    assert engine.stats()["offers_due"] == 0
    assert "never reported committed or not stored" in caplog.text


class FailingLoads:
    """A ledger whose first ``failures`` body loads fail as a store outage would."""

    def __init__(self, inner: SqliteLedger, failures: int) -> None:
        self._inner = inner
        self.failures = failures

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def load(self, refs: Sequence[DeliveryRef]) -> list[DeliveryWork]:
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("disk I/O error (injected)")
        return await self._inner.load(refs)


async def test_a_failed_body_load_is_paged_in_again_not_stuck(
    h: Harness, receivers: StartReceiver
) -> None:
    """Deliveries whose bodies could not be read go back to the store and come back.

    Until the credit lanes, the page-in request this raised was dropped: the
    queue then waited forever for an answer, and the tenant stopped delivering.
    """
    r = await receivers()
    h.tenant()
    h.endpoint("orders", url(r))
    ids = [await h.ingest(None, ("orders",)) for _ in range(5)]  # bodies not cached: loaded
    h.ledger = cast(SqliteLedger, FailingLoads(h.ledger, failures=1))
    engine = await h.engine()
    await until(lambda: len(r.requests) == 5, "deliveries after the failed load")
    await idle(engine)
    assert sorted(q.headers["webhook-id"] for q in r.requests) == sorted(ids)
    assert cast(FailingLoads, h.ledger).failures == 0


async def test_ssrf_refusal_is_a_failed_attempt_and_nothing_is_sent(
    h: Harness, receivers: StartReceiver
) -> None:
    r = await receivers()
    h.tenant()
    h.endpoint("internal", url(r))
    engine = await h.engine(allow_private_networks=False)
    event_id = await h.ingest(engine, ("internal",))
    await idle(engine)
    assert r.requests == []
    record = await h.store.get_event(event_id)
    await h.ledger.record([])
    record = await h.store.get_event(event_id)
    assert record is not None
    assert record.deliveries[0].state is DeliveryState.RETRY
    assert record.deliveries[0].last_error == "destination_refused"


async def test_fair_share_between_a_flooding_tenant_and_a_small_one(
    h: Harness, receivers: StartReceiver
) -> None:
    r = await receivers(lambda req: Reply(status=204, body=b""))
    h.tenant("big", queue_capacity=500)
    h.tenant("small", queue_capacity=50)
    h.endpoint("big-ep", url(r, "/big"), tenant="big")
    h.endpoint("small-ep", url(r, "/small"), tenant="small")
    engine = await h.engine(workers=4)
    await h.burst(engine, [("big", ("big-ep",))] * 300 + [("small", ("small-ep",))] * 10)
    await until(lambda: len(r.requests) == 310, "all delivered")
    await idle(engine)
    small_done = max(i for i, q in enumerate(r.requests) if q.path == "/small")
    assert small_done < 60, f"the small tenant waited behind the flood ({small_done})"


ROUNDS = 5


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def test_isolation_a_hung_endpoint_does_not_slow_another_tenant(
    h: Harness, receivers: StartReceiver
) -> None:
    """Tenant A's endpoint accepts and never answers; tenant B's answers at once."""
    a_healthy = False
    arrived: dict[str, float] = {}

    def b_handler(req: Received) -> Reply:
        arrived[req.headers["webhook-id"]] = time.monotonic()
        return Reply(status=204, body=b"")

    # One hung endpoint per round, so that every hung round meets A's fault
    # fresh (a closed breaker, attempts hanging until they time out); its
    # timeouts then open that endpoint's breaker and park the rest.
    hung_eps = [f"a-ep-{i}" for i in range(ROUNDS)]
    hung_receivers = [
        await receivers(lambda req: Reply(status=200, hang=not a_healthy)) for _ in hung_eps
    ]
    a_ok = await receivers(lambda req: Reply(status=204, body=b""))
    b = await receivers(b_handler)
    h.tenant("ten-a", queue_capacity=50, max_in_flight=8)
    # B's queue holds its burst: this measures isolation, not B's own spill path
    # (page-ins queue behind group commits; test_spill_* covers that path).
    h.tenant("ten-b", queue_capacity=200, max_in_flight=8)
    for endpoint_id, receiver in zip(hung_eps, hung_receivers, strict=True):
        h.endpoint(endpoint_id, url(receiver), tenant="ten-a")
    h.endpoint("a-ok", url(a_ok), tenant="ten-a")  # A without its fault: same work, no hang
    h.endpoint("b-ep", url(b), tenant="ten-b")
    breaker = BreakerSettings(
        failure_ratio=0.5, window_seconds=30, min_requests=5, cooldown_seconds=5
    )
    engine = await h.engine(timeout_seconds=0.3, breaker=breaker, workers=32)

    async def b_latencies(specs: list[tuple[str, tuple[str, ...]]]) -> list[float]:
        ids = await h.burst(engine, specs)
        b_ids = [i for i, (t, _) in zip(ids, specs, strict=True) if t == "ten-b"]
        await until(lambda: all(i in arrived for i in b_ids), "B delivered")
        return [arrived[i] - h.announced_at for i in b_ids]

    without_fault = [("ten-a", ("a-ok",)), ("ten-b", ("b-ep",))] * 200
    # Rounds alternate the same burst without A's fault (A's events go to a
    # healthy endpoint, as the "same run without A's fault") and with
    # it; medians of the p99s keep a noisy round or two from deciding. Each
    # round starts from an idle engine: otherwise a hung round's timeouts (0.3 s
    # later) and the A backlog they release land inside a later round, which
    # then measures two rounds' work at once.
    await b_latencies(without_fault)  # warm-up (connections, caches): not counted
    await idle(engine)
    healthy, hung = [], []
    for endpoint_id in hung_eps:
        healthy.append(p99(await b_latencies(without_fault)))
        await idle(engine)
        hung.append(p99(await b_latencies([("ten-a", (endpoint_id,)), ("ten-b", ("b-ep",))] * 200)))
        await idle(engine)
    base, fault = statistics.median(healthy) * 1e3, statistics.median(hung) * 1e3
    print(f"isolation: B p99 {base:.1f} ms without A's fault, {fault:.1f} ms with A hung")
    # 1.25x is the bar; 10 ms absorbs scheduler noise on this shared 2-core VM.
    assert fault <= 1.25 * base + 10, (healthy, hung)
    await idle(engine)  # A's hung attempts timed out, the rest of its burst is parked
    a_stats = engine.stats()["tenants"]["ten-a"]
    assert a_stats.peak_used <= 50 and a_stats.credits_used == 0, "A's memory stays bounded"
    a_healthy = True
    h.clock.advance(5)
    await engine.poll()

    def a_recovered() -> bool:
        breakers = engine.stats()["breakers"]
        return all(breakers[e].state.value == "closed" for e in hung_eps)

    await until(a_recovered, "A recovers")
    for _ in range(200):  # A's timed-out attempts retry on the schedule (5 s +/- 20 %)
        if engine.stats()["delivered"] >= 4400:  # B's 2200, A's 1200 on a-ok and 1000 hung
            break
        h.clock.advance(1)
        await engine.poll()
        await asyncio.sleep(0.01)
    await idle(engine)
    await h.ledger.record([])
    counts = await h.ledger.state_counts()
    assert counts.get(("ten-a", DeliveryState.DELIVERED)) == 2200, counts
    assert counts.get(("ten-b", DeliveryState.DELIVERED)) == 2200, counts


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["slow", "hung"])
async def test_a_sibling_endpoint_never_waits_for_a_slow_or_hung_one(
    h: Harness, receivers: StartReceiver, fault: str
) -> None:
    """One tenant, two endpoints: one answers in 0.5 s (or never), the other at once.

    Before each endpoint had its own credit lane and slot share, the fast one
    was paced by the slow one (p99 6.0 s for 100 events beside 100 slow ones:
    the slow attempts took every slot as it freed, and its backlog held the
    credits and the page-in cursor).
    """
    arrived: dict[str, float] = {}

    def fast_handler(req: Received) -> Reply:
        arrived[req.headers["webhook-id"]] = time.monotonic()
        return Reply(status=204, body=b"")

    slow_reply = Reply(status=200, delay=0.5) if fault == "slow" else Reply(status=200, hang=True)
    slow = await receivers(lambda req: slow_reply)
    fast = await receivers(fast_handler)
    # The slow endpoint's burst comes first and takes every credit; the fast
    # one's then takes its share by evicting queued slow work (it waits in the store).
    h.tenant(queue_capacity=30, max_in_flight=8)
    h.endpoint("slow", url(slow))
    h.endpoint("fast", url(fast))
    engine = await h.engine(timeout_seconds=3.0)
    specs = [("acme", ("slow",))] * 30 + [("acme", ("fast",))] * 100
    ids = await h.burst(engine, specs)
    fast_ids = [i for i, (_, eps) in zip(ids, specs, strict=True) if eps == ("fast",)]
    await until(lambda: all(i in arrived for i in fast_ids), "fast endpoint delivered", 10)
    latencies = [arrived[i] - h.announced_at for i in fast_ids]
    print(f"sibling of a {fault} endpoint: p99 {p99(latencies) * 1e3:.0f} ms")
    # Well under one slow attempt (0.5 s), let alone the slow backlog or a timeout (3 s).
    assert p99(latencies) < 0.45, sorted(latencies)[-5:]
    stats = engine.stats()["tenants"]["acme"]
    assert stats.peak_used <= 30 and stats.lanes == 2 and stats.evicted_total >= 15
    evicted = REGISTRY.get_sample_value("hookrouter_delivery_evicted_total", {"tenant": "acme"})
    assert evicted == stats.evicted_total

    def fast_settled() -> bool:
        # The receiver notes an arrival before the router reads the answer.
        lanes = engine.stats()["lanes"]["acme"]
        return all(lane.in_flight == 0 for lane in lanes if lane.endpoint_id == "fast")

    await until(fast_settled, "fast endpoint's answers read", 5)
    lanes = {lane.endpoint_id: lane for lane in engine.stats()["lanes"]["acme"]}
    for endpoint_id, lane in lanes.items():  # the same figures, per endpoint, in /metrics
        labels = {"tenant": "acme", "endpoint": endpoint_id}
        for name, value in (("in_flight", lane.in_flight), ("queue_depth", lane.queued)):
            sample = REGISTRY.get_sample_value(f"hookrouter_delivery_endpoint_{name}", labels)
            assert sample == value, (name, endpoint_id)
    # /metrics writes these families' text itself: the same families and samples as
    # prometheus_client writes from the same collectors.
    assert _families_of(render()) == _families_of(generate_latest(REGISTRY))
    if fault == "hung":  # its attempts hang, the fast endpoint's are done
        assert lanes["slow"].in_flight > 0 and lanes["fast"].in_flight == 0
    if fault == "slow":  # and the slow endpoint's work is all delivered, nothing lost
        await until(lambda: engine.stats()["delivered"] == 130, "slow endpoint delivered", 20)
        await idle(engine)
        assert len(slow.requests) == 30 and len(fast.requests) == 100
        assert engine.stats()["cached_bodies"] == 0  # evicted refs' bodies were released


def _families_of(text: bytes) -> dict[tuple[str, str, str], set[tuple[str, Any, float | None]]]:
    """(name, type, help) -> its samples (name, sorted labels, value), parsed from ``text``.

    A lag's value is the scrape's clock less an arrival: left out.
    """
    parsed = text_string_to_metric_families(text.decode())
    return {
        (f.name, f.type, f.documentation): {
            (s.name, tuple(sorted(s.labels.items())), None if "lag" in s.name else s.value)
            for s in f.samples
        }
        for f in parsed
    }


def latency_sample(part: str, tenant: str) -> float:
    """The delivery latency histogram's ``_count`` or ``_sum`` for a tenant (0 before any)."""
    value = REGISTRY.get_sample_value(
        f"hookrouter_delivery_latency_seconds_{part}", {"tenant": tenant}
    )
    return value or 0.0


async def one_endpoint_engine(
    h: Harness, receivers: StartReceiver, tenant: str, endpoint: str
) -> tuple[DeliveryEngine, Receiver]:
    """An engine for ``tenant`` with one endpoint, a receiver that answers 200."""
    r = await receivers()
    h.tenant(tenant)
    h.endpoint(endpoint, url(r), tenant=tenant)
    return await h.engine(), r


async def test_prometheus_series_per_tenant_and_breaker(
    h: Harness, receivers: StartReceiver
) -> None:
    from hookrouter.metrics import render

    before = latency_sample("count", "metrics-t")
    engine, r = await one_endpoint_engine(h, receivers, "metrics-t", "metrics-ep")
    await h.burst(engine, [("metrics-t", ("metrics-ep",))] * 3)
    await until(lambda: len(r.requests) == 3, "deliveries")
    await idle(engine)
    await engine.poll()
    text = render().decode()
    assert 'hookrouter_delivery_outcomes_total{outcome="delivered",tenant="metrics-t"} 3.0' in text
    assert 'hookrouter_delivery_credits_in_use{tenant="metrics-t"} 0.0' in text
    assert 'hookrouter_delivery_breaker_state{endpoint="metrics-ep"} 0.0' in text
    assert latency_sample("count", "metrics-t") == before + 3  # the histogram is process-wide


async def test_outcomes_the_store_refuses_are_counted_then_written(
    tmp_path: Path, receivers: StartReceiver
) -> None:
    """Another process holds the write lock when an outcome is flushed: nothing is lost."""
    clock = ManualClock(wall=time.time())
    store = SqliteStore(tmp_path / "data", clock=clock, busy_timeout=0.05)
    await store.open()
    h = Harness(store, SqliteLedger(store), clock)
    holder = sqlite3.connect(store.db_path, isolation_level=None, check_same_thread=False)

    def lock_then_answer(req: Received) -> Reply:  # the lock is taken before the outcome exists
        holder.execute("BEGIN IMMEDIATE")
        return Reply(status=200)

    def stored_states() -> list[str]:
        rows = holder.execute("SELECT state FROM deliveries").fetchall()
        return [state for (state,) in rows]

    r = await receivers(lock_then_answer)
    h.tenant("wf-t")
    h.endpoint("wf-ep", url(r), tenant="wf-t")
    engine = await h.engine()
    try:
        await h.burst(engine, [("wf-t", ("wf-ep",))])
        await until(lambda: engine.outcome_write_failures >= 1, "a refused outcome batch")
        total = REGISTRY.get_sample_value("hookrouter_delivery_outcome_write_failures_total")
        assert total is not None and total >= 1
        assert engine.stats()["outcome_write_failures"] >= 1
        holder.execute("ROLLBACK")
        await until(lambda: stored_states() == ["delivered"], "the outcome written", limit=5)
        assert len(r.requests) == 1  # written late, not delivered twice
    finally:
        holder.close()
        await engine.stop(grace=1.0)
        await store.close()


async def test_delivery_latency_runs_from_the_events_arrival_to_its_2xx(
    h: Harness, receivers: StartReceiver
) -> None:
    before = latency_sample("sum", "latency-t")
    engine, r = await one_endpoint_engine(h, receivers, "latency-t", "latency-ep")
    await h.burst(engine, [("latency-t", ("latency-ep",))] * 2)
    h.clock.advance(2.5)  # before any answer is read: each delivery lands 2.5 s later
    await until(lambda: len(r.requests) == 2, "deliveries")
    await idle(engine)
    # From each event's received_at (1 ms apart on this clock) to its 2xx.
    assert latency_sample("sum", "latency-t") - before == pytest.approx(2 * 2.5 + 0.001, abs=0.0005)


async def test_bulk_replay_by_endpoint_and_time_window(
    h: Harness, receivers: StartReceiver
) -> None:
    healthy = False
    r = await receivers(lambda req: Reply(status=200 if healthy else 500))
    h.tenant()
    h.endpoint("ep-a", url(r, "/a"), retry_schedule=RetrySchedule(()))  # one attempt, then dead
    h.endpoint("ep-b", url(r, "/b"), retry_schedule=RetrySchedule(()))
    engine = await h.engine()
    window_start = h.clock.time()
    await h.burst(engine, [("acme", ("ep-a",))] * 3 + [("acme", ("ep-b",))])
    window_end = h.clock.time() + 0.001
    h.clock.advance(60)
    late = await h.ingest(engine, ("ep-a",))  # outside the window
    await until(lambda: len(r.requests) == 5, "first attempts")
    await idle(engine)
    healthy = True
    selection = ReplayFilter(
        tenant_id="acme", endpoint_id="ep-a", since=window_start, until=window_end
    )
    assert await engine.replay(selection) == 3
    await until(lambda: len(r.requests) == 8, "replays")
    await idle(engine)
    assert [q.path for q in r.requests[5:]] == ["/a"] * 3
    assert await h.state(late) == (EventStatus.FAILED, [DeliveryState.DEAD])
    assert await engine.replay(ReplayFilter(event_id=late)) == 1


async def test_operator_breaker_reset_resumes_parked_work(
    h: Harness, receivers: StartReceiver
) -> None:
    r = await receivers(lambda req: Reply(status=503))
    h.tenant()
    h.endpoint("ep", url(r))
    breaker = BreakerSettings(
        failure_ratio=0.5, window_seconds=30, min_requests=1, cooldown_seconds=600
    )
    engine = await h.engine(breaker=breaker)
    await h.ingest(engine, ("ep",))
    await idle(engine)
    parked = await h.ingest(engine, ("ep",))
    await idle(engine)
    assert (await h.state(parked))[1] == [DeliveryState.PARKED]
    assert engine.reset_breaker("ep") and not engine.reset_breaker("nope")
    await until(lambda: len(r.requests) >= 2, "parked deliveries resumed")
    await idle(engine)


class RecordingLedger:
    """A ledger that notes every resume_parked limit and outcome record (all passes through)."""

    def __init__(self, inner: SqliteLedger) -> None:
        self._inner = inner
        self.resume_limits: list[int | None] = []
        self.records: list[OutcomeRecord] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def record(self, outcomes: Sequence[OutcomeRecord]) -> asyncio.Future[None]:
        self.records.extend(outcomes)
        return self._inner.record(outcomes)

    async def resume_parked(
        self, tenant_id: str, endpoint_id: str, limit: int | None = None
    ) -> Resumed:
        self.resume_limits.append(limit)
        return await self._inner.resume_parked(tenant_id, endpoint_id, limit)


async def test_parked_work_resumes_in_bounded_chunks(h: Harness, receivers: StartReceiver) -> None:
    """Resuming never puts all parked deliveries in one write job (it held the loop)."""
    ledger = RecordingLedger(h.ledger)
    h.ledger = cast(SqliteLedger, ledger)  # the engine below resumes through it
    limits = ledger.resume_limits
    healthy = False
    r = await receivers(lambda req: Reply(status=200 if healthy else 503))
    h.tenant()
    h.endpoint("ep", url(r))
    breaker = BreakerSettings(
        failure_ratio=0.5, window_seconds=30, min_requests=1, cooldown_seconds=600
    )
    engine = await h.engine(breaker=breaker)
    engine.resume_chunk = 5
    await h.ingest(engine, ("ep",))  # fails: the breaker opens
    await idle(engine)
    parked = await h.burst(engine, [("acme", ("ep",))] * 12)
    await idle(engine)
    assert {tuple((await h.state(e))[1]) for e in parked} == {(DeliveryState.PARKED,)}

    healthy = True
    limits.clear()
    assert engine.reset_breaker("ep")
    await until(lambda: len(r.requests) >= 14, "every parked delivery resumed")
    await idle(engine)
    assert limits and all(n is not None and n <= 5 for n in limits), limits
    assert len(limits) >= 3  # 13 parked (the first one too), 5 at a time
    for event_id in parked:
        assert await h.state(event_id) == (EventStatus.DELIVERED, [DeliveryState.DELIVERED])


class ParkCountingLedger:
    """A ledger that counts parked outcomes recorded one by one, per endpoint."""

    def __init__(self, inner: SqliteLedger) -> None:
        self._inner = inner
        self.parked_one_by_one: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def record(self, outcomes: Any) -> Any:
        for o in outcomes:
            if o.state is DeliveryState.PARKED:
                endpoint = o.ref.endpoint_id
                self.parked_one_by_one[endpoint] = self.parked_one_by_one.get(endpoint, 0) + 1
        return self._inner.record(outcomes)


async def test_open_breaker_parks_spilled_work_in_bulk(
    h: Harness, receivers: StartReceiver
) -> None:
    """Spilled deliveries of an endpoint whose breaker opened are parked in the store at
    once: page-ins then bring the healthy endpoint's work, not the dead one's only for
    each to be loaded and parked on its own."""
    ledger = ParkCountingLedger(h.ledger)
    h.ledger = cast(SqliteLedger, ledger)
    healthy = False
    bad = await receivers(lambda req: Reply(status=200 if healthy else 503))
    good = await receivers(lambda req: Reply(status=200))
    h.tenant(queue_capacity=10)
    h.endpoint("bad", url(bad))
    h.endpoint("good", url(good))
    breaker = BreakerSettings(
        failure_ratio=0.5, window_seconds=30, min_requests=1, cooldown_seconds=600
    )
    engine = await h.engine(breaker=breaker)
    events = await h.burst(engine, [("acme", ("bad", "good"))] * 300)  # 590 spill
    await until(lambda: len(good.requests) >= 300, "the healthy endpoint got everything", 10)
    await idle(engine)
    assert len(bad.requests) <= 10, "one failure opened the breaker"
    # Only what was queued or in flight when it opened was parked one by one.
    assert ledger.parked_one_by_one.get("bad", 0) <= 10, ledger.parked_one_by_one
    states = {tuple((await h.state(e))[1]) for e in events}
    assert states == {(DeliveryState.PARKED, DeliveryState.DELIVERED)}, states
    assert engine.stats()["tenants"]["acme"].credits_used == 0

    healthy = True
    assert engine.reset_breaker("bad")
    await until(lambda: len({r.headers["webhook-id"] for r in bad.requests}) >= 300, "resumed", 10)
    await idle(engine)
    for event_id in events[:5] + events[-5:]:
        assert await h.state(event_id) == (
            EventStatus.DELIVERED,
            [DeliveryState.DELIVERED, DeliveryState.DELIVERED],
        )


@pytest.mark.slow
async def test_spill_10k_events_through_a_capacity_of_10(
    h: Harness, receivers: StartReceiver
) -> None:
    """Issue 3's spill test: arrival order kept, memory bounded by the credits."""
    seen: list[str] = []

    def handler(req: Received) -> Reply:
        seen.append(req.headers["webhook-id"])
        return Reply(status=204, body=b"", delay=0.0002)  # a slow endpoint

    r = await receivers(handler)
    h.tenant(queue_capacity=10, max_in_flight=1)
    h.endpoint("slow", url(r))
    engine = await h.engine()
    ids: list[str] = []
    for _ in range(10):  # bursts of 1,000 while the endpoint is still busy
        ids += await h.burst(engine, [("acme", ("slow",))] * 1000)
    stats = engine.stats()
    assert stats["tenants"]["acme"].credits_used <= 10 and stats["cached_bodies"] <= 10
    await until(lambda: len(seen) >= 10_000, "10,000 deliveries", limit=60)
    await idle(engine)
    assert seen == ids, "delivered in arrival order, each exactly once"
    assert engine.stats()["tenants"]["acme"].peak_used <= 10


async def test_backlog_cap_sheds_retrying_senders_only(
    h: Harness, receivers: StartReceiver
) -> None:
    from hookrouter.config.entities import SourceConfig
    from hookrouter.ingress.admission import AT_RISK, BacklogAdmission
    from hookrouter.metrics import REGISTRY

    r = await receivers(lambda req: Reply(status=500))
    h.tenant("capped", max_backlog=3)
    h.endpoint("down", url(r), tenant="capped", retry_schedule=RetrySchedule((3600.0,)))
    engine = await h.engine()
    await h.burst(engine, [("capped", ("down",))] * 2)
    await until(lambda: len(r.requests) == 2, "attempts")
    await idle(engine)
    assert engine.backlog("capped") == 2  # retrying deliveries are still open
    await engine.refresh_counts()
    assert engine.backlog("capped") == 2  # the store agrees
    sources = [
        SourceConfig("stripe-src", "capped", "stripe", ("whsec_test",)),
        SourceConfig("gh-src", "capped", "github", ("gh-secret",)),
    ]
    catalog = Catalog(h.tenants, sources, h.endpoints)
    admission = BacklogAdmission(engine.backlog, h.clock)
    assert admission.check(catalog.sources["stripe-src"]) is None  # 2 < 3
    await h.ingest(engine, ("down",), tenant="capped")
    shed = admission.check(catalog.sources["stripe-src"])
    assert shed is not None and not isinstance(shed, asyncio.Future)
    assert shed.reason == "backlog_full"
    assert shed.response.status == 429 and dict(shed.response.headers)["retry-after"] == "60"
    labels = {"tenant": "capped", "source": "gh-src"}
    before = REGISTRY.get_sample_value("hookrouter_backlog_at_risk_total", labels) or 0.0
    assert admission.check(catalog.sources["gh-src"]) is None  # GitHub never retries: accept
    assert REGISTRY.get_sample_value("hookrouter_backlog_at_risk_total", labels) == before + 1
    assert AT_RISK is not None


async def test_endpoint_rate_limit_paces_deliveries_without_failures(
    h: Harness, receivers: StartReceiver
) -> None:
    r = await receivers()
    h.tenant(queue_capacity=100)
    h.endpoint("paced", url(r), rate_limit=Limit(capacity=2, refill_per_second=4))
    engine = await h.engine()
    engine.use_limiter(LocalBucketLimiter(clock=h.clock))
    ids = await h.burst(engine, [("acme", ("paced",))] * 10)
    await until(lambda: len(r.requests) == 2, "the burst the bucket allows")
    await idle(engine)
    assert len(r.requests) == 2  # the other 8 wait, holding no slot and no credit
    assert engine.stats()["in_flight"] == 0
    assert engine.queues["acme"].stats().credits_used == 0
    await h.ledger.record([])
    waiting = [await h.store.get_event(i) for i in ids[2:]]
    times = sorted(d.deliveries[0].next_attempt_at or 0 for d in waiting if d is not None)
    assert all(d is not None and d.deliveries[0].attempts == 0 for d in waiting)  # no attempt
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(abs(gap - 0.25) < 1e-6 for gap in gaps), times  # one token apart (4/s)
    step = 0
    while len(r.requests) < 10 and step < 40:  # the manual clock walks the paced schedule
        step += 1  # the manual clock walks through the paced schedule
        h.clock.advance(0.125)
        await engine.poll()
        await idle(engine)
    assert sorted(req.headers["webhook-id"] for req in r.requests) == sorted(ids)
    assert 8 * 0.25 <= step * 0.125 <= 8 * 0.25 + 0.5  # no faster than the rate allows
    for event_id in ids:
        assert await h.state(event_id) == (EventStatus.DELIVERED, [DeliveryState.DELIVERED])


async def test_endpoint_rate_limit_in_redis_defers_then_delivers_everything(
    h: Harness, receivers: StartReceiver, tmp_path: Path
) -> None:
    """The Redis path: every decision is a round trip (no lease), so each
    delivery waits for Redis's answer off the delivery slot, then goes or is
    deferred; the bucket refills in real time."""
    r = await receivers()
    h.tenant(queue_capacity=100)
    h.endpoint("paced", url(r), rate_limit=Limit(capacity=2, refill_per_second=4))
    engine = await h.engine()
    with redis_server(tmp_path / "redis") as server:
        limiter = RedisBucketLimiter(BucketCaller(make_client(server.url, (), 2.0), "script"))
        engine.use_limiter(limiter)
        try:
            ids = await h.burst(engine, [("acme", ("paced",))] * 10)
            await until(lambda: len(r.requests) == 2, "the burst the bucket allows")
            await idle(engine)
            assert len(r.requests) == 2  # the other 8 are deferred, holding nothing
            assert engine.stats()["in_flight"] == 0
            assert engine.queues["acme"].stats().credits_used == 0
            assert limiter.stats()["redis_commands"] >= 10  # every decision asked Redis
            await h.ledger.record([])
            waiting = [await h.store.get_event(i) for i in ids[2:]]
            assert all(d is not None and d.deliveries[0].attempts == 0 for d in waiting)
            step = 0
            while len(r.requests) < 10 and step < 100:
                step += 1
                await asyncio.sleep(0.05)  # Redis refills on its own clock
                h.clock.advance(0.125)  # the deferred deliveries come due on ours
                await engine.poll()
                await idle(engine)
            assert sorted(req.headers["webhook-id"] for req in r.requests) == sorted(ids)
            for event_id in ids:
                assert await h.state(event_id) == (
                    EventStatus.DELIVERED,
                    [DeliveryState.DELIVERED],
                )
        finally:
            await limiter.close()


async def test_only_an_events_sole_delivery_settles_it_and_siblings_still_fail_it(
    h: Harness, receivers: StartReceiver
) -> None:
    good = await receivers()
    gone = await receivers(lambda req: Reply(status=410))
    ledger = RecordingLedger(h.ledger)
    h.ledger = cast(SqliteLedger, ledger)  # the engine below records through it
    h.tenant()
    h.endpoint("good", url(good))
    h.endpoint("gone", url(gone))  # 410: disabled at once, a final state
    engine = await h.engine()
    sole = await h.ingest(engine, ("good",))
    pair = await h.ingest(engine, ("good", "gone"))
    await until(lambda: len(good.requests) == 2 and len(gone.requests) == 1, "3 attempts")
    await idle(engine)
    settles = {(r.ref.event_id, r.ref.endpoint_id): r.settles_event for r in ledger.records}
    assert settles == {(sole, "good"): True, (pair, "good"): False, (pair, "gone"): False}
    assert await h.state(sole) == (EventStatus.DELIVERED, [DeliveryState.DELIVERED])
    status, states = await h.state(pair)
    assert status is EventStatus.FAILED
    assert sorted(states) == sorted([DeliveryState.DELIVERED, DeliveryState.DISABLED])
