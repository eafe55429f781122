"""What only the PostgreSQL backend promises: dedup across nodes, crash safety, migrations, fencing.

Real servers (tests/support/postgres_servers.py): the shared one with a
schema per test, or one of the test's own when the test kills it.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from tests.support.postgres_servers import PostgresServer, postgres_server, primary_with_standby
from tests.support.postgres_store import (
    OpenStore,
    postgres_available,
    schema_for,
    shared_server,
    sql,
)
from tests.support.store_backends import make_event, ordered_ms

from hookrouter.errors import StoreUnavailable
from hookrouter.flow.credits import DeliveryRef
from hookrouter.store import AppendResult, DeliveryState, EventStatus
from hookrouter.store.ledger import AttemptRecord, OutcomeRecord, Resumed
from hookrouter.store.postgres import PostgresStore
from hookrouter.store.postgres import ledger as postgres_ledger
from hookrouter.store.postgres.partitioning import tenant_partition
from hookrouter.store.postgres.queries import pending_sql
from hookrouter.store.retention import Cutoffs

pytestmark = pytest.mark.skipif(not postgres_available(), reason="PostgreSQL is not installed")

# ---- dedup across nodes ---------------------------------------------------------------


async def test_the_same_provider_event_posted_to_two_nodes_is_stored_once(
    open_store: OpenStore, tmp_path: Path
) -> None:
    node_a, node_b = await open_store(node_id="a"), await open_store(node_id="b")
    keys = [f"evt_stripe_{i}" for i in range(200)]
    # Each key sent to both nodes in the same loop turn, as a provider retrying
    # through a load balancer would; their group commits race for the keys.
    sent_a = [make_event(provider_event_id=k, endpoints=("ep_a",)) for k in keys]
    sent_b = [make_event(provider_event_id=k, endpoints=("ep_a",)) for k in reversed(keys)]
    answers = await asyncio.gather(
        asyncio.gather(*(node_a.append(e) for e in sent_a)),
        asyncio.gather(*(node_b.append(e) for e in sent_b)),
    )
    by_key_a = dict(zip(keys, answers[0], strict=True))
    by_key_b = dict(zip(reversed(keys), answers[1], strict=True))
    for key in keys:
        a, b = by_key_a[key], by_key_b[key]
        assert a.event_id == b.event_id, key  # both answers name the one stored event
        assert sorted([a.duplicate, b.duplicate]) == [False, True], key
    rows = await sql(
        tmp_path, "SELECT provider_event_id, count(*) FROM events GROUP BY 1 HAVING count(*) > 1"
    )
    assert rows == []
    assert len(await sql(tmp_path, "SELECT 1 FROM events")) == 200
    assert len(await sql(tmp_path, "SELECT 1 FROM deliveries")) == 200
    assert node_a.stats()["duplicates"] + node_b.stats()["duplicates"] == 200
    # Either node finds the key's event, and a later re-send is a duplicate on both.
    stored = by_key_a[keys[7]].event_id
    assert await node_b.find_event("src_a", keys[7]) == stored
    again = make_event(provider_event_id=keys[7])
    assert await node_b.append(again) == AppendResult(stored, duplicate=True)


async def test_a_keyless_event_appended_again_does_not_fail_its_batch(
    open_store: OpenStore, tmp_path: Path
) -> None:
    store = await open_store()
    event = make_event(endpoints=("ep_a",))
    await store.append(event)
    neighbour = make_event(endpoints=("ep_a",))
    again, other = await asyncio.gather(store.append(event), store.append(neighbour))
    assert (again.event_id, other.event_id) == (event.event_id, neighbour.event_id)
    rows = await sql(tmp_path, "SELECT event_id, count(*) FROM deliveries GROUP BY 1")
    assert sorted(r[1] for r in rows) == [1, 1]


# ---- crash -----------------------------------------------------------------------------


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


async def test_every_acknowledged_event_survives_kill9_mid_group_commit(
    own_server: PostgresServer, tmp_path: Path
) -> None:
    options = {"dsn": own_server.dsn, "schema_name": "crash", "connect_timeout": 2.0}
    store = PostgresStore(**options)  # type: ignore[arg-type]
    await store.open()
    acked: list[str] = []
    refused: list[BaseException] = []
    stop = asyncio.Event()
    enough = asyncio.Event()  # 500 acknowledged: time to kill

    async def producer() -> None:
        while not stop.is_set():
            event = make_event(provider_event_id=None, endpoints=("ep_a", "ep_b"))
            try:
                result = await store.append(event)
            except StoreUnavailable as exc:
                refused.append(exc)
                await asyncio.sleep(0.01)
                continue
            assert result.event_id == event.event_id
            acked.append(result.event_id)
            if len(acked) >= 500:
                enough.set()

    producers = [asyncio.create_task(producer()) for _ in range(32)]
    await asyncio.wait_for(enough.wait(), 60)
    # SIGKILL the postmaster while commits are in flight (its backends die with it).
    await asyncio.to_thread(own_server.kill9)
    acked_at_kill = len(acked)
    await asyncio.sleep(0.5)  # appends meanwhile must fail, not hang
    stop.set()
    await asyncio.wait_for(asyncio.gather(*producers), 30)
    assert refused, "no append was refused while the server was down"
    assert all(e.retry_after > 0 for e in refused)  # a 503 with Retry-After, never a 2xx
    assert len(acked) - acked_at_kill < 64  # only commits already in flight at the kill
    await store.close()

    await asyncio.to_thread(own_server.start)
    reopened = PostgresStore(**options)  # type: ignore[arg-type]
    await reopened.open()
    try:
        conn = await asyncpg.connect(own_server.dsn, server_settings={"search_path": "crash"})
        try:
            stored = {r[0] for r in await conn.fetch("SELECT event_id FROM events")}
            deliveries = await conn.fetchval(
                "SELECT count(*) FROM deliveries WHERE event_id = ANY($1::text[])", acked
            )
        finally:
            await conn.close()
        missing = set(acked) - stored
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged events lost"
        assert deliveries == 2 * len(acked)  # and their fan-out with them
        await reopened.append(make_event())  # the store works again after recovery
    finally:
        await reopened.close()


async def test_no_reachable_server_is_store_unavailable_with_retry_after() -> None:
    from tests.support.redis_servers import free_port

    dead = f"postgresql://hookrouter@127.0.0.1:{free_port()}/hookrouter"
    store = PostgresStore(dead, connect_timeout=1.0)
    with pytest.raises(StoreUnavailable) as info:
        await store.open()
    assert info.value.reason == "store_unreachable"
    assert info.value.retry_after > 0


# ---- ownership partitions ------------------------------------------------------------


async def test_a_takeover_resumes_the_parked_work_of_the_partitions_taken_only(
    open_store: OpenStore,
) -> None:
    store = await open_store(partitions=16)
    tenants = ("ten_a", "ten_b")
    assert store.partition_of("ten_a") != store.partition_of("ten_b")
    for tenant in tenants:
        for _ in range(3):
            await store.append(make_event(tenant=tenant, endpoints=("ep_a",)))
    ledger = store.delivery_ledger()
    assert ledger is not None
    for tenant in tenants:
        assert await ledger.park_pending(tenant, "ep_a", 100.0, 100) == 3
    assert await ledger.resume_partitions([store.partition_of("ten_b")]) == 3
    assert await ledger.state_counts((DeliveryState.PARKED, DeliveryState.PENDING)) == {
        ("ten_a", DeliveryState.PARKED): 3,
        ("ten_b", DeliveryState.PENDING): 3,
    }


async def test_open_work_is_counted_in_the_partitions_this_node_holds_only(
    open_store: OpenStore,
) -> None:
    # Each node's engine runs the tenants of its partitions: counting the
    # others' work every few seconds was database time spent for nothing, and
    # the nodes' backlog metrics added up to a multiple of the cluster's.
    store = await open_store(partitions=16)
    for tenant, count in (("ten_a", 3), ("ten_b", 2)):
        for _ in range(count):
            await store.append(make_event(tenant=tenant, endpoints=("ep_a",)))
    ledger = store.delivery_ledger()
    assert ledger is not None
    open_states = (DeliveryState.PENDING, DeliveryState.PARKED)
    assert await ledger.park_pending("ten_b", "ep_a", 100.0, 1) == 1
    assert await ledger.state_counts(open_states) == {
        ("ten_a", DeliveryState.PENDING): 3,
        ("ten_b", DeliveryState.PENDING): 1,
        ("ten_b", DeliveryState.PARKED): 1,
    }

    del ledger.held[store.partition_of("ten_b")]  # another node took it over
    assert await ledger.state_counts(open_states) == {("ten_a", DeliveryState.PENDING): 3}
    everything = await ledger.state_counts()  # the admin's view: every partition
    assert everything[("ten_b", DeliveryState.PARKED)] == 1


async def test_a_scan_from_a_watermark_counts_the_pending_work_of_its_partitions_from_it(
    open_store: OpenStore,
) -> None:
    store = await open_store(partitions=16)
    a = [make_event(tenant="ten_a", endpoints=("ep_a", "ep_b")) for _ in range(4)]
    b = [make_event(tenant="ten_b", endpoints=("ep_c",)) for _ in range(2)]
    for event in (*a, *b):
        await store.append(event)
    ledger = store.delivery_ledger()
    assert ledger is not None
    assert await ledger.park_pending("ten_a", "ep_b", 100.0, 100) == 4  # not pending: left out
    since = a[1].event_id
    found = await ledger.pending_in([store.partition_of("ten_a")], since)
    assert found == [Resumed("ten_a", "ep_a", 3, DeliveryRef(since, "ep_a"))]
    everything = await ledger.pending_in(
        sorted({store.partition_of(t) for t in ("ten_a", "ten_b")})
    )
    assert sorted(everything, key=lambda r: r.tenant_id) == [
        Resumed("ten_a", "ep_a", 4, DeliveryRef(a[0].event_id, "ep_a")),
        Resumed("ten_b", "ep_c", 2, DeliveryRef(b[0].event_id, "ep_c")),
    ]


async def test_the_partition_count_is_fixed_at_creation(
    open_store: OpenStore, tmp_path: Path
) -> None:
    first = await open_store(partitions=16)
    second = await open_store(partitions=64)  # ignored: the schema says 16
    assert first.stats()["partitions"] == second.stats()["partitions"] == 16
    assert len(await sql(tmp_path, "SELECT partition FROM partitions")) == 16


# ---- fencing -----------------------------------------------------------------------------


async def test_an_outcome_from_a_stale_epoch_is_refused_and_counted(
    open_store: OpenStore, tmp_path: Path
) -> None:
    store = await open_store(partitions=8)
    ledger = store.delivery_ledger()
    assert ledger is not None
    tenants = ["ten_a", "ten_b"]
    parts = [tenant_partition(t, 8) for t in tenants]
    if parts[0] == parts[1]:
        tenants[1], parts[1] = "ten_c", tenant_partition("ten_c", 8)
    assert parts[0] != parts[1]
    mine, taken = (make_event(tenant=t, endpoints=("ep_a",)) for t in tenants)
    for event in (mine, taken):
        await store.append(event)
    # Another node took over the second tenant's partition: its epoch moved on.
    await sql(tmp_path, "UPDATE partitions SET epoch = epoch + 1 WHERE partition = $1", parts[1])

    def delivered(event: Any) -> OutcomeRecord:
        ref = DeliveryRef(event.event_id, "ep_a")
        attempt = AttemptRecord(1, 100.0, 2.0, 200, None)
        return OutcomeRecord(
            ref, DeliveryState.DELIVERED, 1, None, 200, None, 100.0, attempt, True, event.tenant_id
        )

    await ledger.record([delivered(mine), delivered(taken)])
    assert store.stats()["stale_outcomes"] == 1
    counters = store.counters()
    assert counters is not None
    assert [s.value for s in counters.backend if s.name == "postgres_stale_outcomes"] == [1]
    record_kept = await store.get_event(mine.event_id)
    record_refused = await store.get_event(taken.event_id)
    assert record_kept is not None and record_kept.status is EventStatus.DELIVERED
    assert record_refused is not None and record_refused.status is EventStatus.PENDING
    assert record_refused.deliveries[0].history == ()  # no attempt row either


async def _pool_reloaded(server: PostgresServer, store: PostgresStore) -> None:
    """Reload the configuration; return once every pooled backend runs with it.

    The postmaster reloads asynchronously, and a backend idle at the reload
    runs its next command with the old settings (it rereads them only
    before the command after that): one statement on each pooled connection.
    """
    await asyncio.to_thread(server.reload)
    pool = store._pool  # the test reaches into the pool for its connections
    assert pool is not None
    held = [await asyncio.wait_for(pool.acquire(), 5) for _ in range(pool.get_max_size())]
    try:
        for conn in held:
            await conn.execute("SELECT 1")
    finally:
        for conn in held:
            await pool.release(conn)


async def test_outcomes_commit_without_waiting_for_the_flush_events_still_wait(
    own_server: PostgresServer,
) -> None:
    # A lost outcome only means the delivery is attempted again, a lost event
    # is a broken promise: only event commits wait for the WAL flush. Naming
    # a standby that never connects makes every commit that waits hang.
    options = {"dsn": own_server.dsn, "schema_name": "flush", "connect_timeout": 2.0}
    store = PostgresStore(**options)  # type: ignore[arg-type]
    await store.open()
    ledger = store.delivery_ledger()
    assert ledger is not None
    sole, fanned = make_event(endpoints=("ep_a",)), make_event(endpoints=("ep_a", "ep_b"))
    for event in (sole, fanned):
        await store.append(event)
    late: asyncio.Future[AppendResult] | None = None
    own_server.psql("ALTER SYSTEM SET synchronous_standby_names = 'never_connects'")
    try:
        await _pool_reloaded(own_server, store)
        late = asyncio.ensure_future(store.append(make_event()))
        done, _ = await asyncio.wait({late}, timeout=1.0)
        assert not done, "the event commit did not wait for the absent standby"
        # One write alone, one in a transaction with the failed-event check.
        outcomes = [
            OutcomeRecord(
                DeliveryRef(sole.event_id, "ep_a"), DeliveryState.DELIVERED, 1, None, 200,
                None, time.time(), settles_event=True, tenant_id=sole.tenant_id,
            ),
            OutcomeRecord(
                DeliveryRef(fanned.event_id, "ep_b"), DeliveryState.DEAD, 1, None, 500,
                None, time.time(), tenant_id=fanned.tenant_id,
            ),
        ]  # fmt: skip
        for outcome in outcomes:
            await asyncio.wait_for(ledger.record([outcome]), 10)
        states = {
            (e.event_id, d.endpoint_id): d.state
            for e in [await store.get_event(x.event_id) for x in (sole, fanned)]
            if e is not None
            for d in e.deliveries
        }
        assert states[(sole.event_id, "ep_a")] is DeliveryState.DELIVERED
        assert states[(fanned.event_id, "ep_b")] is DeliveryState.DEAD
    finally:
        own_server.psql("ALTER SYSTEM RESET synchronous_standby_names")
        own_server.reload()
        if late is not None:
            await asyncio.wait_for(late, 10)  # released: the event is kept
        await store.close()


async def test_a_paged_delivery_loads_from_its_page_while_its_lease_epoch_holds(
    open_store: OpenStore, tmp_path: Path
) -> None:
    store = await open_store(partitions=8)
    ledger = store.ledger
    event = make_event(endpoints=("ep_a",), body=b"paged body")
    await store.append(event)
    partition = tenant_partition(event.tenant_id, 8)
    [ref] = await ledger.page_pending(event.tenant_id, "ep_a", None, 10)
    # As if another node had attempted it since: the row says 3, the page said 0.
    await sql(tmp_path, "UPDATE deliveries SET attempts = 3")
    [work] = await ledger.load([ref])
    assert (work.attempts, work.payload.body) == (0, b"paged body")  # from the page, no read
    # Only another epoch of the lease lets another node attempt it in between:
    # then the page's copy is not used.
    await ledger.page_pending(event.tenant_id, "ep_a", None, 10)
    await sql(tmp_path, "UPDATE deliveries SET attempts = 5")
    ledger.held[partition] += 1
    [work] = await ledger.load([ref])
    assert (work.attempts, work.payload.body) == (5, b"paged body")


async def test_a_page_leaves_out_unwritten_outcomes_without_writing_them(
    open_store: OpenStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cluster's owner pages in after every work notice: were each page to
    # write the queued outcomes first, an outcome write (and a commit) would
    # carry only what finished since the last page.
    # The batching delay outlasts the test: only a flush the page forced could
    # write the outcomes before the check (at 5 ms, a slow page let the timer do it).
    monkeypatch.setattr(postgres_ledger, "FLUSH_DELAY", 60.0)
    store = await open_store(partitions=8)
    ledger = store.ledger
    events = [make_event(endpoints=("ep_a",)) for _ in range(5)]
    for event in events:
        await store.append(event)
    done = [DeliveryRef(e.event_id, "ep_a") for e in events[:2]]
    recorded = ledger.record(
        [
            OutcomeRecord(
                r, DeliveryState.DELIVERED, 1, None, 200, None, time.time(), tenant_id="ten_a"
            )
            for r in done
        ]
    )
    page = await ledger.page_pending("ten_a", "ep_a", None, 2)
    assert page == [DeliveryRef(e.event_id, "ep_a") for e in events[2:4]]  # full, in order
    states = await sql(
        tmp_path,
        "SELECT state FROM deliveries WHERE event_id = ANY($1)",
        [r.event_id for r in done],
    )
    assert [s[0] for s in states] == ["pending", "pending"]  # the page wrote nothing
    await ledger.record([])  # flushes now
    await recorded
    assert ledger.recorded == 2
    rest = [DeliveryRef(e.event_id, "ep_a") for e in events[2:]]
    assert await ledger.page_pending("ten_a", "ep_a", None, 10) == rest


async def test_page_ins_asked_together_are_one_statement_each_lane_its_own_page(
    open_store: OpenStore,
) -> None:
    store = await open_store(partitions=8)
    ledger = store.ledger
    lanes = [("ten_a", "ep_a"), ("ten_b", "ep_b"), ("ten_c", "ep_c")]
    events = {lane: [make_event(tenant=lane[0], endpoints=(lane[1],)) for _ in range(4)]
              for lane in lanes}  # fmt: skip
    for lane_events in events.values():
        for event in lane_events:
            await store.append(event)
    first_a = DeliveryRef(events[lanes[0]][0].event_id, "ep_a")
    ledger.record([OutcomeRecord(first_a, DeliveryState.DELIVERED, 1, None, 200, None,
                                 time.time(), tenant_id="ten_a")])  # fmt: skip
    before = ledger.page_statements
    pages = await asyncio.gather(
        ledger.page_pending("ten_a", "ep_a", None, 2),
        ledger.page_pending("ten_b", "ep_b", None, 10),
        ledger.page_pending("ten_c", "ep_c", DeliveryRef(events[lanes[2]][2].event_id, "ep_c"), 10),
    )
    assert ledger.page_statements == before + 1
    refs = {lane: [DeliveryRef(e.event_id, lane[1]) for e in evs] for lane, evs in events.items()}
    assert pages == [refs[lanes[0]][1:3], refs[lanes[1]], refs[lanes[2]][2:]]


async def test_a_page_in_asked_after_another_job_does_not_join_an_earlier_page(
    open_store: OpenStore,
) -> None:
    # A page must observe every job submitted before it: one asked after a
    # park must not ride along with a page queued before that park.
    store = await open_store(partitions=8)
    ledger = store.ledger
    for _ in range(3):
        await store.append(make_event(endpoints=("ep_a",)))
    await store.append(make_event(tenant="ten_b", endpoints=("ep_b",)))
    blocker = asyncio.get_running_loop().create_future()
    _, other, parked, after_park, _ = await asyncio.gather(
        ledger.ordered(lambda conn: blocker),  # the chain is busy: asks wait their turn
        ledger.page_pending("ten_b", "ep_b", None, 10),
        ledger.park_pending("ten_a", "ep_a", time.time(), 100),
        ledger.page_pending("ten_a", "ep_a", None, 10),
        _release(blocker),
    )
    assert len(other) == 1
    assert (parked, after_park) == (3, [])


async def _release(blocker: asyncio.Future[None]) -> None:
    await asyncio.sleep(0.05)
    blocker.set_result(None)


async def test_a_refused_joined_page_in_fails_every_asker(
    open_store: OpenStore, tmp_path: Path
) -> None:
    store = await open_store(partitions=8)
    ledger = store.ledger
    await store.append(make_event(endpoints=("ep_a",)))
    await sql(tmp_path, "ALTER TABLE deliveries RENAME TO deliveries_gone")
    answers = await asyncio.gather(
        ledger.page_pending("ten_a", "ep_a", None, 10),
        ledger.page_pending("ten_b", "ep_b", None, 10),
        return_exceptions=True,
    )
    await sql(tmp_path, "ALTER TABLE deliveries_gone RENAME TO deliveries")
    assert [type(a) for a in answers] == [StoreUnavailable] * 2, answers
    assert len(await ledger.page_pending("ten_a", "ep_a", None, 10)) == 1


# ---- retention ---------------------------------------------------------------------------


async def test_retention_drops_whole_days_and_keeps_a_day_with_open_work(
    open_store: OpenStore, tmp_path: Path
) -> None:
    store = await open_store()
    ledger = store.delivery_ledger()
    assert ledger is not None
    day = 86_400_000
    old_ms = ordered_ms(1, start=1_700_000_000_000)[0]
    held_ms = old_ms + 3 * day  # the open work's day stays after the old one's
    done = make_event(endpoints=("ep_a",), at_ms=old_ms)
    unrouted = make_event(at_ms=old_ms + 1)
    still_open = make_event(endpoints=("ep_a",), at_ms=held_ms)
    for event in (done, unrouted, still_open):
        await store.append(event)
    ref = DeliveryRef(done.event_id, "ep_a")
    await ledger.record(
        [
            OutcomeRecord(
                ref,
                DeliveryState.DELIVERED,
                1,
                None,
                200,
                None,
                1.0,
                AttemptRecord(1, 1, 1, 200, None),
            )
        ]
    )
    days_before = len(await sql(tmp_path, "SELECT day FROM time_partitions"))
    result = await store.prune(Cutoffs(delivered_before=time.time(), failed_before=time.time()))
    assert result.deleted == 2 and result.resume_after is None
    assert await store.get_event(done.event_id) is None
    assert await store.get_event(unrouted.event_id) is None
    assert await store.get_event(still_open.event_id) is not None
    assert len(await sql(tmp_path, "SELECT day FROM time_partitions")) == days_before - 1
    tables = await sql(
        tmp_path,
        "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
        " AND tablename LIKE 'events_p%'",
    )
    assert tables[0][0] == days_before - 1
    assert store.stats()["pruned_events"] == 2
    # The dedup key outlives its event; an event arriving for a dropped day still goes in.
    late = make_event(endpoints=("ep_a",), at_ms=old_ms + 2)
    assert await store.append(late) == AppendResult(late.event_id, duplicate=False)


# ---- database failover -------------------------------------------------------------------


async def test_a_failover_loses_no_acknowledged_event_and_the_store_follows_it() -> None:
    """Kill -9 the primary of a synchronous pair, promote the standby: the same store carries on.

    While no primary is reachable appends fail with StoreUnavailable (a 503 +
    Retry-After at the ingress); afterwards the multi-host DSN finds the
    promoted standby, and every event acknowledged before is on it (it was
    on both disks when acknowledged).
    """
    with primary_with_standby(sync=True) as pair:
        store = PostgresStore(pair.dsn, schema_name="failover", connect_timeout=2.0)
        await store.open()
        try:
            acked: list[str] = []
            refused: list[StoreUnavailable] = []
            stop = asyncio.Event()
            enough = asyncio.Event()

            async def producer() -> None:
                while not stop.is_set():
                    try:
                        result = await store.append(make_event(endpoints=("ep_a",)))
                    except StoreUnavailable as exc:
                        refused.append(exc)
                        await asyncio.sleep(0.02)
                        continue
                    acked.append(result.event_id)
                    if len(acked) >= 300:
                        enough.set()

            producers = [asyncio.create_task(producer()) for _ in range(16)]
            await asyncio.wait_for(enough.wait(), 60)
            await asyncio.to_thread(pair.primary.kill9)
            await asyncio.sleep(0.5)
            refused_while_down = len(refused)
            await asyncio.to_thread(pair.standby.promote)
            before = len(acked)
            for _ in range(600):  # the pool reconnects through the DSN's second host
                if len(acked) > before + 100:
                    break
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.wait_for(asyncio.gather(*producers), 30)
            assert refused_while_down > 0
            assert all(e.retry_after > 0 for e in refused)
            assert len(acked) > before + 100, "the store did not follow the failover"
            await store.ping()
        finally:
            await store.close()
        conn = await asyncpg.connect(pair.standby.dsn, server_settings={"search_path": "failover"})
        try:
            stored = {r[0] for r in await conn.fetch("SELECT event_id FROM events")}
        finally:
            await conn.close()
        missing = set(acked) - stored
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged events lost"


# ---- attempt history -----------------------------------------------------------------------


async def test_a_delivered_attempt_lives_in_its_delivery_row_and_joins_the_history(
    open_store: OpenStore, tmp_path: Path
) -> None:
    store = await open_store()
    ledger = store.delivery_ledger()
    assert ledger is not None
    event = make_event(endpoints=("ep_a",))
    await store.append(event)
    ref = DeliveryRef(event.event_id, "ep_a")

    def outcome(state: DeliveryState, number: int, code: int) -> OutcomeRecord:
        error = None if code < 500 else "http_500"
        attempt = AttemptRecord(number, 100.0 + number, 2.0, code, error, "excerpt")
        return OutcomeRecord(
            ref, state, number, None, code, error, 100.0 + number, attempt, tenant_id="ten_a"
        )

    await ledger.record([outcome(DeliveryState.RETRY, 1, 500)])
    await ledger.record([outcome(DeliveryState.DELIVERED, 2, 200)])
    record = await store.get_event(event.event_id)
    assert record is not None
    assert [
        (a.attempt, a.status_code, a.response_excerpt) for a in record.deliveries[0].history
    ] == [
        (1, 500, "excerpt"),
        (2, 200, None),
    ]
    assert len(await sql(tmp_path, "SELECT 1 FROM attempts")) == 1  # the failed one only


async def test_a_tenants_pending_events_are_listed_from_the_open_work_indexes(
    open_store: OpenStore, tmp_path: Path
) -> None:
    """Not by walking the tenant's events: a tenant with few pending ones would read them all."""
    store = await open_store()
    await store.append(make_event(endpoints=("ep_a",)))  # its day's partitions exist
    conn = await asyncpg.connect(
        shared_server().dsn, server_settings={"search_path": schema_for(tmp_path)}
    )
    try:
        await conn.execute("SET enable_seqscan = off")  # plan as for a large table
        part = store.partition_of("ten_a")
        for paged, params in ((False, ("ten_a", 50, part)), (True, ("ten_a", 50, part, "evt_z"))):
            rows = await conn.fetch("EXPLAIN " + pending_sql(paged), *params)
            plan = "\n".join(r[0] for r in rows)
            assert not re.search(r"using events_\w*_tenant_id_event_id_idx", plan), plan
            assert "partition_tenant_id_endpoint_id" in plan, plan  # deliveries_pending
            assert "state_tenant_id_event_id_idx" in plan, plan  # deliveries_waiting
    finally:
        await conn.close()
