"""Compaction: a partition kept by a few failed events is rewritten with only those.

Retention unlinks a partition once everything in it is past its cutoff
(``partition_files``). Failed events are kept longer than delivered ones
(30 days against 7 by default), and with many tenants nearly every bucket
holds one, so most partitions outlive their delivered events. Deleting
those row by row costs the writer about what taking them in did (the soak
measured it: docs/performance.md); copying the few that stay into a new
file and unlinking the old one costs what is kept.

Four steps, each safe to interrupt:

1. **plan** (the reader, off the writer): the rowids of the events that are
   not expired (with the newest row, which row retention never deletes
   either), and the partition's ``delivery_counts`` as a fingerprint. No
   plan when the partition has open work, or keeps more than
   ``MAX_KEPT`` events or half of them: row retention stays cheaper then.
2. **copy** (a thread, off the writer): the kept rows are copied into a new
   file through a connection of its own, which reads the old partition as
   of one snapshot, commits and syncs there. Before it starts, a watch
   (``Watch``: one more connection to the old file) notes the file's
   ``data_version``, which moves whenever another connection commits a
   change to it: only the writer does.
3. **swap** (a write job): the fingerprint is read again on the writer (a
   change between the plan and the watch's start); then what the commit
   cycle wrote so far is committed (a job earlier in the same cycle may
   have written to the old file) and the watch reads the version again:
   moved, the copy may lack a write and the swap is cancelled. Nothing
   else writes while the job runs, so from there the catalog row names the
   new file, committed at once, and the writer takes up the new catalog
   before the next job of the same commit cycle (a replay queued behind the
   swap must not write to the old file). The writer copies and syncs
   nothing: that was the loop's stall while the copy ran in this job. A
   crash before the catalog commit leaves the new file an orphan: no
   catalog row names it, and the writer's next bucket switch removes it
   (``partition_files.remove_orphans``); a switch that does so between the
   copy and the swap cancels the swap.
4. the old file is unlinked once every connection let go of it, as for a
   dropped partition; a crash before that leaves it an orphan too.

Rowids are kept, so the fan-out and tenant-index watermarks and the dedup
runs' rowid bounds stay valid; ``delivery_counts`` is rebuilt by its
triggers as the deliveries go in.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from hookrouter.store.retention import Cutoffs
from hookrouter.store.sqlite import partition_files, partitions
from hookrouter.store.sqlite.partition_sql import Executes, On, attachments_of
from hookrouter.store.sqlite.partitions import Partition
from hookrouter.store.sqlite.queries import read_transaction
from hookrouter.store.sqlite.retention import floors
from hookrouter.store.sqlite.schema import connect
from hookrouter.store.sqlite.status import EXPIRED

log = logging.getLogger(__name__)

# Events a compaction copies at most: a bound on the copy's time and on the
# kept rowids a plan holds.
MAX_KEPT: Final = 5_000

_KEPT: Final = (
    f"SELECT rowid FROM events WHERE NOT {EXPIRED} OR rowid = (SELECT max(rowid) FROM events)"
)
_TOTAL: Final = "SELECT count(*) FROM events"
_FINGERPRINT: Final = "SELECT state, n FROM delivery_counts WHERE n != 0 ORDER BY state"
# Rows of the kept events, table by table; ``{cols}`` is the table's columns.
_COPIES: Final = (
    ("events", "INSERT INTO main.events (rowid, {cols}) SELECT rowid, {cols} FROM old.events"
     " WHERE rowid IN (SELECT value FROM json_each(?1))"),
    ("deliveries", "INSERT INTO main.deliveries ({cols}) SELECT {cols} FROM old.deliveries"
     " WHERE event_id IN (SELECT event_id FROM main.events)"),
    ("attempts", "INSERT INTO main.attempts ({cols}) SELECT {cols} FROM old.attempts"
     " WHERE event_id IN (SELECT event_id FROM main.events)"),
    # By its whole key, run by run: its primary key leads with the run, then
    # the tenant, so ``event_id IN`` alone read every row of the old index.
    ("tenant_runs", "INSERT INTO main.tenant_runs ({cols}) SELECT {cols} FROM old.tenant_runs"),
    ("tenant_events", "INSERT INTO main.tenant_events ({cols}) SELECT {cols}"
     " FROM old.tenant_events WHERE run IN (SELECT run FROM old.tenant_runs)"
     " AND (tenant_id, event_id) IN (SELECT tenant_id, event_id FROM main.events)"),
    ("meta", "INSERT OR REPLACE INTO main.meta ({cols}) SELECT {cols} FROM old.meta"),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Plan:
    """What a compaction of ``partition`` keeps, and the state it was planned on."""

    partition: Partition
    kept: tuple[int, ...]
    total: int
    fingerprint: tuple[tuple[str, int], ...]


def fingerprint(on: Executes) -> tuple[tuple[str, int], ...]:
    """The partition's deliveries counted by state (kept by triggers: one small read)."""
    return tuple((str(r[0]), int(r[1])) for r in on.execute(_FINGERPRINT))


