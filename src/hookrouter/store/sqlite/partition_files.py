"""Partition files: made ahead of a switch, removed whole by retention.

A bucket's file is made before the writer moves to it (``create``: schema
applied, empty), so the switch itself is one catalog transaction
(``partitions.record_switch``). A file left behind by a crash before its
switch was recorded is simply reused.

Retention removes a partition when its whole bucket is older than the
cutoff of every kind of event it holds (``expired``) and nothing in it is
open (``open_work``: the ``delivery_counts`` rows of the open states, kept
by triggers, so no scan; plus any event above the fan-out watermark, whose
deliveries may still be fresh). Delivered and unrouted events are taken to
be in every bucket; failed ones are where the counts of dead or disabled
deliveries say, so a bucket without one goes at the delivered cutoff
instead of waiting for the (longer) failed one. The removal is three steps,
each safe to interrupt:

1. the catalog marks it ``dropping`` (committed on the writer, in the same
   write job that checked it was idle, so no replay slips in between);
2. the files are unlinked, returning their space to the filesystem at once;
3. the catalog row is deleted.

A crash after step 1 is finished at the next open (``finish_drops``); a
crash before it left nothing to undo. ``events.db`` is never removed: it
holds the entities and the catalog, and its own events leave through row
retention (``retention``).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

from hookrouter.store.lifecycle import OPEN_STATES, DeliveryState
from hookrouter.store.retention import Cutoffs
from hookrouter.store.sqlite import fanout, partitions
from hookrouter.store.sqlite.fanout import WATERMARK_SQL
from hookrouter.store.sqlite.file_modes import create_private
from hookrouter.store.sqlite.partition_sql import Executes, On, attachments_of
from hookrouter.store.sqlite.partitions import LEGACY_FILE, Catalog, Partition
from hookrouter.store.sqlite.schema import PARTITION_MIGRATIONS, connect, migrate

log = logging.getLogger("hookrouter.store")

_SUFFIXES: Final = ("", "-wal", "-shm")
# How a partition file is shrunk before its unlink (``shrink``; the step and
# pause that kept ingest's worst latency at its baseline: docs/performance.md).
SHRINK_STEP = 8 * 1024 * 1024
SHRINK_PAUSE = 0.01


def _count(states: Iterable[DeliveryState]) -> str:
    listed = ", ".join(f"'{s.value}'" for s in sorted(states))
    return f"SELECT coalesce(sum(n), 0) FROM delivery_counts WHERE n > 0 AND state IN ({listed})"


_OPEN_COUNT: Final = _count(OPEN_STATES)
# Open deliveries, or final ones that make their event failed (``status``):
# what keeps a bucket that is past the delivered cutoff only.
_KEPT_COUNT: Final = _count((*OPEN_STATES, DeliveryState.DEAD, DeliveryState.DISABLED))
# Events above the watermark may have deliveries without a row yet (fanout).
# This compares two numbers instead of reading the events above the watermark;
# the ledger's rounds materialize every partition older than the newest, and
# ``mark_if_idle`` does before it counts, so a sealed one rarely has any.
_MAYBE_FRESH: Final = f"SELECT coalesce(max(rowid), 0) > {WATERMARK_SQL} FROM events"


def create(store_dir: Path, start: int, *, busy_timeout: float) -> Path:
    """Make (or reuse) the empty file of the bucket beginning at ``start``."""
    return create_named(store_dir, partitions.partition_file(start), busy_timeout=busy_timeout)


def create_named(store_dir: Path, name: str, *, busy_timeout: float) -> Path:
    """Make (or reuse) an empty partition file called ``name`` (schema applied)."""
    path = store_dir / name
    create_private(path)  # it holds bodies and headers: 0600 like events.db
    conn = connect(path, role="writer", busy_timeout=busy_timeout, create=True)
    try:
        migrate(conn, PARTITION_MIGRATIONS)
    finally:
        conn.close()
    return path


def migrate_existing(store_dir: Path, catalog: Catalog, *, busy_timeout: float) -> None:
    """Bring the catalog's partition files made by an older version to the current schema."""
    for partition in catalog.partitions:
        path = store_dir / partition.file
        if partition.file != LEGACY_FILE and partition.state != "dropping" and path.exists():
            conn = connect(path, role="writer", busy_timeout=busy_timeout)
            try:
                migrate(conn, PARTITION_MIGRATIONS)
            finally:
                conn.close()


