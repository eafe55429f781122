"""Fresh deliveries: implicit until they need a row (schema version 5).

Theory of operation
-------------------
Up to schema version 4 a trigger gave every routed event one ``deliveries``
row per endpoint in the statement that inserted the event, and the outcome
of the (usually first and only) attempt then rewrote that row moments later.
Writing the row twice was about a quarter of the store's work per event
(row, primary key, open-work index at ingest, then the update and the index
removal; ``bench.instructions`` counted the saving end to end).

Now an event's deliveries get rows lazily. A delivery without a row is
*fresh*: pending, no attempt made, due since the event arrived. Which ones
can be fresh is bounded by one number kept in ``meta``: ``fanout_rowid``.

* Every event with ``rowid <= fanout_rowid`` has a row for each of its
  endpoints (the watermark's invariant).
* An event above it may lack some: each missing one is a fresh delivery.

Rows appear three ways, all on the writer, in submission order:

1. An outcome *upserts* its delivery's row (``ledger_sql``): one
   insert for a fresh delivery where version 4 had an insert and an update.
2. ``materialize`` gives the fresh deliveries of events up to a bound their
   pending row and raises the watermark to it. The ledger runs it (a) up to
   the newest event before every query that must see all open work (page-in
   of a spilled lane, parking, counts, the pending work at start-up), and
   (b) in every ``promote_due`` job (the engine's poll, every 0.25 s), up to
   the newest event of the *previous* round and at most ``ROUND_CHUNK``
   events: by then nearly all of those deliveries have their outcome row
   and cost one primary-key probe each (``INSERT ... ON CONFLICT DO
   NOTHING``). That keeps the fresh window, and so the work of readers, of
   the queries in (a) and of the recovery after a crash, to about half a
   second of traffic, whether deliveries succeed or not (an endpoint that
   is down records no outcomes, so the round does not ride on those).
3. Readers that list deliveries or derive an event's status count the
   missing ones of events above the watermark as pending (``status``,
   ``queries``): an event is never shown delivered early.

Crash safety is the watermark's: whatever was above it when the process
died is still above it at the next start, where the engine's first query
(``pending_endpoints``) materializes it, so every acknowledged delivery is
found again.

Rowids must not be reused below the watermark: a new event there would
pass for materialized and its deliveries would never be found. SQLite
reuses the rowid of a deleted newest row (retention never deletes the
newest event, but a job may), so the ``events_fanout_clamp`` trigger lowers
the watermark when the newest event is deleted.
"""

from __future__ import annotations

from typing import Final

from hookrouter.store.sqlite.partition_sql import Executes

WATERMARK_KEY: Final = "fanout_rowid"
_STORED_WATERMARK: Final = f"SELECT value FROM meta WHERE key = '{WATERMARK_KEY}'"
# The watermark as an SQL expression; the largest rowid when absent (a store
# still on version 4, where the trigger fans out at insert): nothing is fresh.
WATERMARK_SQL: Final = (
    f"(SELECT coalesce(max(value), 9223372036854775807) FROM meta WHERE key = '{WATERMARK_KEY}')"
)

# Events a periodic round materializes at most (see module docstring): at
# four rounds a second, far above what one store takes in, while one round
# after a long pause stays a short job.
ROUND_CHUNK: Final = 20_000

# An event row (named {events}) with fewer delivery rows than endpoints
# (endpoint ids are unique per event): it has a fresh delivery.
_FEWER_ROWS: Final = (
    "json_array_length({events}.endpoints)"
    " > (SELECT count(*) FROM deliveries AS f WHERE f.event_id = {events}.event_id)"
)

# Pending rows for the fresh deliveries of the events in (?1, ?2]; a
# delivery that already has a row (its outcome came first) keeps it.
# The periodic round finds nearly every delivery with its row already, so
# events are filtered before their endpoint list is parsed: one with no row
# at all has every endpoint fresh; one with rows can only have a fresh one
# if its list has a comma (several endpoints) and more entries than rows.
# (Parsing every list with json_each cost measurably more per event in a
# store of single-endpoint events.)
MATERIALIZE: Final = f"""
INSERT INTO deliveries (event_id, endpoint_id, tenant_id, state, attempts,
                        next_attempt_at, updated_at)
SELECT e.event_id, j.value, e.tenant_id, 'pending', 0, e.received_at, e.received_at
FROM events AS e, json_each(e.endpoints) AS j
WHERE e.rowid > ?1 AND e.rowid <= ?2 AND e.endpoints IS NOT NULL
  AND (NOT EXISTS (SELECT 1 FROM deliveries AS d WHERE d.event_id = e.event_id)
       OR (instr(e.endpoints, ',') > 0 AND {_FEWER_ROWS.format(events="e")}))
ON CONFLICT (event_id, endpoint_id) DO NOTHING"""

# True for an ``events`` row above the watermark with a fresh delivery.
HAS_FRESH: Final = (
    f"(events.rowid > {WATERMARK_SQL} AND events.endpoints IS NOT NULL"
    f" AND {_FEWER_ROWS.format(events='events')})"
)


def watermark(conn: Executes) -> int | None:
    """The stored watermark, or None on a store without one (version 4 and older)."""
    row = conn.execute(_STORED_WATERMARK).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def newest_rowid(conn: Executes) -> int:
    """The largest events rowid (0 when empty)."""
    return int(conn.execute("SELECT coalesce(max(rowid), 0) FROM events").fetchone()[0])


def materialize(conn: Executes, upto: int | None = None) -> int:
    """Give fresh deliveries up to rowid ``upto`` (None: the newest event) their row.

    Runs inside the caller's write transaction; returns how many rows it
    inserted. A no-op on a store without a watermark.
    """
    current = watermark(conn)
    if current is None:
        return 0
    bound = newest_rowid(conn) if upto is None else upto
    if bound <= current:
        return 0
    inserted = conn.execute(MATERIALIZE, (current, bound)).rowcount
    conn.execute(f"UPDATE meta SET value = ? WHERE key = '{WATERMARK_KEY}'", (bound,))
    return inserted


__all__ = [
    "HAS_FRESH",
    "MATERIALIZE",
    "ROUND_CHUNK",
    "WATERMARK_KEY",
    "WATERMARK_SQL",
    "materialize",
    "newest_rowid",
    "watermark",
]
