"""What both group-commit designs share: the writer connection, the commit, the results.

A committer owns the one connection that writes. Callers on the event loop
``submit`` events (and ``submit_job`` write jobs); the committer groups them
into cycles and commits each cycle with ``batch.commit_events`` (one
self-committing statement) and ``commit_jobs``. Two ways to schedule that
work share this base:

* ``LoopCommitter`` (``loopcommit``, the default) commits on the
  event-loop thread once per loop turn;
* ``ThreadCommitter`` (``writer``) commits on a dedicated thread.

``store.py`` explains, with measurements, why the loop is the default.

Failure: if a statement fails, SQLite has rolled the whole batch back and
every append of that batch gets its own ``StoreUnavailable``. After errors
that make the connection itself suspect (I/O error, file moved or deleted)
the connection is closed and reopened, without ``create``, before the next
batch, so a deleted database is reported, never silently recreated empty.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hookrouter.clock import Clock
from hookrouter.errors import StoreError
from hookrouter.ids import event_id_time_ms
from hookrouter.store.base import AppendDone, AppendResult, NewEvent
from hookrouter.store.sqlite import partition_files, partition_sql, partitions
from hookrouter.store.sqlite.batch import (
    EventsOutcome,
    WriteJob,
    commit_events,
    commit_jobs,
    last_event_rowid,
    max_batch,
)
from hookrouter.store.sqlite.checkpoint import (
    CheckpointPolicy,
    CheckpointResult,
    WalState,
    run_checkpoint,
)
from hookrouter.store.sqlite.cycle import (
    CallbackWaiter,
    Cycle,
    DatabaseMoved,
    Waiter,
    fail_all,
    file_identity,
    present_identity,
    resolve_with_errors,
)
from hookrouter.store.sqlite.dedup_tiers import DedupTiers
from hookrouter.store.sqlite.errors import RECONNECT_CODES, primary_code, unavailable
from hookrouter.store.sqlite.ledger_sql import event_id_floor
from hookrouter.store.sqlite.partitions import Catalog, Partition, Settled
from hookrouter.store.sqlite.schema import connect

log = logging.getLogger("hookrouter.store")

_NEWEST_ID = "SELECT max(event_id) FROM events"

# The final TRUNCATE at close may wait this long for a reader to finish.
_CLOSE_TRUNCATE_BUSY_MS = 100


class Committer:
    """Connection, commit and bookkeeping shared by the two scheduling designs."""

    design = "abstract"

    def __init__(
        self,
        *,
        db_path: Path,
        conn: sqlite3.Connection,
        loop: asyncio.AbstractEventLoop,
        clock: Clock,
        policy: CheckpointPolicy,
        wal: WalState,
        busy_timeout: float,
        tiers: DedupTiers,
        on_rotate: Callable[[dict[str, str], int], None],
        on_connect: Callable[[sqlite3.Connection], None],
        catalog: Catalog | None = None,
        bucket_seconds: int | None = None,
        settled: Settled | None = None,
    ) -> None:
        self._db_path = db_path
        self._db_file = os.fspath(db_path)  # stat'ed after every commit: no pathlib call
        self._tiers = tiers
        # Called (committer thread) with a full hot tier to write as a run.
        self._on_rotate = on_rotate
        self._on_connect = on_connect  # run again when the connection is reopened
        self._conn: sqlite3.Connection | None = conn
        self._file_id = file_identity(db_path)  # of the file ``conn`` opened
        self._last_rowid: int | None = None  # the newest partition's, read lazily
        self._init_partitions(catalog, bucket_seconds)
        self._settled = settled or Settled()  # a late event makes its partition open again
        self._max_batch = max_batch(conn)
        self._loop = loop
        self._clock = clock
        self._policy = policy
        self._wal = wal
        self._busy_timeout = busy_timeout
        self._events: list[NewEvent] = []
        self._futs: list[Waiter[AppendResult]] = []
        self._jobs: list[WriteJob] = []
        self._job_futs: list[asyncio.Future[Any]] = []
        self._jobs_synced = False  # a queued job asked for an fsync of its commit
        self._stopping = False
        # Called after commits that succeeded, by whichever thread commits (the
        # checkpointer's nudge: an Event.set, cheap when already set).
        self.on_commit: Callable[[], None] | None = None
        # Written on the loop thread only.
        self.appends = 0
        self.resolved = 0
        # Written by whichever thread commits; read anywhere (plain values, GIL-atomic).
        self.commits = 0
        self.event_commits = 0
        self.committed_events = 0
        self.batch_last = 0
        self.batch_max = 0
        self.duplicates = 0
        self.failures = 0
        self.failed_appends = 0
        self.commit_ms_last = 0.0
        self.commit_ms_peak = 0.0
        self.rewinds = 0
        self.rewind_ms_peak = 0.0
        self.failing = False
        self.last_error: str | None = None
        # Monotonic time of the latest failed event commit, None once events
        # commit again. Kept apart from ``failing``: a small job (the readiness
        # ping) can still commit on a disk too full for the events themselves.
        self.events_failed_at: float | None = None
        self.crashed: BaseException | None = None

    def _init_partitions(self, catalog: Catalog | None, bucket_seconds: int | None) -> None:
        """The time-partition state of the writer (``partitions``)."""
        # The partitions the writer commits to (``partitions``); the store reads it.
        self.catalog = catalog or Catalog()
        self._attached: Catalog | None = None  # the catalog ``conn`` has attached
        # Set (any thread) after a job changed the catalog: reloaded before the next cycle.
        self.catalog_stale = False
        self._bucket_seconds = bucket_seconds  # None: never switch by itself
        self._newest_floor = ""  # the smallest event id of the newest partition's bucket
        self._next_floor = ""  # the smallest event id that moves the writer to a new bucket
        # The dedup cover of events inserted into an older partition since the
        # last rotation (see _dedup_cover); None when there were none.
        self._late_cover: int | None = None
        self.switches = 0
        # The next bucket's file, made on a thread once the current bucket is
        # half over, so that the switch itself does not wait for it.
        self._ahead: threading.Thread | None = None
        self._ahead_start = 0
        self._ahead_floor = ""
        self._ahead_next = 0  # 0: nothing to make ahead (events.db is the newest)
        self._batch_newest = ""

    @property
    def attachments(self) -> partition_sql.Attachments | None:
        """The partitions the writer connection has attached (None while it is closed)."""
        conn = self._conn
        return None if conn is None else partition_sql.attachments_of(conn)

    @property
    def pending(self) -> int:
        """Appends whose futures have not resolved yet."""
        return self.appends - self.resolved

    def start(self) -> None:
        """Begin accepting work."""
        raise NotImplementedError

    def submit(self, event: NewEvent) -> asyncio.Future[AppendResult]:
        """Loop thread: queue ``event``; the future resolves after its commit."""
        fut: asyncio.Future[AppendResult] = self._loop.create_future()
        self._enqueue(event, fut)
        return fut

    def submit_then(self, event: NewEvent, done: AppendDone) -> None:
        """Loop thread: queue ``event``; ``done(result, error)`` is called after its commit."""
        self._enqueue(event, CallbackWaiter(done))

    def _enqueue(self, event: NewEvent, waiter: Waiter[AppendResult]) -> None:
        """Loop thread: add one append to the next cycle (the designs differ here)."""
        raise NotImplementedError

    def submit_job(self, job: WriteJob, *, synced: bool = True) -> asyncio.Future[Any]:
        """Loop thread: run ``job(conn)`` in the next job transaction.

        ``synced=False``: the job's commit need not wait for an fsync (see
        ``batch.commit_jobs``); it is on disk after the next synced one.
        """
        raise NotImplementedError

    def _queue_job(self, job: WriteJob, fut: asyncio.Future[Any], synced: bool) -> None:
        """Add one job to the next cycle (the thread design holds its lock around this)."""
        self._jobs.append(job)
        self._job_futs.append(fut)
        self._jobs_synced = self._jobs_synced or synced

    async def aclose(self) -> None:
        """Commit what is pending (its futures resolve), then release the connection."""
        raise NotImplementedError

    # ---- one cycle -----------------------------------------------------------

    def _take_cycle(self) -> Cycle:
        """Up to one statement's worth of events, and every queued job."""
        cycle = self._take_events()
        jobs = self._take_jobs()
        cycle.jobs, cycle.job_futs, cycle.jobs_synced = jobs.jobs, jobs.job_futs, jobs.jobs_synced
        return cycle

    def _take_events(self) -> Cycle:
        """Up to one statement's worth of events, no job."""
        cap = self._max_batch
        events, futs = self._events[:cap], self._futs[:cap]
        del self._events[:cap], self._futs[:cap]
        return Cycle(events, futs, [], [])

    def _take_jobs(self) -> Cycle:
        """Every queued job, no event."""
        cycle = Cycle([], [], self._jobs, self._job_futs)
        cycle.jobs_synced = self._jobs_synced
        self._jobs, self._job_futs, self._jobs_synced = [], [], False
        return cycle

    def _commit(self, cycle: Cycle) -> None:
        """Commit the cycle's events, then its jobs; record outcomes in ``cycle``."""
        if cycle.events:
            started = time.perf_counter()
            try:
                conn = self._prepared_connection()
                if self._bucket_seconds is not None:
                    self._maybe_switch(conn, cycle.events)
                cycle.outcome = outcome = self._commit_events(conn, cycle.events)
            except Exception as exc:  # sqlite3.Error, or a bug: the batch fails whole
                cycle.events_error = exc
                self._count_failure(len(cycle.events), exc)
            else:
                self._last_rowid = outcome.last_rowid
                ms = (time.perf_counter() - started) * 1000.0
                moved = self._file_moved()
                if moved is None:
                    self._count_commit(len(cycle.events), outcome.duplicates, ms)
                    if self._bucket_seconds is not None:
                        self._make_ahead()
                    if self._tiers.rotation_due():
                        cover = self._dedup_cover(outcome.last_rowid)
                        self._on_rotate(self._tiers.rotate(cover), cover)
                else:  # committed, but into a file that is no longer the store: not durable
                    cycle.outcome, cycle.events_error = None, moved
                    self._count_failure(len(cycle.events), moved)
                    self._drop_connection()
        if cycle.jobs:
            try:
                conn = self._prepared_connection()
                cycle.job_results = commit_jobs(conn, cycle.jobs, synced=cycle.jobs_synced)
                # Jobs may insert or delete events: re-read the rowid high-water mark.
                self._last_rowid = last_event_rowid(conn, self.catalog.newest)
                moved = self._file_moved()
                if moved is not None:
                    cycle.job_results = None
                    self._drop_connection()
                    raise moved
            except Exception as exc:
                cycle.jobs_error = exc
                self._count_failure(0, exc)
            else:
                self._count_commit(0, 0, 0.0)

    def _finish(self, cycle: Cycle) -> None:
        """Loop thread: resolve every future of one cycle."""
        self.resolved += len(cycle.futs)
        outcome = cycle.outcome
        if outcome is None:
            fail_all(cycle.futs, cycle.events_error)
        else:  # compiled (cycle): this loop runs once per event
            resolve_with_errors(cycle.futs, outcome)
        if cycle.job_results is None:
            fail_all(cycle.job_futs, cycle.jobs_error)
            return
        for fut, job_result in zip(cycle.job_futs, cycle.job_results, strict=True):
            if fut.done():
                continue
            if job_result.ok:
                fut.set_result(job_result.value)
            else:
                fut.set_exception(job_result.value)

    # ---- the connection --------------------------------------------------------

    def _file_moved(self) -> DatabaseMoved | None:
        """Is the file at ``db_path`` still the one the connection writes to?

        In WAL mode SQLite keeps writing happily into a database file that was
        deleted or replaced (its "has moved" check only runs for rollback
        journals), and those commits would vanish at the next open. One cheap
        stat per commit after COMMIT and before the acknowledgement closes
        that hole for deletions that happened before the check.
        """
        try:
            identity = present_identity(self._db_file)
        except DatabaseMoved as exc:
            return exc
        if identity != self._file_id:
            return DatabaseMoved(f"database file {self._db_path} was replaced while open")
        return None

    def _prepared_connection(self) -> sqlite3.Connection:
        """The writer connection, reopened after a failure."""
        if self._conn is None:
            # mode=rw: if the file was deleted, fail instead of creating an empty store.
            conn = connect(
                self._db_path,
                role="writer",
                busy_timeout=self._busy_timeout,
                prepare=self._on_connect,
            )
            self._conn = conn
            self._file_id = file_identity(self._db_path)
            self._last_rowid = None
            self._attached = None
        conn = self._conn
        self._sync_catalog(conn)
        if self._last_rowid is None:
            self._last_rowid = last_event_rowid(conn, self.catalog.newest)
        return conn

    # ---- time partitions -------------------------------------------------------

    def _sync_catalog(self, conn: sqlite3.Connection) -> None:
        """Reload the catalog a job changed; pin its newest partition (between transactions).

        Older partitions are attached when a statement needs them
        (``partition_sql.Attachments``); the newest stays attached, so an
        event commit never waits for an ATTACH.
        """
        if self._attached is self.catalog and not self.catalog_stale:
            return  # every cycle but the first and those after a switch
        if conn.in_transaction:  # DETACH refuses a file the transaction holds
            conn.execute("ROLLBACK")
        if self.catalog_stale:
            self.catalog_stale = False
            self.catalog = partitions.load(conn)
            self._last_rowid = None
        catalog = self.catalog
        if self._attached is not catalog:
            partition_sql.attach(conn, catalog, (catalog.newest,))
            self._attached = catalog
            newest = catalog.newest.start
            self._newest_floor = event_id_floor(newest) if newest else ""
            if self._bucket_seconds is not None:
                begins = partitions.bucket_start(newest, self._bucket_seconds)
                self._next_floor = event_id_floor(begins + self._bucket_seconds)
                self._ahead_floor = event_id_floor(begins + self._bucket_seconds // 2)
                self._ahead_next = begins + self._bucket_seconds if newest else 0

    def reload_catalog_now(self, conn: sqlite3.Connection) -> None:
        """From a job, between two of its transactions: take up the catalog it changed.

        The jobs after it in the same cycle then use the new catalog, not
        the one the cycle began with (a compaction's swap: ``compaction``).
        """
        self.catalog_stale = True
        self._sync_catalog(conn)

    def _maybe_switch(self, conn: sqlite3.Connection, events: list[NewEvent]) -> None:
        """Move the writer to the bucket of the batch's newest event, if that is a new one.

        The new bucket's file is made (or reused, after a crash) first; the
        switch itself is one transaction on the catalog (``record_switch``),
        so every event committed before it has an id below the new bucket's
        start, and every event id names the partition holding it.
        """
        assert self._bucket_seconds is not None  # the caller checks: no call without a bucket
        newest_id = self._batch_newest = max(e.event_id for e in events)
        if newest_id < self._next_floor:
            return
        start = partitions.bucket_start(event_id_time_ms(newest_id) / 1000, self._bucket_seconds)
        if start <= self.catalog.newest.start:
            return
        # A store written by a version that stayed on its newest partition at
        # the attachment limit holds events of later buckets there: the new
        # bucket begins after every event it holds.
        stored = partition_sql.On(conn, self.catalog.newest).execute(_NEWEST_ID).fetchone()[0]
        if stored is not None and stored >= event_id_floor(start):
            start = partitions.bucket_start(event_id_time_ms(stored) / 1000, self._bucket_seconds)
            start += self._bucket_seconds
            if newest_id < event_id_floor(start):
                self._next_floor = event_id_floor(start)
                return
        store_dir = self._db_path.parent
        self._join_ahead()
        partition_files.remove_orphans(conn, store_dir, start)
        partition_files.create(store_dir, start, busy_timeout=self._busy_timeout)
        conn.execute("BEGIN IMMEDIATE")
        try:
            added = partitions.record_switch(conn, start)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self.catalog = partitions.load(conn)
        self._last_rowid = None
        self._sync_catalog(conn)
        self._last_rowid = last_event_rowid(conn, self.catalog.newest)
        self.switches += 1
        log.info(
            "store %s: the writer moved to time partition %s (bucket start %d)",
            store_dir,
            added.file,
            added.start,
        )

    def _make_ahead(self) -> None:
        """After an event commit: past half of the bucket, make the next one's file on a thread.

        A switch then finds the file made (``create`` reuses it) and costs
        one catalog transaction instead of the file's seven schema steps.
        """
        if self._batch_newest < self._ahead_floor:
            return
        # Only the bucket right after the newest partition's: at most one file
        # waits for a switch.
        start = self._ahead_next
        if start <= self._ahead_start or (self._ahead is not None and self._ahead.is_alive()):
            return
        self._ahead_start = start
        self._ahead = threading.Thread(
            target=self._create_ahead,
            args=(start,),
            name="hookrouter-store-partition-ahead",
            daemon=True,  # a file half made is finished by ``create`` at the switch
        )
        self._ahead.start()

    def _create_ahead(self, start: int) -> None:
        try:
            partition_files.create(self._db_path.parent, start, busy_timeout=self._busy_timeout)
        except (sqlite3.Error, OSError) as exc:  # the switch makes it then, and reports
            log.warning("store %s: making the next partition file failed: %s", self._db_path, exc)

    def _join_ahead(self) -> None:
        ahead = self._ahead
        if ahead is not None:
            ahead.join()

    def _commit_events(self, conn: sqlite3.Connection, events: list[NewEvent]) -> EventsOutcome:
        """Commit ``events`` into the partitions their ids name (the newest, nearly always)."""
        catalog = self.catalog
        newest = catalog.newest
        if len(catalog.partitions) == 1 or min(e.event_id for e in events) >= self._newest_floor:
            return commit_events(conn, events, self._last_rowid or 0, self._tiers, catalog, newest)
        groups: dict[Partition, list[int]] = {}
        for index, event in enumerate(events):
            groups.setdefault(catalog.route(event.event_id), []).append(index)
        results: list[AppendResult | None] = [None] * len(events)
        errors: dict[int, StoreError] = {}
        duplicates = 0
        last_rowid = self._last_rowid or 0
        for partition, indexes in groups.items():
            outcome = self._commit_into(conn, partition, [events[i] for i in indexes])
            if isinstance(outcome, sqlite3.Error):  # that statement changed nothing
                errors.update({i: unavailable(outcome, "append failed") for i in indexes})
                continue
            duplicates += outcome.duplicates
            if partition == newest:
                last_rowid = outcome.last_rowid
            for index, result in zip(indexes, outcome.results, strict=True):
                results[index] = result
            for position, error in (outcome.errors or {}).items():
                errors[indexes[position]] = error
        return EventsOutcome(results, errors or None, duplicates, last_rowid)

    def _commit_into(
        self, conn: sqlite3.Connection, partition: Partition, events: list[NewEvent]
    ) -> EventsOutcome | sqlite3.Error:
        """One partition's share of a batch that spans a bucket boundary."""
        newest = partition == self.catalog.newest
        last = (self._last_rowid or 0) if newest else last_event_rowid(conn, partition)
        if not newest:  # the dedup runs must cover these from before them
            self._settled.discard(partition)
            cover = partition_sql.global_rowid(partition, last)
            self._late_cover = cover if self._late_cover is None else min(self._late_cover, cover)
        try:
            return commit_events(conn, events, last, self._tiers, self.catalog, partition)
        except sqlite3.Error as exc:
            return exc

    def _dedup_cover(self, last_rowid: int) -> int:
        """How far the dedup runs cover the events once the hot tier is flushed (a global rowid)."""
        cover = partition_sql.global_rowid(self.catalog.newest, last_rowid)
        late, self._late_cover = self._late_cover, None
        return cover if late is None else min(cover, late)

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:
                self.last_error = f"{self.last_error} (and closing the connection failed)"

    def _maybe_rewind(self, idle: bool) -> None:
        """Finish a requested WAL rewind when nobody waits, or when the WAL is too big."""
        self._maybe_rewind_events(idle)
        self._maybe_rewind_newest_partition(idle)

    def _maybe_rewind_newest_partition(self, idle: bool) -> None:
        """The same for the newest time partition's WAL (it takes the appends)."""
        wal = self._wal
        attachments = None if self._conn is None else partition_sql.attachments_of(self._conn)
        if attachments is None:
            return
        for name in attachments.pinned:
            rewound = self._rewind(wal.partition_rewind_requested, idle, wal.partition_frames, name)
            if rewound is not None:
                wal.partition_rewind_requested = False

    def _maybe_rewind_events(self, idle: bool) -> None:
        wal = self._wal
        result = self._rewind(wal.rewind_requested, idle, wal.wal_frames, "main")
        if result is None:
            return
        wal.rewind_requested = False
        if result.wal_frames == result.checkpointed:
            wal.rewound_frames = result.wal_frames

    def _rewind(
        self, requested: bool, idle: bool, frames: int, schema: str
    ) -> CheckpointResult | None:
        """The writer's PASSIVE on ``schema`` when the policy says so; None if it did not run."""
        conn = self._conn
        if conn is None or not self._policy.rewind_now(requested, idle, frames):
            return None
        if not self._wal.lock.acquire(blocking=self._policy.forced(frames)):
            return None
        try:
            result = run_checkpoint(conn, "passive", schema=schema)
        except sqlite3.Error:
            return None  # the next commit reports what is wrong; retry after it
        finally:
            self._wal.lock.release()
        if result.wal_frames < 0:
            return None  # another process is checkpointing; retry later
        self.rewind_ms_peak = max(self.rewind_ms_peak, result.ms)
        if result.wal_frames == result.checkpointed:
            self.rewinds += 1  # every frame is copied: the next commit starts the WAL over
        return result

    def _shutdown_connection(self) -> None:
        """Fold the WAL into the database (best effort), then close."""
        self._join_ahead()
        conn = self._conn
        if conn is not None:
            try:
                conn.execute(f"PRAGMA busy_timeout = {_CLOSE_TRUNCATE_BUSY_MS}")
                with self._wal.lock:
                    run_checkpoint(conn, "truncate")
            except sqlite3.Error:
                pass  # the WAL is replayed at the next open; nothing is lost
        self._drop_connection()

    # ---- bookkeeping ---------------------------------------------------------

    def _count_commit(self, events: int, duplicates: int, ms: float) -> None:
        self.commits += 1
        if events:  # job-only commits (entities, ping) say nothing about grouping
            self.event_commits += 1
            self.committed_events += events
            self.batch_last = events
            self.batch_max = max(self.batch_max, events)
            self.duplicates += duplicates
            self.commit_ms_last = ms
            self.commit_ms_peak = max(self.commit_ms_peak, ms)
            self.events_failed_at = None
        self.failing = False
        self._wal.committed(self._clock.monotonic())

    def _count_failure(self, events: int, error: Exception) -> None:
        self.failures += 1
        self.failed_appends += events
        self.failing = True
        self.last_error = f"{type(error).__name__}: {error}"
        if events:
            self.events_failed_at = self._clock.monotonic()
        if isinstance(error, sqlite3.Error) and primary_code(error) in RECONNECT_CODES:
            self._drop_connection()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(commits={self.commits}, pending={self.pending}, "
            f"batch_last={self.batch_last}, failing={self.failing})"
        )