def make_at_open(
    store_dir: Path, catalog: Catalog, bucket: int, now: float, *, busy_timeout: float
) -> list[Path]:
    """The files of the bucket of ``now`` (and of the next, past half of it) no switch recorded.

    Made at open, so that the first switch after it finds its file made
    instead of making it on the commit path: the writer makes files ahead
    only once it commits into a partition of its own (``committer._make_ahead``).
    """
    start = partitions.bucket_start(now, bucket)
    starts = [start, start + bucket] if now - start >= bucket / 2 else [start]
    newest = catalog.newest.start
    return [create(store_dir, s, busy_timeout=busy_timeout) for s in starts if s > newest]


def expired(catalog: Catalog, cutoffs: Cutoffs) -> list[tuple[Partition, bool]]:
    """Sealed partitions whose whole bucket is older than the delivered cutoff, oldest first.

    Each with whether a failed event would keep it (its bucket is not also
    older than the failed cutoff): then it goes only if it holds none.
    """
    delivered, failed = cutoffs.delivered_before, cutoffs.failed_before
    if delivered is None:
        return []  # delivered events are kept forever, and every bucket is taken to hold one
    return [
        (p, failed is None or p.end > failed)
        for p in catalog.partitions
        if p.state == "sealed"
        and p.file != LEGACY_FILE
        and p.end is not None
        and p.end <= delivered
    ]


def open_work(
    path: Path, *, busy_timeout: float, fresh: bool = True, keeps_failed: bool = False
) -> int:
    """Open deliveries in the partition file at ``path`` (1 more if some may be fresh).

    Two index reads: the counts kept by triggers, and (``fresh``) the newest
    rowid against the fan-out watermark. ``keeps_failed``: dead and disabled
    deliveries count too.
    """
    conn = connect(path, role="reader", busy_timeout=busy_timeout)
    try:
        counted = int(conn.execute(_KEPT_COUNT if keeps_failed else _OPEN_COUNT).fetchone()[0])
        if not fresh:
            return counted
        return counted + int(conn.execute(_MAYBE_FRESH).fetchone()[0])
    finally:
        conn.close()


def has_open(on: Executes) -> bool:
    """Whether a delivery row of this partition is in an open state (one index read)."""
    return bool(int(on.execute(_OPEN_COUNT).fetchone()[0]))


def idle(on: Executes) -> bool:
    """No open delivery and no event above the watermark in this partition (two index reads)."""
    if has_open(on):
        return False
    return not int(on.execute(_MAYBE_FRESH).fetchone()[0])


def mark_if_idle(
    partition: Partition,
    *,
    keeps_failed: bool = False,
    reload: Callable[[sqlite3.Connection], None] | None = None,
) -> Callable[[sqlite3.Connection], bool]:
    """Step 1 as a write-job body: mark ``partition`` dropping unless it has open work.

    ``keeps_failed``: nor a dead or disabled delivery (its bucket is inside
    the failed cutoff).

    The caller checked first off the writer, so that a busy partition costs
    no write job (it skips the fresh ones, which this job makes rows for);
    this checks again where it counts: on the writer's own
    attachment of the file, inside its transaction, so that outcomes or a
    replay written earlier in the same cycle are seen, and nothing can
    write the partition before the mark commits. ``reload`` (the writer's
    ``reload_catalog_now``) runs once the mark is committed, so that no job
    after it in the same commit cycle writes to the file about to go.
    """

    def job(conn: sqlite3.Connection) -> bool:
        on = On(conn, partition)
        # Events committed after the seal (late in their bucket) may still
        # have fresh deliveries: their rows first, so that the count sees them.
        fanout.materialize(on)
        if int(on.execute(_KEPT_COUNT if keeps_failed else _OPEN_COUNT).fetchone()[0]):
            return False
        partitions.mark_dropping(conn, partition.start)
        take_up_catalog(conn, reload)
        return True

    return job


