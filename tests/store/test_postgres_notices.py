"""Work notices name the lanes a commit gave work, so their owner queues them without a query.

The encoding alone first; then a real server (the shared one, a schema per
test): node ``b`` is a ``ClusterNode`` holding every partition, store ``a``
commits as another node would, and a listener of the test's own reads each
notice as sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import pytest
from tests.support.postgres_store import (
    postgres_available,
    schema_for,
    shared_server,
    store_options,
)
from tests.support.store_backends import make_event
from tests.support.waiting import wait_until

from hookrouter.clock import SYSTEM_CLOCK
from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.ledger import Resumed
from hookrouter.store.postgres import PostgresStore
from hookrouter.store.postgres.cluster import ClusterNode
from hookrouter.store.postgres.notices import PAYLOAD_LIMIT, Lane, decode, encode, merged

needs_postgres = pytest.mark.skipif(not postgres_available(), reason="PostgreSQL is not installed")
EVENTS = ["evt_03", "evt_01", "evt_02"]


def test_a_notice_names_each_lane_with_its_count_and_oldest_event() -> None:
    payload = encode("a", [7, 7, 9], ["acme", "acme", "beta"], ["e1", "e1", "e2"], EVENTS)
    assert payload is not None
    notice = decode(payload)
    assert notice is not None and (notice.node, notice.since) == ("a", "evt_01")
    assert notice.partitions == (7, 9)
    assert notice.lanes == (Lane(7, "acme", "e1", 2, "evt_01"), Lane(9, "beta", "e2", 1, "evt_02"))
    assert encode("a", [], [], [], []) is None  # no deliveries: nothing to tell


def test_lanes_past_the_payload_limit_leave_the_watermark_alone() -> None:
    endpoints = [f"endpoint-{n:03d}-with-a-name-long-enough-to-fill-a-notice" for n in range(120)]
    events = [f"evt_{n:03d}" for n in range(120)]
    payload = encode("a", [3] * 120, ["acme"] * 120, endpoints, events)
    assert payload == "a evt_000 3"
    fits = encode("a", [3] * 40, ["acme"] * 40, endpoints[:40], events[:40])
    assert fits is not None and len(fits.encode()) < PAYLOAD_LIMIT
    notice = decode(fits)
    assert notice is not None and notice.lanes is not None and len(notice.lanes) == 40


def test_a_notice_whose_lanes_do_not_parse_is_read_as_its_watermark() -> None:
    notice = decode("a evt_01 4,5 4/acme/e1/x/evt_01")
    assert notice is not None and notice.partitions == (4, 5) and notice.lanes is None
    assert decode("a evt_01 *") is not None
    assert decode("a evt_01 four") is None


def test_lanes_of_several_notices_merge_into_one_page_in_each() -> None:
    lanes = [Lane(7, "acme", "e1", 2, "evt_05"), Lane(9, "beta", "e2", 1, "evt_04"),
             Lane(7, "acme", "e1", 3, "evt_02")]  # fmt: skip
    assert merged(lanes) == [Lane(7, "acme", "e1", 5, "evt_02"), Lane(9, "beta", "e2", 1, "evt_04")]


@dataclass
class Heard:
    """What node ``b`` queued (``on_work``) and the payloads sent on its channel."""

    work: list[Resumed] = field(default_factory=list)
    payloads: list[str] = field(default_factory=list)

    def on_work(self, found: list[Resumed]) -> None:
        self.work.extend(found)

    def on_payload(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        self.payloads.append(str(payload))

    async def until(self, lanes: int) -> None:
        """``lanes`` lanes queued, and the notice heard here too."""
        await wait_until(lambda: len({(r.tenant_id, r.endpoint_id) for r in self.work}) >= lanes)
        await wait_until(lambda: bool(self.payloads))


@dataclass
class Cluster:
    a: PostgresStore
    b: PostgresStore
    node: ClusterNode
    heard: Heard


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    b = PostgresStore(**{**store_options(tmp_path), "node_id": "b"})  # type: ignore[arg-type]
    # No catch-up scan after the first: these tests count what notices alone queue,
    # and a scan landing mid-test (a slow host) would queue the same lanes again.
    node = ClusterNode(
        b, "b", lease_seconds=6.0, attempt_seconds=1.0, clock=SYSTEM_CLOCK, catch_up_seconds=3600
    )
    await b.open()
    await node.join()
    heard = Heard()
    node.start(lambda: None, heard.on_work)
    a = PostgresStore(**{**store_options(tmp_path), "node_id": "a"})  # type: ignore[arg-type]
    await a.open()
    a.committer.notify = (node.channel, "a")
    listener = await asyncpg.connect(
        shared_server().dsn, server_settings={"search_path": schema_for(tmp_path)}
    )
    await listener.add_listener(node.channel, heard.on_payload)
    await wait_until(lambda: b.ledger.pending_scans > 0)  # the notice loop's first scan
    heard.work.clear()
    try:
        yield Cluster(a, b, node, heard)
    finally:
        await listener.close()
        await node.stop()
        await a.close()
        await b.close()


@needs_postgres
async def test_the_owner_queues_named_lanes_without_querying(cluster: Cluster) -> None:
    ledger = cluster.b.ledger
    scans = ledger.pending_scans
    events = [make_event(tenant="acme", endpoints=("e1", "e2")) for _ in range(3)]
    await asyncio.gather(*(cluster.a.append(e) for e in events))  # one commit
    await cluster.heard.until(lanes=2)
    first = events[0].event_id
    assert sorted(cluster.heard.work, key=lambda r: r.endpoint_id) == [
        Resumed("acme", "e1", 3, DeliveryRef(first, "e1")),
        Resumed("acme", "e2", 3, DeliveryRef(first, "e2")),
    ]
    assert [len(p.split(" ")) for p in cluster.heard.payloads] == [4]  # lanes named
    assert ledger.pending_scans == scans  # no PENDING_ENDPOINTS for the notice
    assert ledger.pending_scans_avoided == 1
    assert cluster.b.stats()["pending_scans_avoided"] == 1


@needs_postgres
async def test_a_notice_too_long_to_name_its_lanes_makes_the_owner_query(
    cluster: Cluster,
) -> None:
    ledger = cluster.b.ledger
    scans = ledger.pending_scans
    endpoints = tuple(f"endpoint-{n:03d}-with-a-name-long-enough-to-fill" for n in range(120))
    event = make_event(tenant="acme", endpoints=endpoints)
    await cluster.a.append(event)
    await cluster.heard.until(lanes=120)
    assert {r.endpoint_id for r in cluster.heard.work} == set(endpoints)
    assert {r.oldest for r in cluster.heard.work} == {
        DeliveryRef(event.event_id, e) for e in endpoints
    }
    assert [len(p.split(" ")) for p in cluster.heard.payloads] == [3]  # the watermark alone
    assert ledger.pending_scans == scans + 1
    assert ledger.pending_scans_avoided == 0


@needs_postgres
async def test_notices_heard_while_the_ledger_is_busy_merge_into_one_page_in(
    cluster: Cluster,
) -> None:
    """Two commits' notices for one lane, heard behind a ledger job: one lane queued, count 2."""
    gate = asyncio.Event()
    held = cluster.b.ledger._chain.submit(lambda _conn: gate.wait())  # a slow job ahead
    first, second = (make_event(tenant="acme", endpoints=("e1",)) for _ in range(2))
    await cluster.a.append(first)
    await cluster.a.append(second)  # a commit of its own, a notice of its own
    await wait_until(lambda: cluster.node.notices == 2)  # node b heard both
    assert cluster.heard.work == []  # queued behind the job
    gate.set()
    await held
    await wait_until(lambda: bool(cluster.heard.work))
    await asyncio.sleep(0.2)  # nothing else comes
    assert cluster.heard.work == [Resumed("acme", "e1", 2, DeliveryRef(first.event_id, "e1"))]
