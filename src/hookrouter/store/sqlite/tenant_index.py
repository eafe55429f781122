"""A tenant's events by id, merged in sorted batches (schema version 9).

Theory of operation
-------------------
The admin listing of one tenant's events (all statuses, or delivered) walks
``(tenant_id, event_id)`` newest first. Up to version 8 that was the index
``events_tenant``, which SQLite updates inside every insert: each entry lands
on its tenant's own leaf, so a group commit whose events belong to different
tenants dirtied one index page per event (with a thousand busy tenants about
one WAL page per event, against one per commit with one busy tenant), and the
checkpoint wrote each of them again.

Now the same pairs live in ``tenant_events`` (a ``WITHOUT ROWID`` table whose
primary key is the pair) and are not written at insert. ``merge`` adds the
events above a watermark kept in ``meta`` (``tenant_rowid``), sorted by
tenant, in the transaction that raises it; the ledger's periodic round (every
0.25 s) calls it, and it merges only once ``MERGE_AT`` events wait, so a busy
tenant's entries of a batch share one leaf write whatever the event rate.
The invariant:

* every event with ``rowid <= tenant_rowid`` has its ``tenant_events`` row;
* an event above it may not, and the listing reads that tail by rowid
  (``NOT INDEXED``, at most about ``MERGE_AT`` rows, as the pending listing
  reads fresh deliveries), so a new event is listed at once and a crash
  loses nothing.

A deleted event takes its row with it (``tenant_events_delete``). SQLite
reuses the rowid of a deleted newest row, which would put a new event below
the watermark unmerged: ``tenant_events_clamp`` lowers the watermark then, as
``events_fanout_clamp`` does for the fan-out's, and a merge skips pairs it
already holds (``OR IGNORE``).
"""

from __future__ import annotations

from typing import Final

from hookrouter.store.sqlite.partition_sql import Executes

WATERMARK_KEY: Final = "tenant_rowid"
# Events waiting before a merge: with 1,000 busy tenants a batch writes about
# a leaf per tenant, a quarter page per event (docs/performance.md).
MERGE_AT: Final = 4096
# Events one merge takes at most: a store that fell far behind (a pause, or a
# store written without rounds) catches up over several rounds, each a bounded
# job on the writer, instead of one job the size of the backlog.
MERGE_CHUNK: Final = 20_000
_NEWEST: Final = "(SELECT coalesce(max(rowid), 0) FROM events)"

# The schema step: the same statements for events.db and for partition files.
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

# The watermark as an SQL expression (the listing's tail starts above it).
WATERMARK_SQL: Final = f"(SELECT coalesce(max(value), 0) FROM meta WHERE key = '{WATERMARK_KEY}')"
_STORED: Final = f"SELECT value FROM meta WHERE key = '{WATERMARK_KEY}'"
# The events in (?1, ?2], sorted so that each tenant's entries are written together.
_MERGE: Final = """
INSERT OR IGNORE INTO tenant_events (tenant_id, event_id)
SELECT tenant_id, event_id FROM events WHERE rowid > ?1 AND rowid <= ?2
ORDER BY tenant_id, event_id"""
_RAISE: Final = f"UPDATE meta SET value = ? WHERE key = '{WATERMARK_KEY}'"


def merge(conn: Executes, least: int = MERGE_AT, most: int = MERGE_CHUNK) -> int:
    """Merge up to ``most`` events above the watermark once ``least`` wait (caller's transaction).

    Returns how many events it merged (the oldest first; the rest wait for
    the next call). A no-op on a file without the table (a store opened with
    fewer migrations, as upgrade tests do).
    """
    row = conn.execute(_STORED).fetchone()
    if row is None:
        return 0
    current = int(row[0])
    newest = int(conn.execute(f"SELECT {_NEWEST}").fetchone()[0])
    if newest - current < max(1, least):
        return 0
    upto = min(newest, current + max(1, most))
    conn.execute(_MERGE, (current, upto))
    conn.execute(_RAISE, (upto,))
    return upto - current


__all__ = ["MERGE_AT", "MERGE_CHUNK", "SCHEMA", "WATERMARK_KEY", "WATERMARK_SQL", "merge"]
