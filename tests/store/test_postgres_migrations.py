"""Schema migrations on PostgreSQL: one node migrates, older code refuses, writers go on.

A rolling upgrade migrates while the nodes not yet upgraded keep ingesting:
a migration must never queue writers behind its locks for longer than a
short try, and an index over a large table is built without blocking them
(``store.postgres.online_index``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest
from tests.support.postgres_store import (
    OpenStore,
    postgres_available,
    schema_for,
    shared_server,
    sql,
    store_options,
)
from tests.support.store_backends import make_event

from hookrouter.errors import StoreError
from hookrouter.flow.credits import DeliveryRef
from hookrouter.store import DeliveryState
from hookrouter.store.ledger import Resumed
from hookrouter.store.postgres import PostgresStore, schema
from hookrouter.store.postgres.schema import MIGRATIONS, Migration
from hookrouter.store.postgres.short_locks import ShortLocks

pytestmark = pytest.mark.skipif(not postgres_available(), reason="PostgreSQL is not installed")

V6 = MIGRATIONS[:6]
PENDING_COLUMNS = "(partition, tenant_id, endpoint_id, event_id)"
PENDING_DEFINITION = f"{PENDING_COLUMNS} WHERE state = 'pending'"


async def connect(tmp_path: Path, name: str = "test") -> asyncpg.Connection:
    return await asyncpg.connect(
        shared_server().dsn,
        server_settings={"search_path": schema_for(tmp_path), "application_name": name},
    )


LongWriter = Callable[[], Awaitable[asyncpg.Connection]]


@pytest.fixture
async def long_writer(tmp_path: Path) -> AsyncIterator[LongWriter]:
    """Start another node's transaction that has written to deliveries and not committed yet."""
    opened: list[asyncpg.Connection] = []

    async def start() -> asyncpg.Connection:
        conn = await connect(tmp_path, "long writer")
        opened.append(conn)
        await conn.execute("BEGIN")
        await conn.execute("LOCK TABLE deliveries IN ROW EXCLUSIVE MODE")  # what an INSERT holds
        return conn

    yield start
    for conn in opened:
        await conn.close()


async def pending_index_state(tmp_path: Path) -> dict[str, tuple[bool, str]]:
    """Every index of deliveries and of its partitions: name -> (valid, definition)."""
    rows = await sql(
        tmp_path,
        "SELECT c.relname, x.indisvalid, pg_get_indexdef(x.indexrelid) FROM pg_index AS x"
        " JOIN pg_class AS c ON c.oid = x.indexrelid"
        " JOIN pg_class AS t ON t.oid = x.indrelid"
        " WHERE t.relname LIKE 'deliveries%' AND t.relnamespace = current_schema()::regnamespace",
    )
    return {str(r[0]): (bool(r[1]), str(r[2])) for r in rows}


NEXT = len(MIGRATIONS) + 1
SLOW_V2 = Migration(
    NEXT,
    "a slow step that fails if applied twice",
    ("SELECT pg_sleep(0.5)", "CREATE TABLE probe (n integer)"),
)


async def test_nodes_opening_at_once_migrate_once(open_store: OpenStore, tmp_path: Path) -> None:
    migrations = (*MIGRATIONS, SLOW_V2)
    started = time.monotonic()
    a, b = await asyncio.gather(
        open_store(node_id="a", migrations=migrations),
        open_store(node_id="b", migrations=migrations),
    )
    # One node applied both versions; the other waited for its lock, then found nothing to do.
    assert sorted([a.schema_migrated_from, b.schema_migrated_from]) == [0, NEXT]
    assert time.monotonic() - started >= 0.5
    rows = await sql(tmp_path, "SELECT version, applied_by FROM schema_versions ORDER BY 1")
    assert [r[0] for r in rows] == list(range(1, NEXT + 1))
    assert len({r[1] for r in rows}) == 1


async def test_older_code_refuses_a_newer_schema(open_store: OpenStore, tmp_path: Path) -> None:
    newer = await open_store(migrations=(*MIGRATIONS, SLOW_V2))
    await newer.close()
    old = PostgresStore(**store_options(tmp_path))  # type: ignore[arg-type]
    with pytest.raises(StoreError) as info:
        await old.open()
    assert info.value.reason == "schema_too_new"
    assert (
        f"is at version {NEXT} but this hookrouter only knows versions up to {NEXT - 1}"
        in info.value.message
    )
    assert "upgrade this node" in info.value.message