def plan(conn: sqlite3.Connection, partition: Partition, cutoffs: Cutoffs) -> Plan | None:
    """Step 1, on the reader: the plan, or None when row retention is the cheaper way."""
    with read_transaction(On(conn, partition)) as on:
        # Fresh deliveries (no row yet) need no check: their events are not
        # expired, so they are copied, above the same watermark.
        if partition_files.has_open(on):
            return None
        total = int(on.execute(_TOTAL).fetchone()[0])
        kept = tuple(int(r[0]) for r in on.execute(_KEPT, floors(cutoffs)))
        if len(kept) > MAX_KEPT or 2 * len(kept) > total:
            return None
        return Plan(partition, kept, total, fingerprint(on))


def compacted_file(current: str) -> str:
    """The file name of the next compaction of a partition now in ``current``."""
    stem = current.removesuffix(".db")
    base, _, generation = stem.partition("-c")
    return f"{base}-c{int(generation or 0) + 1}.db"


class Watch:
    """Whether anyone committed a change to one file since the watch began (its own connection).

    SQLite's ``data_version`` moves when a commit by another connection
    changed the file; a watch's own connection never writes. A ``TRUNCATE``
    checkpoint that empties the file's WAL moves it too (tried): the swap
    is then cancelled for nothing and the next retention pass compacts, at
    most once per WAL, since the checkpointer passes over an empty one.
    Made on any thread, read on the writer's.
    """

    __slots__ = ("_conn", "_version")

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
        )
        self._version = self._read()

    def _read(self) -> int:
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def changed(self) -> bool:
        return self._read() != self._version

    def close(self) -> None:
        self._conn.close()


@dataclass(frozen=True, slots=True)
class Copy:
    """A plan's rows copied into ``target``, with the watch begun before the copy read them."""

    plan: Plan
    target: str
    watch: Watch


def copy_kept(store_dir: Path, plan: Plan, target: str, *, busy_timeout: float) -> Copy:
    """Step 2: copy the planned rows into ``target`` (made empty, schema applied), commit there.

    Runs on a thread: the connection is its own, and the old partition is
    read as of one snapshot while the writer goes on. The caller closes the
    copy's watch.
    """
    source = store_dir / plan.partition.file
    watch = Watch(source)  # before the copy's snapshot: a commit after it is seen
    try:
        conn = connect(store_dir / target, role="writer", busy_timeout=busy_timeout)
        try:
            conn.execute("ATTACH DATABASE ? AS old", (f"file:{source}?mode=ro",))
            conn.execute("BEGIN IMMEDIATE")
            if conn.execute("SELECT count(*) FROM main.events").fetchone()[0]:
                raise sqlite3.IntegrityError(f"compaction target {target} is not empty")
            kept = orjson.dumps(plan.kept).decode()
            for table, statement in copy_statements(conn):
                conn.execute(statement, (kept,) if table == "events" else ())
            conn.execute("COMMIT")
            conn.execute("DETACH DATABASE old")
        finally:
            conn.close()
    except BaseException:
        watch.close()
        raise
    return Copy(plan, target, watch)


def unchanged_since_copy(conn: sqlite3.Connection, copy: Copy) -> bool:
    """On the writer, in a job: commit the cycle's work so far, then ask the copy's watch."""
    attachments = attachments_of(conn)
    if attachments is None or attachments.split is None:
        if conn.in_transaction:  # uncommitted writes the watch cannot see
            return False
        return not copy.watch.changed()
    answer: list[bool] = []
    attachments.split(lambda: answer.append(not copy.watch.changed()))
    return answer[0]


def swap_job(
    store_dir: Path,
    copy: Copy,
    *,
    reload: Callable[[sqlite3.Connection], None] | None = None,
) -> Callable[[sqlite3.Connection], bool]:
    """Step 3 as a write job: False (nothing done) when the partition changed since the plan.

    ``reload`` (the writer's ``reload_catalog_now``) runs once the swap is
    committed: a job after this one in the same commit cycle (a replay of a
    kept event) must write to the new file, not to the old one about to go.
    """
    plan = copy.plan

    def job(conn: sqlite3.Connection) -> bool:
        if fingerprint(On(conn, plan.partition)) != plan.fingerprint:
            return _cancelled(plan, "its deliveries changed since the plan")
        # A bucket switch took the copy for an orphan meanwhile (no catalog row named it).
        if not (store_dir / copy.target).exists():
            return _cancelled(plan, f"{copy.target} was removed as an orphan")
        if not unchanged_since_copy(conn, copy):
            return _cancelled(plan, "it was written to since the copy began")
        partitions.replace_file(conn, plan.partition.start, plan.partition.file, copy.target)
        partition_files.take_up_catalog(conn, reload)
        return True

    return job


def _cancelled(plan: Plan, why: str) -> bool:
    log.info("compaction of %s cancelled: %s", plan.partition.file, why)
    return False


def copy_statements(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(table, statement) of each copy, its columns read from ``conn``'s main schema."""
    out = []
    for table, sql in _COPIES:
        cols = ", ".join(str(r[1]) for r in conn.execute(f"PRAGMA main.table_info({table})"))
        out.append((table, sql.format(cols=cols)))
    return out


__all__ = [
    "MAX_KEPT",
    "Copy",
    "Plan",
    "Watch",
    "compacted_file",
    "copy_kept",
    "copy_statements",
    "fingerprint",
    "plan",
    "swap_job",
    "unchanged_since_copy",
]
