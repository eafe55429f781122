"""The SQL of one group commit: a batch of events, and a batch of write jobs.

Events: one statement, one commit
---------------------------------
``commit_events`` writes a whole batch with a *single* multi-row ``INSERT``
run in autocommit mode: the statement is its own transaction, so the one
``sqlite3_step`` call inserts every event, lets the ``events_fanout`` trigger
create their delivery rows, writes the WAL and fsyncs it
(``synchronous=FULL``). It returns after that COMMIT, or raises having
changed nothing: a batch is acknowledged whole or not at all.

Why one statement: Python's ``sqlite3`` releases the GIL inside every step
and the writer thread must then win it back from a busy event loop. With
BEGIN / SAVEPOINT / INSERT / RELEASE / INSERT / COMMIT that hand-off happened
six or more times per commit and inflated the commit from ~0.4 to ~1.2 ms
(``tests/store/bench_group_commit.py``); with one statement the whole b-tree
and fsync work of a batch runs on the other core in one GIL-free stretch.
The statement text depends on the row count, so batches are padded with
all-NULL rows (dropped by ``WHERE column1 IS NOT NULL``) up to a size from a
short ladder (exact up to 16, then steps of 1/8 of a power of two), which
keeps at most ~60 distinct statements in the connection's cache.

Deduplication is done by the database, not in Python: ``ON CONFLICT DO
NOTHING`` against the partial unique index on ``(source_id,
provider_event_id)`` skips duplicates of earlier batches and of earlier rows
of the same statement alike, and triggers fire only for inserted rows. When
the inserted row count equals the batch size (the usual case) nothing else
is needed. Otherwise the already-committed batch is classified after the
fact: rows with a rowid above the last one the writer had seen are the ones
just inserted (only the writer inserts events, and it re-reads the maximum
after every job transaction, since jobs may delete), and every other event
is looked up by its dedup key to report the original's id.

Write jobs (entity changes, ``ping``, later the delivery engine's updates)
run in one explicit transaction per batch, each inside its own savepoint so
a failing job is rolled back and reported alone.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from hookrouter.errors import StoreError
from hookrouter.store.base import AppendResult, EventStatus, NewEvent
from hookrouter.store.sqlite_errors import unavailable

WriteJob = Callable[[sqlite3.Connection], Any]

_PENDING: Final = EventStatus.PENDING.value
_UNROUTED: Final = EventStatus.UNROUTED.value
_WIDTH: Final = 10  # values per event row, see _insert_sql
_PAD_ROW: Final = (None,) * _WIDTH
# Rows per statement: 1024 keeps the largest prepared statement near 300 KiB
# and still allows ~300k events/s at a 3 ms commit, far above the disk's pace.
MAX_BATCH: Final = 1024

FIND_ORIGINAL: Final = "SELECT event_id FROM events WHERE source_id = ? AND provider_event_id = ?"


def max_batch(conn: sqlite3.Connection) -> int:
    """Events per statement on ``conn``: ``MAX_BATCH`` unless SQLite allows fewer parameters."""
    return min(MAX_BATCH, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // _WIDTH)


def padded_size(n: int) -> int:
    """Round ``n`` up the statement-size ladder (exact to 16, then 8 steps per doubling)."""
    if n <= 16:
        return n
    step = 1 << (n.bit_length() - 4)
    return -(-n // step) * step


@functools.lru_cache(maxsize=128)
def _insert_sql(rows: int) -> str:
    values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * rows)
    return (
        "INSERT INTO events (event_id, tenant_id, source_id, provider_event_id, event_type,"
        " received_at, status, headers, body, endpoints)"
        f" SELECT * FROM (VALUES {values}) WHERE column1 IS NOT NULL ON CONFLICT DO NOTHING"
    )


@dataclass(slots=True)
class EventsOutcome:
    """Per-event results, aligned with the events given to ``commit_events``."""

    results: list[AppendResult | None]  # None where ``errors`` holds the event's error
    errors: dict[int, StoreError] | None  # index -> error; None in the usual case
    duplicates: int
    last_rowid: int  # the largest events rowid after this commit


@dataclass(slots=True)
class JobResult:
    """What one write job returned, or the exception it raised."""

    ok: bool
    value: Any


def last_event_rowid(conn: sqlite3.Connection) -> int:
    """The largest rowid in ``events`` (0 when empty)."""
    return int(conn.execute("SELECT coalesce(max(rowid), 0) FROM events").fetchone()[0])


def commit_events(
    conn: sqlite3.Connection, events: Sequence[NewEvent], last_rowid: int
) -> EventsOutcome:
    """Insert and commit ``events`` (at most ``max_batch(conn)``) with one statement."""
    if conn.in_transaction:  # never let a leftover transaction swallow the autocommit
        conn.execute("ROLLBACK")
    dumps = orjson.dumps
    flat: list[Any] = []
    extend = flat.extend
    for e in events:
        endpoints = e.endpoint_ids
        extend(
            (
                e.event_id,
                e.tenant_id,
                e.source_id,
                e.provider_event_id,
                e.event_type,
                e.received_at,
                _PENDING if endpoints else _UNROUTED,
                dumps(e.headers).decode(),
                e.body,
                dumps(endpoints).decode() if endpoints else None,
            )
        )
    n = len(events)
    size = padded_size(n)
    if size > n:
        extend(_PAD_ROW * (size - n))
    cursor = conn.execute(_insert_sql(size), flat)
    if cursor.rowcount == n:
        return EventsOutcome(
            [AppendResult(e.event_id, False) for e in events], None, 0, cursor.lastrowid or 0
        )
    return _classify(conn, events, last_rowid)


def _classify(
    conn: sqlite3.Connection, events: Sequence[NewEvent], last_rowid: int
) -> EventsOutcome:
    """Slow path, after the commit: which events were new, which duplicates of what."""
    inserted: dict[str, int] = dict(
        conn.execute("SELECT event_id, rowid FROM events WHERE rowid > ?", (last_rowid,))
    )
    results: list[AppendResult | None] = []
    errors: dict[int, StoreError] = {}
    duplicates = 0
    for index, event in enumerate(events):
        if inserted.pop(event.event_id, None) is not None:  # pop: a repeated id is new once
            results.append(AppendResult(event.event_id, False))
            continue
        original = None
        if event.provider_event_id is not None:
            hit = conn.execute(FIND_ORIGINAL, (event.source_id, event.provider_event_id))
            found = hit.fetchone()
            original = found[0] if found else None
        if original is None:
            # No duplicate key, so the event id itself was taken: a caller bug.
            errors[index] = StoreError(
                f"event id {event.event_id} is already stored for another event",
                reason="event_id_conflict",
            )
            results.append(None)
        else:
            duplicates += 1
            results.append(AppendResult(original, True))
    return EventsOutcome(results, errors or None, duplicates, last_event_rowid(conn))


def commit_jobs(conn: sqlite3.Connection, jobs: Sequence[WriteJob]) -> list[JobResult]:
    """Run ``jobs`` in one transaction, each in a savepoint; return after COMMIT."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        results = [_run_job(conn, job) for job in jobs]
        conn.execute("COMMIT")
    except BaseException:
        # After SQLITE_FULL / IOERR SQLite may already have rolled back; a second
        # error here would only hide the first one, which is re-raised.
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    return results


def _run_job(conn: sqlite3.Connection, job: WriteJob) -> JobResult:
    conn.execute("SAVEPOINT job")
    try:
        value = job(conn)
    except Exception as exc:
        conn.execute("ROLLBACK TO job")
        conn.execute("RELEASE job")
        if isinstance(exc, sqlite3.OperationalError):  # disk full, busy, I/O: not the job's fault
            error = unavailable(exc, "write failed")
            error.__cause__ = exc
            return JobResult(False, error)
        return JobResult(False, exc)
    conn.execute("RELEASE job")
    return JobResult(True, value)
