"""SQLite store failure paths: a failed commit fails its whole batch, and the store recovers."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.store_backends import backup_copy, make_event
from tests.support.waiting import wait_until

from hookrouter.clock import ManualClock
from hookrouter.errors import StoreError, StoreSaturated, StoreUnavailable
from hookrouter.flow.credits import DeliveryRef
from hookrouter.store import AppendResult
from hookrouter.store.base import EVENT_FAILURE_MEMORY, AttemptRecord, DeliveryState
from hookrouter.store.ledger import OutcomeRecord
from hookrouter.store.sqlite.ledger import RETRY_DELAY, SqliteLedger
from hookrouter.store.sqlite.store import SqliteStore


async def _append_all(store: SqliteStore, events: list[Any]) -> list[Any]:
    """Fire all appends in one loop turn (one batch) and collect results or errors."""
    return await asyncio.gather(*(store.append(e) for e in events), return_exceptions=True)


async def _stored(store: SqliteStore, events: list[Any]) -> int:
    return sum([await store.get_event(e.event_id) is not None for e in events])


@contextlib.contextmanager
def _write_lock_held(tmp_path: Path) -> Iterator[None]:
    """Another connection (as a backup tool or a second process would) holds the write lock."""
    other = sqlite3.connect(tmp_path / "store" / "events.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


async def test_lock_held_by_another_process_fails_the_batch_then_recovers(
    open_sqlite: Any, tmp_path: Path
) -> None:
    store = await open_sqlite(busy_timeout=0.05)
    await store.append(make_event())
    events = [make_event(endpoints=("ep_a",)) for _ in range(20)]
    with _write_lock_held(tmp_path):
        results = await _append_all(store, events)

    assert all(isinstance(r, StoreUnavailable) for r in results), results
    assert {r.reason for r in results} == {"store_busy"}
    assert all(r.retry_after == 1.0 and r.status == 503 for r in results)
    assert isinstance(results[0].__cause__, sqlite3.OperationalError)  # translated, with cause
    assert await _stored(store, events) == 0  # nothing of the failed batch was written
    stats = store.stats()
    assert stats["failed_appends"] == 20 and stats["failing"]

    later = [make_event() for _ in range(5)]
    assert all(not r.duplicate for r in await _append_all(store, later))
    assert await _stored(store, later) == 5
    assert not store.stats()["failing"]


async def test_outcomes_the_store_refused_are_written_once_it_recovers(
    open_sqlite: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Dropped, they would leave their deliveries pending, unknown to the engine."""
    store = await open_sqlite(busy_timeout=0.05)
    ledger = SqliteLedger(store)
    events = [make_event(endpoints=("ep_a",)) for _ in range(3)]
    await _append_all(store, events)
    delivered = [
        OutcomeRecord(
            DeliveryRef(e.event_id, "ep_a"), DeliveryState.DELIVERED, 1, None, 200, None, 100.0,
            AttemptRecord(1, 100.0, 3.0, 200, None),
        )
        for e in events
    ]  # fmt: skip
    with _write_lock_held(tmp_path):
        refused = ledger.record(delivered)
        with pytest.raises(StoreUnavailable):
            await refused  # whoever waits is told
        assert ledger.write_failures == 1
        assert "writing 3 delivery outcomes failed" in caplog.text

    def rows() -> list[str]:  # read from the file: a delivery's row is its first outcome
        with contextlib.closing(sqlite3.connect(store.db_path)) as conn:
            return [state for (state,) in conn.execute("SELECT state FROM deliveries")]

    assert rows() == []
    await wait_until(lambda: rows() == ["delivered"] * 3, within=5 * RETRY_DELAY)
    assert ledger.write_failures == 1


