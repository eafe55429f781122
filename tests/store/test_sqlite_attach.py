"""More time partitions than SQLite attaches to one connection (issue 34), with real files.

Debian's libsqlite3 attaches at most 10 files per connection and the dedup
runs take one, so a store of 25 one-minute buckets only works if each
connection attaches the partitions a statement needs, when it needs them
(``partition_sql.Attachments``). Everything a user reaches is checked here
across all 25: lookups by id and provider id, listings with cursors,
page-in, outcomes into sealed buckets, counts, replay by window, the dedup
rebuild at open, and retention. The kill -9 run with more partitions than
the limit is in test_sqlite_partitions.py.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
from pathlib import Path
from typing import Any

from tests.support.cyclic_garbage import cyclic_garbage
from tests.support.store_backends import make_event

from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.base import AttemptRecord, DeliveryState, EventStatus, NewEvent
from hookrouter.store.ledger import OutcomeRecord, ReplayFilter
from hookrouter.store.retention import Cutoffs
from hookrouter.store.sqlite import SqliteStore, partitions, schema
from hookrouter.store.sqlite.dedup_tiers import TierPolicy
from hookrouter.store.sqlite.partition_sql import PartitionConnection

BUCKET = 60
BUCKETS = 25  # well past the 9 partitions a connection attaches beside events.db and dedup.db
PER_BUCKET = 3
# Ids are monotonic within the process: each test takes buckets later than any before
# (and than test_sqlite_switch's, which count days from 1).
_DAYS = itertools.count(1000)


def _starts() -> list[int]:
    first = partitions.bucket_start(time.time() + 86400 * next(_DAYS) * 3, BUCKET)
    return [first + i * BUCKET for i in range(BUCKETS)]


def _at(bucket: int, second: float, **kwargs: Any) -> NewEvent:
    return make_event(at_ms=int((bucket + second) * 1000), **kwargs)


def _outcome(ref: DeliveryRef, state: DeliveryState, at: float = 100.0) -> OutcomeRecord:
    code = 200 if state is DeliveryState.DELIVERED else 500
    attempt = AttemptRecord(1, at, 3.0, code, None)
    following = at + 10 if state is DeliveryState.RETRY else None
    return OutcomeRecord(ref, state, 1, following, code, None, at, attempt)


async def _fill(store: SqliteStore, starts: list[int]) -> list[NewEvent]:
    events = [
        _at(start, second, provider_event_id=f"k{start}-{second}", endpoints=("ep_a",))
        for start in starts
        for second in range(PER_BUCKET)
    ]
    for event in events:
        assert not (await store.append(event)).duplicate
    return events


def _limit() -> int:
    conn = sqlite3.connect(":memory:")
    try:
        return conn.getlimit(sqlite3.SQLITE_LIMIT_ATTACHED)
    finally:
        conn.close()


async def test_every_partition_is_reached_though_few_are_attached_at_once(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite(bucket_seconds=BUCKET)
    ledger = store.delivery_ledger()
    starts = _starts()
    events = await _fill(store, starts)
    assert _limit() < BUCKETS + 1  # the point of the test: more files than one connection holds
    assert [p.file for p in store.catalog.partitions] == ["events.db"] + [
        partitions.partition_file(s) for s in starts
    ]

    for event in events:  # by id (the id names its partition) and by provider id
        record = await store.get_event(event.event_id, with_body=True)
        assert record is not None and record.body == event.body
        assert await store.find_event("src_a", event.provider_event_id or "") == event.event_id
    repeat = await store.append(_at(starts[-1], 50, provider_event_id=events[0].provider_event_id))
    assert repeat.duplicate and repeat.event_id == events[0].event_id

    seen: list[str] = []  # listing with cursors, newest first, across every file
    before: str | None = None
    while page := await store.list_events(limit=7, before=before):
        seen += [r.event_id for r in page]
        before = page[-1].event_id
    assert seen == [e.event_id for e in reversed(events)]

    refs = await ledger.page_pending("ten_a", "ep_a", None, 10)  # page-in, oldest first
    while len(page_in := await ledger.page_pending("ten_a", "ep_a", refs[-1], 10)) > 1:
        assert page_in[0] == refs[-1]  # a page starts at its cursor
        refs += page_in[1:]
    assert [r.event_id for r in refs] == [e.event_id for e in events]

    # One outcome flush writing into every sealed bucket at once: more files
    # than one transaction can hold, so it commits in steps.
    firsts = [DeliveryRef(e.event_id, "ep_a") for e in events[::PER_BUCKET]]
    await ledger.record([_outcome(r, DeliveryState.DEAD) for r in firsts])
    await ledger.record([])
    counts = await ledger.state_counts()
    assert counts[("ten_a", DeliveryState.DEAD)] == BUCKETS
    assert counts[("ten_a", DeliveryState.PENDING)] == len(events) - BUCKETS
    for ref in firsts:
        record = await store.get_event(ref.event_id)
        assert record is not None and record.status is EventStatus.FAILED

    # Replay by window: only the dead deliveries of buckets 3, 4 and 5 reopen.
    window = ReplayFilter(tenant_id="ten_a", since=float(starts[3]), until=float(starts[6]))
    assert await ledger.count_replayable(window) == 3
    resumed = await ledger.replay(window)
    assert [(r.count, r.oldest.event_id) for r in resumed] == [(3, firsts[3].event_id)]
    assert await ledger.count_replayable(ReplayFilter(tenant_id="ten_a")) == BUCKETS - 3

    # Retries due in many buckets are promoted in one job.
    retries = [DeliveryRef(e.event_id, "ep_a") for e in events[1::PER_BUCKET]]
    await ledger.record([_outcome(r, DeliveryState.RETRY) for r in retries])
    promoted = await ledger.promote_due(1000.0, 100)
    assert sorted(r.event_id for _, r in promoted) == [r.event_id for r in retries]

    stats = store.stats()  # the writer attached on demand, never past SQLite's limit
    assert stats["partitions_attached"] < _limit() < stats["partition_attaches"]
    assert stats["partition_job_splits"] > 0


async def test_retention_removes_the_oldest_of_many_partitions(open_sqlite: Any) -> None:
    store = await open_sqlite(bucket_seconds=BUCKET)
    ledger = store.delivery_ledger()
    starts = _starts()
    events = await _fill(store, starts)
    done = [DeliveryRef(e.event_id, "ep_a") for e in events[: 5 * PER_BUCKET]]
    await ledger.record([_outcome(r, DeliveryState.DELIVERED) for r in done])
    await ledger.record([])
    expire = Cutoffs(delivered_before=float(starts[6]), failed_before=float(starts[6]))
    dropped = await store.drop_expired_partitions(expire)
    # Buckets 0-4 are done; bucket 5's deliveries are still open.
    assert dropped == [partitions.partition_file(s) for s in starts[:5]]
    for start in starts[:5]:
        assert not (store.path / partitions.partition_file(start)).exists()
    assert await store.get_event(events[0].event_id) is None
    kept = events[5 * PER_BUCKET :]
    assert [r.event_id for r in await store.list_events(limit=100)] == [
        e.event_id for e in reversed(kept)
    ]
    assert not (await store.append(_at(starts[-1], 55))).duplicate


async def test_the_dedup_rebuild_at_open_reads_every_partition(tmp_path: Path) -> None:
    path = tmp_path / "store"
    tiny = TierPolicy(hot_limit=4, fanout=2)
    starts = _starts()
    store = SqliteStore(path, bucket_seconds=BUCKET, dedup_policy=tiny)
    await store.open()
    try:
        events = await _fill(store, starts)
    finally:
        await store.close()
    for suffix in ("", "-wal", "-shm"):  # rebuilt from every partition at the next open
        (path / f"dedup.db{suffix}").unlink(missing_ok=True)
    again = SqliteStore(path, bucket_seconds=BUCKET, dedup_policy=tiny)
    await again.open()
    try:
        assert len(again.catalog.partitions) == BUCKETS + 1
        for index, original in enumerate(events):
            key = original.provider_event_id
            repeat = await again.append(_at(starts[-1], 30 + index / 100, provider_event_id=key))
            assert repeat.duplicate and repeat.event_id == original.event_id
    finally:
        await again.close()


def _sync_levels(conn: sqlite3.Connection) -> dict[str, int]:
    """PRAGMA <schema>.synchronous of events.db and every partition attached (1 NORMAL, 2 FULL)."""
    listed = [row[1] for row in conn.execute("PRAGMA database_list")]
    names = [n for n in listed if n == "main" or n.startswith("p")]  # not temp, not dedup's
    return {n: int(conn.execute(f"PRAGMA {n}.synchronous").fetchone()[0]) for n in names}


async def test_unsynced_jobs_skip_the_fsync_in_partition_files_too(open_sqlite: Any) -> None:
    """Outcome flushes into sealed buckets are not fsynced, as in events.db; events still are."""
    store = await open_sqlite(bucket_seconds=BUCKET)
    starts = _starts()[:4]
    await _fill(store, starts)
    # The writer still has the buckets it filled attached (fewer than the limit).
    unsynced = await store.submit_write(_sync_levels, synced=False)
    assert len(unsynced) >= 2 and set(unsynced.values()) == {1}, unsynced
    synced = await store.submit_write(_sync_levels)
    assert set(synced.values()) == {2}, synced
    assert not (await store.append(_at(starts[-1], 30))).duplicate


def test_a_closed_connection_is_freed_without_the_cyclic_collector(tmp_path: Path) -> None:
    # Readers and write jobs open and drop connections while the router runs;
    # each one left in a cycle with its attachments waited for a collection.
    with cyclic_garbage() as garbage:
        for _ in range(5):
            conn = schema.connect(
                tmp_path / "events.db", role="writer", busy_timeout=1, create=True
            )
            assert isinstance(conn, PartitionConnection) and not conn.attachments.names
            conn.close()
            del conn
    assert garbage["PartitionConnection"] == 0, garbage
    assert garbage["Attachments"] == 0, garbage
