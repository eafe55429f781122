"""Compaction of a time partition kept by a few failed events (issue 34), with real files.

Retention rewrites such a partition with only the events it keeps instead of
deleting the rest row by row (``hookrouter.store.sqlite.compaction``). What
users rely on: the kept events stay readable and replayable, a write made
after the plan cancels it, and a crash at either step loses nothing.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.store.test_sqlite_partition_retention import (
    POLICY,
    _at,
    _buckets,
    _file_rows,
    _finished,
    _outcome,
    _pass,
)
from tests.support.store_backends import make_event
from tests.support.store_jobs import queue_behind, reopen

from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.base import AttemptRecord, DeliveryState, NewEvent
from hookrouter.store.ledger import OutcomeRecord, ReplayFilter
from hookrouter.store.sqlite import SqliteStore, compaction, partition_files, partitions
from hookrouter.store.sqlite.partition_sql import On
from hookrouter.store.sqlite.stats import typed as typed_stats

DELIVERED = 20


async def _kept_by_one_failure(store: SqliteStore) -> tuple[int, int, NewEvent, NewEvent]:
    """Bucket a: delivered events and one dead-lettered event; the writer in bucket c."""
    a, _, c = _buckets()
    await _finished(store, [_at(a, s) for s in range(DELIVERED)], DeliveryState.DELIVERED)
    failed = _at(a, 40)
    await _finished(store, [failed], DeliveryState.DEAD)
    newest = make_event(at_ms=(c + 1) * 1000)
    await store.append(newest)
    return a, c, failed, newest


def _partition(store: SqliteStore, start: int) -> partitions.Partition:
    (found,) = [p for p in store.catalog.partitions if p.start == start]
    return found


def test_the_copies_look_up_the_kept_rows_instead_of_reading_the_old_partition(
    tmp_path: Path,
) -> None:
    """The swap runs on the writer: each copy costs what is kept, not the partition's size."""
    old = partition_files.create_named(tmp_path, "old.db", busy_timeout=5)
    target = partition_files.create_named(tmp_path, "new.db", busy_timeout=5)
    conn = sqlite3.connect(target)
    try:
        conn.execute("ATTACH DATABASE ? AS old", (str(old),))
        for table, statement in compaction.copy_statements(conn):
            args = ("[]",) if table == "events" else ()
            steps = [str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + statement, args)]
            # meta and tenant_runs are a few rows each, copied whole.
            small = table in ("meta", "tenant_runs")
            scans = [step for step in steps if step.startswith("SCAN old.") and not small]
            assert scans == [], (table, steps)
    finally:
        conn.close()


async def test_a_compacted_failed_event_is_replayed_and_delivered(open_sqlite: Any) -> None:
    store = await open_sqlite(bucket_seconds=60)
    a, c, failed, _ = await _kept_by_one_failure(store)
    assert await _pass(store, c + 60) == 0
    assert store.stats()["partitions_compacted"] == 1

    ledger = store.delivery_ledger()
    resumed = await ledger.replay(ReplayFilter(event_id=failed.event_id))
    assert [(r.count, r.oldest and r.oldest.event_id) for r in resumed] == [(1, failed.event_id)]
    pending = await ledger.page_pending("ten_a", "ep_a", None, 10)
    assert [r.event_id for r in pending] == [failed.event_id]
    await ledger.record([_outcome(failed, DeliveryState.DELIVERED)])
    await ledger.record([])
    found = await store.get_event(failed.event_id)
    assert found is not None and found.status.value == "delivered"
    assert _file_rows(store, a)[0] == 1
    stats = typed_stats(store.stats())
    assert stats is not None  # the metrics the operator watches
    assert {s.name: s.value for s in stats.backend}["partitions_compacted"] == 1


