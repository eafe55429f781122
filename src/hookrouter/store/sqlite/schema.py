"""SQLite schema, migrations and connection setup for the event store.

The schema version lives in ``PRAGMA user_version``. ``MIGRATIONS`` is the
ordered list of steps from an empty file to the current schema; ``migrate``
applies the missing ones, each in its own transaction together with the
version bump, so a crash mid-migration leaves the file at a clean version.
A file whose version is newer than the code refuses to open: old code must
not guess at a schema it has never seen.

Indexes and the query each one serves (since version 2, when the partial
indexes replaced ``events_tenant_status``, ``deliveries_tenant_state`` and
``deliveries_due``, which indexed every row):

* ``events_dedup`` (versions 1-2 only): duplicate detection moved to the
  dedup tiers in version 3 (``dedup_tiers``; its random key made every
  append dirty a page of its own).
* ``events_tenant`` (tenant_id, event_id), versions 1-8: a tenant's events,
  newest first. Event ids are time-ordered, so ``event_id`` is both the sort
  key and the paging cursor. Since version 9 the same pairs are the primary
  key of ``tenant_events``, merged in sorted batches behind a watermark of
  its own instead of at every insert (``tenant_index``); since version 10,
  as sorted runs appended at the table's end and merged in tiers, keyed
  ``(run, tenant_id, event_id)``, with ``tenant_runs`` listing the runs.
* ``events_tenant_stored_status`` (tenant_id, status, event_id), partial on
  the two statuses the row itself stores (failed, unrouted): a tenant's
  events in one of them, newest first. Pending/delivered are derived from
  the deliveries when read (``status``).
* ``deliveries_undelivered`` (state, tenant_id, event_id), partial on
  ``state <> 'delivered'``: a tenant's open work oldest first (page-in,
  resume, counts, pending events) and dead/disabled work (replay). State
  first, so that queries across tenants (pending work at start, counts,
  replay without a tenant) seek one state's range.
* ``deliveries_retry_due`` (next_attempt_at), partial on ``state = 'retry'``:
  retries that are due.

Partial, because most rows end as a delivered event with delivered
deliveries, and such rows then cost no index entry, or one that is removed
rather than moved when the delivery succeeds. Queries must repeat an index's
WHERE term literally for SQLite to use it (``ledger_sql``).

Attempt history (since version 4): ``attempts`` holds the attempts that did
not deliver; the last attempt of every delivery is also in its ``deliveries``
row (``last_attempt``, ``last_started_at``, ``last_duration_ms`` with
``last_status_code`` and ``last_error``), which is the only record of a
successful one. Most deliveries succeed at once, so most cost no
``attempts`` row at all. Readers merge the two (``queries``).

Open deliveries are counted, not scanned (since version 7): triggers on
``deliveries`` keep ``delivery_counts`` (state, tenant, n) for every state
but delivered, in the transaction that moves the row. Fresh deliveries
(no row yet, ``fanout``) are not in it until materialized.

``events.endpoints`` is the JSON array of endpoint ids the event was routed
to on arrival (NULL when unrouted). Up to version 4 the ``events_fanout``
trigger turned it into one ``deliveries`` row each, in the same statement as
the insert; since version 5 a delivery gets its row lazily, with its first
outcome or when it must be found by a query (``fanout``).

Rows are small except ``events.body``; ``events`` keeps a rowid so bodies do
not bloat an index b-tree, the other tables are ``WITHOUT ROWID`` because
their primary key is how they are always reached.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from hookrouter.errors import StoreError
from hookrouter.store.sqlite import tenant_index
from hookrouter.store.sqlite.partition_sql import PartitionConnection

DB_FILENAME: Final = "events.db"
# "hkrt" in ASCII: marks the file as ours so a stray SQLite file is refused.
APPLICATION_ID: Final = 0x686B7274

# 64 MiB: well above the ~8 MiB the checkpointer lets the WAL reach in steady state.
JOURNAL_SIZE_LIMIT: Final = 64 * 1024 * 1024

# The writer's page cache (SQLite's default is 2 MiB). The periodic
# materialization (fanout) reads events committed up to half a second
# earlier, several MiB of pages under load: with the default cache they came
# back from the file (``bench.perf --deliver`` counted the reads it saves).
WRITER_CACHE_KIB: Final = 32 * 1024

Role = Literal["writer", "reader", "checkpointer"]


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step: ``statements`` run in one transaction, then the version is set."""

    version: int
    description: str
    statements: tuple[str, ...]


