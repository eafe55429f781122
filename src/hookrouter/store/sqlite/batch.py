"""The SQL of one group commit: a batch of events, and a batch of write jobs.

Events: one statement, one commit
---------------------------------
``commit_events`` writes a whole batch with a *single* multi-row ``INSERT``
run in autocommit mode: the statement is its own transaction, so the one
``sqlite3_step`` call inserts every event (with its endpoints: the delivery
rows come later, ``fanout``), writes the WAL and fsyncs it
(``synchronous=FULL``). It returns after that COMMIT, or raises having
changed nothing: a batch is acknowledged whole or not at all.

Why one statement: Python's ``sqlite3`` releases the GIL inside every step
and the writer thread must then win it back from a busy event loop. With
BEGIN / SAVEPOINT / INSERT / RELEASE / INSERT / COMMIT that hand-off happened
six or more times per commit and made the commit several times slower
(``tests/store/bench_group_commit.py``); with one statement the whole b-tree
and fsync work of a batch runs on the other core in one GIL-free stretch.
The statement text depends on the row count, so batches are padded with
rows of an empty id (dropped by ``WHERE column1 <> ''``) up to a size from a
short ladder (exact up to 16, then steps of 1/8 of a power of two), which
keeps at most ~60 distinct statements in the connection's cache.

Deduplication happens before the statement, against the dedup tiers
(``dedup_tiers``, ``dedup.find_originals``: a dict and Bloom filters
in the usual case, no SQL), so only new events are inserted; keys of the
inserted events join the hot tier after the commit. When the inserted row
count equals the number of new events (the usual case) nothing else is
needed. Otherwise an event id was already taken (a caller bug, reported per
event): rows with a rowid above the last one the writer had seen are the
ones just inserted (only the writer inserts events, and it re-reads the
maximum after every job transaction, since jobs may delete).

Write jobs (entity changes, ``ping``, later the delivery engine's updates)
run in one explicit transaction per batch, each inside its own savepoint so
a failing job is rolled back and reported alone.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Final

import orjson

from hookrouter.errors import StoreError
from hookrouter.store.base import AppendResult, EventStatus, NewEvent
from hookrouter.store.sqlite.dedup import SINGLE_FILE, find_originals
from hookrouter.store.sqlite.dedup_tiers import DedupTiers
from hookrouter.store.sqlite.errors import unavailable
from hookrouter.store.sqlite.partition_sql import (
    Attachments,
    On,
    attachments_of,
    qualify,
    ready,
)
from hookrouter.store.sqlite.partitions import LEGACY, Catalog, Partition

WriteJob = Callable[[sqlite3.Connection], Any]

_PENDING: Final = EventStatus.PENDING.value
_UNROUTED: Final = EventStatus.UNROUTED.value
_WIDTH: Final = 10  # values per event row, see _insert_sql
# Padding rows are dropped by ``WHERE column1 <> ''`` (an event id is never
# empty). They hold an empty str and zeros, not NULLs: Python's sqlite3 sends
# every parameter that is not exactly an int, float or str (None, bytes)
# through its adapter lookup (``process``), and a statement carried up to a
# few dozen padding NULLs.
_PAD_ROW: Final = ("",) + (0,) * (_WIDTH - 1)
# Rows per statement: 1024 keeps the largest prepared statement near 300 KiB
# and still allows a commit rate far above the disk's pace.
MAX_BATCH: Final = 1024
# Lists whose spelling is kept, and misses while full before it starts over
# (see SpelledLists).
ENDPOINT_LISTS_KEPT: Final = 1024
ENDPOINT_LISTS_REFILL_AFTER: Final = 1 << 20


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
        f" SELECT * FROM (VALUES {values}) WHERE column1 <> '' ON CONFLICT DO NOTHING"
    )


# Plain classes, not dataclasses: mypyc leaves the ``__init__`` a dataclass
# generates interpreted (a Python frame per commit and per job).
class EventsOutcome:
    """Per-event results, aligned with the events given to ``commit_events``."""

    __slots__ = ("duplicates", "errors", "last_rowid", "results")

    def __init__(
        self,
        results: list[AppendResult | None],
        errors: dict[int, StoreError] | None,
        duplicates: int,
        last_rowid: int,
    ) -> None:
        self.results = results  # None where ``errors`` holds the event's error
        self.errors = errors  # index -> error; None in the usual case
        self.duplicates = duplicates
        self.last_rowid = last_rowid  # the largest events rowid after this commit

    def __repr__(self) -> str:
        return (
            f"EventsOutcome({len(self.results)} results, errors={self.errors!r}, "
            f"duplicates={self.duplicates}, last_rowid={self.last_rowid})"
        )


class JobResult:
    """What one write job returned, or the exception it raised."""

    __slots__ = ("ok", "value")

    def __init__(self, ok: bool, value: Any) -> None:
        self.ok = ok
        self.value = value

    def __repr__(self) -> str:
        return f"JobResult(ok={self.ok}, value={self.value!r})"


def last_event_rowid(conn: sqlite3.Connection, partition: Partition = LEGACY) -> int:
    """The largest rowid in ``partition``'s ``events`` (0 when empty)."""
    sql = qualify("SELECT coalesce(max(rowid), 0) FROM events", ready(conn, partition))
    return int(conn.execute(sql).fetchone()[0])


