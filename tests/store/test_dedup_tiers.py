"""The dedup tiers: exact duplicate detection across the hot tier, flushes, merges and restarts.

Real SQLite files throughout; the tiers are made tiny (a flush every few
events, merges of two runs) so that every tier and transition is crossed by
a few dozen events.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from rbloom import Bloom
from tests.support.store_backends import backup_copy, make_event

from hookrouter.errors import StoreUnavailable
from hookrouter.store.base import NewEvent
from hookrouter.store.retention import Cutoffs
from hookrouter.store.sqlite import SqliteStore
from hookrouter.store.sqlite import dedup_worker as sqlite_dedup_worker
from hookrouter.store.sqlite.dedup import create_run_sql, run_table
from hookrouter.store.sqlite.dedup_tiers import (
    DedupTiers,
    Pins,
    Run,
    TierPolicy,
    dedup_key,
    key_hash,
)
from hookrouter.store.sqlite.schema import MIGRATIONS

TINY = TierPolicy(hot_limit=4, fanout=2)
NOW = time.time()


# ---- the pure parts -------------------------------------------------------------


def test_keys_of_different_sources_never_collide() -> None:
    assert dedup_key("ab", "c") != dedup_key("a", "bc")
    assert dedup_key("a:1", "x") != dedup_key("a", ":1x")


def test_policy_refuses_sizes_that_cannot_work() -> None:
    for bad in ({"hot_limit": 0}, {"fanout": 1}, {"false_positive_rate": 0.0}):
        with pytest.raises(ValueError, match="must be"):
            TierPolicy(**bad)


def _run(run_id: int, level: int) -> Run:
    return Run(run_id, level, 1, TINY.new_filter(1))


def test_merges_take_the_lowest_level_that_is_full_oldest_first() -> None:
    tiers = DedupTiers(TINY, (_run(5, 1), _run(4, 0), _run(3, 1), _run(2, 2)), 0)
    assert [r.run_id for r in tiers.merge_candidate() or ()] == [3, 5]
    tiers = DedupTiers(TINY, (_run(4, 0), _run(3, 1)), 0)
    assert tiers.merge_candidate() is None


def test_a_key_is_in_the_flushing_tier_or_a_run_throughout_a_flush() -> None:
    tiers = DedupTiers(TINY, (), 0)
    for i in range(4):
        tiers.add(f"k{i}", f"evt_{i}")
    assert tiers.rotation_due()
    batch = tiers.rotate(upto_rowid=4)
    assert tiers.find_in_memory("k1") == "evt_1" and not tiers.rotation_due()
    bloom = TINY.new_filter(len(batch))
    bloom.update(key_hash(k) for k in batch)
    tiers.publish(Run(1, 0, len(batch), bloom), flushed=True)
    assert tiers.find_in_memory("k1") is None and tiers.flushing is None
    assert tiers.runs_that_may_hold(key_hash("k1"), tiers.runs) == [1]
    assert tiers.flushed_rowid == 4


def test_the_summary_answers_before_the_runs_filters() -> None:
    own = TINY.new_filter(2)
    own.update((7, 9))
    tiers = DedupTiers(TINY, (Run(2, 0, 2, own),), 0)
    assert tiers.summary_due()  # none yet: every run's filter is probed
    assert tiers.runs_that_may_hold(9, tiers.runs) == [2]
    summary, capacity = TINY.new_summary(2)
    assert capacity == 4 * TINY.hot_limit  # at least four flushes of room
    summary.add(7)
    tiers.install_summary(summary, capacity - 2)
    assert not tiers.summary_due()
    assert tiers.runs_that_may_hold(7, tiers.runs) == [2]
    # Only the summary is asked about a hash it lacks (the worker never lets that
    # happen for a published run; here it shows the runs' filters were skipped).
    assert tiers.runs_that_may_hold(9, tiers.runs) == []
    tiers.summary_room = -1  # a flush overfilled it
    assert tiers.summary_due()


def test_merged_inputs_wait_for_probers_still_using_them() -> None:
    pins = Pins()
    assert pins.clear_of(3)
    pins.committer = 2  # probing with the runs of generation 2
    assert not pins.clear_of(3) and pins.clear_of(2)
    pins.committer, pins.reader = -1, 3
    assert pins.clear_of(3)


# ---- on a real store --------------------------------------------------------------


async def settle(store: SqliteStore) -> None:
    # A bound, not a timing: on a loaded 2-core host the worker can wait seconds for a core.
    for _ in range(3000):
        if store.dedup_settled():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"dedup worker did not settle: {store.dedup_stats()}")


def keyed(i: int, source: str = "src_a") -> NewEvent:
    return make_event(source=source, provider_event_id=f"prov_{i}", endpoints=("ep",))


async def stored_then_closed(open_sqlite: Any, path: Path, count: int) -> list[NewEvent]:
    """``count`` keyed events appended one by one to a store at ``path``, flushed, closed."""
    store = await open_sqlite(path, dedup_policy=TINY)
    events = [keyed(i) for i in range(count)]
    for event in events:
        await store.append(event)
    await settle(store)
    await store.close()
    return events


async def append_all(store: SqliteStore, events: list[NewEvent]) -> list[tuple[str, bool]]:
    results = await asyncio.gather(*(store.append(e) for e in events))
    return [(r.event_id, r.duplicate) for r in results]


async def test_duplicates_are_found_in_every_tier(open_sqlite: Any) -> None:
    store = await open_sqlite(dedup_policy=TINY)
    originals = {}
    for i in range(40):  # one at a time: a flush every 4 commits, merges behind them
        event = keyed(i)
        await store.append(event)
        originals[i] = event.event_id
        if i % 4 == 3:  # each flush done before the next 4: the counts below do not
            await settle(store)  # depend on how fast the worker thread gets the CPU
    await settle(store)
    stats = store.dedup_stats()
    assert stats["dedup_flushes"] >= 9 and stats["dedup_merges"] >= 3, stats
    assert stats["dedup_run_keys"] + stats["dedup_hot_keys"] == 40, stats
    assert stats["dedup_levels"] >= 2, stats
    # Sized for 16 keys at the open, then twice the runs' keys: outgrown and rebuilt.
    assert stats["dedup_summaries"] >= 1 and stats["dedup_summary_room"] >= 0, stats

    again = await append_all(store, [keyed(i) for i in range(40)])
    assert again == [(originals[i], True) for i in range(40)]
    # The same provider id from another source is another event.
    other = await append_all(store, [keyed(i, source="src_b") for i in range(3)])
    assert all(not duplicate for _, duplicate in other)
    for i in (0, 17, 39):
        assert await store.find_event("src_a", f"prov_{i}") == originals[i]
    assert await store.find_event("src_a", "prov_never") is None


async def test_duplicates_within_one_commit_are_stored_once(open_sqlite: Any) -> None:
    store = await open_sqlite(dedup_policy=TINY)
    first, second, third = keyed(1), keyed(1), keyed(2)
    results = await append_all(store, [first, second, third])
    assert results == [(first.event_id, False), (first.event_id, True), (third.event_id, False)]
    assert await store.get_event(second.event_id) is None


async def test_every_key_survives_a_restart_and_a_crash_of_the_runs_file(
    open_sqlite: Any, tmp_path: Path
) -> None:
    path = tmp_path / "store"
    events = await stored_then_closed(open_sqlite, path, 30)

    reopened = await open_sqlite(path, dedup_policy=TINY)
    stats = reopened.dedup_stats()
    assert stats["dedup_run_keys"] > 0 and stats["dedup_hot_keys"] < 30, stats
    assert await append_all(reopened, [keyed(i) for i in range(30)]) == [
        (e.event_id, True) for e in events
    ]
    await reopened.close()

    (path / "dedup.db").unlink()  # lost: rebuilt from the events at the next open
    for leftover in path.glob("dedup.db-*"):
        leftover.unlink()
    rebuilt = await open_sqlite(path, dedup_policy=TINY)
    assert rebuilt.dedup_stats()["dedup_runs"] == 1
    assert await append_all(rebuilt, [keyed(i) for i in range(30)]) == [
        (e.event_id, True) for e in events
    ]


async def test_a_restored_events_file_is_not_judged_by_a_newer_runs_file(
    open_sqlite: Any, tmp_path: Path
) -> None:
    """events.db restored from a backup beside the dedup.db of later days."""
    path = tmp_path / "store"
    store = await open_sqlite(path, dedup_policy=TINY)
    kept = [keyed(i) for i in range(6)]
    for event in kept:
        await store.append(event)
    await store.checkpoint()
    backup = tmp_path / "events-backup.db"
    shutil.copy(path / "events.db", backup)
    for event in [keyed(i) for i in range(6, 30)]:
        await store.append(event)
    await settle(store)
    await store.close()

    shutil.copy(backup, path / "events.db")
    for leftover in path.glob("events.db-*"):
        leftover.unlink()
    roomy = TierPolicy(hot_limit=1000)  # no flush from here on: the hot tier must be rebuilt
    restored = await open_sqlite(path, dedup_policy=roomy)
    results = await append_all(restored, [keyed(i) for i in range(30)])
    assert results[:6] == [(e.event_id, True) for e in kept]
    assert all(not duplicate for _, duplicate in results[6:]), results[6:]  # never received
    await restored.close()

    # The new events took rowids the newer runs file had seen for other events:
    # after a restart they must still be found (the runs file was rebuilt, not trusted).
    again = await open_sqlite(path, dedup_policy=roomy)
    assert await append_all(again, [keyed(i) for i in range(30)]) == [
        (event_id, True) for event_id, _ in results
    ]


def _blake2b_64(key: str) -> int:
    """The key hash of the first runs format (hashlib.blake2b, 8 bytes, little endian)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