_V1 = Migration(
    version=1,
    description="events, deliveries, attempts, entities, meta",
    statements=(
        f"PRAGMA application_id = {APPLICATION_ID}",
        """CREATE TABLE events (
            event_id          TEXT PRIMARY KEY,
            tenant_id         TEXT NOT NULL,
            source_id         TEXT NOT NULL,
            provider_event_id TEXT,
            event_type        TEXT,
            received_at       REAL NOT NULL,
            status            TEXT NOT NULL,
            headers           TEXT NOT NULL,
            body              BLOB NOT NULL,
            endpoints         TEXT
        )""",
        """CREATE UNIQUE INDEX events_dedup ON events (source_id, provider_event_id)
            WHERE provider_event_id IS NOT NULL""",
        "CREATE INDEX events_tenant ON events (tenant_id, event_id)",
        "CREATE INDEX events_tenant_status ON events (tenant_id, status, event_id)",
        """CREATE TABLE deliveries (
            event_id         TEXT NOT NULL REFERENCES events (event_id) ON DELETE CASCADE,
            endpoint_id      TEXT NOT NULL,
            tenant_id        TEXT NOT NULL,
            state            TEXT NOT NULL,
            attempts         INTEGER NOT NULL DEFAULT 0,
            next_attempt_at  REAL,
            last_status_code INTEGER,
            last_error       TEXT,
            updated_at       REAL NOT NULL,
            PRIMARY KEY (event_id, endpoint_id)
        ) WITHOUT ROWID""",
        "CREATE INDEX deliveries_tenant_state ON deliveries (tenant_id, state, event_id)",
        "CREATE INDEX deliveries_due ON deliveries (state, next_attempt_at)",
        # Fan-out inside the append statement itself (see batch): fires only
        # for rows actually inserted, so a duplicate never gets deliveries.
        """CREATE TRIGGER events_fanout AFTER INSERT ON events
            WHEN NEW.endpoints IS NOT NULL
        BEGIN
            INSERT INTO deliveries (event_id, endpoint_id, tenant_id, state, attempts,
                                    next_attempt_at, updated_at)
            SELECT NEW.event_id, value, NEW.tenant_id, 'pending', 0,
                   NEW.received_at, NEW.received_at
            FROM json_each(NEW.endpoints);
        END""",
        """CREATE TABLE attempts (
            event_id         TEXT NOT NULL,
            endpoint_id      TEXT NOT NULL,
            attempt          INTEGER NOT NULL,
            started_at       REAL NOT NULL,
            duration_ms      REAL NOT NULL,
            status_code      INTEGER,
            error            TEXT,
            response_excerpt TEXT,
            PRIMARY KEY (event_id, endpoint_id, attempt),
            FOREIGN KEY (event_id, endpoint_id)
                REFERENCES deliveries (event_id, endpoint_id) ON DELETE CASCADE
        ) WITHOUT ROWID""",
        """CREATE TABLE entities (
            kind       TEXT NOT NULL CHECK (kind IN ('tenant', 'source', 'endpoint')),
            id         TEXT NOT NULL,
            tenant_id  TEXT,
            doc        TEXT NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (kind, id)
        ) WITHOUT ROWID""",
        # Small facts about the store itself; ``ping`` writes here to prove writability.
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID",
    ),
)

_V2 = Migration(
    version=2,
    description="partial indexes; event status derived from deliveries",
    statements=(
        # Rows finished by version 1 keep status 'delivered', which reads like
        # 'pending' now (status): no rewrite of every event row.
        "DROP INDEX events_tenant_status",
        """CREATE INDEX events_tenant_stored_status ON events (tenant_id, status, event_id)
            WHERE status = 'failed' OR status = 'unrouted'""",
        "DROP INDEX deliveries_tenant_state",
        """CREATE INDEX deliveries_undelivered ON deliveries (state, tenant_id, event_id)
            WHERE state <> 'delivered'""",
        "DROP INDEX deliveries_due",
        """CREATE INDEX deliveries_retry_due ON deliveries (next_attempt_at)
            WHERE state = 'retry'""",
    ),
)

_V3 = Migration(
    version=3,
    description="dedup keys move to the dedup tiers (dedup.db)",
    statements=(
        # Its random key dirtied one page per append; the tiers answer the same
        # question with sorted writes (dedup_tiers). dedup.db is built from the
        # events at the first open after this step (dedup.open_tiers).
        "DROP INDEX events_dedup",
    ),
)

_V4 = Migration(
    version=4,
    description="a delivery's last attempt is kept in its row",
    statements=(
        # A successful attempt is then written once, in the UPDATE that finishes
        # the delivery, instead of also as an ``attempts`` row (ledger).
        "ALTER TABLE deliveries ADD COLUMN last_attempt INTEGER",
        "ALTER TABLE deliveries ADD COLUMN last_started_at REAL",
        "ALTER TABLE deliveries ADD COLUMN last_duration_ms REAL",
    ),
)