async def test_a_store_of_version_6_upgrades_and_its_open_work_is_found(
    open_store: OpenStore, tmp_path: Path
) -> None:
    """Migration 7: deliveries_pending leads with the partition; deliveries_partition_open goes."""
    old = PostgresStore(**store_options(tmp_path), migrations=MIGRATIONS[:6])  # type: ignore[arg-type]
    await old.open()
    events = [make_event(endpoints=("ep_a", "ep_b")) for _ in range(4)]
    other = make_event(tenant="ten_b", endpoints=("ep_c",))
    for event in (*events, other):
        await old.append(event)
    ledger = old.delivery_ledger()
    assert ledger is not None
    assert await ledger.park_pending("ten_a", "ep_b", 100.0, 100) == 4
    await old.close()

    store = await open_store()
    assert store.schema_migrated_from == 6
    indexes = dict(
        (r[0], r[1])
        for r in await sql(
            tmp_path,
            "SELECT indexname, indexdef FROM pg_indexes"
            " WHERE schemaname = current_schema() AND tablename = 'deliveries'",
        )
    )
    assert "deliveries_partition_open" not in indexes
    assert "(partition, tenant_id, endpoint_id, event_id)" in indexes["deliveries_pending"]
    ledger = store.delivery_ledger()
    assert ledger is not None
    backlog = sorted(await ledger.pending_endpoints(), key=lambda r: r.tenant_id)
    assert backlog == [
        Resumed("ten_a", "ep_a", 4, DeliveryRef(events[0].event_id, "ep_a")),
        Resumed("ten_b", "ep_c", 1, DeliveryRef(other.event_id, "ep_c")),
    ]
    paged = await ledger.page_pending("ten_a", "ep_a", None, 10)
    assert [r[0] for r in paged] == [e.event_id for e in events]
    # A takeover of ten_a's partition resumes its parked work, and no other partition's.
    assert await ledger.resume_partitions([store.partition_of("ten_a")]) == 4
    assert await ledger.state_counts((DeliveryState.PARKED,)) == {}


async def test_a_fresh_delivery_takes_two_index_entries(
    open_store: OpenStore, tmp_path: Path
) -> None:
    """Its primary key and deliveries_pending: no other index of deliveries admits a pending row."""
    await open_store()
    rows = await sql(
        tmp_path,
        "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index AS i"
        " JOIN pg_class AS c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = 'deliveries'::regclass",
    )
    taking = sorted(name for name, pred in rows if pred is None or "'pending'" in pred)
    assert taking == ["deliveries_pending", "deliveries_pkey"]


# ---- migration 7 on a table that takes writes --------------------------------------------


async def test_migration_7_lets_the_running_nodes_write_while_a_transaction_holds_the_table(
    open_store: OpenStore, tmp_path: Path, long_writer: LongWriter
) -> None:
    """A rolling upgrade: the node not yet upgraded keeps ingesting while the new one migrates.

    The new node's store waits up to 30 s for a lock (an operator's choice), so a
    migration queueing for its lock would hold every insert behind it that long.
    """
    old = await open_store(node_id="old", migrations=V6)
    await old.append(make_event(endpoints=("ep_a",)))
    writer = await long_writer()
    upgrade = asyncio.create_task(open_store(node_id="new", lock_timeout=30.0))
    await asyncio.sleep(1.0)  # the migration is running and meets the long transaction
    late = [make_event(endpoints=("ep_a",)) for _ in range(3)]
    for event in late:
        result = await asyncio.wait_for(old.append(event), 5.0)
        assert result.event_id == event.event_id
    assert not upgrade.done()  # it waits for the long transaction, holding nobody up
    await writer.execute("COMMIT")
    new = await asyncio.wait_for(upgrade, 60.0)
    assert new.schema_migrated_from == 6
    indexes = await pending_index_state(tmp_path)
    assert (
        indexes["deliveries_pending"]
        == (
            True,
            indexes["deliveries_pending"][1],
        )
        and PENDING_COLUMNS in indexes["deliveries_pending"][1]
    )
    assert "deliveries_partition_open" not in indexes
    assert not [name for name in indexes if "building" in name]
    ledger = new.delivery_ledger()
    assert ledger is not None
    paged = await ledger.page_pending("ten_a", "ep_a", None, 10)
    assert [r[0] for r in paged][-3:] == [e.event_id for e in late]