def commit_events(  # noqa: PLR0917 (the hot path's one call: no keyword packing)
    conn: sqlite3.Connection,
    events: Sequence[NewEvent],
    last_rowid: int,
    tiers: DedupTiers,
    catalog: Catalog = SINGLE_FILE,
    into: Partition = LEGACY,
) -> EventsOutcome:
    """Insert and commit the new ones of ``events`` (at most ``max_batch(conn)``) at once.

    They go into partition ``into`` (attached to ``conn``); duplicates are
    looked for in every partition of ``catalog``; ``last_rowid`` is ``into``'s.
    """
    if conn.in_transaction:  # never let a leftover transaction swallow the autocommit
        conn.execute("ROLLBACK")
    keys, originals = find_originals(conn, tiers, events, catalog)
    fresh = (
        events
        if originals is None
        else [e for e, o in zip(events, originals, strict=True) if o is None]
    )
    if not fresh:  # every event repeats a stored one
        repeats: list[AppendResult | None] = [AppendResult(o, True) for o in originals or () if o]
        return EventsOutcome(repeats, None, len(repeats), last_rowid)
    insert = qualify(_insert_sql(padded_size(len(fresh))), ready(conn, into))
    cursor = conn.execute(insert, _rows(fresh))
    if cursor.rowcount != len(fresh):
        return _classify(On(conn, into), events, keys, originals, tiers, last_rowid)
    add = tiers.add
    if originals is None:
        for key, e in zip(keys, events, strict=True):
            if key is not None:
                add(key, e.event_id)
        return EventsOutcome(
            [AppendResult(e.event_id, False) for e in events], None, 0, cursor.lastrowid or 0
        )
    results: list[AppendResult | None] = []
    for key, e, original in zip(keys, events, originals, strict=True):
        if original is not None:
            results.append(AppendResult(original, True))
            continue
        if key is not None:
            add(key, e.event_id)
        results.append(AppendResult(e.event_id, False))
    return EventsOutcome(results, None, len(events) - len(fresh), cursor.lastrowid or 0)


def _rows(events: Sequence[NewEvent]) -> list[Any]:
    """The statement's parameters: ten per event, then the padding rows."""
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
                dumps(e.headers).decode(),  # str: bound without the adapter lookup
                e.body,
                _SPELLED.spell(endpoints) if endpoints else None,
            )
        )
    n = len(events)
    size = padded_size(n)
    if size > n:
        extend(_PAD_ROW * (size - n))
    return flat


class SpelledLists:
    """The ``endpoints`` column's text, kept for the lists most events share.

    The events of a source mostly share one list, and ``orjson.dumps`` plus
    the decode to str cost about twice a lookup. At most ``keep`` lists are
    held. Once full, other lists are spelled per event and not kept: with
    more busy tenants than that, clearing and refilling made every event pay
    a miss, an insert and a share of the clear. After ``refill_after`` such
    misses it starts over, so a router whose routes change over months comes
    to hold its current lists again.
    """

    __slots__ = ("keep", "misses", "refill_after", "texts")

    def __init__(
        self, keep: int = ENDPOINT_LISTS_KEPT, refill_after: int = ENDPOINT_LISTS_REFILL_AFTER
    ) -> None:
        self.keep = keep
        self.refill_after = refill_after
        self.texts: dict[tuple[str, ...], str] = {}
        self.misses = 0  # lists spelled and not kept since the last start

    def spell(self, endpoints: tuple[str, ...]) -> str:
        texts = self.texts
        text = texts.get(endpoints)
        if text is None:
            text = orjson.dumps(endpoints).decode()
            if len(texts) < self.keep:
                texts[endpoints] = text
            else:
                self.misses += 1
                if self.misses >= self.refill_after:
                    texts.clear()
                    self.misses = 0
        return text


