"""The PostgreSQL schema: versioned migrations applied at open under an advisory lock.

Every node runs ``migrate`` when its store opens. A session-level advisory
lock (one per schema) lets one node apply the missing versions while the
others wait for it, then find nothing left to do. ``schema_versions`` records
each applied version with the node that applied it. A database whose version
is newer than this code knows is refused: old code must not write rows that
newer code reads differently.

Tables (migration 1):

* ``events``, ``deliveries``, ``attempts``: range partitioned by event id, one
  partition per UTC day (``partitioning``), made ahead and on demand
  (``ensure_days``); retention drops whole days (``retention``). Delivery
  rows are written with their event, in the same statement.
* ``event_keys``: the dedup index, ``(source_id, provider_event_id)`` ->
  event id, primary key (a unique index). Not partitioned: a unique index on
  a partitioned table must include the partition key, and dedup must hold
  across days; a key outlives its event (dedup stays exact forever).
* ``partitions``: the ownership leases, one row per tenant hash number, with
  the owner node, epoch and expiry. Single-node mode leaves every row at
  epoch 1, unowned; cluster mode moves leases here.
* ``entities``, ``meta`` (the fixed partition count), ``time_partitions``
  (the days that exist, for retention and ``ensure_days``).

Migration 2: ``nodes``, the live nodes with the expiry of their heartbeat
(``leases``): the quotas of the lease plan divide partitions over them.

Migration 3: the change feed (``changes``). Every entity write and operator
command takes a version from ``change_versions``: ``entities.version``,
``entity_deletions`` (the last deletion of each id) and ``commands`` (the
last of each command and target), so a node catches up by asking for
versions above the last it applied.

Migration 5: ``events.fanout``, the number of deliveries an event was
stored with (NULL for events stored before it). An owner that loads an event
with one delivery knows that delivering it settles the event (``ledger``).

Migration 7: ``deliveries_pending`` leads with the ownership partition, so
the scans of a partition's pending work use it, and
``deliveries_partition_open`` is dropped: a fresh delivery writes one index
entry fewer. A new owner resumes parked work through ``deliveries_waiting``
and retries through ``deliveries_retry_due``, as every owner does. The new
index is built partition by partition while the nodes still running go on
writing (``online_index``): a rolling upgrade over a large deliveries table
does not stop their ingest for the build.

Every migration's transaction waits for its locks briefly and tries again
(``short_locks``), and nodes waiting for the migration lock poll for it
instead of waiting inside a statement: a waiting statement holds a snapshot,
which a CONCURRENTLY build would wait for in turn.

Identifiers compare in the "C" collation: ids sort as Python sorts them (the
delivery engine pages by event id), whatever the database's locale.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from hookrouter.errors import StoreError
from hookrouter.store.postgres import online_index
from hookrouter.store.postgres.conn import Conn
from hookrouter.store.postgres.online_index import PartitionedIndex
from hookrouter.store.postgres.partitioning import day_bounds, day_suffix
from hookrouter.store.postgres.short_locks import ShortLocks

# pg_advisory_lock(key1, key2): key1 marks hookrouter's locks ("hkrt"), key2 the purpose.
LOCK_NAMESPACE: Final = 0x686B7274
# The second key: hashtext of the purpose and the schema name ($1), so schemas do not share locks.
_MIGRATE_LOCK: Final = "hashtext('migrate.' || $1::text)"
_DAYS_LOCK: Final = "hashtext('days.' || $1::text)"
_MIGRATION_LOCK_POLL: Final = 0.1
DEFAULT_LOCKS: Final = ShortLocks()
DEFAULT_PARTITIONS: Final = 256
MAX_PARTITIONS: Final = 32_767  # stored as smallint


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema version: statements run in one transaction (``{partitions}`` is filled in).

    ``index``, when set, is built first without blocking writers, and made
    final (old indexes dropped, renamed) in that same transaction.
    """

    version: int
    description: str
    statements: tuple[str, ...]
    index: PartitionedIndex | None = None


_C: Final = 'COLLATE "C"'

MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(
        1,
        "events, deliveries, attempts by day; dedup keys; entities; partition leases",
        (
            "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
            "INSERT INTO meta (key, value) VALUES ('partitions', '{partitions}')",
            """CREATE TABLE partitions (
                partition smallint PRIMARY KEY,
                owner text,
                epoch bigint NOT NULL DEFAULT 1,
                expires_at timestamptz)""",
            "INSERT INTO partitions (partition, epoch)"
            " SELECT g, 1 FROM generate_series(0, {partitions} - 1) AS g",
            f"""CREATE TABLE event_keys (
                source_id text {_C} NOT NULL,
                provider_event_id text {_C} NOT NULL,
                event_id text {_C} NOT NULL,
                PRIMARY KEY (source_id, provider_event_id))""",
            f"""CREATE TABLE events (
                event_id text {_C} NOT NULL,
                partition smallint NOT NULL,
                tenant_id text {_C} NOT NULL,
                source_id text {_C} NOT NULL,
                provider_event_id text,
                event_type text,
                received_at double precision NOT NULL,
                status text NOT NULL,
                headers jsonb NOT NULL,
                body bytea NOT NULL,
                PRIMARY KEY (event_id)) PARTITION BY RANGE (event_id)""",
            "CREATE INDEX events_tenant ON events (tenant_id, event_id)",
            "CREATE INDEX events_stored_status ON events (tenant_id, status, event_id)"
            " WHERE status IN ('failed', 'unrouted')",
            f"""CREATE TABLE deliveries (
                event_id text {_C} NOT NULL,
                endpoint_id text {_C} NOT NULL,
                partition smallint NOT NULL,
                tenant_id text {_C} NOT NULL,
                state text NOT NULL,
                attempts integer NOT NULL DEFAULT 0,
                next_attempt_at double precision,
                last_status_code integer,
                last_error text,
                updated_at double precision NOT NULL,
                last_attempt integer,
                last_started_at double precision,
                last_duration_ms double precision,
                PRIMARY KEY (event_id, endpoint_id)) PARTITION BY RANGE (event_id)""",
            # Page-in of one endpoint's pending work, in event id order.
            "CREATE INDEX deliveries_pending ON deliveries (tenant_id, endpoint_id, event_id)"
            " WHERE state = 'pending'",
            "CREATE INDEX deliveries_retry_due ON deliveries (next_attempt_at)"
            " WHERE state = 'retry'",
            # Retry, parked, dead and disabled: resume, replay, counts. Not pending
            # (deliveries_pending has those): a fresh delivery costs one entry fewer.
            "CREATE INDEX deliveries_waiting ON deliveries (state, tenant_id, event_id)"
            " WHERE state IN ('retry', 'parked', 'dead', 'disabled')",
            # What a new owner resumes when it takes a partition over (until migration 7).
            "CREATE INDEX deliveries_partition_open ON deliveries (partition, event_id)"
            " WHERE state IN ('pending', 'retry', 'parked')",
            f"""CREATE TABLE attempts (
                event_id text {_C} NOT NULL,
                endpoint_id text {_C} NOT NULL,
                attempt integer NOT NULL,
                started_at double precision NOT NULL,
                duration_ms double precision NOT NULL,
                status_code integer,
                error text,
                response_excerpt text,
                PRIMARY KEY (event_id, endpoint_id, attempt)) PARTITION BY RANGE (event_id)""",
            f"""CREATE TABLE entities (
                kind text NOT NULL,
                id text {_C} NOT NULL,
                tenant_id text {_C},
                doc jsonb NOT NULL,
                updated_at double precision NOT NULL,
                PRIMARY KEY (kind, id))""",
            f"""CREATE TABLE time_partitions (
                day integer PRIMARY KEY,
                lower_id text {_C} NOT NULL,
                upper_id text {_C} NOT NULL)""",
        ),
    ),
    Migration(
        2,
        "live nodes for lease planning",
        (
            f"""CREATE TABLE nodes (
                node_id text {_C} PRIMARY KEY,
                started_at timestamptz NOT NULL DEFAULT now(),
                expires_at timestamptz NOT NULL)""",
        ),
    ),
    Migration(
        3,
        "the change feed: entity versions, deletions and operator commands",
        (
            "CREATE SEQUENCE change_versions",
            "ALTER TABLE entities ADD COLUMN version bigint NOT NULL DEFAULT 0",
            "CREATE INDEX entities_version ON entities (version)",
            f"""CREATE TABLE entity_deletions (
                kind text NOT NULL,
                id text {_C} NOT NULL,
                version bigint NOT NULL,
                PRIMARY KEY (kind, id))""",
            "CREATE INDEX entity_deletions_version ON entity_deletions (version)",
            f"""CREATE TABLE commands (
                name text NOT NULL,
                target text {_C} NOT NULL,
                version bigint NOT NULL,
                PRIMARY KEY (name, target))""",
            "CREATE INDEX commands_version ON commands (version)",
        ),
    ),
    Migration(
        4,
        "console sessions and portal links any node can read (store.sessions)",
        (
            f"""CREATE TABLE console_sessions (
                id text {_C} PRIMARY KEY,
                site text NOT NULL,
                tenant text {_C},
                read_only boolean NOT NULL,
                who text NOT NULL,
                csrf text NOT NULL,
                last_seen double precision NOT NULL,
                flash jsonb NOT NULL DEFAULT '[]')""",
            "CREATE INDEX console_sessions_seen ON console_sessions (last_seen)",
            f"""CREATE TABLE portal_links (
                token text {_C} PRIMARY KEY,
                tenant text {_C} NOT NULL,
                expires_at double precision NOT NULL)""",
        ),
    ),
    Migration(
        5,
        "events.fanout: how many deliveries an event was stored with",
        ("ALTER TABLE events ADD COLUMN fanout smallint",),
    ),
    Migration(
        6,
        "breakers: each endpoint's breaker as its owner last wrote it (store.postgres.breakers)",
        (
            f"""CREATE TABLE breakers (
                endpoint_id text {_C} PRIMARY KEY,
                tenant_id text {_C} NOT NULL,
                partition smallint NOT NULL,
                state text NOT NULL,
                opened_at double precision,
                times_opened integer NOT NULL,
                node text NOT NULL,
                changed_at double precision NOT NULL,
                history jsonb NOT NULL)""",
            "CREATE INDEX breakers_partition ON breakers (partition) WHERE state <> 'closed'",
        ),
    ),
    Migration(
        7,
        "deliveries_pending leads with the partition; deliveries_partition_open dropped",
        (),
        # One entry per fresh delivery serves both the page-in of a lane and
        # the scans of a partition's pending work (start, takeover, catch-up).
        PartitionedIndex(
            "deliveries",
            "deliveries_pending",
            "(partition, tenant_id, endpoint_id, event_id) WHERE state = 'pending'",
            replaces=("deliveries_partition_open", "deliveries_pending"),
        ),
    ),
)