_V5 = Migration(
    version=5,
    description="fresh deliveries get their row lazily (fanout)",
    statements=(
        # Every event stored so far has its rows (the trigger made them): the
        # watermark starts at the newest one.
        "DROP TRIGGER events_fanout",
        """INSERT INTO meta (key, value)
            VALUES ('fanout_rowid', (SELECT coalesce(max(rowid), 0) FROM events))
            ON CONFLICT (key) DO UPDATE SET value = excluded.value""",
        # SQLite reuses the rowid of a deleted newest row: never below the watermark.
        """CREATE TRIGGER events_fanout_clamp AFTER DELETE ON events
            WHEN OLD.rowid > (SELECT coalesce(max(rowid), 0) FROM events)
        BEGIN
            UPDATE meta SET value = (SELECT coalesce(max(rowid), 0) FROM events)
            WHERE key = 'fanout_rowid' AND value > (SELECT coalesce(max(rowid), 0) FROM events);
        END""",
    ),
)

_V6 = Migration(
    version=6,
    description="entities may be tenants' API keys",
    statements=(
        # SQLite cannot alter a CHECK constraint: the small table is copied.
        """CREATE TABLE entities_v6 (
            kind       TEXT NOT NULL CHECK (kind IN ('tenant', 'source', 'endpoint', 'api_key')),
            id         TEXT NOT NULL,
            tenant_id  TEXT,
            doc        TEXT NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (kind, id)
        ) WITHOUT ROWID""",
        "INSERT INTO entities_v6 SELECT kind, id, tenant_id, doc, updated_at FROM entities",
        "DROP TABLE entities",
        "ALTER TABLE entities_v6 RENAME TO entities",
    ),
)


# The count of a (tenant, state) pair moves by ``delta``; rows of delivered
# deliveries are never counted (they pile up forever, nobody asks).
def _count_change(row: str, delta: int) -> str:
    return (
        f"INSERT INTO delivery_counts (tenant_id, state, n)"
        f" VALUES ({row}.tenant_id, {row}.state, {delta})"
        f" ON CONFLICT (state, tenant_id) DO UPDATE SET n = n + {delta};"
    )


_V7 = Migration(
    version=7,
    description="delivery counts per tenant and state, kept by triggers",
    statements=(
        # The engine asked for these counts every few seconds with a scan of the
        # open deliveries (a million-entry scan with a million open). Triggers keep
        # them in the same transaction as the rows, so they survive any crash.
        """CREATE TABLE delivery_counts (
            tenant_id TEXT NOT NULL,
            state     TEXT NOT NULL,
            n         INTEGER NOT NULL,
            PRIMARY KEY (state, tenant_id)
        ) WITHOUT ROWID""",
        """INSERT INTO delivery_counts (tenant_id, state, n)
            SELECT tenant_id, state, count(*) FROM deliveries
            WHERE state <> 'delivered' GROUP BY tenant_id, state""",
        f"""CREATE TRIGGER delivery_counts_insert AFTER INSERT ON deliveries
            WHEN NEW.state <> 'delivered'
        BEGIN {_count_change("NEW", 1)} END""",
        f"""CREATE TRIGGER delivery_counts_delete AFTER DELETE ON deliveries
            WHEN OLD.state <> 'delivered'
        BEGIN {_count_change("OLD", -1)} END""",
        # Two triggers for a state change, each with its own WHEN: a move into
        # or out of 'delivered' touches one count only.
        f"""CREATE TRIGGER delivery_counts_leave AFTER UPDATE OF state, tenant_id ON deliveries
            WHEN OLD.state <> 'delivered'
                AND (OLD.state IS NOT NEW.state OR OLD.tenant_id IS NOT NEW.tenant_id)
        BEGIN {_count_change("OLD", -1)} END""",
        f"""CREATE TRIGGER delivery_counts_enter AFTER UPDATE OF state, tenant_id ON deliveries
            WHEN NEW.state <> 'delivered'
                AND (OLD.state IS NOT NEW.state OR OLD.tenant_id IS NOT NEW.tenant_id)
        BEGIN {_count_change("NEW", 1)} END""",
    ),
)

_V8 = Migration(
    version=8,
    description="the catalog of time partitions; this file is the oldest one",
    statements=(
        # One row per partition file (``partitions``); the store this file was
        # until now is read in place as the first, open-ended partition.
        """CREATE TABLE partitions (
            start INTEGER PRIMARY KEY,
            until INTEGER,
            file  TEXT NOT NULL UNIQUE,
            state TEXT NOT NULL CHECK (state IN ('live', 'sealed', 'dropping'))
        ) WITHOUT ROWID""",
        f"""INSERT INTO partitions (start, until, file, state)
            VALUES (0, NULL, '{DB_FILENAME}', 'live')""",
    ),
)

