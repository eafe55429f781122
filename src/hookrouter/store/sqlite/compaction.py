"""Compaction: a partition kept by a few failed events is rewritten with only those.

Retention unlinks a partition once everything in it is past its cutoff
(``partition_files``). Failed events are kept longer than delivered ones
(30 days against 7 by default), and with many tenants nearly every bucket
holds one, so most partitions outlive their delivered events. Deleting
those row by row costs the writer about what taking them in did (the soak
measured it: docs/performance.md); copying the few that stay into a new
file and unlinking the old one costs what is kept.

Three steps, each safe to interrupt:

1. **plan** (the reader, off the writer): the rowids of the events that are
   not expired (with the newest row, which row retention never deletes
   either), and the partition's ``delivery_counts`` as a fingerprint. No
   plan when the partition has open work, or keeps more than
   ``MAX_KEPT`` events or half of them: row retention stays cheaper then.
2. **swap** (a write job): the fingerprint is read again on the writer,
   inside its transaction, so a replay or any other write since the plan
   (even one earlier in the same commit) cancels it; the kept rows are
   copied into a new file through a connection of its own (committed and
   synced there first), then the catalog row names the new file,
   committed at once, and the writer takes up the new catalog before the
   next job of the same commit cycle (a replay queued behind the swap must
   not write to the old file). A crash
   before the catalog commit leaves the new file an orphan: no catalog row
   names it, and the writer's next bucket switch removes it
   (``partition_files.remove_orphans``).
3. the old file is unlinked once every connection let go of it, as for a
   dropped partition; a crash before that leaves it an orphan too.

Rowids are kept, so the fan-out and tenant-index watermarks and the dedup
runs' rowid bounds stay valid; ``delivery_counts`` is rebuilt by its
triggers as the deliveries go in.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from hookrouter.store.retention import Cutoffs
from hookrouter.store.sqlite import partition_files, partitions
from hookrouter.store.sqlite.partition_sql import Executes, On
from hookrouter.store.sqlite.partitions import Partition
from hookrouter.store.sqlite.queries import read_transaction
from hookrouter.store.sqlite.retention import floors
from hookrouter.store.sqlite.schema import connect
from hookrouter.store.sqlite.status import EXPIRED

# Events a compaction copies at most: the swap runs on the writer, so what
# it copies is what the appends queued behind it wait for.
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
    # By its whole key: its primary key leads with the tenant, so ``event_id IN``
    # read every row of the old partition's index on the writer.
    ("tenant_events", "INSERT INTO main.tenant_events ({cols}) SELECT {cols}"
     " FROM old.tenant_events WHERE (tenant_id, event_id) IN"
     " (SELECT tenant_id, event_id FROM main.events)"),
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


def copy_kept(store_dir: Path, plan: Plan, target: str, *, busy_timeout: float) -> None:
    """Copy the planned rows into ``target`` (made empty, schema applied) and commit there."""
    conn = connect(store_dir / target, role="writer", busy_timeout=busy_timeout)
    try:
        source = store_dir / plan.partition.file
        conn.execute("ATTACH DATABASE ? AS old", (f"file:{source}?mode=ro",))
        conn.execute("BEGIN IMMEDIATE")
        if conn.execute("SELECT count(*) FROM main.events").fetchone()[0]:
            raise sqlite3.IntegrityError(f"compaction target {target} is not empty")
        for table, statement in copy_statements(conn):
            if table == "events":
                conn.execute(statement, (orjson.dumps(plan.kept).decode(),))
            else:
                conn.execute(statement)
        conn.execute("COMMIT")
        conn.execute("DETACH DATABASE old")
    finally:
        conn.close()


def swap_job(
    store_dir: Path,
    plan: Plan,
    target: str,
    *,
    busy_timeout: float,
    reload: Callable[[sqlite3.Connection], None] | None = None,
) -> Callable[[sqlite3.Connection], bool]:
    """Step 2 as a write job: False (nothing done) when the partition changed since the plan.

    ``reload`` (the writer's ``reload_catalog_now``) runs once the swap is
    committed: a job after this one in the same commit cycle (a replay of a
    kept event) must write to the new file, not to the old one about to go.
    """

    def job(conn: sqlite3.Connection) -> bool:
        if fingerprint(On(conn, plan.partition)) != plan.fingerprint:
            return False
        # Made ahead on a thread; made here only if a bucket switch took it
        # for an orphan meanwhile (the schema steps are not for the writer).
        if not (store_dir / target).exists():
            partition_files.create_named(store_dir, target, busy_timeout=busy_timeout)
        copy_kept(store_dir, plan, target, busy_timeout=busy_timeout)
        partitions.replace_file(conn, plan.partition.start, plan.partition.file, target)
        partition_files.take_up_catalog(conn, reload)
        return True

    return job


def copy_statements(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(table, statement) of each copy, its columns read from ``conn``'s main schema."""
    out = []
    for table, sql in _COPIES:
        cols = ", ".join(str(r[1]) for r in conn.execute(f"PRAGMA main.table_info({table})"))
        out.append((table, sql.format(cols=cols)))
    return out


__all__ = [
    "MAX_KEPT",
    "Plan",
    "compacted_file",
    "copy_kept",
    "copy_statements",
    "fingerprint",
    "plan",
    "swap_job",
]
