"""Time partitions of the SQLite store (issue 34): catalog, routing, migration, retention by unlink.

Tests that need sealed partitions of chosen contents record the switches
in the catalog themselves (``seal_up_to``, the transaction the writer's
switch runs); the writer's own switches are tested in test_sqlite_switch.py
and by the kill -9 test below.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import shutil
import signal
import sqlite3
import stat
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.support.store_backends import make_event

from hookrouter.errors import StoreError
from hookrouter.ids import event_id_time_ms, new_event_id
from hookrouter.store.base import Entity
from hookrouter.store.retention import DAY, Cutoffs
from hookrouter.store.sqlite import SqliteStore, backup, partition_files, partitions
from hookrouter.store.sqlite.ledger_sql import event_id_floor
from hookrouter.store.sqlite.partitions import Catalog, Partition
from hookrouter.store.sqlite.schema import MIGRATIONS

HOUR = 3600
NOW = time.time()


@contextmanager
def _db(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain connection to one file of the store: committed and closed after the block."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            yield conn
    finally:
        conn.close()


# ---- buckets and routing (no files) -------------------------------------------


def _three() -> Catalog:
    return Catalog(
        [
            Partition(0, 1000 * HOUR, "events.db", "sealed"),
            Partition(1000 * HOUR, 1006 * HOUR, partitions.partition_file(1000 * HOUR), "sealed"),
            Partition(1006 * HOUR, None, partitions.partition_file(1006 * HOUR)),
        ]
    )


def _id_at(seconds: float) -> str:
    return new_event_id(int(seconds * 1000))


def test_an_event_id_routes_to_the_bucket_of_its_arrival() -> None:
    catalog = _three()
    files = [p.file for p in catalog.partitions]
    assert catalog.route(_id_at(999 * HOUR)).file == files[0]
    assert catalog.route(_id_at(1000 * HOUR)).file == files[1]  # a bucket starts inclusive
    assert catalog.route(_id_at(1006 * HOUR - 0.001)).file == files[1]
    assert catalog.route(_id_at(1006 * HOUR)).file == files[2]
    # A clock far ahead still lands in the newest partition: the writer's one file.
    assert catalog.route(_id_at(5000 * HOUR)).file == files[2]
    with pytest.raises(ValueError, match="not an event id"):
        catalog.route("evt_nonsense")


def test_listing_order_and_windows_touch_only_the_buckets_they_overlap() -> None:
    catalog = _three()
    old, mid, new = catalog.partitions
    assert catalog.newest_first() == (new, mid, old)
    assert catalog.newest is new
    assert catalog.overlapping(1001 * HOUR, 1002 * HOUR) == (mid,)
    assert catalog.overlapping(1005 * HOUR, 1007 * HOUR) == (new, mid)
    assert catalog.overlapping(None, 1000 * HOUR) == (old,)  # until is exclusive
    assert catalog.overlapping(2000 * HOUR, None) == (new,)
    assert catalog.overlapping(None, None) == (new, mid, old)


def test_buckets_are_aligned_to_the_epoch_and_named_by_their_start() -> None:
    assert partitions.bucket_start(6 * HOUR + 5, 6 * HOUR) == 6 * HOUR
    assert partitions.bucket_start(6 * HOUR - 0.5, 6 * HOUR) == 0
    assert partitions.partition_file(1_764_806_400) == "events-20251204T000000Z.db"
    with pytest.raises(ValueError):
        partitions.bucket_start(10, 0)


def test_a_catalog_needs_an_open_ended_newest_partition() -> None:
    with pytest.raises(ValueError, match="open-ended"):
        Catalog([Partition(0, 10, "events.db", "sealed")])
    with pytest.raises(ValueError, match="at least one"):
        Catalog([Partition(0, None, "events.db", "dropping")])


# ---- the catalog in a store ---------------------------------------------------


async def seal_up_to(store: SqliteStore, *starts: int) -> None:
    """Record switches to buckets beginning at ``starts`` (files made ahead, as the switch will)."""
    for start in starts:
        partition_files.create(store.path, start, busy_timeout=1.0)
        await store.submit_write(lambda c, s=start: partitions.record_switch(c, s))
    await store.reload_catalog()


async def test_a_new_store_is_one_open_partition_events_db(open_sqlite: Any) -> None:
    store = await open_sqlite()
    assert store.catalog.partitions == (partitions.LEGACY,)
    assert store.stats()["partitions"] == 1
    with _db(store.db_path) as conn:
        assert conn.execute(partitions.CATALOG_SQL).fetchall() == [(0, None, "events.db", "live")]


async def test_a_switch_seals_the_newest_and_never_goes_back(open_sqlite: Any) -> None:
    store = await open_sqlite()
    await seal_up_to(store, 100 * HOUR, 106 * HOUR)
    old, mid, new = store.catalog.partitions
    assert (old.end, old.state) == (100 * HOUR, "sealed")
    assert (mid.start, mid.end, mid.state) == (100 * HOUR, 106 * HOUR, "sealed")
    assert (new.start, new.end, new.state) == (106 * HOUR, None, "live")
    with pytest.raises(ValueError, match="must start after"):
        await store.submit_write(lambda c: partitions.record_switch(c, 106 * HOUR))
    # The refused switch changed nothing; a file made twice is the same empty file.
    assert await store.run_read(partitions.load) is not None
    assert (await store.run_read(partitions.load)).partitions == store.catalog.partitions
    path = partition_files.create(store.path, 106 * HOUR, busy_timeout=1.0)
    assert path.name == new.file


# ---- migration: a store written by today's single-file layout -------------------


async def test_a_single_file_store_is_read_in_place_as_the_oldest_partition(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store"
    old = SqliteStore(path, migrations=MIGRATIONS[:7])  # what hookrouter wrote before version 8
    await old.open()
    events = [
        make_event(provider_event_id=f"pv_{n}", endpoints=("ep_a",), at_ms=int(NOW * 1000) + n)
        for n in range(30)
    ]
    for event in events:
        await old.append(event)
    await old.put_entity(Entity("tenant", "ten_a", None, {"name": "A"}, NOW))
    await old.close()
    size_before = (path / "events.db").stat().st_size

    caplog.set_level(logging.WARNING, logger="hookrouter.store")
    store = SqliteStore(path)
    await store.open()
    try:
        assert store.schema_migrated_from == 7
        assert any(
            "read in place as the oldest time partition" in r.message for r in caplog.records
        )
        assert store.catalog.partitions == (partitions.LEGACY,)
        assert sorted(p.name for p in path.glob("events*.db")) == ["events.db"]  # nothing copied
        assert (path / "events.db").stat().st_size <= size_before + 64 * 1024
        middle = events[15]
        found = await store.get_event(middle.event_id, with_body=True)
        assert found is not None and found.body == middle.body
        assert await store.find_event("src_a", "pv_15") == middle.event_id
        page = await store.list_events(limit=10)
        assert [e.event_id for e in page] == [e.event_id for e in reversed(events[-10:])]
        older = await store.list_events(limit=100, before=page[-1].event_id)
        assert [e.event_id for e in older] == [e.event_id for e in reversed(events[:-10])]
        assert [e.id for e in await store.list_entities("tenant")] == ["ten_a"]
        # And it keeps taking events.
        assert not (await store.append(make_event())).duplicate
    finally:
        await store.close()
    caplog.clear()
    again = SqliteStore(path)
    await again.open()
    await again.close()
    assert not any("read in place" in r.message for r in caplog.records)  # said once


# ---- retention by unlink ----------------------------------------------------------


def _put(path: Path, state: str | None) -> None:
    """One event in the partition file at ``path``, with a delivery in ``state`` if given."""
    event_id = new_event_id()
    with _db(path) as conn:
        conn.execute(
            "INSERT INTO events (event_id, tenant_id, source_id, received_at, status, headers,"
            " body, endpoints) VALUES (?, 'ten_a', 'src_a', 0, 'pending', '{}', x'00', ?)",
            (event_id, None if state is None else '["ep_a"]'),
        )
        conn.execute(
            "UPDATE meta SET value = (SELECT max(rowid) FROM events) WHERE key = 'fanout_rowid'"
        )
        if state is not None:
            conn.execute(
                "INSERT INTO deliveries (event_id, endpoint_id, tenant_id, state, updated_at)"
                " VALUES (?, 'ep_a', 'ten_a', ?, 0)",
                (event_id, state),
            )


def _set_states(path: Path, state: str) -> None:
    with _db(path) as conn:
        conn.execute("UPDATE deliveries SET state = ?", (state,))


def _expire_all() -> Cutoffs:
    return Cutoffs(delivered_before=NOW, failed_before=NOW + DAY)


async def test_an_expired_partition_goes_whole_only_once_nothing_in_it_is_open(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite()
    kept = make_event(endpoints=("ep_a",))
    await store.append(kept)
    base = partitions.bucket_start(NOW - 10 * DAY, 6 * HOUR)
    await seal_up_to(store, base, base + 6 * HOUR)
    expired = store.catalog.partitions[1]
    expired_path = store.path / expired.file
    for _ in range(20):
        _put(expired_path, "delivered")
    _put(expired_path, "retry")  # one open delivery keeps the whole bucket

    assert await store.drop_expired_partitions(_expire_all()) == []
    assert expired_path.exists()
    assert expired in store.catalog.partitions

    # Failed events are kept longer: a cutoff of theirs inside the bucket keeps it.
    _set_states(expired_path, "dead")
    young_failed = Cutoffs(delivered_before=NOW, failed_before=float(expired.start + 1))
    assert await store.drop_expired_partitions(young_failed) == []
    assert await store.drop_expired_partitions(Cutoffs(NOW, None)) == []  # failed kept forever

    assert await store.drop_expired_partitions(_expire_all()) == [expired.file]
    assert not expired_path.exists()
    assert not any(store.path.glob(expired.file + "*"))
    files = [p.file for p in store.catalog.partitions]
    assert expired.file not in files and len(files) == 2
    assert (await store.run_read(partitions.load)).partitions == store.catalog.partitions
    # events.db (entities, catalog, the events before the first switch) is never unlinked.
    assert await store.get_event(kept.event_id) is not None
    assert store.stats()["partitions_dropped"] == 1


def test_a_removed_partition_is_shrunk_in_steps_then_unlinked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(partition_files, "SHRINK_STEP", 4096)
    monkeypatch.setattr(partition_files, "SHRINK_PAUSE", 0.0)
    partition = Partition(HOUR, 2 * HOUR, partitions.partition_file(HOUR), "dropping")
    (tmp_path / partition.file).write_bytes(b"x" * 40_000)
    (tmp_path / (partition.file + "-wal")).write_bytes(b"w" * 100)
    assert partition_files.remove(tmp_path, partition) == 40_100
    assert list(tmp_path.iterdir()) == []
    assert partition_files.remove(tmp_path, partition) == 0  # a second time: nothing left


async def test_a_partition_with_deliveries_not_materialized_yet_is_kept(open_sqlite: Any) -> None:
    store = await open_sqlite()
    base = partitions.bucket_start(NOW - 10 * DAY, 6 * HOUR)
    await seal_up_to(store, base, base + 6 * HOUR)
    path = store.path / store.catalog.partitions[1].file
    _put(path, None)
    with _db(path) as conn:  # an event above the watermark, routed, no row yet
        conn.execute("UPDATE meta SET value = 0 WHERE key = 'fanout_rowid'")
        conn.execute("UPDATE events SET endpoints = '[\"ep_a\"]'")
    assert await store.drop_expired_partitions(_expire_all()) == []
    assert path.exists()


async def test_a_removal_interrupted_after_its_mark_is_finished_at_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store"
    store = SqliteStore(path)
    await store.open()
    base = partitions.bucket_start(NOW - 10 * DAY, 6 * HOUR)
    await seal_up_to(store, base, base + 6 * HOUR, base + 12 * HOUR)
    doomed = store.catalog.partitions[1]
    _put(path / doomed.file, "delivered")
    # Step 1 committed, then the process died before unlinking (see partition_files).
    assert await store.submit_write(partition_files.mark_if_idle(doomed))
    await store.close()
    assert (path / doomed.file).exists()

    caplog.set_level(logging.WARNING, logger="hookrouter.store")
    reopened = SqliteStore(path)
    await reopened.open()
    try:
        assert not (path / doomed.file).exists()
        assert doomed.file not in [p.file for p in reopened.catalog.partitions]
        assert len(reopened.catalog.partitions) == 3
        assert any("finished removing expired partition" in r.message for r in caplog.records)
    finally:
        await reopened.close()


def test_the_id_floor_of_a_bucket_start_routes_into_that_bucket() -> None:
    catalog = _three()
    assert catalog.route(event_id_floor(1006 * HOUR)) is catalog.newest


# ---- kill -9 of a real process while it switches buckets and removes partitions ---------

CHILD = Path(__file__).with_name("partition_child.py")
DROPS_BEFORE_KILL = 15


async def test_sigkill_during_switches_and_removals_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    await _sigkill_run(tmp_path / "store", keep=None, drops=DROPS_BEFORE_KILL, switches=0)


async def test_sigkill_with_more_partitions_than_sqlite_attaches_loses_nothing(
    tmp_path: Path,
) -> None:
    # 25 buckets kept: every connection attaches what it needs, a few at a time.
    store = await _sigkill_run(tmp_path / "store", keep=25, drops=5, switches=32)
    assert store.partitions > 25


class _Run:
    """What a kill -9 run left, as the reopened store sees it."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions


