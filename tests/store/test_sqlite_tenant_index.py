"""A tenant's events on SQLite (schema version 10): sorted runs appended in batches.

``tenant_index``: an insert writes no tenant index entry; the ledger's
rounds append them as sorted runs and compact the runs in tiers, and the
listing reads every run and the events above the watermark by rowid. What a
user must see: every event of the tenant, newest first, page by page with
cursors, whether merged or not, in every partition, during a compaction too;
what the change is for: a commit, and a merge, of events of many tenants
writes about the pages of one of a single tenant's.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support.store_backends import make_event

from hookrouter.store.base import EventStatus, NewEvent
from hookrouter.store.sqlite import SqliteStore, partitions, tenant_index
from hookrouter.store.sqlite.batch import _insert_sql, _rows, padded_size
from hookrouter.store.sqlite.ledger import SqliteLedger
from hookrouter.store.sqlite.partition_sql import On
from hookrouter.store.sqlite.schema import DB_FILENAME, MIGRATIONS, connect, migrate

BUCKET = 60
# Ids are monotonic within the process: each test takes buckets later than any
# before, in a range of days no other module's tests use.
_DAYS = itertools.count(9000)


def _bucket() -> int:
    """A one-minute bucket in the future of every id minted so far (the next one is free too)."""
    return partitions.bucket_start(time.time() + 86400 * next(_DAYS) * 3, BUCKET)


async def _listing(store: SqliteStore, tenant: str, status: EventStatus | None = None) -> list[str]:
    """The tenant's events, every page of two followed by its cursor."""
    ids: list[str] = []
    before = None
    while True:
        page = await store.list_events(tenant_id=tenant, status=status, limit=2, before=before)
        ids += [r.event_id for r in page]
        if len(page) < 2:
            return ids
        before = page[-1].event_id


async def _merge_all(store: SqliteStore) -> None:
    """Merge every partition's waiting events (the ledger's rounds wait for a batch)."""

    def job(conn: sqlite3.Connection) -> None:
        for partition in store.catalog.partitions:
            tenant_index.merge(On(conn, partition), least=1)

    await store.submit_write(job)


async def _round(store: SqliteStore) -> None:
    """One of the ledger's periodic rounds (the engine's poll, every 0.25 s)."""
    await SqliteLedger(store).promote_due(0.0, 10)


