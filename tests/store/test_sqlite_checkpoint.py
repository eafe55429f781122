"""Deliberate checkpoints: the rules, a WAL that stays bounded, truncation when idle."""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support.store_backends import make_event
from tests.support.waiting import wait_until

from hookrouter.clock import ManualClock
from hookrouter.store.sqlite import checkpoint as sqlite_checkpoint
from hookrouter.store.sqlite import partitions
from hookrouter.store.sqlite.checkpoint import CheckpointPolicy, CheckpointStep

POLICY = CheckpointPolicy(
    rewind_frames=1000, force_frames=4000, settle_frames=50, max_rounds=3, idle_after=1.0
)


def test_small_wal_is_left_alone() -> None:
    assert POLICY.after_passive(wal_frames=999, copied=999, rounds=1) is CheckpointStep.DONE


def test_big_wal_is_copied_again_at_once_while_rounds_copy_much() -> None:
    # A round that had much to copy took long: as much was committed meanwhile,
    # and leaving that to the writer's rewind would stall the writer as long.
    assert POLICY.after_passive(2000, copied=1000, rounds=1) is CheckpointStep.AGAIN
    assert POLICY.after_passive(2000, copied=51, rounds=2) is CheckpointStep.AGAIN


def test_a_small_round_asks_the_writer_to_rewind() -> None:
    assert POLICY.after_passive(2000, copied=50, rounds=2) is CheckpointStep.REWIND
    assert POLICY.after_passive(2000, copied=0, rounds=1) is CheckpointStep.REWIND


def test_copying_rounds_are_bounded_under_load() -> None:
    assert POLICY.after_passive(2000, copied=1000, rounds=3) is CheckpointStep.REWIND


def test_writer_rewinds_when_idle_or_when_the_wal_is_too_big() -> None:
    assert POLICY.rewind_now(requested=True, writer_idle=True, wal_frames=1000)
    assert not POLICY.rewind_now(requested=True, writer_idle=False, wal_frames=3999)
    assert POLICY.rewind_now(requested=True, writer_idle=False, wal_frames=4000)
    assert not POLICY.rewind_now(requested=False, writer_idle=True, wal_frames=99999)


def test_idle_truncation_waits_for_quiet_and_for_something_to_truncate() -> None:
    assert not POLICY.idle_truncate_due(now=10.5, last_commit_at=10.0, wal_dirty=True)
    assert POLICY.idle_truncate_due(now=11.0, last_commit_at=10.0, wal_dirty=True)
    assert not POLICY.idle_truncate_due(now=99.0, last_commit_at=10.0, wal_dirty=False)


async def test_wal_stays_bounded_under_sustained_appends(open_sqlite: Any, tmp_path: Path) -> None:
    policy = CheckpointPolicy(
        rewind_frames=64, force_frames=128, settle_frames=16, min_interval=0.0
    )
    store = await open_sqlite(checkpoint_policy=policy)
    wal = tmp_path / "store" / "events.db-wal"
    written = peak = 0
    # 120 commits of 50 x 2 KB: ~12 MB through the WAL. The first rewind needs
    # the checkpointer's rounds to finish, which on a loaded 2-core host took
    # up to ~16 commits (~4 MB of WAL) after which the size stayed flat: 60
    # commits left too little margin below half of what was written.
    for _ in range(120):
        batch = [make_event(body=os.urandom(2000), endpoints=("ep_a",)) for _ in range(50)]
        await asyncio.gather(*(store.append(e) for e in batch))
        written += 50 * 2000
        peak = max(peak, wal.stat().st_size)
    stats = store.stats()
    assert stats["wal_rewinds"] >= 1 and stats["checkpoints"] >= 1
    # Without rewinds the WAL holds everything written (~12 MB plus index pages).
    assert peak < written / 2, (peak, written, stats)