async def test_runs_written_with_the_first_key_hash_are_rebuilt_not_misread(
    open_sqlite: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A dedup.db of the blake2b format, opened by this version: rebuilt, duplicates kept."""
    path = tmp_path / "store"
    events = await stored_then_closed(open_sqlite, path, 12)
    # Turn the runs file into what the first format left: blake2b hashes, no key_hash.
    with sqlite3.connect(path / "dedup.db") as conn:
        conn.execute("ATTACH DATABASE ? AS ev", (str(path / "events.db"),))
        keys = {
            event_id: dedup_key(source, provider)
            for event_id, source, provider in conn.execute(
                "SELECT event_id, source_id, provider_event_id FROM ev.events"
            )
        }
        runs = [r for (r,) in conn.execute("SELECT run FROM runs WHERE state = 'live'")]
        assert runs, "the tiny policy should have flushed runs"
        for run in runs:
            held = conn.execute(f"SELECT event_id FROM run_{run}").fetchall()
            conn.execute(f"DELETE FROM run_{run}")
            conn.executemany(
                f"INSERT INTO run_{run} (h, event_id) VALUES (?, ?)",
                [(_blake2b_64(keys[e]), e) for (e,) in held],
            )
        conn.execute("DELETE FROM meta WHERE key = 'key_hash'")
    conn.close()

    with caplog.at_level(logging.WARNING, logger="hookrouter.store.sqlite.dedup"):
        upgraded = await open_sqlite(path, dedup_policy=TINY)
    assert "key hash blake2b-64" in caplog.text and "rebuilding" in caplog.text
    assert upgraded.dedup_stats()["dedup_runs"] == 1  # rebuilt into one run
    assert await append_all(upgraded, [keyed(i) for i in range(12)]) == [
        (e.event_id, True) for e in events
    ]


async def test_an_existing_store_keeps_its_duplicates_after_the_upgrade(tmp_path: Path) -> None:
    """A version-2 file (dedup by unique index) opened by this version: dedup.db is built."""
    path = tmp_path / "store"
    old = SqliteStore(path, migrations=MIGRATIONS[:2], dedup_policy=TINY)
    await old.open()
    events = [keyed(i) for i in range(10)]
    for event in events:
        await old.append(event)
    await old.close()
    (path / "dedup.db").unlink()  # as a version-2 hookrouter left the directory
    for leftover in path.glob("dedup.db-*"):
        leftover.unlink()

    store = SqliteStore(path, dedup_policy=TINY)
    await store.open()
    try:
        assert store.schema_migrated_from == 2
        assert await append_all(store, [keyed(i) for i in range(10)]) == [
            (e.event_id, True) for e in events
        ]
    finally:
        await store.close()


async def test_keys_of_deleted_events_are_forgotten_and_dropped_by_merges(
    open_sqlite: Any, tmp_path: Path
) -> None:
    store = await open_sqlite(dedup_policy=TINY)
    month_ago = int((NOW - 30 * 86400) * 1000)
    for i in range(12):  # unrouted (no endpoints): finished at once, expired after 7 days
        await store.append(make_event(provider_event_id=f"old_{i}", at_ms=month_ago))
    await settle(store)
    everything = Cutoffs(delivered_before=NOW - 86400, failed_before=NOW - 86400)
    assert (await store.prune(everything)).deleted == 11  # never the newest row

    again = make_event(provider_event_id="old_0")
    assert (await store.append(again)).duplicate is False  # forgotten with its event
    for i in range(20):  # enough flushes that every run from before the prune is merged
        await store.append(make_event(provider_event_id=f"more_{i}"))
        await settle(store)
    assert (await store.append(make_event(provider_event_id="old_0"))).event_id == again.event_id

    with sqlite3.connect(tmp_path / "store" / "dedup.db") as conn:
        conn.execute("ATTACH DATABASE ? AS ev", (str(tmp_path / "store" / "events.db"),))
        runs = [r for (r,) in conn.execute("SELECT run FROM runs")]
        union = " UNION ALL ".join(f"SELECT h, event_id FROM run_{r}" for r in runs)
        stale = conn.execute(
            f"SELECT count(*) FROM ({union}) AS k"
            " WHERE NOT EXISTS (SELECT 1 FROM ev.events AS e WHERE e.event_id = k.event_id)"
        ).fetchone()[0]
        held = conn.execute(f"SELECT count(*) FROM ({union})").fetchone()[0]
    conn.close()
    assert stale == 0
    assert held + store.dedup_stats()["dedup_hot_keys"] == 1 + 1 + 20  # old_11, old_0, more_*


async def test_runs_file_lost_under_a_running_store_degrades_dedup_never_ingest(
    open_sqlite: Any, tmp_path: Path
) -> None:
    """rm -rf of the data files, events.db restored: appends go on (dedup of old keys lapses)."""
    store = await open_sqlite(dedup_policy=TINY)
    events = [keyed(i) for i in range(8)]
    for event in events:
        await store.append(event)
    await settle(store)
    assert store.dedup_stats()["dedup_runs"] >= 1
    db = tmp_path / "store" / "events.db"
    backup = tmp_path / "backup.db"
    backup_copy(db, backup)
    for path in db.parent.iterdir():
        path.unlink()
    with pytest.raises(StoreUnavailable):
        await store.append(keyed(100))  # the commit that notices the loss
    shutil.copy(backup, db)  # the operator restores the events; dedup.db is recreated empty

    # Keys in runs now probe tables that are gone: a miss, not a failed commit.
    again = await append_all(store, [keyed(0), keyed(101)])
    assert all(not duplicate for _, duplicate in again), again
    with sqlite3.connect(db) as conn:  # committed into the restored file
        stored = {r[0] for r in conn.execute("SELECT event_id FROM events")}
    conn.close()
    assert {event_id for event_id, _ in again} <= stored


def test_the_runs_file_holds_sorted_runs(tmp_path: Path) -> None:
    """Flush and merge output is what the probes rely on: one run per id, keys unique."""

    events = [keyed(i) for i in range(24)]
    left_hot = 0  # keys still in the hot tier at close (they are rebuilt from the events)

    async def fill() -> None:
        nonlocal left_hot
        store = SqliteStore(tmp_path / "store", dedup_policy=TINY)
        await store.open()
        try:
            for event in events:
                await store.append(event)
            await settle(store)
            # A rotation is skipped while a flush is still being written, so a
            # slow worker can leave up to hot_limit keys in memory (a full tier
            # rotates at the next append, and there is none).
            left_hot = store.dedup_stats()["dedup_hot_keys"]
        finally:
            await store.close()

    asyncio.run(fill())
    assert left_hot <= TINY.hot_limit
    with sqlite3.connect(tmp_path / "store" / "dedup.db") as conn:
        pairs = {
            row
            for (run,) in conn.execute("SELECT run FROM runs").fetchall()
            for row in conn.execute(f"SELECT h, event_id FROM run_{run}")
        }
        runs = conn.execute("SELECT run, keys, state FROM runs").fetchall()
        per_run = {
            run: conn.execute(f"SELECT count(*) FROM run_{run}").fetchone()[0] for run, _, _ in runs
        }
        union = " UNION ".join(f"SELECT h FROM run_{run}" for run, _, _ in runs)
        total = conn.execute(f"SELECT count(*) FROM ({union})").fetchone()[0]
        tables = conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name GLOB 'run_*'"
        ).fetchone()[0]
    conn.close()
    assert all(state == "live" for _, _, state in runs)
    assert {run: keys for run, keys, _ in runs} == per_run
    assert total == sum(per_run.values()) == len(events) - left_hot
    assert tables == len(runs)  # replaced runs were dropped
    # Each pair is exactly (the key's hash, its event), as the probes look it up.
    expected = {
        (key_hash(dedup_key(e.source_id, e.provider_event_id or "")), e.event_id) for e in events
    }
    assert pairs <= expected and len(pairs) == total


@pytest.mark.parametrize("chunk", [2, 3])
def test_flush_and_read_back_statements_keep_every_64_bit_hash_exact(
    monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    # Rows travel as JSON, a few per statement (GIL_CHUNK, patched small here so
    # that chunks and the cut between them are crossed): the extremes of the
    # signed 64-bit range must come back as the same integers, and every hash
    # must reach the filter, a repeated hash cut by a chunk's end included. With
    # chunks of 3 the repeated hash falls inside one chunk (sent as pairs).
    monkeypatch.setattr(sqlite_dedup_worker, "GIL_CHUNK", chunk)
    hashes = [-(1 << 63), -1, 0, 0, 1, 0x7FFF_FFFF_FFFF_FFFE, (1 << 63) - 1]
    conn = sqlite3.connect(":memory:")
    conn.execute(create_run_sql(1))
    table = run_table(1)
    batch = {f"key_{i}": f"evt_{i}" for i in range(len(hashes))}
    by_key = dict(zip(batch, reversed(hashes), strict=True))
    monkeypatch.setattr(sqlite_dedup_worker, "key_hash", by_key.__getitem__)
    written, summary = Bloom(100, 0.01), Bloom(100, 0.01)
    sqlite_dedup_worker._write_flush_rows(conn, table, batch, written, summary)
    stored = conn.execute(f"SELECT h, typeof(h) FROM {table} ORDER BY h").fetchall()
    assert stored == [(h, "integer") for h in hashes]
    read = Bloom(100, 0.01)
    sqlite_dedup_worker._fill_filter(conn, table, -(1 << 63), (1 << 63) - 1, read)
    assert all(h in written and h in summary and h in read for h in hashes)
    part = Bloom(100, 0.01)
    sqlite_dedup_worker._fill_filter(conn, table, 0, 1, part)  # a range inside the run
    assert all(h in part for h in (0, 1))
    conn.close()


async def test_a_failing_flush_is_retried_and_answers_stay_exact_meanwhile(
    open_sqlite: Any,
) -> None:
    """dedup.db full (SQLITE_FULL, as on a full disk): the keys wait in memory, then go."""
    store = await open_sqlite(dedup_policy=TINY)
    worker = store._dedup
    assert worker is not None
    await settle(store)
    pages = worker.conn.execute("PRAGMA page_count").fetchone()[0]
    worker.conn.execute(f"PRAGMA max_page_count = {pages}")  # no room for another run
    events = [keyed(i) for i in range(8)]
    for event in events:
        await store.append(event)
    for _ in range(300):
        if store.dedup_stats()["dedup_failures"] >= 1:
            break
        await asyncio.sleep(0.01)
    stats = store.dedup_stats()
    assert stats["dedup_failures"] >= 1 and "full" in str(stats["dedup_last_error"]), stats
    assert stats["dedup_flushing_keys"] == 4  # held in memory, still answering
    assert await append_all(store, [keyed(i) for i in range(8)]) == [
        (e.event_id, True) for e in events
    ]

    worker.conn.execute("PRAGMA max_page_count = 1073741823")  # room again
    await settle(store)  # the retried flush landed
    assert store.dedup_stats()["dedup_run_keys"] == 4
    events.append(keyed(8))
    await store.append(events[-1])  # the hot tier, full since, rotates behind it
    await settle(store)
    assert store.dedup_stats()["dedup_run_keys"] == 9
    assert await append_all(store, [keyed(i) for i in range(9)]) == [
        (e.event_id, True) for e in events
    ]


async def test_a_merge_in_many_hash_ranges_keeps_every_key(
    open_sqlite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranges of 3 keys: every boundary between ranges is crossed many times."""
    monkeypatch.setattr(sqlite_dedup_worker, "MERGE_CHUNK", 3)
    store = await open_sqlite(dedup_policy=TierPolicy(hot_limit=8, fanout=2))
    events = [keyed(i) for i in range(64)]
    for event in events:
        await store.append(event)
    await settle(store)
    stats = store.dedup_stats()
    assert stats["dedup_merges"] >= 3 and stats["dedup_hot_keys"] < 8
    assert stats["dedup_run_keys"] + stats["dedup_hot_keys"] == len(events)
    assert await append_all(store, [keyed(i) for i in range(64)]) == [
        (e.event_id, True) for e in events
    ]


def test_merge_ranges_seek_each_input_instead_of_scanning_it(tmp_path: Path) -> None:
    """A scan of every input per range made merges quadratic in their size."""
    conn = sqlite3.connect(tmp_path / "dedup.db")
    conn.execute("ATTACH ':memory:' AS ev")
    inputs = tuple(Run(run_id, 0, 10, TINY.new_filter(10)) for run_id in (1, 2))
    for run in (*inputs, Run(3, 1, 0, TINY.new_filter(1))):
        conn.execute(create_run_sql(run.run_id))
    copy = sqlite_dedup_worker._merge_sql(inputs, 3)
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {copy}", (0, 10, "evt_"))]
    cut = sqlite_dedup_worker._CUT.format(table=run_table(1))
    plan += [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {cut}", (0, 2))]
    conn.close()
    reads = [step for step in plan if step.startswith(("SCAN", "SEARCH"))]
    assert len(reads) == 3 and all(step.startswith("SEARCH") for step in reads), plan
