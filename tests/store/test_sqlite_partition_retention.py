"""Row retention inside time partitions (issue 34), with real files.

A partition file is unlinked whole once its bucket is past every cutoff and
none of its work is open. Until then its rows leave one by one at their own
cutoff: delivered events of a partition that a failed event (kept longer)
or an open delivery keeps must not wait for the file. Buckets are one
minute long and the retention passes run on a manual clock, so a month of
policy passes in a few milliseconds.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
from typing import Any

import pytest
from tests.support.store_backends import make_event
from tests.support.store_jobs import queue_behind, reopen

from hookrouter.clock import ManualClock
from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.base import AttemptRecord, DeliveryState, NewEvent
from hookrouter.store.ledger import OutcomeRecord
from hookrouter.store.pruner import Pruner
from hookrouter.store.retention import RetentionPolicy
from hookrouter.store.sqlite import SqliteStore, partition_files, partitions

BUCKET = 60
# Buckets in the future of every id the other partition tests mint (not required:
# each test has its own store; it keeps the files' names apart in a failure's output).
_DAYS = itertools.count(5000)
# Delivered and unrouted events are kept a minute, failed ones ten.
POLICY = RetentionPolicy(delivered_seconds=60, failed_seconds=600)


def _buckets(count: int = 3) -> list[int]:
    first = partitions.bucket_start(time.time() + 86400 * next(_DAYS) * 3, BUCKET)
    return [first + i * BUCKET for i in range(count)]


def _at(bucket: int, second: float, **kwargs: Any) -> NewEvent:
    return make_event(at_ms=int((bucket + second) * 1000), endpoints=("ep_a",), **kwargs)


def _outcome(event: NewEvent, state: DeliveryState) -> OutcomeRecord:
    code = 200 if state is DeliveryState.DELIVERED else 500
    attempt = AttemptRecord(1, 100.0, 3.0, code, None)
    ref = DeliveryRef(event.event_id, "ep_a")
    return OutcomeRecord(ref, state, 1, None, code, None, 100.0, attempt)


async def _finished(store: SqliteStore, events: list[NewEvent], state: DeliveryState) -> None:
    for event in events:
        await store.append(event)
    await store.delivery_ledger().record([_outcome(e, state) for e in events])
    await store.delivery_ledger().record([])


def _file_rows(store: SqliteStore, start: int) -> tuple[int, int, int]:
    """``_rows`` of the file the catalog names for the bucket at ``start`` now."""
    (partition,) = [p for p in store.catalog.partitions if p.start == start]
    return _rows(store, start, partition.file)


async def _pass(store: SqliteStore, now: float, policy: RetentionPolicy = POLICY) -> int:
    """One retention pass at wall time ``now``, in batches smaller than a partition."""
    return await Pruner(
        store, policy, ManualClock(wall=now), scan_limit=7, batch_pause=0
    ).run_pass()


def _rows(store: SqliteStore, start: int, file: str | None = None) -> tuple[int, int, int]:
    """(events, deliveries, attempts) rows in the file of the bucket beginning at ``start``."""
    conn = sqlite3.connect(store.path / (file or partitions.partition_file(start)))
    try:
        return tuple(  # type: ignore[return-value]
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("events", "deliveries", "attempts")
        )
    finally:
        conn.close()


async def test_a_partition_its_failed_event_keeps_is_compacted_to_that_event(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite(bucket_seconds=BUCKET)
    a, _, c = _buckets()
    delivered = [_at(a, s / 2) for s in range(30)]
    failed = _at(a, 40)
    await _finished(store, delivered, DeliveryState.DELIVERED)
    await _finished(store, [failed], DeliveryState.DEAD)
    newest = make_event(at_ms=(c + 1) * 1000)  # unrouted, in the writer's partition
    await store.append(newest)
    assert _rows(store, a) == (31, 31, 1)

    # The whole partition (it ends at c: nothing came in b) is past the delivered
    # cutoff, the failed event inside its ten minutes: the file is rewritten
    # with that event alone, and no row is deleted one by one.
    assert await _pass(store, c + 60) == 0
    assert store.stats()["partitions_compacted"] == 1
    assert not (store.path / partitions.partition_file(a)).exists()
    assert _file_rows(store, a) == (1, 1, 1)
    for event in delivered:
        assert await store.get_event(event.event_id) is None
    kept = await store.get_event(failed.event_id)
    assert kept is not None and kept.status.value == "failed"
    listed = await store.list_events(limit=10)
    assert [e.event_id for e in listed] == [newest.event_id, failed.event_id]

    # A second pass finds nothing more to do.
    assert await _pass(store, c + 120) == 0
    assert store.stats()["partitions_compacted"] == 1

    # Ten minutes after the partition ended, the compacted file goes whole.
    assert await _pass(store, c + 600 + 1) == 0
    assert store.stats()["partitions_dropped"] == 1
    assert [p.start for p in store.catalog.partitions if p.start == a] == []
    assert not any(store.path.glob(partitions.partition_file(a)[:-3] + "*"))
    assert await store.get_event(failed.event_id) is None
    assert await store.get_event(newest.event_id) is not None


async def test_a_partition_without_failed_events_goes_whole_at_the_delivered_cutoff(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite(bucket_seconds=BUCKET)
    a, _, c = _buckets()
    delivered = [_at(a, s) for s in range(10)]
    await _finished(store, delivered, DeliveryState.DELIVERED)
    await store.append(make_event(at_ms=(a + 20) * 1000))  # unrouted: the delivered cutoff too
    await store.append(make_event(at_ms=(c + 1) * 1000))

    # Inside the failed cutoff, but nothing in it failed: unlinked, no row deleted.
    assert await _pass(store, c + 60) == 0
    assert not (store.path / partitions.partition_file(a)).exists()
    assert store.stats()["partitions_dropped"] == 1
    assert await store.get_event(delivered[0].event_id) is None


async def test_open_work_keeps_the_file_but_not_its_delivered_events(open_sqlite: Any) -> None:
    store = await open_sqlite(bucket_seconds=BUCKET)
    a, _, c = _buckets()
    delivered = [_at(a, s) for s in range(10)]
    await _finished(store, delivered, DeliveryState.DELIVERED)
    waiting = _at(a, 30)  # its delivery is still open
    await store.append(waiting)
    await store.append(make_event(at_ms=(c + 1) * 1000))
    short = RetentionPolicy(delivered_seconds=60, failed_seconds=60)

    # Bucket a is past every cutoff, but its open delivery keeps the file.
    assert await _pass(store, c + 60, short) == len(delivered)
    assert (store.path / partitions.partition_file(a)).exists()
    assert _rows(store, a) == (1, 1, 0)  # the open delivery got its row on the way
    refs = await store.delivery_ledger().page_pending("ten_a", "ep_a", None, 10)
    assert [r.event_id for r in refs] == [waiting.event_id]

    await store.delivery_ledger().record([_outcome(waiting, DeliveryState.DELIVERED)])
    await store.delivery_ledger().record([])
    assert await _pass(store, c + 60, short) == 0
    assert not (store.path / partitions.partition_file(a)).exists()
    assert store.stats()["partitions_dropped"] == 1
    assert await store.get_event(waiting.event_id) is None


async def _partitions_with_failures(
    store: SqliteStore, delivered: int, failed: int
) -> tuple[list[int], list[NewEvent]]:
    """14 one-minute partitions, each but the last with delivered and failed events."""
    starts = _buckets(14)  # past the 9 a connection attaches beside events.db and dedup.db
    kept: list[NewEvent] = []
    for start in starts[:-1]:
        await _finished(store, [_at(start, s) for s in range(delivered)], DeliveryState.DELIVERED)
        kept += [_at(start, 50 + s) for s in range(failed)]
        await _finished(store, kept[-failed:], DeliveryState.DEAD)
    await store.append(make_event(at_ms=(starts[-1] + 1) * 1000))
    return starts, kept


# Every delivered event is past its minute; every failed one inside its hour.
HOUR = RetentionPolicy(delivered_seconds=60, failed_seconds=3600)


async def test_row_retention_walks_more_partitions_than_a_connection_attaches(
    open_sqlite: Any,
) -> None:
    # Most events of each partition are kept: deleting the others row by row
    # is cheaper than rewriting the file.
    store = await open_sqlite(bucket_seconds=BUCKET)
    starts, kept = await _partitions_with_failures(store, delivered=3, failed=4)

    assert await _pass(store, starts[-1] + 60, HOUR) == 3 * (len(starts) - 1)
    assert store.stats()["partitions_compacted"] == 0
    assert len(await store.list_events(limit=100)) == len(kept) + 1
    for start in starts[:-1]:
        assert _rows(store, start) == (4, 4, 4)


async def test_compaction_walks_more_partitions_than_a_connection_attaches(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite(bucket_seconds=BUCKET)
    starts, kept = await _partitions_with_failures(store, delivered=3, failed=1)

    assert await _pass(store, starts[-1] + 60, HOUR) == 0
    assert store.stats()["partitions_compacted"] == len(starts) - 1
    listed = await store.list_events(limit=100)
    assert len(listed) == len(kept) + 1
    for start, event in zip(starts, kept, strict=False):
        assert _file_rows(store, start) == (1, 1, 1)
        assert not (store.path / partitions.partition_file(start)).exists()
        assert await store.get_event(event.event_id) is not None


async def test_the_partition_holding_the_cutoff_waits_to_go_whole(open_sqlite: Any) -> None:
    # Its expired rows would be deleted (and checkpointed) only for the file to
    # be unlinked within a bucket: they wait for the file instead.
    store = await open_sqlite(bucket_seconds=BUCKET)
    a, _, c = _buckets()
    early = [_at(a, s) for s in range(10)]
    late = [_at(a, 40 + s) for s in range(5)]
    await _finished(store, early + late, DeliveryState.DELIVERED)
    await store.append(make_event(at_ms=(c + 1) * 1000))  # bucket a ends at c

    # The delivered cutoff is a + 30: the early events are expired, their file is not.
    assert await _pass(store, a + 30 + 60) == 0
    assert _rows(store, a) == (15, 15, 0)
    assert await store.get_event(early[0].event_id) is not None

    # Once the whole bucket is past the cutoff the file goes, with no row deleted.
    assert await _pass(store, c + 60) == 0
    assert store.stats()["partitions_dropped"] == 1
    assert not (store.path / partitions.partition_file(a)).exists()
    assert await store.get_event(late[-1].event_id) is None


async def test_the_newest_partition_holding_the_cutoff_loses_rows_one_by_one(
    open_sqlite: Any,
) -> None:
    # The writer's partition is never unlinked: a retention shorter than a
    # bucket still deletes its expired rows.
    store = await open_sqlite(bucket_seconds=BUCKET)
    (a,) = _buckets(1)
    early = [_at(a, s) for s in range(10)]
    await _finished(store, early, DeliveryState.DELIVERED)
    await store.append(_at(a, 50))

    assert await _pass(store, a + 30 + 60) == len(early)
    assert await store.get_event(early[0].event_id) is None


async def test_a_write_queued_behind_the_drop_mark_misses_the_file_that_goes(
    open_sqlite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Jobs of one commit cycle share the catalog the cycle began with: a replay
    # queued right behind the mark reopened a delivery in the file unlinked a
    # moment later, and reported it resumed. It now finds no such partition.
    store = await open_sqlite(bucket_seconds=BUCKET)
    a, _, c = _buckets()
    event = _at(a, 1)
    await _finished(store, [event], DeliveryState.DELIVERED)
    await store.append(make_event(at_ms=(c + 1) * 1000))
    reopened = queue_behind(
        monkeypatch, store, partition_files, "mark_if_idle", reopen(store, event.event_id)
    )
    assert await _pass(store, c + 60) == 0
    assert store.stats()["partitions_dropped"] == 1
    assert await reopened[0] == 0