async def test_full_database_fails_whole_batch_simulated_with_max_page_count(
    open_sqlite: Any,
) -> None:
    # A SIMULATION of a full disk: SQLite's per-connection page cap makes the
    # writer hit SQLITE_FULL exactly as ENOSPC would (see the tmpfs test for the real thing).
    store = await open_sqlite()
    await store.append(make_event())
    pages = await store.run_read(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
    await store.submit_write(lambda c: c.execute(f"PRAGMA max_page_count = {pages + 6}").fetchall())

    # ~40 pages of bodies in one batch: the first events would fit, the batch does not.
    batch = [make_event(body=os.urandom(4000), endpoints=("ep_a",)) for _ in range(40)]
    results = await _append_all(store, batch)
    assert all(isinstance(r, StoreUnavailable) and r.reason == "store_full" for r in results)
    assert all(r.retry_after == 30.0 for r in results)
    assert await _stored(store, batch) == 0  # no partial acknowledgement, no partial write

    await store.submit_write(lambda c: c.execute("PRAGMA max_page_count = 1073741823").fetchall())
    retry = await _append_all(store, batch)
    assert [r.event_id for r in retry] == [e.event_id for e in batch]
    assert await _stored(store, batch) == 40


async def test_ping_is_unready_while_events_fail_to_commit_though_small_writes_fit(
    open_sqlite: Any,
) -> None:
    # The same simulated full disk: a few pages left take the ping's one-row
    # write, but not a batch of events. /readyz must not say "ready" then.
    clock = ManualClock()
    store = await open_sqlite(clock=clock)
    await store.append(make_event())
    pages = await store.run_read(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
    await store.submit_write(lambda c: c.execute(f"PRAGMA max_page_count = {pages + 6}").fetchall())
    await store.ping()  # nothing failed yet

    refused = await _append_all(store, [make_event(body=os.urandom(4000)) for _ in range(40)])
    assert all(isinstance(r, StoreUnavailable) for r in refused)
    with pytest.raises(StoreUnavailable) as info:
        await store.ping()
    assert info.value.reason == "store_failing"
    assert "full" in info.value.message  # the commit's own error, for the operator

    # Nothing commits for a while (a load balancer stopped sending): forgotten,
    # so traffic comes back and tells again.
    clock.advance(EVENT_FAILURE_MEMORY + 1)
    await store.ping()
    await _append_all(store, [make_event(body=os.urandom(4000)) for _ in range(40)])
    with pytest.raises(StoreUnavailable):
        await store.ping()

    # An event commit that succeeds clears it at once.
    await store.submit_write(lambda c: c.execute("PRAGMA max_page_count = 1073741823").fetchall())
    await store.append(make_event())
    await store.ping()


@pytest.fixture
def tiny_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB tmpfs (needs root and mount; skipped elsewhere)."""
    mountpoint = tmp_path / "tiny"
    mountpoint.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mountpoint)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


async def test_real_disk_full_fails_batches_and_recovers_when_space_returns(
    tiny_filesystem: Path,
    open_sqlite: Any,  # this order: the store closes before the unmount
) -> None:
    store = await open_sqlite(tiny_filesystem / "store")
    await store.append(make_event())
    stat = os.statvfs(tiny_filesystem)
    filler = tiny_filesystem / "filler"
    filler.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 150_000))

    accepted: list[Any] = []
    refused: list[Any] = []
    for _ in range(30):  # batches of 3 x 20 KB until the disk is full
        batch = [make_event(body=os.urandom(20_000)) for _ in range(3)]
        for event, result in zip(batch, await _append_all(store, batch), strict=True):
            (refused if isinstance(result, StoreError) else accepted).append((event, result))
    assert refused, "the disk never filled up"
    assert {r.reason for _, r in refused} == {"store_full"}
    assert await _stored(store, [e for e, _ in accepted]) == len(accepted)
    assert await _stored(store, [e for e, _ in refused]) == 0

    filler.unlink()
    again = [make_event(body=os.urandom(20_000)) for _ in range(3)]
    assert all(not r.duplicate for r in await _append_all(store, again))
    await store.ping()


async def test_deleted_database_is_reported_never_recreated_and_recovers_when_restored(
    open_sqlite: Any, tmp_path: Path
) -> None:
    store = await open_sqlite()
    kept = make_event()
    await store.append(kept)
    db = tmp_path / "store" / "events.db"
    backup = tmp_path / "backup.db"
    backup_copy(db, backup)
    for path in db.parent.iterdir():  # rm -rf of the data files under a running store
        path.unlink()

    for _ in range(2):  # the commit that noticed it, then the failed reopen
        batch = [make_event() for _ in range(3)]
        results = await _append_all(store, batch)
        assert all(isinstance(r, StoreUnavailable) for r in results), results
        assert {r.reason for r in results} == {"store_io_error"}
    with pytest.raises(StoreUnavailable):
        await store.ping()
    assert not db.exists()  # no silently recreated, empty store

    shutil.copy(backup, db)  # the operator restores the file
    fresh = make_event()
    assert (await store.append(fresh)).event_id == fresh.event_id
    await store.ping()


async def test_reads_and_checkpoints_follow_a_database_file_restored_under_them(
    open_sqlite: Any, tmp_path: Path
) -> None:
    """After a restore, admin reads answer from the restored file and its WAL is folded in."""
    store = await open_sqlite()
    kept, later = make_event(), make_event()
    await store.append(kept)
    db = tmp_path / "store" / "events.db"
    backup = tmp_path / "backup.db"
    backup_copy(db, backup)
    await store.append(later)  # only in the file that is about to be deleted
    assert await store.get_event(later.event_id) is not None
    for path in db.parent.iterdir():
        path.unlink()

    with pytest.raises(StoreUnavailable) as gone:
        await store.get_event(kept.event_id)
    assert gone.value.reason == "store_io_error" and "is gone" in gone.value.message
    shutil.copy(backup, db)
    assert await store.get_event(later.event_id) is None  # not answered from the deleted copy
    assert await store.get_event(kept.event_id) is not None

    # The first commit notices the replaced file; the next ones go into the restored one.
    await _append_all(store, [make_event()])
    fresh = [make_event() for _ in range(20)]
    assert all(isinstance(r, AppendResult) for r in await _append_all(store, fresh))
    assert await _stored(store, fresh) == len(fresh)
    wanted = [e.event_id for e in fresh]
    found = 0
    for _ in range(100):  # the checkpointer copies the WAL into the restored file
        found = _in_database_file_alone(db, wanted)
        if found == len(fresh):
            break
        await asyncio.sleep(0.05)
    assert found == len(fresh)


def _in_database_file_alone(db: Path, event_ids: list[str]) -> int:
    """How many of ``event_ids`` the database file holds without its WAL (0 if mid-write)."""
    marks = ",".join("?" * len(event_ids))
    try:  # immutable: read the file as it is, ignoring the WAL and every lock
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)) as c:
            query = f"SELECT count(*) FROM events WHERE event_id IN ({marks})"
            return int(c.execute(query, event_ids).fetchone()[0])
    except sqlite3.DatabaseError:  # caught between two page writes of a checkpoint
        return 0


async def test_backlog_cap_refuses_appends_at_once(open_sqlite: Any) -> None:
    store = await open_sqlite(max_pending=10)
    futures = [store.append(make_event()) for _ in range(10)]
    with pytest.raises(StoreSaturated) as refused:
        store.append(make_event())
    assert refused.value.status == 429 and refused.value.retry_after == 1.0
    await asyncio.gather(*futures)
    await store.append(make_event())  # room again once the batch committed


async def test_reused_event_id_fails_only_that_event(open_sqlite: Any) -> None:
    store = await open_sqlite()
    first = make_event(provider_event_id="pe_1")
    await store.append(first)
    clash = make_event(provider_event_id="pe_2")
    clash = dataclasses.replace(clash, event_id=first.event_id)
    fine = make_event(provider_event_id="pe_3")
    results = await _append_all(store, [clash, fine])
    assert isinstance(results[0], StoreError) and results[0].reason == "event_id_conflict"
    assert results[1].event_id == fine.event_id and not results[1].duplicate


class _Answers:
    """Collects ``append_then`` callbacks: (result, error) per tag, in call order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, BaseException | None]] = []

    def for_(self, tag: str) -> Any:
        return lambda result, error: self.calls.append((tag, result, error))


