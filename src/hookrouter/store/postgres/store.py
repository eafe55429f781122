"""PostgreSQL event store: one statement per loop turn of appends, acknowledged after COMMIT.

Theory of operation
-------------------
``open`` connects once on its own to migrate the schema (``schema``: under an
advisory lock, one node at a time), then opens a pool of ``pool_size``
connections (asyncpg, ``search_path`` = the schema, ``lock_timeout`` set so a
held lock fails a statement instead of stalling it). ``synchronous_commit`` is
left at the server's setting (on), so a commit returns once it is flushed,
and on the synchronous standby when the server has one.

* Appends: ``commit.GroupCommitter`` (one statement per loop turn, answered
  after it committed; a failed commit fails its appends with
  ``StoreUnavailable``, which the ingress answers with 503 + Retry-After).
* Delivery ledger: ``ledger.PostgresLedger`` (ordered jobs, batched outcomes
  fenced by the lease epoch).
* Reads: one pooled connection each (``queries``). Entity writes and
  operator commands: one versioned statement each (``changes``), notified
  in cluster mode.
* Retention: whole days dropped (``retention``).

Every failure of the database or of the link to it reaches callers as
``StoreUnavailable`` (``errors``); with a libpq multi-host DSN and
``target_session_attrs=read-write`` new connections find the new primary
after a failover, and the pool replaces the connections that broke.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

import asyncpg
import orjson

from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.errors import StoreError, StoreSaturated, StoreUnavailable
from hookrouter.store.base import (
    AppendDone,
    AppendResult,
    Entity,
    EntityKind,
    EventRecord,
    EventStatus,
    NewEvent,
    StatSeries,
    StoredChange,
    StoreStats,
    check_events_committing,
)
from hookrouter.store.postgres import changes, errors, queries, retention, schema, sessions
from hookrouter.store.postgres.commit import GroupCommitter
from hookrouter.store.postgres.conn import Conn
from hookrouter.store.postgres.leases import LeaseKeeper
from hookrouter.store.postgres.ledger import PostgresLedger
from hookrouter.store.postgres.ledger_sql import EPOCHS
from hookrouter.store.postgres.partitioning import DAY_MS, PartitionMap
from hookrouter.store.postgres.replication import ReplicationStatus, replication_status
from hookrouter.store.retention import Cutoffs, PruneResult
from hookrouter.store.sessions import SessionTable, StoredSession

if TYPE_CHECKING:
    from hookrouter.store.base import EventStore
    from hookrouter.store.ledger import DeliveryLedger

T = TypeVar("T")
log = logging.getLogger(__name__)

DEFAULT_POOL_SIZE: Final = 8
DEFAULT_MAX_PENDING: Final = 20_000
# A lock held elsewhere (a migration, a partition drop, an operator) fails
# the statement after this long: the appends are answered 503 + Retry-After
# well inside providers' timeouts instead of hanging.
DEFAULT_LOCK_TIMEOUT: Final = 2.0
# Connecting (each host of a multi-host DSN in turn) and each statement give up after this.
DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_COMMAND_TIMEOUT: Final = 30.0
MAX_LIST_LIMIT: Final = 1000
# Days of time partitions made ahead at open, so the day boundary costs no DDL.
DAYS_AHEAD: Final = 2


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """The pool's reset of a released connection: only asyncpg's rollback of an open transaction.

    asyncpg's default reset runs four more statements on every release
    (unlock advisory locks, close cursors, unlisten, reset settings): a
    round trip and server work per pooled job, several jobs per event. Pooled
    connections here never change session state (advisory locks are
    transaction-level, LISTEN has a connection of its own, settings are set
    at connect), so there is nothing for them to undo.
    """
    return None


def default_node_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class PostgresStore:
    """``EventStore`` on PostgreSQL (see the module docstring)."""

    def __init__(
        self,
        dsn: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
        pool_size: int = DEFAULT_POOL_SIZE,
        partitions: int = schema.DEFAULT_PARTITIONS,
        schema_name: str = "public",
        node_id: str | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
        max_pending: int = DEFAULT_MAX_PENDING,
        migrations: tuple[schema.Migration, ...] = schema.MIGRATIONS,
    ) -> None:
        """``dsn`` is a libpq URI (multi-host allowed); ``schema_name`` is created when missing.

        ``partitions`` is used only when the schema is created; an existing
        schema keeps the count it was created with.
        """
        if pool_size < 2:
            raise ValueError(f"pool_size must be at least 2, got {pool_size}")
        if not 1 <= partitions <= schema.MAX_PARTITIONS:
            raise ValueError(f"partitions must be 1..{schema.MAX_PARTITIONS}, got {partitions}")
        self.dsn = dsn
        self.schema = schema_name
        self.node_id = node_id or default_node_id()
        self._clock = clock
        self._pool_size = pool_size
        self._configured_partitions = partitions
        self._lock_timeout = lock_timeout
        self._connect_timeout = connect_timeout
        self._command_timeout = command_timeout
        self._max_pending = max_pending
        self._migrations = migrations
        self._state = "new"
        self._pool: asyncpg.Pool | None = None
        self._committer: GroupCommitter | None = None
        self._ledger: PostgresLedger | None = None
        self._partition_of: PartitionMap | None = None
        self.schema_migrated_from: int | None = None
        self.replication: ReplicationStatus | None = None  # read at open
        self.lease_keeper: LeaseKeeper | None = None  # cluster mode (``cluster.ClusterNode``)
        self.changes_notify: changes.Notify = None  # cluster mode: (channel, node id)
        self._pruned = 0

    # ---- lifecycle ---------------------------------------------------------

    def server_settings(self) -> dict[str, str]:
        """What every connection of this store sets for its session."""
        return {
            "search_path": schema.quote_ident(self.schema),
            "lock_timeout": f"{max(1, int(self._lock_timeout * 1000))}ms",
            "application_name": f"hookrouter {self.node_id}"[:63],
            # The router's statements join a small array of ids to tables by
            # their keys. Planned from missing statistics (a day partition that
            # autovacuum has not analysed yet; a prepared plan made while it was
            # empty is kept), they scanned or hashed the whole partition, so an
            # outcome write cost more with every event of the day. Index probes
            # are always right for this workload (tests/store/test_postgres_plans.py).
            "enable_seqscan": "off",
            "enable_hashjoin": "off",
            "enable_mergejoin": "off",
            # A disabled scan is priced past every JIT threshold, so the lease
            # turn's reads of small tables were compiled by LLVM on every call.
            "jit": "off",
            # With the joins above fixed, a generic plan is the custom plan, and
            # the outcome write (partition pruning over the day partitions) was
            # planned afresh on every call; performance.md "Generic plans".
            "plan_cache_mode": "force_generic_plan",
        }

    async def _connect(self) -> asyncpg.Connection:
        return await asyncpg.connect(
            self.dsn,
            timeout=self._connect_timeout,
            command_timeout=self._command_timeout,
            server_settings=self.server_settings(),
        )

    async def open(self) -> None:
        """Migrate (one node at a time), make today's partitions, open the pool."""
        if self._state != "new":
            raise StoreError(f"store already {self._state}", reason="store_state")
        loop = asyncio.get_running_loop()
        try:
            conn = await self._connect()
        except Exception as exc:
            raise errors.unavailable(exc, "cannot connect to PostgreSQL") from exc
        try:
            self.schema_migrated_from, _ = await schema.migrate(
                conn,
                self.schema,
                partitions=self._configured_partitions,
                node_id=self.node_id,
                migrations=self._migrations,
            )
            count = await schema.stored_partitions(conn)
            today = int(self._clock.time() * 1000) // DAY_MS
            days = await schema.ensure_days(conn, self.schema, range(today, today + DAYS_AHEAD + 1))
            held = {int(r[0]): int(r[1]) for r in await conn.fetch(EPOCHS)}
            self.replication = await replication_status(conn)
        except StoreError:
            raise
        except Exception as exc:
            if errors.is_store_failure(exc):
                raise errors.unavailable(exc, "cannot open the PostgreSQL store") from exc
            raise
        finally:
            await conn.close()
        log.info("PostgreSQL %s", self.replication.summary())
        if count != self._configured_partitions and self.schema_migrated_from:
            log.warning(
                "[store.postgres] partitions = %d is ignored: the schema was created with %d",
                self._configured_partitions,
                count,
            )
        try:
            pool = await asyncpg.create_pool(
                self.dsn,
                min_size=1,
                max_size=self._pool_size,
                timeout=self._connect_timeout,
                command_timeout=self._command_timeout,
                server_settings=self.server_settings(),
                reset=_keep_session,
            )
        except Exception as exc:
            raise errors.unavailable(exc, "cannot open the PostgreSQL pool") from exc
        self._pool = pool
        self._partition_of = PartitionMap(count)
        self._committer = GroupCommitter(pool, loop, self._partition_of, self._ensure_days, days)
        self._ledger = PostgresLedger(pool, loop, self._partition_of, held)
        self._state = "open"

    # ---- what cluster mode (``cluster.ClusterNode``) builds on -----------------

    @property
    def ledger(self) -> PostgresLedger:
        assert self._ledger is not None, "store not open"
        return self._ledger

    @property
    def committer(self) -> GroupCommitter:
        assert self._committer is not None, "store not open"
        return self._committer

    @property
    def partition_of(self) -> PartitionMap:
        assert self._partition_of is not None, "store not open"
        return self._partition_of

    async def connect(self) -> asyncpg.Connection:
        """A connection of its own, outside the pool (a LISTEN connection)."""
        return await self._connect()

    async def run(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """``fn`` on a pooled connection; database failures as ``StoreUnavailable``."""
        return await self._run(fn)

    async def _ensure_days(self, days: set[int]) -> set[int]:
        found: set[int] = await self._run(lambda c: schema.ensure_days(c, self.schema, days))
        return found

    async def close(self) -> None:
        """Commit what is pending (its futures resolve), then close the pool."""
        if self._state in ("new", "closed"):
            self._state = "closed"
            return
        if self._state == "closing":
            return
        self._state = "closing"
        if self._committer is not None:
            await self._committer.drain()
        if self._ledger is not None:
            await self._ledger.drain()
        if self._pool is not None:
            try:
                await asyncio.wait_for(self._pool.close(), self._connect_timeout)
            except (TimeoutError, *errors.CONNECTION_ERRORS):
                self._pool.terminate()
        self._state = "closed"

    # ---- hot path ----------------------------------------------------------

    def append(self, event: NewEvent) -> asyncio.Future[AppendResult]:
        return self._admitting().submit(event)

    def append_then(self, event: NewEvent, done: AppendDone) -> None:
        self._admitting().submit_then(event, done)

    def _admitting(self) -> GroupCommitter:
        committer = self._committer
        if self._state != "open" or committer is None:
            raise StoreUnavailable(f"store is {self._state}", reason="store_closed")
        if committer.pending >= self._max_pending:
            raise StoreSaturated(
                f"{self._max_pending} appends are waiting for a commit", retry_after=1.0
            )
        return committer

    # ---- reads and small writes --------------------------------------------

    async def _run(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """``fn`` on a pooled connection, database failures as ``StoreUnavailable``."""
        pool = self._pool
        if self._state not in ("open", "closing") or pool is None:
            raise StoreUnavailable(f"store is {self._state}", reason="store_closed")
        try:
            async with pool.acquire() as conn:
                return await fn(conn)
        except StoreError:
            raise
        except Exception as exc:
            if errors.is_store_failure(exc):
                raise errors.unavailable(exc, "query failed") from exc
            raise

    async def get_event(self, event_id: str, *, with_body: bool = False) -> EventRecord | None:
        return await self._run(lambda c: queries.get_event(c, event_id, with_body))

    async def find_event(self, source_id: str, provider_event_id: str) -> str | None:
        return await self._run(lambda c: queries.find_event(c, source_id, provider_event_id))

    async def list_events(
        self,
        *,
        tenant_id: str | None = None,
        status: EventStatus | None = None,
        limit: int = 100,
        before: str | None = None,
    ) -> list[EventRecord]:
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_LIST_LIMIT}, got {limit}")
        partition = None if tenant_id is None else self.partition_of(tenant_id)
        return await self._run(
            lambda c: queries.list_events(
                c,
                tenant_id=tenant_id,
                partition=partition,
                status=status,
                limit=limit,
                before=before,
            )
        )

    async def list_entities(self, kind: EntityKind) -> list[Entity]:
        return await self._run(lambda c: queries.list_entities(c, kind))

    async def put_entity(self, entity: Entity) -> None:
        doc = orjson.dumps(entity.doc).decode()  # a bad document fails here, not in the database
        await self._run(lambda c: changes.put_entity(c, entity, doc, self.changes_notify))

    async def replace_entity(self, entity: Entity) -> bool:
        doc = orjson.dumps(entity.doc).decode()
        return await self._run(
            lambda c: changes.replace_entity(c, entity, doc, self.changes_notify)
        )

    async def delete_entity(self, kind: EntityKind, entity_id: str) -> bool:
        return await self._run(
            lambda c: changes.delete_entity(c, kind, entity_id, self.changes_notify)
        )

    # ---- the change feed (cluster mode: ``changes``) ---------------------------

    async def send_command(self, name: str, target: str) -> int:
        """Store an operator command for the node it concerns; its version."""
        return await self._run(lambda c: changes.command(c, name, target, self.changes_notify))

    async def changes_since(self, version: int, limit: int) -> list[StoredChange]:
        return await self._run(lambda c: changes.since(c, version, limit))

    async def last_change(self) -> int:
        return await self._run(changes.last_version)

    async def ping(self) -> None:
        """A primary is reachable and writable, and event commits are not failing."""

        async def check(conn: Conn) -> bool:
            return bool(await conn.fetchval("SELECT pg_is_in_recovery()"))

        if await self._run(check):
            raise StoreUnavailable("connected to a standby, not a primary", reason="store_readonly")
        committer = self._committer
        if committer is not None:
            check_events_committing(
                committer.events_failed_at, committer.last_error, self._clock.monotonic()
            )

    async def prune(
        self, cutoffs: Cutoffs, *, after: str | None = None, scan_limit: int = 1000
    ) -> PruneResult:
        """Drop every day past the cutoffs (``retention``); one call is a whole pass."""
        if scan_limit < 1:
            raise ValueError(f"scan_limit must be at least 1, got {scan_limit}")
        scanned, deleted, days = await self._run(
            lambda c: retention.prune_days(c, cutoffs, scan_limit)
        )
        if days and self._committer is not None:
            self._committer.known_days -= set(days)
        self._pruned += deleted
        return PruneResult(scanned=scanned, deleted=deleted, resume_after=None)

    # ---- introspection -----------------------------------------------------

    def stats(self) -> dict[str, Any]:
        w = self._committer
        if w is None:
            return {"state": self._state}
        ledger = self._ledger
        return {
            "state": self._state,
            "backend": "postgres",
            "node_id": self.node_id,
            "appends": w.appends,
            "pending_appends": w.pending,
            "commits": w.commits,
            "events_per_commit_last": w.batch_last,
            "events_per_commit_max": w.batch_max,
            "events_per_commit_mean": w.committed_events / w.commits if w.commits else 0.0,
            "commit_ms_last": w.commit_ms_last,
            "commit_ms_peak": w.commit_ms_peak,
            "duplicates": w.duplicates,
            "failures": w.failures,
            "failed_appends": w.failed_appends,
            "failing": w.failing,
            "last_error": w.last_error,
            "pruned_events": self._pruned,
            "partitions": self._partition_of.count if self._partition_of else 0,
            "stale_outcomes": ledger.stale_outcomes if ledger else 0,
            "outcome_write_failures": ledger.write_failures if ledger else 0,
            "pending_scans": ledger.pending_scans if ledger else 0,
            "pending_scans_avoided": ledger.pending_scans_avoided if ledger else 0,
            "pool_size": self._pool.get_size() if self._pool else 0,
        }

    def counters(self) -> StoreStats | None:
        w = self._committer
        if w is None:
            return None
        ledger = self._ledger
        return StoreStats(
            appends=w.appends,
            pending_appends=w.pending,
            commits=w.commits,
            events_per_commit_last=w.batch_last,
            commit_seconds_last=w.commit_ms_last / 1000,
            commit_seconds_peak=w.commit_ms_peak / 1000,
            duplicates=w.duplicates,
            failed_appends=w.failed_appends,
            failing=w.failing,
            pruned_events=self._pruned,
            backend=(
                StatSeries(
                    "postgres_stale_outcomes",
                    "counter",
                    "Delivery outcomes refused because this node's lease epoch was stale.",
                    float(ledger.stale_outcomes if ledger else 0),
                ),
                StatSeries(
                    "postgres_pending_scans",
                    "counter",
                    "Queries for the endpoints with pending work in some partitions"
                    " (start, takeover, catch-up scan, a work notice without its lanes).",
                    float(ledger.pending_scans if ledger else 0),
                ),
                StatSeries(
                    "postgres_pending_scans_avoided",
                    "counter",
                    "Work notices from other nodes whose lanes were queued as named, unqueried.",
                    float(ledger.pending_scans_avoided if ledger else 0),
                ),
                *self._lease_series(),
            ),
        )

    def _lease_series(self) -> tuple[StatSeries, ...]:
        """Cluster mode: this node's partition leases (``leases.LeaseKeeper``)."""
        keeper = self.lease_keeper
        if keeper is None:
            return ()
        return (
            StatSeries(
                "postgres_partitions_held",
                "gauge",
                "Tenant partitions this node holds the lease of.",
                float(len(keeper.held)),
            ),
            StatSeries(
                "postgres_leases_taken",
                "counter",
                "Partition leases this node took (free or expired ones).",
                float(keeper.taken),
            ),
            StatSeries(
                "postgres_leases_lost",
                "counter",
                "Partition leases this node lost to another node (it renewed too late).",
                float(keeper.lost),
            ),
        )

    def delivery_ledger(self) -> DeliveryLedger | None:
        return self._ledger

    def session_table(self) -> SessionTable:
        return self  # every node reads the same rows

    async def get_session(self, session_id: str) -> StoredSession | None:
        return await self._run(lambda c: sessions.get_session(c, session_id))

    async def put_session(self, session: StoredSession) -> None:
        await self._run(lambda c: sessions.put_session(c, session))

    async def delete_session(self, session_id: str) -> None:
        await self._run(lambda c: sessions.delete_session(c, session_id))

    async def purge_sessions(self, seen_before: float) -> int:
        return await self._run(lambda c: sessions.purge(c, seen_before))

    async def put_link(self, token: str, tenant: str, expires_at: float) -> None:
        await self._run(lambda c: sessions.put_link(c, token, tenant, expires_at))

    async def take_link(self, token: str) -> tuple[str, float] | None:
        return await self._run(lambda c: sessions.take_link(c, token))

    def removal_hint(self, kind: EntityKind, entity_id: str) -> str:
        quoted = entity_id.replace("'", "''")
        return (
            f"psql '<dsn>' -c \"DELETE FROM {self.schema}.entities WHERE kind = '{kind}'"
            f" AND id = '{quoted}'\""
        )

    def __repr__(self) -> str:
        w = self._committer
        detail = "" if w is None else f", commits={w.commits}, pending={w.pending}"
        return f"PostgresStore(schema={self.schema!r}, state={self._state}{detail})"


if TYPE_CHECKING:

    def _conforms(store: PostgresStore) -> EventStore:  # mypy checks the protocol here
        return store