_TENANT_EVENTS = "a tenant's events are indexed in sorted batches (tenant_events)"
# Its index entry made every insert dirty its tenant's own leaf (tenant_index).
_V9 = Migration(version=9, description=_TENANT_EVENTS, statements=tenant_index.SCHEMA)
_TENANT_RUNS = "a tenant's events are indexed in sorted runs merged in tiers (tenant_runs)"
# A merge into one table keyed by tenant wrote a leaf per busy tenant (tenant_index).
_V10 = Migration(version=10, description=_TENANT_RUNS, statements=tenant_index.RUNS_SCHEMA)
# Append new steps at the end; never edit a released one (files in the field ran it).
MIGRATIONS: Final[tuple[Migration, ...]] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10)
# The steps a partition file gets: its tables are shaped like events.db's, so
# every query runs on either unchanged (its entities table stays empty). The
# catalog (events.db's version 8) is not among them, so version 9 is its 8 (10 its 9).
PARTITION_MIGRATIONS: Final[tuple[Migration, ...]] = (
    *MIGRATIONS[:7],
    Migration(version=8, description=_TENANT_EVENTS, statements=tenant_index.SCHEMA),
    Migration(version=9, description=_TENANT_RUNS, statements=tenant_index.RUNS_SCHEMA),
)


def schema_version(conn: sqlite3.Connection) -> int:
    """The version recorded in the file (0 for a new, empty file)."""
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def _check_chain(migrations: tuple[Migration, ...]) -> None:
    for expected, step in enumerate(migrations, start=1):
        if step.version != expected:
            raise ValueError(f"migration versions must be 1..n in order; got {step.version}")


def migrate(
    conn: sqlite3.Connection, migrations: tuple[Migration, ...] = MIGRATIONS
) -> tuple[int, int]:
    """Bring the file to the last version of ``migrations``; return (from, to)."""
    _check_chain(migrations)
    app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
    if app_id not in (0, APPLICATION_ID):
        raise StoreError(f"not a hookrouter event store (application_id={app_id:#x})")
    current = schema_version(conn)
    latest = migrations[-1].version if migrations else 0
    if current > latest:
        raise StoreError(
            f"the database schema is version {current} but this hookrouter only knows "
            f"versions up to {latest}; run a newer hookrouter or point it at another directory",
            reason="schema_too_new",
        )
    for step in migrations[current:]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in step.statements:
                conn.execute(statement)
            # user_version lives in the file header, so it commits atomically with the DDL.
            conn.execute(f"PRAGMA user_version = {step.version}")
            conn.execute("COMMIT")
        except BaseException as exc:
            conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StoreError(
                    f"schema migration {step.version} ({step.description}) failed: {exc}",
                    reason="migration_failed",
                ) from exc
            raise
    return current, latest


def connect(
    db_path: Path,
    *,
    role: Role,
    busy_timeout: float,
    create: bool = False,
    prepare: Callable[[sqlite3.Connection], None] | None = None,
) -> sqlite3.Connection:
    """Open one connection with the pragmas its role needs, then ``prepare`` it.

    The connection is closed again if a pragma or ``prepare`` (e.g. attaching
    the dedup runs) fails. Every connection is used by one thread at a time, but not always the
    thread that opened it, hence ``check_same_thread=False``. Transactions are
    explicit (``isolation_level=None``): the writer decides what one commit holds.
    """
    mode = "rwc" if create else "rw"
    conn = sqlite3.connect(
        f"file:{db_path}?mode={mode}",
        uri=True,
        timeout=busy_timeout,
        isolation_level=None,
        check_same_thread=False,
        # The writer keeps ~64 sizes of the batch INSERT prepared (batch).
        cached_statements=256,
        factory=PartitionConnection,  # attaches time partitions on demand (partition_sql)
    )
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL: a commit that returned is on disk (WAL fsync'd at every commit).
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        # Automatic checkpoints run inside whichever COMMIT crosses 1000 pages and
        # caused long p99 commit stalls; checkpoint.py runs them instead.
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        if role == "reader":
            conn.execute("PRAGMA query_only = ON")
        if role == "writer":
            # The WAL file is reused after each restart (cheaper fdatasync than
            # growing a file); only shrink it back after a burst made it huge.
            conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
            conn.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
        if prepare is not None:
            prepare(conn)
    except BaseException:
        conn.close()
        raise
    return conn
