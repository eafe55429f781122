"""The SQLite writer switching time partitions (issue 34), with real files.

With ``bucket_seconds`` set, the first event of a new bucket moves the
writer to a new partition file. Events here carry ids (and arrival times)
in chosen one-minute buckets, so one test crosses two boundaries in
milliseconds; everything a user reaches must then work across them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support.store_backends import make_event

from hookrouter.clock import ManualClock
from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.base import AttemptRecord, DeliveryState, EventStatus, NewEvent
from hookrouter.store.ledger import OutcomeRecord, ReplayFilter
from hookrouter.store.retention import Cutoffs
from hookrouter.store.sqlite import SqliteStore, backup, partitions
from hookrouter.store.sqlite.dedup_tiers import TierPolicy
from hookrouter.store.sqlite.schema import MIGRATIONS

BUCKET = 60
# Ids are monotonic within the process: each test takes buckets later than any before.
_DAYS = itertools.count(1)


def _buckets() -> tuple[int, int, int]:
    """Three consecutive one-minute buckets, in the future of every id minted so far."""
    first = partitions.bucket_start(time.time() + 86400 * next(_DAYS) * 3, BUCKET)
    return first, first + BUCKET, first + 2 * BUCKET


def _at(bucket: int, second: float, **kwargs: Any) -> NewEvent:
    return make_event(at_ms=int((bucket + second) * 1000), **kwargs)


def _files(store: SqliteStore) -> list[str]:
    return [p.file for p in store.catalog.partitions]


def _outcome(event_id: str, endpoint_id: str, state: DeliveryState) -> OutcomeRecord:
    code = 200 if state is DeliveryState.DELIVERED else 500
    attempt = AttemptRecord(1, 100.0, 3.0, code, None)
    return OutcomeRecord(
        DeliveryRef(event_id, endpoint_id), state, 1, None, code, None, 100.0, attempt
    )


async def test_events_of_new_buckets_go_to_new_files_and_lookups_cross_them(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite(bucket_seconds=BUCKET)
    a, b, c = _buckets()
    first = [_at(a, s, provider_event_id=f"pa{s}") for s in range(5)]
    second = [_at(b, s, provider_event_id=f"pb{s}") for s in range(5)]
    for event in first + second:
        assert not (await store.append(event)).duplicate
    assert _files(store) == [
        "events.db",
        partitions.partition_file(a),
        partitions.partition_file(b),
    ]
    assert store.stats()["partition_switches"] == 2
    assert (store.path / partitions.partition_file(b)).exists()
    for event in first + second:
        record = await store.get_event(event.event_id, with_body=True)
        assert record is not None and record.body == event.body
        assert await store.find_event("src_a", event.provider_event_id or "") == event.event_id
    assert await store.get_event("evt_nothing_like_an_id") is None

    # A repeat of an event of the sealed bucket is still a duplicate of it.
    repeat = await store.append(_at(c, 1, provider_event_id="pa2"))
    assert repeat.duplicate and repeat.event_id == first[2].event_id


async def test_listing_pages_with_cursors_across_the_boundary(open_sqlite: Any) -> None:
    store = await open_sqlite(bucket_seconds=BUCKET)
    a, b, _ = _buckets()
    events = [_at(a, 50 + s) for s in range(7)] + [_at(b, s) for s in range(6)]
    for event in events:
        await store.append(event)
    assert len(store.catalog.partitions) == 3
    seen: list[str] = []
    before: str | None = None
    while True:
        page = await store.list_events(limit=4, before=before)
        if not page:
            break
        seen += [r.event_id for r in page]
        before = page[-1].event_id
    assert seen == [e.event_id for e in reversed(events)]
    by_tenant = await store.list_events(tenant_id="ten_a", status=EventStatus.UNROUTED, limit=100)
    assert len(by_tenant) == len(events)


async def test_outcomes_page_in_and_replay_reach_events_of_sealed_buckets(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite(bucket_seconds=BUCKET)
    ledger = store.delivery_ledger()
    a, b, c = _buckets()
    old = [_at(a, s, endpoints=("ep_a",)) for s in range(3)]
    new = [_at(b, s, endpoints=("ep_a",)) for s in range(3)]
    for event in old + new:
        await store.append(event)
    await store.append(_at(c, 1))  # and a third bucket: old ones are now two back

    # Page-in of the lane's spilled deliveries: oldest first, across files.
    refs = await ledger.page_pending("ten_a", "ep_a", None, 4)
    assert [r.event_id for r in refs] == [e.event_id for e in (old + new)[:4]]
    later = await ledger.page_pending("ten_a", "ep_a", refs[-1], 10)
    assert [r.event_id for r in later] == [e.event_id for e in (old + new)[3:]]
    loaded = await ledger.load([DeliveryRef(e.event_id, "ep_a") for e in (new[0], old[0])])
    assert [w.ref.event_id for w in loaded] == [new[0].event_id, old[0].event_id]

    # Outcomes of deliveries of the sealed buckets land in their files.
    await ledger.record([_outcome(old[0].event_id, "ep_a", DeliveryState.DELIVERED)])
    await ledger.record([_outcome(old[1].event_id, "ep_a", DeliveryState.DEAD)])
    await ledger.record([_outcome(new[1].event_id, "ep_a", DeliveryState.DEAD)])
    await ledger.record([])
    status = {e.event_id: (await store.get_event(e.event_id)) for e in old + new}
    assert status[old[0].event_id].status is EventStatus.DELIVERED  # type: ignore[union-attr]
    assert status[old[1].event_id].status is EventStatus.FAILED  # type: ignore[union-attr]
    counts = await ledger.state_counts()
    assert counts[("ten_a", DeliveryState.PENDING)] == 3
    assert counts[("ten_a", DeliveryState.DEAD)] == 2
    listed = await store.list_events(tenant_id="ten_a", status=EventStatus.PENDING, limit=10)
    assert [e.event_id for e in listed] == [e.event_id for e in (new[2], new[0], old[2])]
    pending = await ledger.pending_endpoints()
    assert [(p.endpoint_id, p.count, p.oldest.event_id) for p in pending] == [
        ("ep_a", 3, old[2].event_id)
    ]

    # Replay by window: only the first bucket's dead delivery reopens.
    window = ReplayFilter(tenant_id="ten_a", since=float(a), until=float(b))
    assert await ledger.count_replayable(window) == 1
    resumed = await ledger.replay(window)
    assert [(r.endpoint_id, r.count, r.oldest.event_id) for r in resumed] == [
        ("ep_a", 1, old[1].event_id)
    ]
    record = await store.get_event(old[1].event_id)
    assert record is not None and record.status is EventStatus.PENDING
    everything = ReplayFilter(tenant_id="ten_a")
    assert await ledger.count_replayable(everything) == 1  # the second bucket's


async def test_dedup_across_the_boundary_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "store"
    tiny = TierPolicy(hot_limit=4, fanout=2)
    a, b, c = _buckets()
    store = SqliteStore(path, bucket_seconds=BUCKET, dedup_policy=tiny)
    await store.open()
    try:
        originals = [_at(a, s, provider_event_id=f"k{s}") for s in range(6)]
        originals += [_at(b, s, provider_event_id=f"k{6 + s}") for s in range(6)]
        for event in originals:
            await store.append(event)
    finally:
        await store.close()
    (path / "dedup.db").unlink()  # rebuilt from every partition at the next open
    for suffix in ("-wal", "-shm"):
        (path / f"dedup.db{suffix}").unlink(missing_ok=True)
    again = SqliteStore(path, bucket_seconds=BUCKET, dedup_policy=tiny)
    await again.open()
    try:
        for index, original in enumerate(originals):
            repeat = await again.append(_at(c, index, provider_event_id=f"k{index}"))
            assert repeat.duplicate and repeat.event_id == original.event_id
    finally:
        await again.close()


async def test_a_backup_across_switched_partitions_restores_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / "store"
    a, b, c = _buckets()
    store = SqliteStore(path, bucket_seconds=BUCKET)
    await store.open()
    try:
        events = [_at(a, 1, endpoints=("ep_a",)), _at(b, 1, provider_event_id="pb")]
        for event in events:
            await store.append(event)
        dest = tmp_path / "copy.db"
        result = backup.backup(path, dest)
    finally:
        await store.close()
    assert result.events == 2
    restored = tmp_path / "restored"
    restored.mkdir()
    shutil.copyfile(dest, restored / "events.db")
    for copy in backup.partitions_dir(dest).iterdir():
        shutil.copyfile(copy, restored / copy.name)
    again = SqliteStore(restored, bucket_seconds=BUCKET)
    await again.open()
    try:
        assert len(again.catalog.partitions) == 3
        for event in events:
            assert await again.get_event(event.event_id) is not None
        assert (await again.append(_at(c, 1, provider_event_id="pb"))).duplicate
        assert not (await again.append(_at(c, 2))).duplicate
        assert again.stats()["partition_switches"] == 1
        refs = await again.delivery_ledger().page_pending("ten_a", "ep_a", None, 10)
        assert [r.event_id for r in refs] == [events[0].event_id]
    finally:
        await again.close()


async def test_retention_unlinks_a_switched_partition_once_its_work_is_done(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite(bucket_seconds=BUCKET)
    ledger = store.delivery_ledger()
    a, b, _ = _buckets()
    old = _at(a, 1, endpoints=("ep_a",))
    await store.append(old)
    await store.append(_at(b, 1))
    expire = Cutoffs(delivered_before=float(b), failed_before=float(b))
    assert await store.drop_expired_partitions(expire) == []  # its delivery is open
    await ledger.record([_outcome(old.event_id, "ep_a", DeliveryState.DELIVERED)])
    await ledger.record([])
    assert await store.drop_expired_partitions(expire) == [partitions.partition_file(a)]
    assert not (store.path / partitions.partition_file(a)).exists()
    assert await store.get_event(old.event_id) is None
    assert len(await store.list_events(limit=10)) == 1
    await store.append(_at(b, 2))  # the writer goes on in the newest file


async def test_without_a_bucket_every_event_stays_in_events_db(open_sqlite: Any) -> None:
    store = await open_sqlite()
    a, b, _ = _buckets()
    for event in (_at(a, 1), _at(b, 1)):
        await store.append(event)
    assert _files(store) == ["events.db"]
    assert not list(store.path.glob("events-*.db"))


async def test_a_single_file_store_opened_with_a_bucket_switches_and_keeps_its_events(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store"
    a, b, _ = _buckets()
    old = SqliteStore(path, migrations=MIGRATIONS[:7])  # what hookrouter wrote before version 8
    await old.open()
    before = [_at(a, s, provider_event_id=f"v{s}", endpoints=("ep_a",)) for s in range(3)]
    for event in before:
        await old.append(event)
    await old.close()

    store = SqliteStore(path, bucket_seconds=BUCKET)
    await store.open()
    try:
        after = _at(b, 1, endpoints=("ep_a",))
        await store.append(after)
        assert _files(store) == ["events.db", partitions.partition_file(b)]
        assert (await store.append(_at(b, 2, provider_event_id="v1"))).event_id == (
            before[1].event_id
        )
        listed = await store.list_events(limit=10)
        assert [e.event_id for e in listed] == [after.event_id] + [
            e.event_id for e in reversed(before)
        ]
        refs = await store.delivery_ledger().page_pending("ten_a", "ep_a", None, 10)
        assert [r.event_id for r in refs] == [e.event_id for e in (*before, after)]
    finally:
        await store.close()


@pytest.mark.parametrize("version", [5, 7])
async def test_a_store_kept_below_version_8_never_switches(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    path = tmp_path / "store"
    a, b, _ = _buckets()
    store = SqliteStore(path, bucket_seconds=BUCKET, migrations=MIGRATIONS[:version])
    with caplog.at_level(logging.WARNING, logger="hookrouter.store"):
        await store.open()
    try:
        events = [_at(a, 1, endpoints=("ep_a",)), _at(b, 1), _at(b, 2)]
        for event in events:
            assert not (await store.append(event)).duplicate
        assert _files(store) == ["events.db"]
        assert store.bucket_seconds is None and store.stats()["partition_switches"] == 0
        assert not list(path.glob("events-*.db"))
        for event in events:
            assert await store.get_event(event.event_id) is not None
    finally:
        await store.close()
    why = [r.getMessage() for r in caplog.records if "bucket is ignored" in r.getMessage()]
    assert len(why) == 1 and f"schema version {version}" in why[0]


async def test_the_next_file_is_made_ahead_and_an_unused_one_removed(tmp_path: Path) -> None:
    path = tmp_path / "store"
    a, b, c = _buckets()
    store = SqliteStore(path, bucket_seconds=BUCKET)
    await store.open()
    try:
        await store.append(_at(a, 1))
        await store.append(_at(a, 40))  # past half of the bucket: b's file is made ahead
    finally:
        await store.close()  # waits for the file being made
    assert (path / partitions.partition_file(b)).exists()
    again = SqliteStore(path, bucket_seconds=BUCKET)
    await again.open()
    try:
        assert _files(again) == ["events.db", partitions.partition_file(a)]
        late = _at(c, 1)  # nothing arrived in b: its file will never be used
        await again.append(late)
        assert _files(again) == [
            "events.db",
            partitions.partition_file(a),
            partitions.partition_file(c),
        ]
        assert not (path / partitions.partition_file(b)).exists()
        assert await again.get_event(late.event_id) is not None
    finally:
        await again.close()


async def test_a_batch_across_the_boundary_puts_each_event_in_its_own_bucket(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite(bucket_seconds=BUCKET)
    a, b, _ = _buckets()
    await store.append(_at(a, 1))
    # One group commit: the newest event moves the writer to b, the others
    # (late in a, as from other producers) still go to a's file.
    batch = [_at(a, 58, provider_event_id="late"), _at(b, 1), _at(a, 59, endpoints=("ep_a",))]
    results = await asyncio.gather(*(store.append(e) for e in batch))
    assert [r.event_id for r in results] == [e.event_id for e in batch]
    assert _files(store)[1:] == [partitions.partition_file(a), partitions.partition_file(b)]
    for event in batch:
        assert await store.get_event(event.event_id) is not None
    with sqlite3.connect(store.path / partitions.partition_file(a)) as conn:
        in_a = {r[0] for r in conn.execute("SELECT event_id FROM events")}
    conn.close()
    assert {batch[0].event_id, batch[2].event_id} <= in_a
    assert batch[1].event_id not in in_a
    assert (await store.append(_at(b, 2, provider_event_id="late"))).duplicate
    refs = await store.delivery_ledger().page_pending("ten_a", "ep_a", None, 10)
    assert [r.event_id for r in refs] == [batch[2].event_id]


async def test_the_first_partition_file_is_made_at_open(tmp_path: Path) -> None:
    path = tmp_path / "store"
    a, b, _ = _buckets()
    # The clock 40 s into bucket a: past its half, so b's file is made too.
    store = SqliteStore(path, bucket_seconds=BUCKET, clock=ManualClock(wall=a + 40))
    await store.open()
    try:
        made = path / partitions.partition_file(a)
        assert made.exists() and (path / partitions.partition_file(b)).exists()
        assert _files(store) == ["events.db"]  # made, not switched to
        inode = made.stat().st_ino
        await store.append(_at(a, 41))
        assert _files(store) == ["events.db", partitions.partition_file(a)]
        assert made.stat().st_ino == inode  # the switch reused it
    finally:
        await store.close()
