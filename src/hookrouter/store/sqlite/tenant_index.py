"""A tenant's events by id: sorted runs appended in batches, merged in tiers (schema version 10).

Theory of operation
-------------------
The admin listing of one tenant's events (all statuses, or delivered) walks
``(tenant_id, event_id)`` newest first. Up to version 8 that was the index
``events_tenant``, which SQLite updates inside every insert: each entry lands
on its tenant's own leaf, so a group commit whose events belong to different
tenants dirtied one index page per event.

Version 9 wrote the same pairs into one table keyed ``(tenant_id, event_id)``
in sorted batches. That shares a leaf between a busy tenant's entries of one
batch only while the tenant's entries are few: once each busy tenant's pairs
fill leaves of their own, a batch still writes one leaf per busy tenant, and
with as many busy tenants as the batch holds events, a page per event again.

Now the pairs live in sorted *runs*: ``tenant_events`` is keyed ``(run,
tenant_id, event_id)``, and ``tenant_runs`` lists the runs. ``merge`` appends
the events above a watermark kept in ``meta`` (``tenant_rowid``) as a new run
whose number is above every other, sorted by tenant, in the transaction that
raises the watermark: its rows go to the right edge of the table, a page per
page's worth of pairs whatever the number of tenants. The ledger's periodic
round (every 0.25 s) calls it once ``MERGE_AT`` events wait. ``compact``
keeps the number of runs small, as log-structured stores do: once ``FANOUT``
runs of one size tier exist, it moves their pairs, in key order, into one new
run of the next tier, a few ``COMPACT_CHUNK`` steps per round paced by the
events the round merged (``compact_for``), so each pair is written once per
tier (a few times over its life) and always in sequence. One compaction is
under way at a time per file.

The invariants:

* every event with ``rowid <= tenant_rowid`` has its pair in some run;
* a run's pairs belong to events whose rowids lie in its ``(lo, hi]``;
* an event above the watermark may not have a pair yet, and the listing reads
  that tail by rowid (``NOT INDEXED``, at most about ``MERGE_AT`` rows, as the
  pending listing reads fresh deliveries), so a new event is listed at once
  and a crash loses nothing;
* while a compaction runs, each pair is either still in an input run (those
  with ``into_run`` set) or already in the output run: each chunk copies and
  deletes in one transaction, and the next chunk starts after the output's
  largest key, so a crash resumes where the last commit left it.

The listing reads one arm per run (``runs`` lists them, in the same read
transaction as the listing), which SQLite merges in order and stops at the
page's end: a seek per run, a few dozen at most.

A deleted event takes its pair with it (``tenant_events_delete``: the runs
whose rowid range holds it). SQLite reuses the rowid of a deleted newest row,
which would put a new event below the watermark unmerged:
``tenant_events_clamp`` lowers the watermark then, as ``events_fanout_clamp``
does for the fan-out's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from hookrouter.store.sqlite.partition_sql import Executes

WATERMARK_KEY: Final = "tenant_rowid"
# Events waiting before a merge appends them as a run: fewer runs to compact
# and to seek, against a longer tail the listing reads by rowid.
MERGE_AT: Final = 4096
# Events one merge takes at most: a store that fell far behind (a pause, or a
# store written without rounds) catches up over several rounds, each a bounded
# job on the writer, instead of one job the size of the backlog.
MERGE_CHUNK: Final = 20_000
# Runs of one tier that are compacted into one run of the next: the listing
# seeks up to about FANOUT runs per tier, and each pair is rewritten once per tier.
FANOUT: Final = 8
# Pairs one round's compaction moves at most (a bounded job on the writer);
# a round merges MERGE_AT events, so compaction keeps up with several tiers.
COMPACT_CHUNK: Final = 8192
# Pairs a round compacts per event it merged, beyond its chunk: about the
# tiers a pair passes through, so compaction keeps pace with any ingest rate.
KEEP_PACE: Final = FANOUT // 2
# Chunks one round compacts at most: a bound on its stall on the writer.
MAX_CHUNKS: Final = 2
# Above this many runs the listing reads them all in one arm and sorts (SQLite
# caps a compound statement at 500 arms); compaction brings the count back down.
MAX_ARMS: Final = 200
_NEWEST: Final = "(SELECT coalesce(max(rowid), 0) FROM events)"

# Version 10's delete trigger: the pair leaves the runs whose rowid range holds the event.
_DELETE_TRIGGER: Final = """CREATE TRIGGER tenant_events_delete AFTER DELETE ON events
    BEGIN
        DELETE FROM tenant_events
        WHERE run IN (SELECT run FROM tenant_runs WHERE lo < OLD.rowid AND OLD.rowid <= hi)
            AND tenant_id = OLD.tenant_id AND event_id = OLD.event_id;
    END"""

# Version 9: one sorted table, merged behind a watermark (kept as released).
SCHEMA: Final[tuple[str, ...]] = (
    """CREATE TABLE tenant_events (
        tenant_id TEXT NOT NULL,
        event_id  TEXT NOT NULL,
        PRIMARY KEY (tenant_id, event_id)
    ) WITHOUT ROWID""",
    """INSERT INTO tenant_events (tenant_id, event_id)
        SELECT tenant_id, event_id FROM events ORDER BY tenant_id, event_id""",
    f"""INSERT INTO meta (key, value) VALUES ('{WATERMARK_KEY}', {_NEWEST})
        ON CONFLICT (key) DO UPDATE SET value = excluded.value""",
    "DROP INDEX events_tenant",
    """CREATE TRIGGER tenant_events_delete AFTER DELETE ON events
    BEGIN
        DELETE FROM tenant_events WHERE tenant_id = OLD.tenant_id AND event_id = OLD.event_id;
    END""",
    f"""CREATE TRIGGER tenant_events_clamp AFTER DELETE ON events
        WHEN OLD.rowid > {_NEWEST}
    BEGIN
        UPDATE meta SET value = {_NEWEST}
        WHERE key = '{WATERMARK_KEY}' AND value > {_NEWEST};
    END""",
)

# Version 10: the pairs of version 9 become run 1, spanning every event stored.
RUNS_SCHEMA: Final[tuple[str, ...]] = (
    """CREATE TABLE tenant_runs (
        run      INTEGER PRIMARY KEY,
        lo       INTEGER NOT NULL,
        hi       INTEGER NOT NULL,
        size     INTEGER NOT NULL,
        into_run INTEGER
    )""",
    """CREATE TABLE tenant_events_runs (
        run       INTEGER NOT NULL,
        tenant_id TEXT NOT NULL,
        event_id  TEXT NOT NULL,
        PRIMARY KEY (run, tenant_id, event_id)
    ) WITHOUT ROWID""",
    f"""INSERT INTO tenant_runs (run, lo, hi, size)
        SELECT 1, 0, {_NEWEST}, count(*) FROM tenant_events HAVING count(*) > 0""",
    """INSERT INTO tenant_events_runs (run, tenant_id, event_id)
        SELECT 1, tenant_id, event_id FROM tenant_events ORDER BY tenant_id, event_id""",
    "DROP TRIGGER tenant_events_delete",
    "DROP TABLE tenant_events",
    "ALTER TABLE tenant_events_runs RENAME TO tenant_events",
    _DELETE_TRIGGER,
)

# The watermark as an SQL expression (the listing's tail starts above it).
WATERMARK_SQL: Final = f"(SELECT coalesce(max(value), 0) FROM meta WHERE key = '{WATERMARK_KEY}')"
_STORED: Final = f"SELECT value FROM meta WHERE key = '{WATERMARK_KEY}'"
_NEXT_RUN: Final = "SELECT coalesce(max(run), 0) + 1 FROM tenant_runs"
# The events in (?2, ?3] as run ?1, sorted so that the run is written in key order.
_APPEND: Final = """
INSERT INTO tenant_events (run, tenant_id, event_id)
SELECT ?1, tenant_id, event_id FROM events WHERE rowid > ?2 AND rowid <= ?3
ORDER BY tenant_id, event_id"""
_ADD_RUN: Final = "INSERT INTO tenant_runs (run, lo, hi, size) VALUES (?, ?, ?, ?)"
_RAISE: Final = f"UPDATE meta SET value = ? WHERE key = '{WATERMARK_KEY}'"
_RUNS: Final = "SELECT run, size, into_run FROM tenant_runs ORDER BY run"
_LIVE: Final = "SELECT run FROM tenant_runs ORDER BY run DESC"


@dataclass(frozen=True, slots=True)
class Run:
    """One row of ``tenant_runs``."""

    run: int
    size: int
    into: int | None


def merge(conn: Executes, least: int = MERGE_AT, most: int = MERGE_CHUNK) -> int:
    """Append up to ``most`` events above the watermark as a run once ``least`` wait.

    In the caller's transaction. Returns how many events it merged (the
    oldest first; the rest wait for the next call). A no-op on a file without
    the index (a store opened with fewer migrations, as upgrade tests do).
    """
    row = conn.execute(_STORED).fetchone()
    if row is None:
        return 0
    current = int(row[0])
    newest = int(conn.execute(f"SELECT {_NEWEST}").fetchone()[0])
    if newest - current < max(1, least):
        return 0
    upto = min(newest, current + max(1, most))
    run = int(conn.execute(_NEXT_RUN).fetchone()[0])
    size = conn.execute(_APPEND, (run, current, upto)).rowcount
    if size > 0:
        conn.execute(_ADD_RUN, (run, current, upto, size))
    conn.execute(_RAISE, (upto,))
    return upto - current


def runs(conn: Executes) -> tuple[int, ...]:
    """The runs a listing reads, newest first (in the listing's read transaction)."""
    return tuple(int(r[0]) for r in conn.execute(_LIVE))


def tier(size: int, base: int = MERGE_AT, fanout: int = FANOUT) -> int:
    """A run's size class: runs of one tier are compacted together."""
    level, ceiling = 0, base * fanout
    while size >= ceiling:
        level, ceiling = level + 1, ceiling * fanout
    return level


def compact(
    conn: Executes,
    base: int = MERGE_AT,
    fanout: int = FANOUT,
    chunk: int = COMPACT_CHUNK,
) -> int:
    """Move up to ``chunk`` pairs of the compaction under way, or of a new one.

    In the caller's transaction; returns how many pairs it moved (0: nothing
    to compact). A no-op on a file without the index, as ``merge``.
    """
    if conn.execute(_STORED).fetchone() is None:
        return 0
    every = [
        Run(int(r[0]), int(r[1]), None if r[2] is None else int(r[2])) for r in conn.execute(_RUNS)
    ]
    inputs = _under_way(every) or _start(conn, every, base, fanout)
    if not inputs:
        return 0
    return _move(conn, inputs, chunk)


def compact_for(
    conn: Executes, merged: int, base: int = MERGE_AT, chunk: int = COMPACT_CHUNK
) -> int:
    """A round's compaction after a merge of ``merged`` events; returns the pairs moved.

    A chunk, plus ``KEEP_PACE`` pairs per merged event, ``MAX_CHUNKS``
    chunks at most: at a high ingest rate one chunk a round would fall
    behind the merges, and the runs (the listing's arms) would pile up.
    """
    budget = min(chunk * MAX_CHUNKS, chunk + merged * KEEP_PACE)
    moved = 0
    while moved < budget:
        step = compact(conn, base, chunk=min(chunk, budget - moved))
        if step == 0:
            break
        moved += step
    return moved


def _under_way(every: Sequence[Run]) -> tuple[Run, ...]:
    """The inputs of the compaction a previous round began, if one is under way."""
    return tuple(r for r in every if r.into is not None)


def _start(conn: Executes, every: Sequence[Run], base: int, fanout: int) -> tuple[Run, ...]:
    """Begin compacting the oldest ``fanout`` runs of the smallest full tier, if any."""
    by_tier: dict[int, list[Run]] = {}
    for run in every:
        by_tier.setdefault(tier(run.size, base, fanout), []).append(run)
    width = max(2, fanout)
    full = [runs for _, runs in sorted(by_tier.items()) if len(runs) >= width]
    if not full:
        return ()
    chosen = full[0][:width]
    out = every[-1].run + 1
    ids = [r.run for r in chosen]
    marks = ",".join("?" * len(ids))
    conn.execute(
        "INSERT INTO tenant_runs (run, lo, hi, size)"
        f" SELECT ?, min(lo), max(hi), sum(size) FROM tenant_runs WHERE run IN ({marks})",
        (out, *ids),
    )
    conn.execute(f"UPDATE tenant_runs SET into_run = ? WHERE run IN ({marks})", (out, *ids))
    return tuple(Run(r.run, r.size, out) for r in chosen)


def _move(conn: Executes, inputs: Sequence[Run], chunk: int) -> int:
    """Copy the ``chunk`` smallest pairs of ``inputs`` into their output and delete them there.

    The last input emptied ends the compaction: the inputs' rows in
    ``tenant_runs`` go, and the output is a run like any other.
    """
    out = inputs[0].into
    # One ordered arm per input: SQLite merges them and stops at the chunk.
    arms = " UNION ALL ".join(
        f"SELECT tenant_id, event_id FROM tenant_events WHERE run = {r.run}" for r in inputs
    )
    moved = conn.execute(
        "INSERT OR IGNORE INTO tenant_events (run, tenant_id, event_id)"
        f" SELECT {out}, tenant_id, event_id FROM ({arms} ORDER BY 1, 2 LIMIT ?)",
        (chunk,),
    ).rowcount
    last = conn.execute(
        "SELECT tenant_id, event_id FROM tenant_events WHERE run = ?"
        " ORDER BY tenant_id DESC, event_id DESC LIMIT 1",
        (out,),
    ).fetchone()
    left = False
    for run in inputs:
        if last is not None:
            conn.execute(
                "DELETE FROM tenant_events WHERE run = ? AND (tenant_id, event_id) <= (?, ?)",
                (run.run, last[0], last[1]),
            )
        left = left or _holds(conn, run.run)
    if not left:
        ids = [r.run for r in inputs]
        conn.execute(f"DELETE FROM tenant_runs WHERE run IN ({','.join('?' * len(ids))})", ids)
    return max(0, moved)


def _holds(conn: Executes, run: int) -> bool:
    row = conn.execute("SELECT 1 FROM tenant_events WHERE run = ? LIMIT 1", (run,)).fetchone()
    return row is not None


__all__ = [
    "COMPACT_CHUNK",
    "FANOUT",
    "KEEP_PACE",
    "MAX_ARMS",
    "MAX_CHUNKS",
    "MERGE_AT",
    "MERGE_CHUNK",
    "RUNS_SCHEMA",
    "SCHEMA",
    "WATERMARK_KEY",
    "WATERMARK_SQL",
    "Run",
    "compact",
    "compact_for",
    "merge",
    "runs",
    "tier",
]