async def test_an_interrupted_migration_7_resumes_and_rebuilds_what_failed(
    open_store: OpenStore, tmp_path: Path
) -> None:
    """What a node that died mid-build leaves is taken up: kept where valid, rebuilt where not."""
    old = await open_store(migrations=V6)
    events = [make_event(endpoints=("ep_a",)) for _ in range(3)]
    for event in events:
        await old.append(event)
    await old.close()
    with_rows = str(
        (await sql(tmp_path, "SELECT tableoid::regclass FROM deliveries LIMIT 1"))[0][0]
    )
    partitions = [
        str(r[0])
        for r in await sql(
            tmp_path,
            "SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'deliveries'::regclass",
        )
    ]
    empty = next(p for p in partitions if p != with_rows)
    conn = await connect(tmp_path)
    try:
        await conn.execute(
            f"CREATE INDEX deliveries_pending_building ON ONLY deliveries {PENDING_DEFINITION}"
        )
        await conn.execute(f"CREATE INDEX {empty}_pending_ix ON {empty} {PENDING_DEFINITION}")
        await conn.execute(
            f"ALTER INDEX deliveries_pending_building ATTACH PARTITION {empty}_pending_ix"
        )
        kept = await conn.fetchval(f"SELECT '{empty}_pending_ix'::regclass::oid")
        with pytest.raises(asyncpg.UniqueViolationError):  # a build that failed half way
            await conn.execute(
                f"CREATE UNIQUE INDEX CONCURRENTLY {with_rows}_pending_ix"
                f" ON {with_rows} (tenant_id) WHERE state = 'pending'"
            )
        # Another node makes a day while the build is under way: it gets its index from the parent.
        later = max(await schema.existing_days(conn)) + 30
        await schema.ensure_days(conn, schema_for(tmp_path), [later])
    finally:
        await conn.close()
    assert (await pending_index_state(tmp_path))[f"{with_rows}_pending_ix"][0] is False

    store = await open_store()
    assert store.schema_migrated_from == 6
    indexes = await pending_index_state(tmp_path)
    assert [name for name, (valid, _) in indexes.items() if not valid] == []
    assert indexes["deliveries_pending"][1].endswith(
        f"{PENDING_COLUMNS} WHERE (state = 'pending'::text)"
    )
    rebuilt = indexes[f"{with_rows}_pending_ix"][1]
    assert "UNIQUE" not in rebuilt and PENDING_COLUMNS in rebuilt
    assert (await sql(tmp_path, f"SELECT '{empty}_pending_ix'::regclass::oid"))[0][0] == kept
    attached = await sql(
        tmp_path,
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'deliveries_pending'::regclass",
    )
    assert attached[0][0] == len(partitions) + 1
    ledger = store.delivery_ledger()
    assert ledger is not None
    paged = await ledger.page_pending("ten_a", "ep_a", None, 10)
    assert [r[0] for r in paged] == [e.event_id for e in events]


async def test_a_migration_that_cannot_get_its_lock_gives_up_and_names_the_holder(
    open_store: OpenStore, tmp_path: Path, long_writer: LongWriter
) -> None:
    await (await open_store(migrations=V6)).close()
    await long_writer()
    conn = await connect(tmp_path)
    try:
        with pytest.raises(StoreError) as info:
            await schema.migrate(
                conn,
                schema_for(tmp_path),
                partitions=16,
                node_id="new",
                locks=ShortLocks(lock_timeout_ms=50, deadline=1.0),
            )
        version = await conn.fetchval("SELECT max(version) FROM schema_versions")
    finally:
        await conn.close()
    assert info.value.reason == "migration_blocked"
    assert "could not lock deliveries" in info.value.message
    assert "long writer" in info.value.message
    assert version == 6