async def test_a_write_after_the_plan_cancels_the_swap(
    open_sqlite: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = await open_sqlite(bucket_seconds=60)
    a, c, failed, _ = await _kept_by_one_failure(store)
    before = _partition(store, a)
    planned = await _planned(store, before, c)
    assert len(planned.kept) == 1

    # An operator replays the failed event between the plan and the swap.
    await store.delivery_ledger().replay(ReplayFilter(event_id=failed.event_id))
    copy = _copy(store, planned)
    with caplog.at_level("INFO", logger=compaction.__name__):
        assert await store.submit_write(compaction.swap_job(store.path, copy)) is False
    copy.watch.close()
    assert f"compaction of {before.file} cancelled: its deliveries changed" in caplog.text

    assert _partition(store, a) == before  # the catalog still names the old file
    pending = await store.delivery_ledger().page_pending("ten_a", "ep_a", None, 10)
    assert [r.event_id for r in pending] == [failed.event_id]


async def _planned(store: SqliteStore, partition: partitions.Partition, c: int) -> compaction.Plan:
    """Step 1 as a retention pass in bucket ``c + 1`` makes it (there is one to make)."""
    planned = await store.run_read(
        lambda conn: compaction.plan(conn, partition, POLICY.cutoffs(c + 60))
    )
    assert planned is not None
    return planned


def _copy(store: SqliteStore, planned: compaction.Plan) -> compaction.Copy:
    """Step 2 as the store runs it, on its own connection."""
    target = compaction.compacted_file(planned.partition.file)
    partition_files.create_named(store.path, target, busy_timeout=1.0)
    return compaction.copy_kept(store.path, planned, target, busy_timeout=1.0)


async def test_a_pass_cancelled_mid_copy_leaves_no_file_and_the_next_pass_compacts(
    open_sqlite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Closing the store cancels a retention pass; the copy's thread cannot be
    # stopped. Removing its file at once would let it write a new one (or
    # fail half way), with its read-only watch connection left open.
    store = await open_sqlite(bucket_seconds=60)
    a, c, _, newest = await _kept_by_one_failure(store)
    before = _partition(store, a)
    started, release, ended = threading.Event(), threading.Event(), threading.Event()
    copies: list[compaction.Copy] = []
    real_copy = compaction.copy_kept

    def held_copy(*args: Any, **kwargs: Any) -> compaction.Copy:
        started.set()
        try:
            release.wait(10)
            copies.append(real_copy(*args, **kwargs))
            return copies[-1]
        finally:
            ended.set()

    monkeypatch.setattr(compaction, "copy_kept", held_copy)
    passing = asyncio.create_task(_pass(store, c + 60))
    assert await asyncio.to_thread(started.wait, 10)
    passing.cancel()
    await asyncio.sleep(0.05)  # the cancel is delivered while the copy is held
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await passing
    assert ended.is_set(), "the cancelled pass did not wait for its copy"
    old = _partition(store, a)
    assert not (store.path / compaction.compacted_file(old.file)).exists()
    with pytest.raises(sqlite3.ProgrammingError):  # its watch is closed
        copies[0].watch.changed()
    assert old == before  # the catalog still names the old file
    assert await store.get_event(newest.event_id) is not None

    release.set()  # the next pass compacts what the cancelled one left
    assert await _pass(store, c + 60) == 0
    assert store.stats()["partitions_compacted"] == 1
    assert _file_rows(store, a)[0] == 1


def _attempts(store: SqliteStore, file: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(store.path / file)
    try:
        return conn.execute("SELECT attempt, status_code FROM attempts ORDER BY attempt").fetchall()
    finally:
        conn.close()


async def test_a_write_after_the_copy_cancels_the_swap_even_when_the_counts_match(
    open_sqlite: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The copy is made off the writer, so the writer goes on between it and the
    # swap: a replay that failed again leaves the partition's delivery counts
    # as they were, but the copy lacks its attempt. Swapped, that attempt would
    # be gone from the event's history.
    store = await open_sqlite(bucket_seconds=60)
    a, c, failed, _ = await _kept_by_one_failure(store)
    before = _partition(store, a)
    copy = _copy(store, await _planned(store, before, c))

    ledger = store.delivery_ledger()
    await ledger.replay(ReplayFilter(event_id=failed.event_id))
    pending = await ledger.page_pending("ten_a", "ep_a", None, 10)
    assert [r.event_id for r in pending] == [failed.event_id]
    again = AttemptRecord(2, 200.0, 3.0, 503, None)
    ref = DeliveryRef(failed.event_id, "ep_a")
    await ledger.record([OutcomeRecord(ref, DeliveryState.DEAD, 2, None, 503, None, 200.0, again)])
    await ledger.record([])
    assert (
        await store.run_read(lambda conn: compaction.fingerprint(On(conn, before)))
        == copy.plan.fingerprint
    )

    with caplog.at_level("INFO", logger=compaction.__name__):
        assert await store.submit_write(compaction.swap_job(store.path, copy)) is False
    copy.watch.close()
    assert "cancelled: it was written to since the copy began" in caplog.text
    assert _partition(store, a) == before
    assert _attempts(store, before.file) == [(1, 500), (2, 503)]
    assert _attempts(store, copy.target) == [(1, 500)]  # what the swap would have kept


async def test_a_write_earlier_in_the_swaps_commit_cycle_cancels_it(open_sqlite: Any) -> None:
    # Jobs of one cycle share a transaction: a write queued just before the
    # swap is not committed yet when the swap runs, so the copy's watch
    # cannot see it unless the swap commits the cycle's work first.
    store = await open_sqlite(bucket_seconds=60)
    a, c, failed, _ = await _kept_by_one_failure(store)
    before = _partition(store, a)
    copy = _copy(store, await _planned(store, before, c))

    def late_attempt(conn: sqlite3.Connection) -> None:
        On(conn, before).execute(
            "INSERT INTO attempts (event_id, endpoint_id, attempt, started_at, duration_ms,"
            " status_code) VALUES (?, 'ep_a', 2, 200.0, 3.0, 503)",
            (failed.event_id,),
        )

    written = store.submit_write(late_attempt)
    swapped = store.submit_write(compaction.swap_job(store.path, copy))
    assert (await written, await swapped) == (None, False)
    copy.watch.close()
    assert _partition(store, a) == before
    assert _attempts(store, before.file) == [(1, 500), (2, 503)]


@dataclass
class _Died:
    """A store closed as a process dies after compaction's copy committed."""

    path: Path
    start: int
    c: int
    failed: NewEvent
    newest: NewEvent
    old: str
    target: str


async def _died_after_the_copy(open_sqlite: Any) -> _Died:
    store = await open_sqlite(bucket_seconds=60)
    a, c, failed, newest = await _kept_by_one_failure(store)
    planned = await _planned(store, _partition(store, a), c)
    await store.close()
    copy = _copy(store, planned)
    copy.watch.close()
    return _Died(store.path, a, c, failed, newest, planned.partition.file, copy.target)


async def test_a_crash_before_the_catalog_swap_keeps_the_old_file(open_sqlite: Any) -> None:
    died = await _died_after_the_copy(open_sqlite)  # before the catalog named the copy

    again = await open_sqlite(path=died.path, bucket_seconds=60)
    assert _partition(again, died.start).file == died.old
    assert _file_rows(again, died.start) == (DELIVERED + 1, DELIVERED + 1, 1)
    assert await again.get_event(died.failed.event_id) is not None
    # The next bucket switch takes the copy for the orphan it is.
    await again.append(make_event(at_ms=(died.c + 61) * 1000))
    assert not (died.path / died.target).exists()
    # And the next pass compacts again, from the start.
    assert await _pass(again, died.c + 60) == 0
    assert again.stats()["partitions_compacted"] == 1
    assert await again.get_event(died.newest.event_id) is not None


async def test_a_crash_after_the_swap_reads_the_new_file(open_sqlite: Any) -> None:
    died = await _died_after_the_copy(open_sqlite)
    # The catalog named the copy too; the old file was not unlinked yet.
    conn = sqlite3.connect(died.path / "events.db", isolation_level=None)
    partitions.replace_file(conn, died.start, died.old, died.target)
    conn.close()

    again = await open_sqlite(path=died.path, bucket_seconds=60)
    assert _file_rows(again, died.start) == (1, 1, 1)
    assert await again.get_event(died.failed.event_id) is not None
    await again.append(make_event(at_ms=(died.c + 61) * 1000))
    assert not (died.path / died.old).exists()


async def test_a_write_after_the_swap_in_its_commit_cycle_goes_to_the_new_file(
    open_sqlite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Jobs of one commit cycle share a transaction and, until the swap's
    # reload, the catalog the cycle began with: a replay queued right after
    # the swap wrote into the old file, unlinked a moment later.
    store = await open_sqlite(bucket_seconds=60)
    a, c, failed, _ = await _kept_by_one_failure(store)
    reopened = queue_behind(
        monkeypatch, store, compaction, "swap_job", reopen(store, failed.event_id)
    )
    assert await _pass(store, c + 60) == 0
    assert await reopened[0] == 1

    assert store.stats()["partitions_compacted"] == 1
    conn = sqlite3.connect(store.path / _partition(store, a).file)
    states = conn.execute("SELECT state FROM deliveries").fetchall()
    conn.close()
    assert states == [("pending",)]