async def _sigkill_run(path: Path, *, keep: int | None, drops: int, switches: int) -> _Run:
    """Kill the child mid-run once it made ``switches`` switches and ``drops`` removals; check."""
    base = partitions.bucket_start(NOW - 40 * DAY, 60)
    args = [str(CHILD), str(path), str(base)] + ([] if keep is None else [str(keep)])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(60):
            while (
                sum(line.startswith("D ") for line in lines) < drops
                or sum(line.startswith("S ") for line in lines) < switches
            ):
                line = await proc.stdout.readline()
                assert line.endswith(b"\n"), f"child stopped early: {line!r}"
                lines.append(line.decode().strip())
    finally:
        proc.send_signal(signal.SIGKILL)  # no flush, no close: mid-append, mid-switch, mid-drop
        tail = await proc.stdout.read()
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL
    lines.extend(line.decode() for line in tail.split(b"\n")[:-1])  # a torn last line was not done
    acked = [line[2:] for line in lines if line.startswith("A ")]
    switched = [int(line[2:]) for line in lines if line.startswith("S ")]
    dropped = [line[2:] for line in lines if line.startswith("D ")]

    store = SqliteStore(path)
    await store.open()
    # Retention removed a partition whose file is gone: the kill may have come
    # before its D line (or its removal was finished at this open).
    removed = set(dropped) | {
        partitions.partition_file(s)
        for s in switched
        if not (path / partitions.partition_file(s)).exists()
    }
    try:
        # An acknowledged event is stored, unless retention removed its whole bucket.
        # Each event went to the newest bucket at or before its id's time (S lines).
        def holder(event_id: str) -> str:
            index = bisect.bisect_right(switched, event_id_time_ms(event_id) / 1000) - 1
            return partitions.partition_file(switched[max(index, 0)])

        missing = [
            i for i in acked if holder(i) not in removed and await store.get_event(i) is None
        ]
        assert missing == [], f"{len(missing)} of {len(acked)} acknowledged events were lost"
        assert len(switched) > drops
        catalog = store.catalog
        # A recorded switch survives; the newest partition is one the writer could commit to.
        assert catalog.newest.start >= switched[-1]
        on_disk = _partition_files_in(path)
        listed = {p.file for p in catalog.partitions} - {"events.db"}
        assert listed <= on_disk, "every partition in the catalog has its file"
        # Only a file made ahead of a switch the kill interrupted may be unlisted,
        # besides those made at open for the real clock's bucket (ids run 40 days back).
        real = partitions.partition_file(partitions.bucket_start(NOW, 60))
        assert len({f for f in on_disk - listed if f < real}) <= 1
        assert not set(dropped) & (listed | on_disk), "a removed partition stays removed"
        assert await store.run_read(partition_files_dropping) == []
        return _Run(len(catalog.partitions))
    finally:
        await store.close()


