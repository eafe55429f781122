"""The body of one group commit: events, their deliveries, queued write jobs.

``commit_batch`` runs on whichever thread owns the writer connection and
returns only after ``COMMIT`` returned, i.e. after the WAL was fsync'd
(``synchronous=FULL``). It either commits everything it was given or raises
``sqlite3.Error`` having rolled everything back: the caller acknowledges all
events of a batch or none.

Deduplication is done by the database, not in Python: events are inserted
with ``ON CONFLICT DO NOTHING`` against the partial unique index on
``(source_id, provider_event_id)``. When the inserted row count equals the
batch size (the usual case) nothing else is needed. Otherwise the insert is
rolled back to a savepoint and replayed row by row, so each event learns
whether it was new and, if not, which stored event it duplicates. This covers
duplicates of earlier batches and duplicates within the batch alike, and the
common path pays for no lookup at all (the unique index is maintained anyway).

Write jobs (entity changes, later the delivery engine's updates) share the
commit; each runs inside its own savepoint so one failing job is rolled back
and reported alone.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from hookrouter.errors import StoreError
from hookrouter.store.base import AppendResult, DeliveryState, EventStatus, NewEvent
from hookrouter.store.sqlite_errors import unavailable

WriteJob = Callable[[sqlite3.Connection], Any]

_PENDING: Final = EventStatus.PENDING.value
_UNROUTED: Final = EventStatus.UNROUTED.value

_INSERT_EVENT: Final = (
    "INSERT INTO events (event_id, tenant_id, source_id, provider_event_id, event_type,"
    " received_at, status, headers, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT DO NOTHING"
)
_INSERT_DELIVERY: Final = (
    "INSERT INTO deliveries (event_id, endpoint_id, tenant_id, state, attempts,"
    f" next_attempt_at, updated_at) VALUES (?, ?, ?, '{DeliveryState.PENDING.value}', 0, ?, ?)"
)
_FIND_ORIGINAL: Final = "SELECT event_id FROM events WHERE source_id = ? AND provider_event_id = ?"


@dataclass(slots=True)
class JobResult:
    """What one write job returned, or the exception it raised."""

    ok: bool
    value: Any


@dataclass(slots=True)
class BatchOutcome:
    """Per-event results, aligned with the events given to ``commit_batch``."""

    results: list[AppendResult | None]  # None where ``errors`` holds the event's error
    errors: dict[int, StoreError] | None  # index -> error; None in the usual case
    duplicates: int
    jobs: list[JobResult]


def commit_batch(
    conn: sqlite3.Connection, events: Sequence[NewEvent], jobs: Sequence[WriteJob] = ()
) -> BatchOutcome:
    """Write ``events`` and run ``jobs`` in one transaction; return after COMMIT."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if events:
            results, errors, duplicates = _insert_events(conn, events)
        else:
            results, errors, duplicates = [], None, 0
        job_results = [_run_job(conn, job) for job in jobs]
        conn.execute("COMMIT")
    except BaseException:
        _rollback_quietly(conn)
        raise
    return BatchOutcome(results, errors, duplicates, job_results)


def _rollback_quietly(conn: sqlite3.Connection) -> None:
    # After SQLITE_FULL / IOERR SQLite may already have rolled back; a second
    # error here would only hide the first one, which the caller re-raises.
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _insert_events(
    conn: sqlite3.Connection, events: Sequence[NewEvent]
) -> tuple[list[AppendResult | None], dict[int, StoreError] | None, int]:
    dumps = orjson.dumps
    rows = [
        (
            e.event_id,
            e.tenant_id,
            e.source_id,
            e.provider_event_id,
            e.event_type,
            e.received_at,
            _PENDING if e.endpoint_ids else _UNROUTED,
            dumps(e.headers).decode(),
            e.body,
        )
        for e in events
    ]
    conn.execute("SAVEPOINT batch_events")
    if conn.executemany(_INSERT_EVENT, rows).rowcount == len(rows):
        conn.execute("RELEASE batch_events")
        accepted: Sequence[NewEvent] = events
        results: list[AppendResult | None] = [AppendResult(e.event_id, False) for e in events]
        errors, duplicates = None, 0
    else:
        conn.execute("ROLLBACK TO batch_events")
        conn.execute("RELEASE batch_events")
        results, accepted, errors, duplicates = _insert_one_by_one(conn, events, rows)
    deliveries = [
        (e.event_id, endpoint_id, e.tenant_id, e.received_at, e.received_at)
        for e in accepted
        for endpoint_id in e.endpoint_ids
    ]
    if deliveries:
        conn.executemany(_INSERT_DELIVERY, deliveries)
    return results, errors, duplicates


def _insert_one_by_one(
    conn: sqlite3.Connection, events: Sequence[NewEvent], rows: list[tuple[Any, ...]]
) -> tuple[list[AppendResult | None], list[NewEvent], dict[int, StoreError] | None, int]:
    """Slow path when the batch holds a duplicate: learn each event's fate."""
    results: list[AppendResult | None] = []
    accepted: list[NewEvent] = []
    errors: dict[int, StoreError] = {}
    duplicates = 0
    for index, (event, row) in enumerate(zip(events, rows, strict=True)):
        if conn.execute(_INSERT_EVENT, row).rowcount:
            results.append(AppendResult(event.event_id, False))
            accepted.append(event)
            continue
        original = None
        if event.provider_event_id is not None:
            hit = conn.execute(_FIND_ORIGINAL, (event.source_id, event.provider_event_id))
            found = hit.fetchone()
            original = found[0] if found else None
        if original is None:
            # Not a duplicate key, so the event id itself was taken: a caller bug.
            errors[index] = StoreError(
                f"event id {event.event_id} is already stored for another event",
                reason="event_id_conflict",
            )
            results.append(None)
        else:
            duplicates += 1
            results.append(AppendResult(original, True))
    return results, accepted, errors or None, duplicates


def _run_job(conn: sqlite3.Connection, job: WriteJob) -> JobResult:
    conn.execute("SAVEPOINT batch_job")
    try:
        value = job(conn)
    except Exception as exc:
        conn.execute("ROLLBACK TO batch_job")
        conn.execute("RELEASE batch_job")
        if isinstance(exc, sqlite3.OperationalError):  # disk full, busy, I/O: not the job's fault
            error = unavailable(exc, "write failed")
            error.__cause__ = exc
            return JobResult(False, error)
        return JobResult(False, exc)
    conn.execute("RELEASE batch_job")
    return JobResult(True, value)
