"""SQLite schema: migrations, durability settings, and the indexes queries rely on."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tests.support.store_backends import make_event

from hookrouter.errors import StoreError
from hookrouter.store.base import EventStatus
from hookrouter.store.sqlite import SqliteStore
from hookrouter.store.sqlite_queries import list_events_sql
from hookrouter.store.sqlite_schema import (
    APPLICATION_ID,
    DB_FILENAME,
    MIGRATIONS,
    Migration,
    migrate,
)

_V2 = Migration(2, "events.note for the test", ("ALTER TABLE events ADD COLUMN note TEXT",))


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


async def test_database_at_version_1_is_migrated_forward_keeping_its_data(
    open_sqlite: Any, tmp_path: Path
) -> None:
    path = tmp_path / "store"
    old = SqliteStore(path, migrations=MIGRATIONS[:1])  # what a version-1 hookrouter wrote
    await old.open()
    event = make_event(endpoints=("ep_a",))
    await old.append(event)
    await old.close()
    assert _version(path) == 1

    store = await open_sqlite(path, migrations=(*MIGRATIONS[:1], _V2))
    assert store.schema_migrated_from == 1
    assert _version(path) == 2
    record = await store.get_event(event.event_id)
    assert record is not None and len(record.deliveries) == 1
    notes = await store.run_read(lambda c: c.execute("SELECT note FROM events").fetchall())
    assert notes == [(None,)]


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
        migrate(conn, (*MIGRATIONS, Migration(5, "gap", ())))
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


@pytest.mark.parametrize(
    ("sql", "params", "index"),
    [
        (
            "SELECT event_id FROM events WHERE source_id = ? AND provider_event_id = ?",
            ("s", "p"),
            "events_dedup",
        ),
        (
            "SELECT event_id FROM events WHERE tenant_id = ? AND event_id < ?"
            " ORDER BY event_id DESC LIMIT 10",
            ("t", "evt_z"),
            "events_tenant",
        ),
        (
            "SELECT event_id FROM events WHERE tenant_id = ? AND status = ?"
            " ORDER BY event_id DESC LIMIT 10",
            ("t", "pending"),
            "events_tenant_status",
        ),
        (
            "SELECT event_id, endpoint_id FROM deliveries WHERE tenant_id = ? AND state = ?"
            " ORDER BY event_id LIMIT 10",
            ("t", "pending"),
            "deliveries_tenant_state",
        ),
        (
            "SELECT event_id FROM deliveries WHERE state = 'retry' AND next_attempt_at <= ?"
            " ORDER BY next_attempt_at LIMIT 10",
            (1.0,),
            "deliveries_due",
        ),
    ],
)
async def test_queries_use_their_index_without_sorting(
    open_sqlite: Any, sql: str, params: tuple[Any, ...], index: str
) -> None:
    store = await open_sqlite()
    plan = await store.run_read(
        lambda c: " | ".join(r[3] for r in c.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    )
    assert f"INDEX {index}" in plan, plan
    assert "TEMP B-TREE" not in plan, plan  # served in index order, no sort step


# The index each admin listing (``list_events``) walks, by tenant or not.
_LISTING_INDEX = {
    (True, None): "events_tenant",
    (True, EventStatus.DELIVERED): "events_tenant",
    (True, EventStatus.FAILED): "events_tenant_status",
    (True, EventStatus.UNROUTED): "events_tenant_status",
    (True, EventStatus.PENDING): "deliveries_tenant_state",  # the tenant's open deliveries
    **{(False, s): "sqlite_autoindex_events_1" for s in (None, *EventStatus)},  # primary key
}


@pytest.mark.parametrize(("by_tenant", "status"), list(_LISTING_INDEX))
@pytest.mark.parametrize("paged", [False, True])
def test_event_listings_use_their_index_without_sorting(
    tmp_path: Path, by_tenant: bool, status: EventStatus | None, paged: bool
) -> None:
    conn = sqlite3.connect(tmp_path / "plan.db", isolation_level=None)
    migrate(conn)
    sql = list_events_sql(by_tenant, status, paged)
    params = {"tenant": "t", "before": "evt_z", "limit": 10}
    plan = " | ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    conn.close()
    assert f"INDEX {_LISTING_INDEX[by_tenant, status]} " in plan, plan
    assert "TEMP B-TREE" not in plan and "SCAN deliveries" not in plan, plan