async def test_writer_never_waits_for_the_checkpointers_lock(open_sqlite: Any) -> None:
    """A rewind due while the checkpointer copies is skipped, not waited for.

    Waiting blocked the writer (on the loop design: the whole event loop) for
    as long as the checkpointer's copy and fsync took.
    """
    store = await open_sqlite()
    wal = store._wal
    wal.rewind_requested = True  # as if the checkpointer had asked (WAL below force_frames)
    held, release = threading.Event(), threading.Event()

    def checkpointer_busy() -> None:
        with wal.lock:
            held.set()
            release.wait(5.0)

    busy = threading.Thread(target=checkpointer_busy)
    busy.start()
    try:
        held.wait(5.0)
        started = time.monotonic()
        for _ in range(3):  # each commit is followed by an idle moment: a rewind attempt
            await asyncio.wait_for(store.append(make_event()), 5.0)
        waited = time.monotonic() - started
    finally:
        release.set()
        busy.join()
    assert waited < 1.0, f"appends took {waited:.2f} s while the checkpoint lock was held"
    assert wal.rewind_requested  # still to do, at the writer's next idle moment

    async def commit_and_check() -> bool:  # the checkpointer may hold the lock again
        await store.append(make_event())
        return not wal.rewind_requested

    for _ in range(100):
        if await commit_and_check():
            break
    assert not wal.rewind_requested
    assert store.stats()["wal_rewinds"] == 1