def _merged(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        count = int(conn.execute("SELECT count(*) FROM tenant_events").fetchone()[0])
    conn.close()
    return count


async def test_a_tenants_events_are_listed_before_and_after_their_merge(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite()
    mine = [make_event(tenant="ten_a", endpoints=("ep_a",)) for _ in range(3)]
    theirs = [make_event(tenant="ten_b", endpoints=("ep_b",)) for _ in range(2)]
    for event in (mine[0], theirs[0], mine[1], theirs[1], mine[2]):
        await store.append(event)
    newest_first = [e.event_id for e in reversed(mine)]

    assert _merged(store.db_path) == 0  # nothing indexed at insert
    assert await _listing(store, "ten_a") == newest_first  # read above the watermark
    await _round(store)
    assert _merged(store.db_path) == 0  # a round waits for a batch's worth

    await _merge_all(store)
    assert _merged(store.db_path) == 5
    assert await _listing(store, "ten_a") == newest_first  # read from the merged entries

    later = [make_event(tenant="ten_a", endpoints=("ep_a",)) for _ in range(2)]
    for event in later:
        await store.append(event)
    both = [e.event_id for e in reversed(later)] + newest_first
    assert await _listing(store, "ten_a") == both  # the cursor crosses merged and tail
    assert await _listing(store, "ten_a", EventStatus.PENDING) == both
    assert await _listing(store, "ten_b") == [e.event_id for e in reversed(theirs)]


async def test_the_ledgers_round_merges_once_a_batch_waits(open_sqlite: Any) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    ledger.tenant_merge_at = 4
    events = [make_event(tenant=f"ten_{i % 2}", endpoints=("ep_a",)) for i in range(5)]
    for event in events[:3]:
        await store.append(event)
    await ledger.promote_due(0.0, 10)
    assert _merged(store.db_path) == 0
    for event in events[3:]:
        await store.append(event)
    await ledger.promote_due(0.0, 10)
    assert _merged(store.db_path) == 5
    assert await _listing(store, "ten_1") == [events[3].event_id, events[1].event_id]


async def test_a_round_merges_a_bounded_chunk_and_the_listing_stays_whole(
    open_sqlite: Any,
) -> None:
    # A store far behind (a long pause, a store written without rounds) catches
    # up a chunk per round: each a bounded job on the writer, never the backlog.
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    ledger.tenant_merge_at, ledger.tenant_merge_chunk = 1, 2
    events = [make_event(tenant="ten_a", endpoints=("ep_a",)) for _ in range(5)]
    for event in events:
        await store.append(event)
    expected = [e.event_id for e in reversed(events)]
    for merged in (2, 4, 5, 5):
        await ledger.promote_due(0.0, 10)
        assert _merged(store.db_path) == merged
        assert await _listing(store, "ten_a") == expected  # merged entries + the tail


async def _three_merged(open_sqlite: Any) -> tuple[SqliteStore, list[NewEvent]]:
    """A store with three events of ten_a, all merged into the tenant index."""
    store = await open_sqlite()
    events = [make_event(tenant="ten_a") for _ in range(3)]
    for event in events:
        await store.append(event)
    await _merge_all(store)
    return store, events


async def test_a_deleted_event_leaves_the_tenant_index(open_sqlite: Any) -> None:
    store, events = await _three_merged(open_sqlite)
    doomed = events[1].event_id

    def delete(conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM events WHERE event_id = ?", (doomed,))

    await store.submit_write(delete)
    assert await _listing(store, "ten_a") == [events[2].event_id, events[0].event_id]
    assert _merged(store.db_path) == 2


async def test_an_event_taking_a_deleted_newest_rowid_is_listed(open_sqlite: Any) -> None:
    store, events = await _three_merged(open_sqlite)

    def delete_newest(conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM events WHERE event_id = ?", (events[2].event_id,))

    await store.submit_write(delete_newest)
    new = make_event(tenant="ten_a")
    await store.append(new)  # SQLite gives it the deleted row's rowid, below the old watermark
    listed = [new.event_id, events[1].event_id, events[0].event_id]
    assert await _listing(store, "ten_a") == listed
    await _merge_all(store)
    assert await _listing(store, "ten_a") == listed


async def test_a_tenants_listing_crosses_partitions_merged_or_not(open_sqlite: Any) -> None:
    store = await open_sqlite(bucket_seconds=BUCKET)
    first = _bucket()
    a = [make_event(tenant="ten_a", at_ms=(first + s) * 1000) for s in range(3)]
    b = [make_event(tenant="ten_a", at_ms=(first + BUCKET + s) * 1000) for s in range(3)]
    for event in (*a, *b):
        await store.append(event)
    assert len(store.catalog.partitions) == 3  # events.db and the two buckets
    newest_first = [e.event_id for e in reversed((*a, *b))]
    assert await _listing(store, "ten_a") == newest_first
    await _merge_all(store)
    assert await _listing(store, "ten_a") == newest_first


async def test_partition_files_of_an_older_version_get_the_index_at_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store"
    store = SqliteStore(path, bucket_seconds=BUCKET)
    await store.open()
    start = _bucket()
    events = [make_event(tenant="ten_a", at_ms=(start + s) * 1000) for s in range(3)]
    for event in events:
        await store.append(event)
    await store.close()
    part = path / partitions.partition_file(start)
    with sqlite3.connect(part) as conn:  # as the version before this one made it
        conn.execute("DROP TRIGGER tenant_events_delete")
        conn.execute("DROP TRIGGER tenant_events_clamp")
        conn.execute("DELETE FROM meta WHERE key = 'tenant_rowid'")
        conn.execute("DROP TABLE tenant_events")
        conn.execute("DROP TABLE tenant_runs")
        conn.execute("CREATE INDEX events_tenant ON events (tenant_id, event_id)")
        conn.execute("PRAGMA user_version = 7")
    conn.close()

    store = SqliteStore(path, bucket_seconds=BUCKET)
    await store.open()
    try:
        assert await _listing(store, "ten_a") == [e.event_id for e in reversed(events)]
    finally:
        await store.close()
    assert _merged(part) == 3


def _routed(tenant: str) -> NewEvent:
    """A pending event (an unrouted one is also indexed by status, by tenant)."""
    return make_event(tenant=tenant, endpoints=("ep",))


def _pages_since(conn: sqlite3.Connection, wal: Path, before: int) -> int:
    """WAL pages (frames) appended since the WAL was ``before`` bytes long."""
    page = int(conn.execute("PRAGMA page_size").fetchone()[0])
    return (wal.stat().st_size - before) // (page + 24)


def _wal_pages(conn: sqlite3.Connection, wal: Path, events: list[NewEvent]) -> int:
    """Pages one group commit of ``events`` appends to the WAL (the writer's statement)."""
    before = wal.stat().st_size if wal.exists() else 0
    conn.execute(_insert_sql(padded_size(len(events))), _rows(events))
    return _pages_since(conn, wal, before)


def test_a_commit_of_many_tenants_writes_the_pages_of_one_tenants(tmp_path: Path) -> None:
    """Why the index is merged: per insert it dirtied a leaf per tenant of the commit."""
    conn = connect(tmp_path / DB_FILENAME, role="writer", busy_timeout=5.0, create=True)
    migrate(conn, MIGRATIONS)
    tenants = [f"t{i:04d}" for i in range(1_000)]
    # 20 events for each of 1,000 tenants: the tenants' entries span many leaves.
    conn.execute("BEGIN")
    for _ in range(20):
        conn.execute(_insert_sql(padded_size(1_000)), _rows([_routed(t) for t in tenants]))
    conn.execute("COMMIT")
    wal = tmp_path / f"{DB_FILENAME}-wal"
    one, many = 0, 0
    for k in range(6):  # alternating, so that leaf splits of the table fall on both
        one += _wal_pages(conn, wal, [_routed("t0500") for _ in range(13)])
        many += _wal_pages(conn, wal, [_routed(t) for t in tenants[k::77]])
    conn.close()
    # Before version 9 each commit of 13 tenants wrote about 12 pages more (the
    # tenants' leaves of events_tenant): 157 against 53 over these 6 pairs.
    assert many - one < 6, (one, many)


# ---- runs and their compaction (schema version 10) ---------------------------


def _runs(path: Path) -> list[tuple[int, int | None]]:
    """(run, into_run) of every run, oldest first."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT run, into_run FROM tenant_runs ORDER BY run").fetchall()
    conn.close()
    return [(int(r[0]), None if r[1] is None else int(r[1])) for r in rows]


def _run_per_event(conn: sqlite3.Connection) -> None:
    """Merge every waiting event as a run of its own (many runs from few events)."""
    while tenant_index.merge(conn, least=1, most=1):
        pass


def _pairs(path: Path) -> list[tuple[str, str]]:
    """Every (tenant, event) pair the runs hold, duplicates kept."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT tenant_id, event_id FROM tenant_events").fetchall()
    conn.close()
    return sorted((str(r[0]), str(r[1])) for r in rows)


async def test_rounds_append_runs_and_compact_them_while_the_listing_stays_whole(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    # Runs of 2 events, 2 pairs moved a round: a compaction spans several
    # rounds, so the listing is read half way through one.
    ledger.tenant_merge_at, ledger.tenant_compact_chunk = 2, 2
    fanout = tenant_index.FANOUT
    events: list[NewEvent] = []
    seen_under_way = False
    for i in range(40):
        event = make_event(tenant=f"ten_{i % 3}", endpoints=("ep_a",))
        events.append(event)
        await store.append(event)
        await ledger.promote_due(0.0, 10)
        seen_under_way |= any(into is not None for _, into in _runs(store.db_path))
        for tenant in ("ten_0", "ten_2"):
            mine = [e.event_id for e in reversed(events) if e.tenant_id == tenant]
            assert await _listing(store, tenant) == mine
    assert seen_under_way
    for _ in range(40):  # the rounds finish what is due
        await ledger.promote_due(0.0, 10)
    runs = _runs(store.db_path)
    assert all(into is None for _, into in runs)
    assert len(runs) < 2 * fanout, runs  # fewer than a full tier per tier
    expected = sorted((e.tenant_id, e.event_id) for e in events)
    assert _pairs(store.db_path) == expected  # each pair once, none lost


async def test_an_event_deleted_during_a_compaction_leaves_every_run(open_sqlite: Any) -> None:
    store = await open_sqlite()
    events = [make_event(tenant="ten_a") for _ in range(tenant_index.FANOUT * 2)]
    for event in events:
        await store.append(event)

    def under_way(conn: sqlite3.Connection) -> None:
        _run_per_event(conn)
        tenant_index.compact(conn, base=1, chunk=3)  # under way: some pairs moved

    await store.submit_write(under_way)
    assert any(into is not None for _, into in _runs(store.db_path))
    doomed = {events[0].event_id, events[5].event_id}  # one moved, one still in its input

    def delete(conn: sqlite3.Connection) -> None:
        for event_id in doomed:
            conn.execute("DELETE FROM events WHERE event_id = ?", (event_id,))

    await store.submit_write(delete)
    kept = [e.event_id for e in reversed(events) if e.event_id not in doomed]
    assert [e for _, e in _pairs(store.db_path)] == sorted(kept)
    assert await _listing(store, "ten_a") == kept


async def test_a_store_of_version_9_keeps_its_index_as_one_run(tmp_path: Path) -> None:
    path = tmp_path / "store"
    old = SqliteStore(path, migrations=MIGRATIONS[:9])
    await old.open()
    events = [make_event(tenant=f"ten_{i % 2}") for i in range(6)]
    try:
        for event in events:
            await old.append(event)

        def merge_v9(conn: sqlite3.Connection) -> None:  # version 9's merge, by hand
            conn.execute(
                "INSERT INTO tenant_events SELECT tenant_id, event_id FROM events"
                " ORDER BY tenant_id, event_id"
            )
            conn.execute("UPDATE meta SET value = 6 WHERE key = 'tenant_rowid'")

        await old.submit_write(merge_v9)
    finally:
        await old.close()
    store = SqliteStore(path)
    await store.open()
    try:
        assert _runs(store.db_path) == [(1, None)]
        assert _pairs(store.db_path) == sorted((e.tenant_id, e.event_id) for e in events)
        later = make_event(tenant="ten_1")
        await store.append(later)
        await _merge_all(store)
        assert _runs(store.db_path) == [(1, None), (2, None)]
        mine = [later.event_id] + [e.event_id for e in reversed(events) if e.tenant_id == "ten_1"]
        assert await _listing(store, "ten_1") == mine
    finally:
        await store.close()


def _merge_pages(conn: sqlite3.Connection, wal: Path, tenants: list[str], events: int) -> int:
    """WAL pages of one merge of ``events`` events spread over ``tenants`` (commits apart)."""
    conn.execute("BEGIN")
    for k in range(0, events, 512):
        chunk = [_routed(tenants[(k + i) % len(tenants)]) for i in range(min(512, events - k))]
        conn.execute(_insert_sql(padded_size(len(chunk))), _rows(chunk))
    conn.execute("COMMIT")
    before = wal.stat().st_size
    conn.execute("BEGIN")
    tenant_index.merge(conn, least=1, most=events)
    conn.execute("COMMIT")
    return _pages_since(conn, wal, before)


def test_a_merge_of_many_busy_tenants_writes_the_pages_of_one_tenants(tmp_path: Path) -> None:
    """Why runs: keyed by tenant, a merge wrote a leaf per busy tenant once each owned leaves."""
    conn = connect(tmp_path / DB_FILENAME, role="writer", busy_timeout=5.0, create=True)
    migrate(conn, MIGRATIONS)
    tenants = [f"t{i:04d}" for i in range(1_000)]
    wal = tmp_path / f"{DB_FILENAME}-wal"
    # 200 merged events per tenant: each tenant's pairs own leaves of their own.
    _merge_pages(conn, wal, tenants, 200_000)
    one = _merge_pages(conn, wal, ["t0500"], 4_096)
    many = _merge_pages(conn, wal, tenants, 4_096)
    conn.close()
    # Keyed (tenant_id, event_id), the 1,000-tenant merge wrote a leaf per tenant.
    assert many < 2 * one + 10, (one, many)


async def test_past_max_arms_the_listing_reads_every_run_in_one_arm(
    open_sqlite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_sqlite()
    events = [make_event(tenant=f"ten_{i % 2}") for i in range(9)]
    for event in events:
        await store.append(event)

    await store.submit_write(_run_per_event)
    assert len(_runs(store.db_path)) == 9
    mine = [e.event_id for e in reversed(events) if e.tenant_id == "ten_0"]
    assert await _listing(store, "ten_0") == mine  # nine arms
    monkeypatch.setattr(tenant_index, "MAX_ARMS", 4)
    assert await _listing(store, "ten_0") == mine  # one arm over every run, sorted
    assert await _listing(store, "ten_0", EventStatus.PENDING) == []


async def test_a_round_compacts_more_the_more_it_merged(open_sqlite: Any) -> None:
    # One chunk a round falls behind a high ingest rate and the runs pile up:
    # a round's compaction keeps pace with the events it merged, within a bound.
    store = await open_sqlite()
    events = [make_event(tenant=f"ten_{i % 3}") for i in range(2 * tenant_index.FANOUT)]
    for event in events:
        await store.append(event)

    def rounds(conn: sqlite3.Connection) -> tuple[int, int]:
        _run_per_event(conn)  # sixteen runs of one event
        idle = tenant_index.compact_for(conn, merged=0, base=1, chunk=3)
        busy = tenant_index.compact_for(conn, merged=10, base=1, chunk=3)
        return idle, busy

    idle, busy = await store.submit_write(rounds)
    assert idle == 3  # nothing merged: one chunk
    assert busy == 3 * tenant_index.MAX_CHUNKS  # ten merged: up to the bound
    assert sorted(e for _, e in _pairs(store.db_path)) == sorted(e.event_id for e in events)
    mine = [e.event_id for e in reversed(events) if e.tenant_id == "ten_1"]
    assert await _listing(store, "ten_1") == mine