def take_up_catalog(
    conn: sqlite3.Connection, reload: Callable[[sqlite3.Connection], None] | None
) -> None:
    """Inside a job that changed the catalog: commit, then ``reload`` before the next job.

    Jobs of one commit cycle share a transaction and the catalog the cycle
    began with; without this, one queued behind the change would still write
    to a partition file that is about to be unlinked or replaced.
    """
    attachments = attachments_of(conn)
    if reload is not None and attachments is not None and attachments.split is not None:
        attachments.split(lambda: reload(conn))


def remove(store_dir: Path, partition: Partition) -> int:
    """Step 2: unlink the partition's files; returns the bytes given back."""
    freed = 0
    for suffix in _SUFFIXES:
        path = store_dir / (partition.file + suffix)
        try:
            freed += shrink(path)
            path.unlink()
        except FileNotFoundError:
            continue
    return freed


def remove_orphans(conn: sqlite3.Connection, store_dir: Path, before: int) -> list[str]:
    """Remove the files of buckets before ``before`` that no switch recorded.

    Such a file was made ahead of a switch that never came (the next event
    fell in a later bucket): buckets only move forward, so nothing will
    ever use it. The file of ``before`` itself is kept (reused by ``create``),
    and so is every file the catalog in ``conn`` names, even one retention
    is removing (its own steps finish that, after every connection let go).
    """
    listed = {str(r[0]) for r in conn.execute("SELECT file FROM partitions")}
    limit = partitions.partition_file(before)
    gone: list[str] = []
    for path in sorted(store_dir.glob("events-*.db")):
        if path.name not in listed and path.name < limit:
            remove(store_dir, Partition(0, None, path.name, "dropping"))
            gone.append(path.name)
    return gone


def shrink(path: Path) -> int:
    """Truncate ``path`` to empty from its end, ``SHRINK_STEP`` at a time; returns its size.

    One unlink of a 1.5 GiB file took the kernel 0.3-0.7 s, and appends
    committed meanwhile waited up to 180 ms; in steps with a pause between,
    the commits get the disk and a CPU back between steps.
    """
    step, pause = SHRINK_STEP, SHRINK_PAUSE  # read at each call: the bench varies them
    with path.open("r+b") as file:
        size = os.fstat(file.fileno()).st_size
        left = size
        while left > step:
            left -= step
            os.ftruncate(file.fileno(), left)
            time.sleep(pause)
        os.ftruncate(file.fileno(), 0)
    return size


def finish_drops(conn: sqlite3.Connection, store_dir: Path) -> list[Partition]:
    """At open: finish every removal a crash interrupted (steps 2 and 3)."""
    interrupted = partitions.dropping(conn)
    for partition in interrupted:
        remove(store_dir, partition)
        conn.execute("BEGIN IMMEDIATE")
        partitions.forget(conn, partition.start)
        conn.execute("COMMIT")
        log.warning(
            "store %s: finished removing expired partition %s (interrupted by a restart)",
            store_dir,
            partition.file,
        )
    return interrupted


__all__ = [
    "SHRINK_PAUSE",
    "SHRINK_STEP",
    "create",
    "create_named",
    "expired",
    "finish_drops",
    "has_open",
    "idle",
    "make_at_open",
    "mark_if_idle",
    "open_work",
    "remove",
    "remove_orphans",
    "shrink",
    "take_up_catalog",
]