async def test_append_then_answers_from_the_commit_once_per_append(open_sqlite: Any) -> None:
    store = await open_sqlite()
    first = make_event(provider_event_id="pe_1", endpoints=("ep_a",))
    again = make_event(provider_event_id="pe_1", endpoints=("ep_a",))  # same provider id
    other = make_event()
    answers = _Answers()
    for tag, event in (("first", first), ("again", again), ("other", other)):
        store.append_then(event, answers.for_(tag))
    assert answers.calls == []  # nothing is answered before its commit
    await store.append(make_event())  # queued behind them: resolves after their commit
    assert [tag for tag, _, _ in answers.calls] == ["first", "again", "other"]
    results = {tag: (result, error) for tag, result, error in answers.calls}
    assert results["first"] == (AppendResult(first.event_id, duplicate=False), None)
    assert results["again"] == (AppendResult(first.event_id, duplicate=True), None)
    assert results["other"] == (AppendResult(other.event_id, duplicate=False), None)
    assert await _stored(store, [first, other]) == 2
    assert await store.get_event(again.event_id) is None  # a duplicate is stored once


async def test_append_then_reports_a_failed_commit_to_every_caller(
    open_sqlite: Any, tmp_path: Path
) -> None:
    store = await open_sqlite(busy_timeout=0.05)
    await store.append(make_event())
    answers = _Answers()
    events = [make_event() for _ in range(5)]
    with _write_lock_held(tmp_path):
        for index, event in enumerate(events):
            store.append_then(event, answers.for_(str(index)))
        await asyncio.gather(store.append(make_event()), return_exceptions=True)
    assert len(answers.calls) == 5
    for _, result, error in answers.calls:
        assert result is None
        assert isinstance(error, StoreUnavailable) and error.reason == "store_busy"
    assert await _stored(store, events) == 0


async def test_a_failing_append_callback_does_not_stop_the_others(
    open_sqlite: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = await open_sqlite()
    answers = _Answers()

    def broken(_result: Any, _error: BaseException | None) -> None:
        raise RuntimeError("bug in a caller")

    events = [make_event() for _ in range(3)]
    store.append_then(events[0], answers.for_("before"))
    store.append_then(events[1], broken)
    store.append_then(events[2], answers.for_("after"))
    await store.append(make_event())
    assert [(tag, error) for tag, _, error in answers.calls] == [("before", None), ("after", None)]
    assert "append callback failed" in caplog.text
    assert await _stored(store, events) == 3  # the commit stood; only the callback failed
    later = make_event()
    assert await store.append(later) == AppendResult(later.event_id, duplicate=False)