_SPELLED: Final = SpelledLists()


def _classify(  # noqa: PLR0917 (one slow path, all of commit_events' state)
    conn: On,
    events: Sequence[NewEvent],
    keys: list[str | None],
    originals: list[str | None] | None,
    tiers: DedupTiers,
    last_rowid: int,
) -> EventsOutcome:
    """Slow path, after the commit: which new events were inserted, which ids were taken."""
    inserted: dict[str, int] = dict(
        conn.execute("SELECT event_id, rowid FROM events WHERE rowid > ?", (last_rowid,))
    )
    results: list[AppendResult | None] = []
    errors: dict[int, StoreError] = {}
    failed: set[str] = set()
    duplicates = 0
    for index, event in enumerate(events):
        original = None if originals is None else originals[index]
        if original is not None and original not in failed:
            duplicates += 1
            results.append(AppendResult(original, True))
        elif original is None and inserted.pop(event.event_id, None) is not None:
            key = keys[index]  # pop: a repeated id is new once
            if key is not None:
                tiers.add(key, event.event_id)
            results.append(AppendResult(event.event_id, False))
        else:
            # Its id was taken by an earlier event (a caller bug), or it repeats
            # an event of this batch that was refused so: nothing stored.
            failed.add(event.event_id)
            message = (
                f"event id {event.event_id} is already stored for another event"
                if original is None
                else f"event {event.event_id} repeats {original}, which was refused"
            )
            errors[index] = StoreError(message, reason="event_id_conflict")
            results.append(None)
    return EventsOutcome(
        results, errors or None, duplicates, last_event_rowid(conn.conn, conn.partition)
    )


def commit_jobs(
    conn: sqlite3.Connection, jobs: Sequence[WriteJob], *, synced: bool = True
) -> list[JobResult]:
    """Run ``jobs`` in one transaction, each in a savepoint; return after COMMIT.

    ``synced=False`` commits under ``synchronous = NORMAL``: in WAL mode the
    COMMIT then writes its frames without an fsync (one saved per
    delivery-outcome flush), in events.db and in every partition attached.
    They reach the disk with the file's next synced commit, whose fsync
    covers its whole WAL, or with its next checkpoint, which syncs the WAL
    before it copies. A crash in between
    loses only that commit (never the consistency of the file), so it is for
    writes whose loss repeats work rather than losing it: delivery outcomes,
    where a lost one means one more delivery, which at-least-once allows.

    Cost: SQLite re-prepares each PRAGMA statement (two per file attached)
    every time it runs, a small price per flush next to the fsyncs it saves.

    A job that needs more time partitions than the connection can attach
    at once is committed in steps (``partition_sql.Attachments.split``).
    """
    attachments = attachments_of(conn)
    if not synced:
        _set_synchronous(conn, attachments, "NORMAL")
    if attachments is not None:
        attachments.split = functools.partial(_split, conn)
    try:
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
    finally:
        if attachments is not None:
            attachments.split = None
        if not synced:  # event commits must always fsync (schema.connect)
            _set_synchronous(conn, attachments, "FULL")
    return results


def _set_synchronous(conn: sqlite3.Connection, attachments: Attachments | None, level: str) -> None:
    """``level`` on events.db and every partition attached now (each file has its own).

    A partition attached during the job starts FULL (``Attachments.want``):
    its outcomes are then synced, never less safe than asked.
    """
    conn.execute(f"PRAGMA main.synchronous = {level}")
    for name in () if attachments is None else attachments.names:
        conn.execute(f"PRAGMA {name}.synchronous = {level}")


def _split(conn: sqlite3.Connection, between: Callable[[], object]) -> None:
    """Commit the running job's work so far, run ``between``, go on in a new transaction."""
    conn.execute("RELEASE job")
    conn.execute("COMMIT")
    try:
        between()
    finally:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("SAVEPOINT job")


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
