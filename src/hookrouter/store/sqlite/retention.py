"""Retention on SQLite: find expired events on the reader, delete them on the writer.

A batch is two steps. The **scan** walks ``events`` in primary-key order on
the read connection (its own thread: the writer and the event loop are not
involved), from the previous batch's last id up to the latest cutoff, and
marks which rows are expired (``status.EXPIRED``). Event ids begin
with their arrival time (``hookrouter.ids``), so "received before the
cutoff" is an id range the primary key serves, and the scan of a store with
nothing to expire stops at its first young event.

With time partitions the scan walks them oldest first (``scanned``): each
one whose bucket begins before the latest cutoff, from the one holding the
previous batch's last id, each in a read transaction of its own so that the
reader attaches them one by one. Ids order the partitions as they order
rows, so the resume point stays one event id. Partitions past the cutoffs
of all they hold, with no open work, were unlinked whole before the first
batch (``partition_files``) and are no longer in the catalog; what is left
are those kept by failed events inside their longer retention or by open
work, whose delivered events leave here at their own cutoff. The sealed
partition whose bucket holds the delivered cutoff is not walked: the whole
of it is past that cutoff within one bucket and then goes whole, so its
expired events stay at most one bucket longer instead of being deleted row
by row just before their file is unlinked (the soak measured that as the
writer's largest cost once retention began: docs/performance.md).

The **delete** is a write job: it checks ``EXPIRED`` again for the
candidates, because between the two steps a replay may have reopened one,
then deletes their attempts, deliveries and the events (children first, so
it does not depend on ``PRAGMA foreign_keys``), each in the partition its
id routes to (in the writer's catalog). The job holds the writer, so
batches are small (``DELETE_LIMIT``).

Deleting costs the writer a small fraction of what an event cost to take
in and deliver (the commit is the largest part: the freed pages are
scattered over the old part of the file), and the scan runs on the reader;
so keeping up with a steady ingest rate costs the writer a few per cent
(figures: docs/performance.md).

Old events that must stay (open deliveries, failed ones inside their longer
retention) are scanned on every pass; the scan is bounded per batch and the
reader is cheap, so a million parked events cost a pass a few seconds of the
read thread, not of the writer.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, Final

import orjson

from hookrouter.store.retention import Cutoffs
from hookrouter.store.sqlite.ledger_sql import event_id_floor
from hookrouter.store.sqlite.partition_sql import Executes, On
from hookrouter.store.sqlite.partitions import LEGACY_FILE, Catalog, Partition
from hookrouter.store.sqlite.queries import read_transaction
from hookrouter.store.sqlite.status import EXPIRED

# Events deleted per write job: sized so that appends queued behind one job
# wait about as long as behind one group commit.
DELETE_LIMIT: Final = 250

_SCAN: Final = f"""
SELECT event_id, {EXPIRED} FROM events
WHERE event_id > :after AND event_id < :scan_floor
ORDER BY event_id LIMIT :limit"""
# Never the row with the largest rowid: SQLite gives a new row max(rowid) + 1,
# and both the group commit (which rows of a batch went in: "rowid above the
# last one it saw", ``batch._classify``) and the dedup tiers (which
# events a run covers: ``flushed_rowid``) rely on that maximum never going down.
_CONFIRM: Final = f"""
SELECT event_id FROM events
WHERE event_id IN (SELECT value FROM json_each(:ids)) AND {EXPIRED}
    AND rowid < (SELECT max(rowid) FROM events)"""
_DELETES: Final = tuple(
    f"DELETE FROM {table} WHERE event_id IN (SELECT value FROM json_each(?))"
    for table in ("attempts", "deliveries", "events")
)


def floors(cutoffs: Cutoffs) -> dict[str, str]:
    """The cutoffs as event-id bounds ('' where a kind is kept forever)."""

    def floor(before: float | None) -> str:
        return "" if before is None else event_id_floor(before)

    return {
        "delivered_floor": floor(cutoffs.delivered_before),
        "failed_floor": floor(cutoffs.failed_before),
        "scan_floor": floor(cutoffs.scan_before),
    }


def scanned(catalog: Catalog, cutoffs: Cutoffs, after: str) -> list[Partition]:
    """The partitions a scan resuming after ``after`` walks, oldest first.

    Those whose bucket begins before the latest cutoff and that may hold an
    id above ``after`` (every id of a partition is below its end's floor).
    """
    before = cutoffs.scan_before
    if before is None:
        return []
    return [
        p
        for p in catalog.partitions
        if p.start < before
        and (p.end is None or event_id_floor(p.end) > after)
        and not _goes_whole(p, cutoffs)
    ]


def _goes_whole(partition: Partition, cutoffs: Cutoffs) -> bool:
    """A sealed partition whose bucket holds the delivered cutoff: its file goes within a bucket.

    Deleting its expired rows first would write (and checkpoint) nearly a
    bucket's events a second time just before the unlink frees them all;
    the newest partition and ``events.db`` are never unlinked, so their
    rows still leave one by one.
    """
    delivered = cutoffs.delivered_before
    return (
        delivered is not None
        and partition.file != LEGACY_FILE
        and partition.end is not None
        and partition.start <= delivered < partition.end
    )


def scan(
    conn: sqlite3.Connection, catalog: Catalog, cutoffs: Cutoffs, after: str | None, limit: int
) -> tuple[list[str], str | None, int]:
    """Up to ``limit`` events after ``after``: (expired ids, resume point, rows scanned).

    The resume point is the last id scanned, or ``None`` when the scan
    reached the cutoff in the newest partition it walks (the pass is complete).
    """
    params: dict[str, Any] = {**floors(cutoffs), "after": after or ""}
    expired: list[str] = []
    count = 0
    for partition in scanned(catalog, cutoffs, after or ""):
        params["limit"] = limit - count
        with read_transaction(On(conn, partition)) as on:
            rows = on.execute(_SCAN, params).fetchall()
        expired += [row[0] for row in rows if row[1]]
        count += len(rows)
        if count == limit:
            return expired, rows[-1][0], count
    return expired, None, count


def delete_job(
    cutoffs: Cutoffs, candidates: list[str], catalog: Callable[[], Catalog]
) -> Callable[[sqlite3.Connection], int]:
    """A write job deleting those of ``candidates`` that are still expired; returns the count.

    ``catalog`` gives the writer's catalog when the job runs: each id is
    deleted from the partition it routes to there.
    """
    params = floors(cutoffs)

    def job(conn: sqlite3.Connection) -> int:
        current = catalog()
        groups: dict[Partition, list[str]] = {}
        for event_id in candidates:
            groups.setdefault(current.holding(event_id), []).append(event_id)
        return sum(_delete(On(conn, p), params, ids) for p, ids in groups.items())

    return job


def _delete(on: Executes, params: dict[str, str], candidates: list[str]) -> int:
    """Delete those of ``candidates`` still expired in one partition; returns the count."""
    ids = orjson.dumps(candidates).decode()
    confirmed = [r[0] for r in on.execute(_CONFIRM, {**params, "ids": ids})]
    if not confirmed:
        return 0
    doomed = orjson.dumps(confirmed).decode()
    for statement in _DELETES:
        on.execute(statement, (doomed,))
    return len(confirmed)


__all__ = ["DELETE_LIMIT", "delete_job", "floors", "scan", "scanned"]
