"""SQLite event store: WAL, ``synchronous=FULL``, one commit per group of appends.

Theory of operation
-------------------
Files: ``<path>/events.db`` (plus SQLite's ``-wal`` and ``-shm``), and
``<path>/dedup.db``, the dedup tiers' runs (``dedup``: derived from
the events, rebuilt from them when missing). Three connections to the
events, each used by one thread at a time:

* the **writer** commits appends in batches, on the event-loop thread once
  per loop turn (``loopcommit``, default) or on a writer thread
  (``writer``); the commit itself is shared (``committer``).
  ``append`` returns a future that resolves after the statement holding the
  event committed, so an acknowledged event is on disk.
* the **reader** serves ``get_event``/``list_events``/``list_entities`` on a
  single worker thread, so reads never block the event loop or the writer
  (WAL readers see the last committed snapshot and take no write lock).
* the **checkpointer** copies the WAL into the database off the commit path
  (``checkpoint``); automatic checkpoints are off.

The writer and the reader attach ``dedup.db`` read-only; the **dedup worker**
thread (``dedup_worker``) is its only writer.

Entity writes, ``ping`` and the delivery ledger's updates are write jobs
(``submit_write``) that the writer commits right after the events of the same
cycle, so SQLite never sees two writers competing for its lock. A cycle whose
jobs are all unsynced (the ledger's outcome batches) commits them without an
fsync; the next event commit's fsync covers them (``batch.commit_jobs``).

Choice of grouping: a writer thread halves the event loop's CPU per event
and keeps the loop responsive, but committing once per loop turn won on
throughput and acknowledgement latency in every measurement (after each
statement the thread must win the GIL back from a busy loop, and pipelining
splits the waiting producers into two half-size batches, paying the fixed
cost of a commit twice as often). Hence ``grouping="loop"`` by default and
``"thread"`` for deployments that value loop responsiveness, or fear slow
fsyncs, more than peak rate. Committing on the loop with
``synchronous=NORMAL`` and syncing the WAL in a helper thread before
acknowledging was tried and dropped: every sync round paid two thread
hand-offs plus waits for the GIL. The figures: docs/performance.md
(``tests/store/bench_group_commit.py`` reproduces them).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

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
    StoreStats,
    check_events_committing,
)
from hookrouter.store.ledger import DeliveryLedger
from hookrouter.store.retention import Cutoffs, PruneResult
from hookrouter.store.sqlite import (
    compaction,
    partition_files,
    partition_sql,
    partitions,
    queries,
    retention,
)
from hookrouter.store.sqlite import dedup as dedup_index
from hookrouter.store.sqlite.checkpoint import (
    Checkpointer,
    CheckpointMode,
    CheckpointPolicy,
    CheckpointResult,
    WalState,
    run_checkpoint,
)
from hookrouter.store.sqlite.committer import Committer
from hookrouter.store.sqlite.cycle import DatabaseMoved, file_error
from hookrouter.store.sqlite.dedup_tiers import TierPolicy
from hookrouter.store.sqlite.dedup_worker import DedupWorker
from hookrouter.store.sqlite.errors import unavailable
from hookrouter.store.sqlite.file_modes import secure_store_dir, secure_store_files
from hookrouter.store.sqlite.follow import FollowedConnection
from hookrouter.store.sqlite.ledger import SqliteLedger
from hookrouter.store.sqlite.loopcommit import LoopCommitter
from hookrouter.store.sqlite.schema import (
    DB_FILENAME,
    MIGRATIONS,
    Migration,
    connect,
    migrate,
    schema_version,
)
from hookrouter.store.sqlite.stats import typed as typed_stats
from hookrouter.store.sqlite.writer import ThreadCommitter

if TYPE_CHECKING:
    from hookrouter.store.base import EventStore

T = TypeVar("T")

log = logging.getLogger("hookrouter.store")

Grouping = Literal["loop", "thread"]
DEFAULT_GROUPING: Final[Grouping] = "loop"
_COMMITTERS: Final[dict[str, type[Committer]]] = {"loop": LoopCommitter, "thread": ThreadCommitter}

# About a second of commits and tens of MiB of small events: past that,
# senders are better served by a 429.
DEFAULT_MAX_PENDING: Final = 20_000
# How long a commit waits for SQLite's write lock (held by another process, or
# briefly by the idle TRUNCATE) before its batch fails with StoreUnavailable
# and providers are asked to retry. On the loop the wait blocks every task,
# so keep it short; a writer thread can afford the 2 s that still answers
# well inside providers' ~10 s+ timeouts.
DEFAULT_BUSY_TIMEOUT: Final[dict[str, float]] = {"loop": 0.2, "thread": 2.0}
MAX_LIST_LIMIT: Final = 1000
# The schema version that introduced the partition catalog (schema._V8).
_CATALOG_VERSION: Final = 8


class SqliteStore:
    """The default ``EventStore`` (see module docstring)."""

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock = SYSTEM_CLOCK,
        busy_timeout: float | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
        checkpoint_policy: CheckpointPolicy | None = None,
        grouping: Grouping = DEFAULT_GROUPING,
        migrations: tuple[Migration, ...] = MIGRATIONS,
        dedup_policy: TierPolicy | None = None,
        bucket_seconds: int | None = None,
    ) -> None:
        """``path`` is a directory (created if missing); ``migrations`` is for tests and tools.

        ``grouping`` picks where commits run: ``"loop"`` (default) on the
        event-loop thread once per loop turn, ``"thread"`` on a writer thread.
        ``busy_timeout`` (seconds) defaults per grouping, see
        ``DEFAULT_BUSY_TIMEOUT``. ``dedup_policy`` sizes the dedup tiers
        (``dedup_tiers.TierPolicy``; tests make them small). ``bucket_seconds``
        is the length of a time partition (``partitions``): the writer moves
        to a new partition file when an event of a new bucket arrives. None
        (the default), or a file kept below schema version 8 by ``migrations``:
        it never switches by itself (the single-file layout).
        """
        if grouping not in _COMMITTERS:
            raise ValueError(f"grouping must be 'loop' or 'thread', not {grouping!r}")
        self.path = Path(path)
        self.db_path = self.path / DB_FILENAME
        self.dedup_path = dedup_index.dedup_path(self.path)
        self._dedup_policy = dedup_policy or TierPolicy()
        self._dedup: DedupWorker | None = None
        self._clock = clock
        self._busy_timeout = (
            DEFAULT_BUSY_TIMEOUT[grouping] if busy_timeout is None else busy_timeout
        )
        self._max_pending = max_pending
        self._policy = checkpoint_policy or CheckpointPolicy()
        self._migrations = migrations
        self._grouping = grouping
        self._state = "new"
        self._writer: Committer | None = None
        self._checkpointer: Checkpointer | None = None
        self._wal = WalState()
        self._reader: FollowedConnection | None = None
        self._read_pool: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.schema_migrated_from: int | None = None
        self._pruned = 0
        self._ledger: DeliveryLedger | None = None
        self.bucket_seconds = bucket_seconds
        self._catalog = partitions.Catalog()
        # Sealed partitions with no open work: walks after open work skip them.
        self.settled = partitions.Settled()
        self._reader_view: tuple[sqlite3.Connection, partitions.Catalog] | None = None
        self.partitions_dropped = 0
        self.partitions_compacted = 0
        # Buckets past the delivered cutoff found holding a failed event, no open work.
        self._holding_failed: set[int] = set()

    @property
    def catalog(self) -> partitions.Catalog:
        """The partitions the store reads and the writer commits to (the writer's copy)."""
        writer = self._writer
        return self._catalog if writer is None else writer.catalog

    def reader_catalog(self) -> partitions.Catalog:
        """Read thread, inside ``run_read``: the catalog the read connection has attached."""
        view = self._reader_view
        return self._catalog if view is None else view[1]

    async def reload_catalog(self) -> partitions.Catalog:
        """After a job changed the catalog: the writer reloads it (and re-attaches) first."""
        writer = self._writer
        if writer is None:
            raise StoreUnavailable(f"store is {self._state}", reason="store_closed")
        writer.catalog_stale = True
        await self.submit_write(_nothing)  # the writer reloads before this cycle
        return writer.catalog

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the store was opened on, where its futures resolve."""
        if self._loop is None:
            raise StoreUnavailable(f"store is {self._state}", reason="store_closed")
        return self._loop

    # ---- lifecycle ---------------------------------------------------------

    async def open(self) -> None:
        """Create the directory and files, migrate, recover the dedup tiers, start the threads."""
        if self._state != "new":
            raise StoreError(f"store already {self._state}", reason="store_state")
        self._loop = asyncio.get_running_loop()
        writer_conn, reader, ckpt_conn, dedup = await asyncio.to_thread(self._open_files)
        self._reader = FollowedConnection(self.db_path, reader, self._open_reader)
        self._dedup = dedup
        self._read_pool = ThreadPoolExecutor(1, thread_name_prefix="hookrouter-store-read")
        wal = WalState()
        writer = _COMMITTERS[self._grouping](
            db_path=self.db_path,
            conn=writer_conn,
            loop=self._loop,
            clock=self._clock,
            policy=self._policy,
            wal=wal,
            busy_timeout=self._busy_timeout,
            tiers=dedup.tiers,
            on_rotate=dedup.flush,
            on_connect=self._attach_runs,
            catalog=self._catalog,
            bucket_seconds=self.bucket_seconds,
            settled=self.settled,
        )
        checkpointer = Checkpointer(
            ckpt_conn,
            self._policy,
            wal,
            self._clock,
            self.db_path,
            reopen=lambda: connect(
                self.db_path, role="checkpointer", busy_timeout=self._busy_timeout
            ),
            partition_files=self._partition_paths,
        )
        writer.on_commit = checkpointer.nudge
        self._writer, self._checkpointer, self._wal = writer, checkpointer, wal
        checkpointer.start()
        dedup.start()
        writer.start()
        self._state = "open"

    def _open_files(
        self,
    ) -> tuple[sqlite3.Connection, sqlite3.Connection, sqlite3.Connection, DedupWorker]:
        opened: list[sqlite3.Connection] = []
        try:
            secure_store_dir(self.path)
            writer = connect(
                self.db_path, role="writer", busy_timeout=self._busy_timeout, create=True
            )
            opened.append(writer)
            self.schema_migrated_from, _ = migrate(writer, self._migrations)
            self._load_catalog(writer)
            partition_files.migrate_existing(
                self.path, self._catalog, busy_timeout=self._busy_timeout
            )
            if self.bucket_seconds is not None:
                partition_files.make_at_open(
                    self.path,
                    self._catalog,
                    self.bucket_seconds,
                    self._clock.time(),
                    busy_timeout=self._busy_timeout,
                )
            store_id = dedup_index.ensure_store_id(writer)
            runs_conn = dedup_index.connect_runs(self.dedup_path, self.db_path)
            opened.append(runs_conn)
            tiers = dedup_index.open_tiers(
                runs_conn, store_id, self._dedup_policy, self.path, self._catalog
            )
            self._attach_runs(writer)
            reader = self._open_reader()
            opened.append(reader)
            opened.append(
                connect(self.db_path, role="checkpointer", busy_timeout=self._busy_timeout)
            )
            secure_store_files(self.path)
        except BaseException as exc:
            for conn in opened:
                conn.close()
            if isinstance(exc, sqlite3.Error):
                raise unavailable(exc, f"cannot open {self.db_path}") from exc
            if isinstance(exc, OSError):
                raise StoreUnavailable(f"cannot open {self.db_path}: {exc}") from exc
            raise
        return writer, reader, opened[3], DedupWorker(runs_conn, tiers)

    def _load_catalog(self, writer: sqlite3.Connection) -> None:
        """Finish removals a crash interrupted, read the catalog, say when the layout moved."""
        partition_files.finish_drops(writer, self.path)
        self._catalog = partitions.load(writer)
        if self.bucket_seconds is not None and not partitions.has_catalog(writer):
            # No catalog to record a switch in: the single file goes on taking every event.
            log.warning(
                "store %s: %s is at schema version %d, before the partition catalog"
                " (version %d); bucket is ignored and every event stays in it",
                self.path,
                DB_FILENAME,
                schema_version(writer),
                _CATALOG_VERSION,
            )
            self.bucket_seconds = None
        before = self.schema_migrated_from
        if before and partitions.has_catalog(writer) and before < _CATALOG_VERSION:
            log.warning(
                "store %s: %s was written by the single-file layout (schema version %d);"
                " it is read in place as the oldest time partition, nothing was copied",
                self.path,
                DB_FILENAME,
                before,
            )

    def _partition_paths(self) -> list[Path]:
        """The files of the partitions but events.db, newest first (the checkpointer's)."""
        catalog = self.catalog
        if len(catalog.partitions) == 1:
            return []
        return [
            self.path / p.file for p in catalog.newest_first() if p.file != partitions.LEGACY_FILE
        ]

    def _attach_runs(self, conn: sqlite3.Connection) -> None:
        dedup_index.attach_runs(conn, self.dedup_path)

    def _open_reader(self) -> sqlite3.Connection:
        return connect(
            self.db_path, role="reader", busy_timeout=self._busy_timeout, prepare=self._attach_runs
        )

    async def close(self) -> None:
        """Commit what is pending (its futures resolve), stop the threads, close files."""
        if self._state in ("new", "closed"):
            self._state = "closed"
            return
        if self._state == "closing":
            return
        self._state = "closing"
        assert self._writer is not None and self._checkpointer is not None
        await asyncio.to_thread(self._checkpointer.stop)
        if self._dedup is not None:
            await asyncio.to_thread(self._dedup.stop)
        # The committer drains what is pending (its futures resolve), truncates
        # the WAL and closes its connection.
        await self._writer.aclose()
        if self._read_pool is not None:
            await asyncio.to_thread(self._read_pool.shutdown, True)
        if self._reader is not None:
            self._reader.close()
        self._checkpointer.close()
        self._state = "closed"

    # ---- hot path ----------------------------------------------------------

    def append(self, event: NewEvent) -> asyncio.Future[AppendResult]:
        """Queue ``event`` for the next group commit; the future resolves once it is durable.

        Raises ``StoreUnavailable`` at once when the store is not open and
        ``StoreSaturated`` when ``max_pending`` appends are already waiting.
        """
        return self._admitting_writer().submit(event)

    def append_then(self, event: NewEvent, done: AppendDone) -> None:
        """``append`` with ``done(result, error)`` called right after the commit (no future)."""
        self._admitting_writer().submit_then(event, done)

    def _admitting_writer(self) -> Committer:
        writer = self._writer
        if self._state != "open" or writer is None:
            raise StoreUnavailable(f"store is {self._state}", reason="store_closed")
        if writer.appends - writer.resolved >= self._max_pending:
            raise StoreSaturated(
                f"{self._max_pending} appends are waiting for a commit", retry_after=1.0
            )
        return writer

    # ---- reads -------------------------------------------------------------

    async def run_read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(read_connection)`` on the read thread (for other store-side modules)."""
        if self._state != "open" or self._read_pool is None or self._loop is None:
            raise StoreUnavailable(f"store is {self._state}", reason="store_closed")
        reader = self._reader
        assert reader is not None
        return await self._loop.run_in_executor(self._read_pool, self._translated, fn, reader)

    def _translated(self, fn: Callable[[Any], T], reader: FollowedConnection) -> T:
        """Read thread: let go of removed partitions, run ``fn(conn)``, translate failures."""
        try:
            conn = reader.current()
            catalog = self.catalog
            view = self._reader_view
            if view is None or view[0] is not conn or view[1] is not catalog:
                partition_sql.attach(conn, catalog)
                self._reader_view = (conn, catalog)
            return fn(conn)
        except sqlite3.DatabaseError as exc:  # locked, I/O error, not a database, ...
            raise unavailable(exc, "read failed") from exc
        except DatabaseMoved as exc:
            raise file_error(exc) from exc

    async def get_event(self, event_id: str, *, with_body: bool = False) -> EventRecord | None:
        return await self.run_read(
            lambda c: queries.find_event(c, self.reader_catalog(), event_id, with_body)
        )

    async def find_event(self, source_id: str, provider_event_id: str) -> str | None:
        dedup = self._dedup
        if dedup is None:
            raise StoreUnavailable(f"store is {self._state}", reason="store_closed")
        tiers = dedup.tiers
        return await self.run_read(
            lambda c: dedup_index.find_stored(
                c, tiers, source_id, provider_event_id, self.reader_catalog()
            )
        )

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
        return await self.run_read(
            lambda c: queries.list_across(
                c,
                self.reader_catalog(),
                tenant_id=tenant_id,
                status=status,
                limit=limit,
                before=before,
            )
        )

    async def list_entities(self, kind: EntityKind) -> list[Entity]:
        return await self.run_read(lambda c: queries.list_entities(c, kind))

    # ---- other writes --------------------------------------------------------

    def submit_write(
        self, fn: Callable[[sqlite3.Connection], T], *, synced: bool = True
    ) -> asyncio.Future[T]:
        """Queue ``fn(writer_connection)`` for the writer; the future resolves after its COMMIT.

        For store-side modules (entities, the delivery ledger). Jobs run in
        submission order on the writer thread, all jobs of one writer cycle in
        one transaction, each in its own savepoint: if ``fn`` raises, only its
        own changes are rolled back and the future gets the exception
        (``sqlite3.OperationalError`` arrives as ``StoreUnavailable``). ``fn``
        must be quick: appends wait while it runs. ``synced=False`` lets the
        commit skip its fsync when no other job of the cycle needs one (for
        writes a crash may lose: ``batch.commit_jobs``).
        """
        writer = self._writer
        if self._state != "open" or writer is None:
            raise StoreUnavailable(f"store is {self._state}", reason="store_closed")
        return writer.submit_job(fn, synced=synced)

    async def put_entity(self, entity: Entity) -> None:
        await self.submit_write(queries.put_entity_job(entity))

    async def replace_entity(self, entity: Entity) -> bool:
        return await self.submit_write(queries.replace_entity_job(entity))

    async def delete_entity(self, kind: EntityKind, entity_id: str) -> bool:
        return await self.submit_write(queries.delete_entity_job(kind, entity_id))

    async def ping(self) -> None:
        """Write one small row through the writer, and check events are committing.

        The row proves the thread, lock and disk work; but a disk with a few
        pages left takes it while refusing the events themselves. So a failed
        event commit in the last ``EVENT_FAILURE_MEMORY`` seconds, with none
        committed since, also makes the store unready
        (``check_events_committing``).
        """
        await self.submit_write(queries.ping_job(self._clock.time()))
        writer = self._writer
        if writer is not None:
            check_events_committing(
                writer.events_failed_at, writer.last_error, self._clock.monotonic()
            )

    async def prune(
        self, cutoffs: Cutoffs, *, after: str | None = None, scan_limit: int = 1000
    ) -> PruneResult:
        """One retention batch (``retention``): scan on the reader, delete on the writer.

        The first batch of a pass (``after`` None) first removes whole
        partitions past every cutoff (``drop_expired_partitions``); the
        batches then walk the partitions left, oldest first.
        """
        if scan_limit < 1:
            raise ValueError(f"scan_limit must be at least 1, got {scan_limit}")
        if after is None:
            await self.drop_expired_partitions(cutoffs)
        expired, resume, scanned = await self.run_read(
            lambda c: retention.scan(c, self.reader_catalog(), cutoffs, after, scan_limit)
        )
        deleted = 0
        step = retention.DELETE_LIMIT
        for start in range(0, len(expired), step):
            job = retention.delete_job(cutoffs, expired[start : start + step], lambda: self.catalog)
            count = await self.submit_write(job)
            deleted += count
            self._pruned += count
        return PruneResult(scanned=scanned, deleted=deleted, resume_after=resume)

    async def drop_expired_partitions(self, cutoffs: Cutoffs) -> list[str]:
        """Unlink each partition past the cutoffs of what it holds, with no open work.

        Returns their files. The steps and why a crash between them loses
        nothing: ``partition_files``.
        """
        dropped: list[str] = []
        held = self._holding_failed
        held &= {p.start for p in self.catalog.partitions}
        for partition, keeps_failed in partition_files.expired(self.catalog, cutoffs):
            if keeps_failed and partition.start in held:
                continue  # it waits for the failed cutoff: no file opened each pass
            if await self._busy(partition, keeps_failed):
                if partition.start in self._holding_failed:  # failed events alone keep it
                    await self._compact_or_look_again(partition, cutoffs)
                continue
            mark = partition_files.mark_if_idle(
                partition, keeps_failed=keeps_failed, reload=self._catalog_reload()
            )
            if not await self.submit_write(mark):
                continue
            await self._forget_in_every_connection()
            await asyncio.to_thread(partition_files.remove, self.path, partition)
            await self.submit_write(partial(partitions.forget, start=partition.start))
            dropped.append(partition.file)
            self.partitions_dropped += 1
        return dropped

    async def _compact_or_look_again(
        self, partition: partitions.Partition, cutoffs: Cutoffs
    ) -> None:
        """Compact ``partition``; unless it was done (or not worth it), the next pass tries again.

        A held partition is otherwise skipped until the failed cutoff, so a
        pass cut short (a cancel, an error, a write since the plan) would
        leave its expired rows to the row-by-row delete, and its file at full
        size, until then.
        """
        settled = False
        try:
            planned = await self.run_read(lambda c: compaction.plan(c, partition, cutoffs))
            # No plan: deleting row by row is the cheaper way, which a later pass won't change.
            settled = planned is None or await self._compact(planned)
        finally:
            if not settled:
                self._holding_failed.discard(partition.start)

    async def _compact(self, planned: compaction.Plan) -> bool:
        """Rewrite the planned partition with only what it keeps; whether it was swapped in.

        The steps and why a crash between them loses nothing: ``compaction``.
        """
        partition = planned.partition
        target = replace(partition, file=compaction.compacted_file(partition.file))
        wait = self._busy_timeout
        await asyncio.to_thread(partition_files.remove, self.path, target)  # a leftover
        await asyncio.to_thread(
            partition_files.create_named, self.path, target.file, busy_timeout=wait
        )
        swapped = False
        try:
            copying = asyncio.ensure_future(
                asyncio.to_thread(
                    compaction.copy_kept, self.path, planned, target.file, busy_timeout=wait
                )
            )
            try:
                copy = await asyncio.shield(copying)
            except asyncio.CancelledError:
                await _copy_ended(copying)
                raise
            try:
                swap = compaction.swap_job(self.path, copy, reload=self._catalog_reload())
                swapped = await self.submit_write(swap)
            finally:
                copy.watch.close()
        finally:
            if not swapped:  # changed since the plan or the copy, or it failed
                await asyncio.to_thread(partition_files.remove, self.path, target)
        if not swapped:
            return False
        await self._forget_in_every_connection()
        await asyncio.to_thread(partition_files.remove, self.path, partition)
        self.partitions_compacted += 1
        log.info(
            "store %s: compacted expired partition %s into %s (kept %d of %d events)",
            self.path,
            partition.file,
            target.file,
            len(planned.kept),
            planned.total,
        )
        return True

    def _catalog_reload(self) -> Callable[[sqlite3.Connection], None] | None:
        """What a job that changes the catalog calls to have the writer take it up at once."""
        writer = self._writer
        return None if writer is None else writer.reload_catalog_now

    async def _busy(self, partition: partitions.Partition, keeps_failed: bool) -> bool:
        """Whether ``partition`` has work (or, ``keeps_failed``, a failed event) that keeps it.

        A partition kept by a failed event alone is remembered: only a replay
        could free it before the failed cutoff, and then it waits for that
        cutoff as it did before buckets without failures went early.
        """
        path, wait = self.path / partition.file, self._busy_timeout
        count = partial(partition_files.open_work, path, busy_timeout=wait, fresh=False)
        if not await asyncio.to_thread(partial(count, keeps_failed=keeps_failed)):
            return False
        if keeps_failed and not await asyncio.to_thread(count):
            self._holding_failed.add(partition.start)
        return True

    async def _forget_in_every_connection(self) -> None:
        """After a catalog change: the writer, reader and checkpointer let go of what it dropped."""
        await self.reload_catalog()  # the writer detaches what the catalog no longer lists
        await self.run_read(_nothing)  # the reader detaches before this read

        def checkpoints_done() -> None:
            with self._wal.lock:  # a checkpoint round that saw the old catalog has finished
                return

        await asyncio.to_thread(checkpoints_done)

    async def checkpoint(self, mode: CheckpointMode = "truncate") -> CheckpointResult:
        """Run a checkpoint now from a fresh connection (operators, tests, backups)."""
        if self._state != "open":
            raise StoreUnavailable(f"store is {self._state}", reason="store_closed")

        def run() -> CheckpointResult:
            try:
                conn = connect(self.db_path, role="checkpointer", busy_timeout=self._busy_timeout)
                try:
                    with self._wal.lock:  # not while the checkpointer thread runs one
                        return run_checkpoint(conn, mode)
                finally:
                    conn.close()
            except sqlite3.DatabaseError as exc:
                raise unavailable(exc, "checkpoint failed") from exc

        return await asyncio.to_thread(run)

    # ---- introspection -----------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters for metrics and tests; cheap, safe to call from the loop at any time."""
        w, c = self._writer, self._checkpointer
        if w is None or c is None:
            return {"state": self._state}
        return {
            "state": self._state,
            "grouping": w.design,
            "appends": w.appends,
            "pending_appends": w.pending,
            "commits": w.commits,
            "events_per_commit_last": w.batch_last,
            "events_per_commit_max": w.batch_max,
            "events_per_commit_mean": (
                w.committed_events / w.event_commits if w.event_commits else 0.0
            ),
            "commit_ms_last": w.commit_ms_last,
            "commit_ms_peak": w.commit_ms_peak,
            "duplicates": w.duplicates,
            "failures": w.failures,
            "failed_appends": w.failed_appends,
            "failing": w.failing,
            "last_error": w.last_error,
            "checkpoints": c.checkpoints,
            "checkpoint_ms_last": c.last_ms,
            "checkpoint_ms_peak": c.peak_ms,
            "checkpoint_errors": c.errors,
            "checkpoints_skipped": c.skipped,
            "wal_frames": self._wal.wal_frames,
            "wal_rewinds": w.rewinds,
            "wal_rewind_ms_peak": w.rewind_ms_peak,
            "wal_truncates": c.truncates,
            "pruned_events": self._pruned,
            "partitions": len(self.catalog.partitions),
            "partition_switches": w.switches,
            "partitions_dropped": self.partitions_dropped,
            "partitions_compacted": self.partitions_compacted,
            **_attachment_stats(w.attachments),
            **self.dedup_stats(),
        }

    def counters(self) -> StoreStats | None:
        """``stats()`` typed, for metrics (``stats.typed``)."""
        return typed_stats(self.stats())

    def session_table(self) -> None:
        """None: one process owns a SQLite store, so its console sessions stay in memory."""
        return None

    def delivery_ledger(self) -> DeliveryLedger:
        """The store's one ``SqliteLedger`` (made on first use)."""
        if self._ledger is None:
            self._ledger = SqliteLedger(self)
        return self._ledger

    def removal_hint(self, kind: EntityKind, entity_id: str) -> str:
        """The ``sqlite3`` command that deletes one stored entity (router stopped)."""
        quoted = entity_id.replace("'", "''")
        return (
            f"sqlite3 <store path>/{DB_FILENAME} \"DELETE FROM entities WHERE kind = '{kind}' "
            f"AND id = '{quoted}'\""
        )

    def dedup_settled(self) -> bool:
        """True when the dedup worker has nothing to flush or merge (tests wait for it)."""
        return self._dedup is not None and self._dedup.settled()

    def dedup_stats(self) -> dict[str, Any]:
        """The dedup tiers' sizes and the worker's counters, keys prefixed ``dedup_``."""
        dedup = self._dedup
        if dedup is None:
            return {}
        merged = {**dedup.tiers.stats(), **dedup.stats()}
        return {f"dedup_{name}": value for name, value in merged.items()}

    def __repr__(self) -> str:
        w = self._writer
        detail = "" if w is None else f", commits={w.commits}, pending={w.pending}"
        return f"SqliteStore(path={str(self.path)!r}, state={self._state}{detail})"


def _attachment_stats(attachments: partition_sql.Attachments | None) -> dict[str, int]:
    """The writer's attached partitions (at most SQLite's limit) and how often it changed them."""
    if attachments is None:
        return {}
    return {
        "partitions_attached": len(attachments.names),
        "partition_attaches": attachments.attaches,
        "partition_job_splits": attachments.splits,
    }


async def _copy_ended(copying: asyncio.Future[compaction.Copy]) -> None:
    """Wait out a copy whose caller was cancelled, and close its watch.

    A thread cannot be stopped: were its file removed while it runs, it would
    go on writing one of the same name, left for the next orphan sweep.
    """
    await asyncio.wait({copying})
    if not copying.cancelled() and copying.exception() is None:
        copying.result().watch.close()


def _nothing(conn: sqlite3.Connection) -> None:
    """A job or read that only lets the connection catch up with the catalog first."""


if TYPE_CHECKING:

    def _conforms(store: SqliteStore) -> EventStore:  # mypy checks the protocol here
        return store
