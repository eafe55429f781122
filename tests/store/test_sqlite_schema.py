"""SQLite schema: migrations, durability settings, and the indexes queries rely on."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tests.support.store_backends import make_event

from hookrouter.errors import StoreError
from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.base import DeliveryState, EventStatus
from hookrouter.store.ledger import ReplayFilter, Resumed
from hookrouter.store.sqlite import SqliteStore, ledger_sql
from hookrouter.store.sqlite import dedup as sqlite_dedup
from hookrouter.store.sqlite import status as sqlite_status
from hookrouter.store.sqlite.ledger import SqliteLedger
from hookrouter.store.sqlite.queries import list_events_sql
from hookrouter.store.sqlite.schema import (
    APPLICATION_ID,
    DB_FILENAME,
    MIGRATIONS,
    Migration,
    migrate,
)

_NEXT = Migration(
    len(MIGRATIONS) + 1, "events.note for the test", ("ALTER TABLE events ADD COLUMN note TEXT",)
)


_OPEN = (DeliveryState.PENDING, DeliveryState.RETRY, DeliveryState.PARKED)


def _version(path: Path) -> int:
    with sqlite3.connect(path / DB_FILENAME) as conn:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    conn.close()
    return version


async def test_new_database_is_created_at_the_latest_version(
    open_sqlite: Any, tmp_path: Path
) -> None:
    store = await open_sqlite()
    assert store.schema_migrated_from == 0
    assert _version(tmp_path / "store") == MIGRATIONS[-1].version


async def test_database_at_version_1_is_migrated_through_every_step_keeping_its_data(
    open_sqlite: Any, tmp_path: Path
) -> None:
    path = tmp_path / "store"
    old = SqliteStore(path, migrations=MIGRATIONS[:1])  # what a version-1 hookrouter wrote
    await old.open()
    event = make_event(endpoints=("ep_a",))
    await old.append(event)
    await old.close()
    assert _version(path) == 1

    store = await open_sqlite(path, migrations=(*MIGRATIONS, _NEXT))
    assert store.schema_migrated_from == 1
    assert _version(path) == _NEXT.version
    record = await store.get_event(event.event_id)
    assert record is not None and len(record.deliveries) == 1
    notes = await store.run_read(lambda c: c.execute("SELECT note FROM events").fetchall())
    assert notes == [(None,)]


async def test_version_1_data_reads_the_same_after_the_partial_index_migration(
    open_sqlite: Any, tmp_path: Path
) -> None:
    """Version 2 swaps indexes and stops storing pending/delivered; version-1 rows still answer."""
    path = tmp_path / "store"
    old = SqliteStore(path, migrations=MIGRATIONS[:1])
    await old.open()
    ev = {name: make_event(endpoints=("ep_a",)) for name in ("pending", "delivered", "retry")}
    ev["parked"] = make_event(endpoints=("ep_a",))
    ev["failed"] = make_event(endpoints=("ep_a", "ep_b"))
    ev["unrouted"] = make_event()
    for event in ev.values():
        await old.append(event)

    def as_version_1_left_them(conn: sqlite3.Connection) -> None:
        for name, state, status in (
            ("delivered", "delivered", "delivered"),
            ("retry", "retry", "pending"),
            ("parked", "parked", "pending"),
            ("failed", "dead", "failed"),
        ):
            event_id = ev[name].event_id
            conn.execute(
                "UPDATE deliveries SET state = ?, next_attempt_at = 50.0 WHERE event_id = ?"
                " AND endpoint_id = (SELECT max(endpoint_id) FROM deliveries WHERE event_id = ?)",
                (state, event_id, event_id),
            )
            conn.execute("UPDATE events SET status = ? WHERE event_id = ?", (status, event_id))
        conn.execute(  # the failed event's other delivery succeeded
            "UPDATE deliveries SET state = 'delivered' WHERE event_id = ? AND endpoint_id = 'ep_a'",
            (ev["failed"].event_id,),
        )

    await old.submit_write(as_version_1_left_them)
    await old.close()

    store = await open_sqlite(path)
    assert store.schema_migrated_from == 1
    indexes = await store.run_read(
        lambda c: {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    )
    assert {i for i in indexes if not i.startswith("sqlite_autoindex")} == {
        "events_tenant_stored_status",
        "deliveries_undelivered",
        "deliveries_retry_due",
    }
    expected = {
        "pending": EventStatus.PENDING,
        "delivered": EventStatus.DELIVERED,
        "retry": EventStatus.PENDING,
        "parked": EventStatus.PENDING,
        "failed": EventStatus.FAILED,
        "unrouted": EventStatus.UNROUTED,
    }
    for name, status in expected.items():
        record = await store.get_event(ev[name].event_id)
        assert record is not None and record.status is status, name
        for tenant in (None, "ten_a"):
            listed = await store.list_events(tenant_id=tenant, status=status)
            want = sorted(
                (ev[n].event_id for n, s in expected.items() if s is status), reverse=True
            )
            assert [r.event_id for r in listed] == want, (name, tenant)

    ledger = SqliteLedger(store)
    pending = DeliveryRef(ev["pending"].event_id, "ep_a")
    assert await ledger.page_pending("ten_a", "ep_a", None, 10) == [pending]
    assert await ledger.page_pending("ten_a", "ep_b", None, 10) == []  # one endpoint's lane
    assert await ledger.page_pending("ten_a", "ep_a", pending, 10) == [pending]  # inclusive
    assert await ledger.pending_endpoints() == [Resumed("ten_a", "ep_a", 1, pending)]
    assert await ledger.state_counts(_OPEN) == {
        ("ten_a", DeliveryState.PENDING): 1,
        ("ten_a", DeliveryState.RETRY): 1,
        ("ten_a", DeliveryState.PARKED): 1,
    }
    assert await ledger.promote_due(100.0, 10) == [
        ("ten_a", DeliveryRef(ev["retry"].event_id, "ep_a"))
    ]
    assert await ledger.count_replayable(ReplayFilter(tenant_id="ten_a")) == 1
    resumed = await ledger.replay(ReplayFilter(tenant_id="ten_a"))
    assert [(r.endpoint_id, r.count, r.oldest) for r in resumed] == [
        ("ep_b", 1, DeliveryRef(ev["failed"].event_id, "ep_b"))
    ]
    record = await store.get_event(ev["failed"].event_id)
    assert record is not None and record.status is EventStatus.PENDING


async def test_failed_migration_leaves_the_previous_version_intact(tmp_path: Path) -> None:
    path = tmp_path / "store"
    old = SqliteStore(path, migrations=MIGRATIONS[:1])
    await old.open()
    await old.append(make_event())
    await old.close()
    broken = Migration(2, "half done", ("CREATE TABLE t (x)", "THIS IS NOT SQL"))
    with pytest.raises(StoreError) as failed:
        await SqliteStore(path, migrations=(*MIGRATIONS[:1], broken)).open()
    assert failed.value.reason == "migration_failed" and "half done" in failed.value.message
    assert _version(path) == 1
    with sqlite3.connect(path / DB_FILENAME) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "t" not in tables  # the migration's first statement was rolled back too


async def test_database_from_a_newer_hookrouter_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = SqliteStore(path)
    await store.open()
    await store.close()
    with sqlite3.connect(path / DB_FILENAME) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError) as refused:
        await SqliteStore(path).open()
    assert refused.value.reason == "schema_too_new"
    assert "99" in refused.value.message and f"up to {MIGRATIONS[-1].version}" in str(refused.value)
    assert _version(path) == 99  # untouched


async def test_sqlite_file_of_another_application_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "store"
    path.mkdir()
    with sqlite3.connect(path / DB_FILENAME) as conn:
        conn.execute("PRAGMA application_id = 12345")
        conn.execute("CREATE TABLE theirs (x)")
    conn.close()
    with pytest.raises(StoreError, match="not a hookrouter event store"):
        await SqliteStore(path).open()


def test_migration_chain_must_be_numbered_in_order(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    with pytest.raises(ValueError, match="in order"):
        migrate(conn, (*MIGRATIONS, Migration(MIGRATIONS[-1].version + 2, "gap", ())))
    conn.close()


async def test_connections_use_wal_full_sync_foreign_keys_and_no_autocheckpoint(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite()

    def pragmas(conn: sqlite3.Connection) -> dict[str, Any]:
        names = ("journal_mode", "synchronous", "foreign_keys", "wal_autocheckpoint")
        return {n: conn.execute(f"PRAGMA {n}").fetchone()[0] for n in names}

    expected = {"journal_mode": "wal", "synchronous": 2, "foreign_keys": 1, "wal_autocheckpoint": 0}
    assert await store.submit_write(pragmas) == expected  # the writer: 2 = FULL
    assert await store.run_read(pragmas) == expected
    app_id = await store.run_read(lambda c: c.execute("PRAGMA application_id").fetchone()[0])
    assert app_id == APPLICATION_ID


def _replay(**selection: Any) -> tuple[str, tuple[Any, ...]]:
    where, params = ledger_sql.replay_where(ReplayFilter(**selection))
    return ledger_sql.replay_sql(where), (*params, 10)


def _count_replayable(**selection: Any) -> tuple[str, tuple[Any, ...]]:
    where, params = ledger_sql.replay_where(ReplayFilter(**selection))
    return f"SELECT count(*) FROM deliveries d WHERE {where}", tuple(params)


_DEAD_OR_DISABLED = (DeliveryState.DEAD, DeliveryState.DISABLED)


# Every statement of the store and ledger that looks rows up by something
# other than their full primary key, with the index it must use. The partial
# indexes are only used when the query repeats their WHERE term, so a query
# that forgot it shows up here as a table scan.
@pytest.mark.parametrize(
    ("sql", "params", "index", "sorts"),
    [
        # A dedup probe: the run's key, then the event's existence, by primary keys.
        (sqlite_dedup.probe_sql(1), (42, "s", "p"), "PRIMARY KEY", False),
        (sqlite_dedup.probe_sql(1), (42, "s", "p"), "sqlite_autoindex_events_1", False),
        (sqlite_dedup.EXISTING_SQL, ('["evt_a"]',), "sqlite_autoindex_events_1", False),
        (ledger_sql.PAGE_ALL, ("t", "ep", 10), "deliveries_undelivered", False),
        (ledger_sql.PAGE_FROM, ("t", "ep", "evt_a", 10), "deliveries_undelivered", False),
        (ledger_sql.RESUME_PARKED, ("t", "ep", 10), "deliveries_undelivered", False),
        # Start-up only: sorting the pending rows by endpoint is cheaper than an index.
        (ledger_sql.PENDING_ENDPOINTS, (), "deliveries_undelivered", True),
        (ledger_sql.state_counts_sql(_OPEN), (), "PRIMARY KEY", False),  # delivery_counts
        (ledger_sql.PROMOTE_DUE, (1.0, 10), "deliveries_retry_due", False),
        (*_replay(tenant_id="t"), "deliveries_undelivered", False),
        (*_count_replayable(tenant_id="t"), "deliveries_undelivered", False),
        # Several states, or no tenant: one index range per state, then a sort.
        (*_replay(tenant_id="t", states=_DEAD_OR_DISABLED), "deliveries_undelivered", True),
        (*_replay(endpoint_id="ep"), "deliveries_undelivered", True),
        (*_count_replayable(endpoint_id="ep"), "deliveries_undelivered", False),
        (*_replay(states=_DEAD_OR_DISABLED), "deliveries_undelivered", True),
        (*_replay(event_id="evt_a"), "PRIMARY KEY", False),
        (*_count_replayable(event_id="evt_a"), "PRIMARY KEY", False),
        (sqlite_status.MARK_FAILED, ('["evt_a"]',), "sqlite_autoindex_events_1", False),
    ],
)
async def test_queries_use_their_index(
    open_sqlite: Any, sql: str, params: tuple[Any, ...], index: str, sorts: bool
) -> None:
    store = await open_sqlite()
    plan = await store.run_read(
        lambda c: " | ".join(r[3] for r in c.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    )
    assert f"USING {index}" in plan or f"INDEX {index}" in plan, plan
    assert "SCAN" not in plan.replace("SCAN j VIRTUAL TABLE", ""), plan  # no table/index scan
    assert ("TEMP B-TREE" in plan) is sorts, plan


# The index each admin listing (``list_events``) walks, by tenant or not.
_LISTING_INDEX = {
    (True, None): "tenant_events",  # merged entries; the tail by rowid (tenant_index)
    (True, EventStatus.DELIVERED): "tenant_events",
    (True, EventStatus.FAILED): "events_tenant_stored_status",
    (True, EventStatus.UNROUTED): "events_tenant_stored_status",
    (True, EventStatus.PENDING): "deliveries_undelivered",  # the tenant's open work
    **{(False, s): "sqlite_autoindex_events_1" for s in (None, *EventStatus)},  # primary key
}


@pytest.mark.parametrize(("by_tenant", "status"), list(_LISTING_INDEX))
@pytest.mark.parametrize("paged", [False, True])
def test_event_listings_use_their_index_without_sorting(
    tmp_path: Path, by_tenant: bool, status: EventStatus | None, paged: bool
) -> None:
    conn = sqlite3.connect(tmp_path / "plan.db", isolation_level=None)
    migrate(conn)
    sql = list_events_sql(by_tenant, status, paged, runs=(3, 7))  # two runs: two arms
    params = {"tenant": "t", "before": "evt_z", "limit": 10}
    plan = " | ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    conn.close()
    index = _LISTING_INDEX[by_tenant, status]
    if index == "tenant_events":  # a WITHOUT ROWID table: its primary key is the index
        assert plan.count("SEARCH t USING PRIMARY KEY (run=? AND tenant_id=?") == 2, plan
    else:
        assert f"INDEX {index} " in plan, plan
    assert "SCAN deliveries" not in plan, plan
    if by_tenant and status in (EventStatus.PENDING, None, EventStatus.DELIVERED):
        # The fresh arm reads the rowid range above the watermark (about a
        # second of traffic) and sorts it; through the tenant's index (or the
        # primary key) it read every event the tenant (or the store) has
        # whenever fewer than a page were pending.
        assert "USING INTEGER PRIMARY KEY (rowid>?)" in plan, plan
        assert "events_tenant " not in plan and "SCAN events" not in plan, plan
        assert plan.count("TEMP B-TREE") == 1, plan
    else:
        assert "TEMP B-TREE" not in plan, plan