async def test_a_failing_database_sync_is_counted_and_checkpoints_go_on(
    open_sqlite: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Fault injected (a disk that fails fdatasync cannot be had here): EIO on the sync."""

    def failing_fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(sqlite_checkpoint.os, "fdatasync", failing_fdatasync)
    store = await open_sqlite(checkpoint_policy=CheckpointPolicy(min_interval=0))

    async def append_batch() -> None:
        await asyncio.gather(*(store.append(make_event(body=os.urandom(2000))) for _ in range(20)))

    await append_batch()
    # A reader pinned to a snapshot keeps PASSIVE from copying the frames after
    # it: the copies are partial, which the checkpointer syncs itself. It moves
    # its snapshot after every batch, so each checkpoint has new frames it *may*
    # copy (had the checkpointer copied everything up to one fixed snapshot
    # already, later rounds would copy nothing and sync nothing: a flaky test).
    reader = sqlite3.connect(tmp_path / "store" / "events.db", isolation_level=None)
    try:
        for _ in range(5):
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM events").fetchone()
            await append_batch()
            reader.execute("COMMIT")
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchone()
        await append_batch()
        await wait_until(lambda: store.stats()["checkpoint_errors"] > 0)
    finally:
        reader.close()
    assert "Input/output error" in (store._checkpointer.last_error or "")
    checkpoints = store.stats()["checkpoints"]
    await append_batch()
    await wait_until(lambda: store.stats()["checkpoints"] > checkpoints)  # still checkpointing
    assert len(await store.list_events(limit=1000)) == 160  # nothing lost


async def test_idle_store_empties_its_wal(open_sqlite: Any, tmp_path: Path) -> None:
    clock = ManualClock()
    # idle_after is both the clock threshold and how often the idle writer looks.
    store = await open_sqlite(clock=clock, checkpoint_policy=CheckpointPolicy(idle_after=0.02))
    await asyncio.gather(*(store.append(make_event()) for _ in range(20)))
    wal = tmp_path / "store" / "events.db-wal"
    assert wal.stat().st_size > 0
    assert store.stats()["wal_truncates"] == 0

    clock.advance(1.0)  # the store has now been quiet for a second
    await wait_until(lambda: store.stats()["wal_truncates"] > 0)  # the writer wakes by itself
    assert wal.stat().st_size == 0
    assert len(await store.list_events(limit=100)) == 20


async def test_checkpoint_on_demand(open_sqlite: Any, tmp_path: Path) -> None:
    store = await open_sqlite()
    await asyncio.gather(*(store.append(make_event()) for _ in range(20)))
    for _ in range(50):  # the checkpointer thread may hold the lock for a moment
        result = await store.checkpoint("truncate")
        if not result.busy:
            break
        await asyncio.sleep(0.01)
    assert not result.busy
    assert (tmp_path / "store" / "events.db-wal").stat().st_size == 0


def test_a_partition_without_wal_frames_is_passed_over(tmp_path: Path) -> None:
    path = tmp_path / "events-x.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t (x)")
        assert sqlite_checkpoint._has_wal(path)  # frames to copy: checkpointed
    finally:
        conn.close()  # the last connection folds the WAL in and removes it
    assert not sqlite_checkpoint._has_wal(path)


async def test_the_newest_partitions_wal_stays_bounded_under_appends(
    open_sqlite: Any, tmp_path: Path
) -> None:
    """With a bucket set the appends go to a partition file: its WAL is rewound too.

    Without the writer's rewind of that file the WAL held every frame written
    since the bucket began (PASSIVE copies frames but never restarts a WAL that
    keeps taking commits), so a one-hour bucket's WAL grew for the hour.
    """
    policy = CheckpointPolicy(
        rewind_frames=64, force_frames=256, settle_frames=8, max_rounds=2, min_interval=0
    )
    store = await open_sqlite(bucket_seconds=3600, checkpoint_policy=policy)
    start = partitions.bucket_start(time.time() + 86400 * 5000, 3600)
    body = os.urandom(3000)  # about a page per event
    for batch in range(80):
        events = [
            make_event(at_ms=(start + 1) * 1000 + batch * 100 + i, body=body) for i in range(25)
        ]
        await asyncio.gather(*(store.append(e) for e in events))
    newest = tmp_path / "store" / store.catalog.newest.file
    assert newest.name != "events.db"
    wal_pages = (newest.parent / f"{newest.name}-wal").stat().st_size // 4096
    assert store.stats()["wal_rewinds"] > 0
    # 2,000 events of ~3 KB write more than a page each, all of them kept in
    # the WAL without the rewind. With it the WAL holds force_frames plus what
    # arrived before the checkpointer thread next looked: that lag is
    # scheduling, and a busy CI machine stretched it past 2 * force_frames.
    assert wal_pages < 4 * policy.force_frames
    first = await store.list_events(limit=1000)
    rest = await store.list_events(limit=1000, before=first[-1].event_id)
    assert len({e.event_id for e in first + rest}) == 2000  # all there, in that file


async def test_a_partial_copy_of_the_newest_partition_is_synced_by_the_checkpointer(
    open_sqlite: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The checkpointer fdatasyncs a partition file it copied part of the WAL into.

    Unsynced, those pages waited for the next full copy, which is the writer's
    rewind on the event loop: its fsync then wrote them all (issue 34).
    """
    synced: list[str] = []
    real_fdatasync = os.fdatasync

    def recording_fdatasync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fdatasync(fd)

    monkeypatch.setattr(sqlite_checkpoint.os, "fdatasync", recording_fdatasync)
    policy = CheckpointPolicy(rewind_frames=100_000, force_frames=200_000, min_interval=0)
    store = await open_sqlite(bucket_seconds=3600, checkpoint_policy=policy)
    start = partitions.bucket_start(time.time() + 86400 * 5000, 3600)
    body = os.urandom(2000)
    batches = iter(range(10))

    async def append_batch() -> None:
        first = (start + 1) * 1000 + next(batches) * 100
        events = [make_event(at_ms=first + i, body=body) for i in range(20)]
        await asyncio.gather(*(store.append(e) for e in events))

    await append_batch()
    newest = tmp_path / "store" / store.catalog.newest.file
    assert newest.name != "events.db"
    # A reader's snapshot keeps PASSIVE from copying the frames committed after
    # it, so the checkpoint that the next batch's commits nudge copies part.
    reader = sqlite3.connect(newest, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchone()
        await append_batch()
        await wait_until(lambda: str(newest) in synced, within=5.0)
    finally:
        reader.close()