_PARTITIONED: Final = ("events", "deliveries", "attempts")


def latest(migrations: tuple[Migration, ...]) -> int:
    return migrations[-1].version if migrations else 0


def _check_chain(migrations: tuple[Migration, ...]) -> None:
    for index, step in enumerate(migrations, start=1):
        if step.version != index:
            raise ValueError(f"migration {index} is numbered {step.version}")


async def ensure_schema(conn: Conn, schema: str) -> None:
    """Create ``schema`` when missing (under the migration lock, which the caller holds)."""
    if await conn.fetchval("SELECT 1 FROM pg_namespace WHERE nspname = $1", schema) is None:
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")


async def migrate(
    conn: Conn,
    schema: str,
    *,
    partitions: int,
    node_id: str,
    migrations: tuple[Migration, ...] = MIGRATIONS,
    locks: ShortLocks = DEFAULT_LOCKS,
) -> tuple[int, int]:
    """Bring ``schema`` to the last version of ``migrations``; return (from, to).

    ``conn`` is a connection of its own whose search_path is ``schema``. The
    lock is held for the whole check-and-apply, so nodes starting together
    migrate once; a node that finds a newer version raises ``StoreError``.
    """
    _check_chain(migrations)
    await _take_migration_lock(conn, schema)
    try:
        await ensure_schema(conn, schema)
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_versions (
                version integer PRIMARY KEY,
                description text NOT NULL,
                applied_by text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        current = int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_versions"))
        newest = latest(migrations)
        if current > newest:
            raise StoreError(
                f"the PostgreSQL schema {schema!r} is at version {current} but this hookrouter "
                f"only knows versions up to {newest}: a newer hookrouter migrated it; upgrade "
                "this node before starting it (it must not write rows that newer code reads "
                "differently)",
                reason="schema_too_new",
            )
        for step in migrations[current:]:
            await _apply(conn, step, partitions=partitions, node_id=node_id, locks=locks)
        return current, newest
    finally:
        await conn.execute(f"SELECT pg_advisory_unlock({LOCK_NAMESPACE}, {_MIGRATE_LOCK})", schema)


async def _take_migration_lock(conn: Conn, schema: str) -> None:
    """Poll for it: a statement waiting for it holds a snapshot that the migrator may wait for."""
    take = f"SELECT pg_try_advisory_lock({LOCK_NAMESPACE}, {_MIGRATE_LOCK})"
    while True:
        if await conn.fetchval(take, schema):
            return
        await asyncio.sleep(_MIGRATION_LOCK_POLL)


async def _apply(
    conn: Conn, step: Migration, *, partitions: int, node_id: str, locks: ShortLocks
) -> None:
    if step.index is not None:
        await online_index.build(conn, step.index, locks)

    async def statements(c: Conn) -> None:
        for statement in step.statements:
            await c.execute(statement.replace("{partitions}", str(partitions)))
        if step.index is not None:
            await online_index.finish(c, step.index)
        await c.execute(
            "INSERT INTO schema_versions (version, description, applied_by) VALUES ($1, $2, $3)",
            step.version,
            step.description,
            node_id,
        )

    tables = (step.index.table,) if step.index is not None else ()
    await locks.transaction(conn, f"migration {step.version}", tables, statements)


async def stored_partitions(conn: Conn) -> int:
    """The partition count fixed when the schema was created."""
    return int(await conn.fetchval("SELECT value FROM meta WHERE key = 'partitions'"))


async def existing_days(conn: Conn) -> set[int]:
    return {int(r[0]) for r in await conn.fetch("SELECT day FROM time_partitions")}


async def ensure_days(conn: Conn, schema: str, days: Iterable[int]) -> set[int]:
    """Create the time partitions of ``days`` that do not exist yet; return all that exist.

    One transaction under a transaction-level advisory lock, so that two
    nodes meeting a new day at once do not both create it.
    """
    wanted = sorted(set(days))
    async with conn.transaction():
        await conn.execute(f"SELECT pg_advisory_xact_lock({LOCK_NAMESPACE}, {_DAYS_LOCK})", schema)
        have = await existing_days(conn)
        for day in wanted:
            if day in have:
                continue
            lower, upper = day_bounds(day)
            for table in _PARTITIONED:
                await conn.execute(
                    f"CREATE TABLE {table}_{day_suffix(day)} PARTITION OF {table}"
                    f" FOR VALUES FROM ('{lower}') TO ('{upper}')"
                )
            await conn.execute(
                "INSERT INTO time_partitions (day, lower_id, upper_id) VALUES ($1, $2, $3)",
                day,
                lower,
                upper,
            )
            have.add(day)
    return have


async def drop_day(conn: Conn, day: int) -> None:
    """Drop one day's partitions of every table (inside the caller's transaction)."""
    for table in reversed(_PARTITIONED):
        await conn.execute(f"DROP TABLE IF EXISTS {table}_{day_suffix(day)}")
    await conn.execute("DELETE FROM time_partitions WHERE day = $1", day)


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


__all__ = [
    "DEFAULT_PARTITIONS",
    "LOCK_NAMESPACE",
    "MAX_PARTITIONS",
    "MIGRATIONS",
    "Migration",
    "drop_day",
    "ensure_days",
    "existing_days",
    "latest",
    "migrate",
    "quote_ident",
    "stored_partitions",
]