def _partition_files_in(path: Path) -> set[str]:
    return {p.name for p in path.glob("events-*.db")}


def partition_files_dropping(conn: sqlite3.Connection) -> list[Partition]:
    return partitions.dropping(conn)


# ---- backup across partitions -------------------------------------------------------


def _rows(path: Path) -> list[tuple[Any, ...]]:
    with _db(path) as conn:
        return conn.execute(
            "SELECT e.event_id, d.state FROM events e LEFT JOIN deliveries d USING (event_id)"
            " ORDER BY 1"
        ).fetchall()


async def test_a_backup_copies_every_partition_and_the_restored_store_resumes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store"
    store = SqliteStore(path)
    await store.open()
    try:
        kept = [make_event(endpoints=("ep_a",)) for _ in range(5)]
        for event in kept:
            await store.append(event)
        base = partitions.bucket_start(NOW - 2 * DAY, 6 * HOUR)
        await seal_up_to(store, base, base + 6 * HOUR)
        for partition, states in zip(
            store.catalog.partitions[1:], (["delivered", "retry"], ["pending"]), strict=True
        ):
            for state in states:
                _put(path / partition.file, state)
        dest = tmp_path / "copy.db"
        result = backup.backup(path, dest)
        catalog = store.catalog
    finally:
        await store.close()

    copies = backup.partitions_dir(dest)
    later = [p.file for p in catalog.partitions[1:]]
    assert sorted(p.name for p in copies.iterdir()) == sorted(later)
    assert result.events == 5 + 3
    assert stat.S_IMODE(copies.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in copies.iterdir()} == {0o600}
    with pytest.raises(StoreError, match="already exists"):
        backup.backup(path, dest)

    restored = tmp_path / "restored"
    restored.mkdir()
    shutil.copyfile(dest, restored / "events.db")
    for copy in copies.iterdir():
        shutil.copyfile(copy, restored / copy.name)
    for name in later:
        assert _rows(restored / name) == _rows(path / name)
    again = SqliteStore(restored)
    await again.open()
    try:
        assert again.catalog.partitions == catalog.partitions
        for event in kept:
            assert await again.get_event(event.event_id) is not None
        assert not (await again.append(make_event())).duplicate
        # The restored files are live partitions: the open retry keeps the expired one.
        expire_all = Cutoffs(delivered_before=NOW + DAY, failed_before=NOW + DAY)
        assert await again.drop_expired_partitions(expire_all) == []
    finally:
        await again.close()
