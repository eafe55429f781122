"""The group-commit writer: one thread, one connection, one commit per batch.

Theory of operation
-------------------
``submit`` runs on the event-loop thread. It creates the future the caller
awaits, appends the event to the pending list under a lock (uncontended,
~0.1 µs) and, only if the writer thread is parked, wakes it. The writer takes
the *whole* pending list (up to ``max_batch``), commits it with one statement
(``sqlite_batch.commit_events``) and hands every result back to the loop
with a single ``loop.call_soon_threadsafe``. While it commits, new appends
pile up and become the next batch, so the batch size follows the load: one
event per commit when idle, hundreds under a burst, and no timer anywhere.

Thread wakes cost ~18 µs of CPU per side on this machine, so the design pays
at most two per *batch* (loop -> writer only when the writer was parked,
writer -> loop once per batch), never per event.

Write jobs (``submit_job``) are committed by the same thread right after the
events of the same cycle, in their own transaction.

Failure: if the statement fails, SQLite has rolled the whole batch back and
every future of that batch gets its own ``StoreUnavailable``. After errors
that make the connection itself suspect (I/O error, file moved or deleted)
the connection is closed and reopened, without ``create``, before the next
batch, so a deleted database is reported, never silently recreated empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hookrouter.clock import Clock
from hookrouter.errors import StoreError, StoreUnavailable
from hookrouter.store.base import AppendResult, NewEvent
from hookrouter.store.sqlite_batch import (
    WriteJob,
    commit_events,
    commit_jobs,
    last_event_rowid,
    max_batch,
)
from hookrouter.store.sqlite_checkpoint import CheckpointPolicy, WalState, run_checkpoint
from hookrouter.store.sqlite_cycle import (
    Cycle,
    DatabaseMoved,
    fail_all,
    file_identity,
    resolve_with_errors,
)
from hookrouter.store.sqlite_errors import RECONNECT_CODES, primary_code
from hookrouter.store.sqlite_schema import connect

log = logging.getLogger(__name__)

# While idle, a TRUNCATE checkpoint may wait this long for readers; an append
# arriving meanwhile waits behind it, so keep it short (a read takes ~1 ms).
_IDLE_TRUNCATE_BUSY_MS = 100


class GroupCommitWriter:
    """Owns the writer connection and the commit thread (see module docstring)."""

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
    ) -> None:
        self._db_path = db_path
        self._conn: sqlite3.Connection | None = conn
        self._last_rowid: int | None = None  # read lazily on the writer thread
        self._file_id = file_identity(db_path)  # of the file ``conn`` opened
        self._max_batch = max_batch(conn)
        self._loop = loop
        self._clock = clock
        self._policy = policy
        self._busy_timeout = busy_timeout
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._events: list[NewEvent] = []
        self._futs: list[asyncio.Future[AppendResult]] = []
        self._jobs: list[WriteJob] = []
        self._job_futs: list[asyncio.Future[Any]] = []
        self._idle = False
        self._stopping = False
        self._wal = wal
        self._wal_dirty = False
        self._last_commit_at = clock.monotonic()
        self._thread = threading.Thread(target=self._run, name="hookrouter-store-writer")
        # Called on the writer thread after each successful commit (the checkpointer's nudge).
        self.on_commit: Callable[[], None] | None = None
        # Written on the loop thread only.
        self.appends = 0
        self.resolved = 0
        # Written on the writer thread only; read anywhere (plain ints, GIL-atomic).
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
        self.truncates = 0
        self.failing = False
        self.last_error: str | None = None
        self.crashed: BaseException | None = None
        self._current: Cycle | None = None  # the cycle being committed, for the crash path

    # ---- loop thread -------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def submit(self, event: NewEvent) -> asyncio.Future[AppendResult]:
        """Queue ``event`` for the next commit (hot path: one lock, no thread wake if busy)."""
        if self.crashed is not None:
            raise StoreUnavailable(self.last_error or "writer thread crashed")
        fut: asyncio.Future[AppendResult] = self._loop.create_future()
        with self._lock:
            self._events.append(event)
            self._futs.append(fut)
            if self._idle:
                self._idle = False
                self._cond.notify()
        self.appends += 1
        return fut

    def submit_job(self, job: WriteJob) -> asyncio.Future[Any]:
        """Run ``job(conn)`` in the next job transaction; resolves with its return value."""
        if self.crashed is not None:
            raise StoreUnavailable(self.last_error or "writer thread crashed")
        fut: asyncio.Future[Any] = self._loop.create_future()
        with self._lock:
            self._jobs.append(job)
            self._job_futs.append(fut)
            if self._idle:
                self._idle = False
                self._cond.notify()
        return fut

    @property
    def pending(self) -> int:
        """Appends whose futures have not resolved yet."""
        return self.appends - self.resolved

    def stop(self) -> None:
        """Ask the thread to commit what is pending and exit (blocks until it has)."""
        with self._lock:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _finish(self, cycle: Cycle) -> None:
        """Loop thread: resolve every future of one cycle."""
        self.resolved += len(cycle.futs)
        outcome = cycle.outcome
        if outcome is None:
            fail_all(cycle.futs, cycle.events_error)
        elif outcome.errors is None:
            for fut, result in zip(cycle.futs, outcome.results, strict=True):
                if not fut.done():
                    fut.set_result(result)  # type: ignore[arg-type]  # never None without errors
        else:
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

    # ---- writer thread -----------------------------------------------------

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:
            # A bug escaped: never leave callers awaiting forever. Fail what is
            # queued, and make submit() refuse new work from now on.
            self.crashed = exc
            self.last_error = f"writer thread crashed: {exc!r}"
            log.exception("hookrouter store writer thread crashed; the store refuses writes")
            with self._lock:
                queued = Cycle(self._events, self._futs, self._jobs, self._job_futs)
                self._events, self._futs, self._jobs, self._job_futs = [], [], [], []
            for cycle in (self._current, queued):
                if cycle is not None:
                    cycle.outcome = cycle.job_results = None
                    cycle.events_error = cycle.jobs_error = StoreError(self.last_error)
                    self._post(cycle)
        finally:
            self._shutdown_connection()

    def _serve(self) -> None:
        while True:
            self._maybe_rewind()
            cycle = self._take()
            if cycle is None:
                if self._stopping:
                    return
                self._on_idle()
                continue
            self._current = cycle
            self._commit(cycle)
            self._post(cycle)
            self._current = None
            if self.on_commit is not None and not self.failing:
                self.on_commit()

    def _post(self, cycle: Cycle) -> None:
        """One hand-off to the loop per cycle, whatever its size."""
        # RuntimeError: the loop is closed, nobody is left to tell; the commit stands.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._finish, cycle)

    def _take(self) -> Cycle | None:
        """Wait for work; None means stop (``_stopping``) or an idle timeout."""
        with self._lock:
            while not self._events and not self._jobs:
                if self._stopping:
                    return None
                self._idle = True
                timeout = self._policy.idle_after if self._wal_dirty else None
                notified = self._cond.wait(timeout)
                self._idle = False
                if not notified and not self._events and not self._jobs:
                    return None
            cap = self._max_batch
            events, futs = self._events[:cap], self._futs[:cap]
            del self._events[:cap], self._futs[:cap]
            cycle = Cycle(events, futs, self._jobs, self._job_futs)
            self._jobs, self._job_futs = [], []
            return cycle

    def _commit(self, cycle: Cycle) -> None:
        if cycle.events:
            started = time.perf_counter()
            try:
                conn = self._prepared_connection()
                cycle.outcome = outcome = commit_events(conn, cycle.events, self._last_rowid or 0)
            except Exception as exc:  # sqlite3.Error, or a bug: the batch fails whole
                cycle.events_error = exc
                self._count_failure(len(cycle.events), exc)
            else:
                self._last_rowid = outcome.last_rowid
                ms = (time.perf_counter() - started) * 1000.0
                moved = self._file_moved()
                if moved is None:
                    self._count_commit(len(cycle.events), outcome.duplicates, ms)
                else:  # committed, but into a file that is no longer the store: not durable
                    cycle.outcome, cycle.events_error = None, moved
                    self._count_failure(len(cycle.events), moved)
                    self._drop_connection()
        if cycle.jobs:
            try:
                conn = self._prepared_connection()
                cycle.job_results = commit_jobs(conn, cycle.jobs)
                # Jobs may insert or delete events: re-read the rowid high-water mark.
                self._last_rowid = last_event_rowid(conn)
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

    def _file_moved(self) -> DatabaseMoved | None:
        """Is the file at ``db_path`` still the one the connection writes to?

        In WAL mode SQLite keeps writing happily into a database file that was
        deleted or replaced (its "has moved" check only runs for rollback
        journals), and those commits would vanish at the next open. One stat
        per commit (~1 µs) after COMMIT and before the acknowledgement closes
        that hole for deletions that happened before the check.
        """
        try:
            identity = file_identity(self._db_path)
        except OSError as exc:
            return DatabaseMoved(f"database file {self._db_path} is gone: {exc.strerror}")
        if identity != self._file_id:
            return DatabaseMoved(f"database file {self._db_path} was replaced while open")
        return None

    def _prepared_connection(self) -> sqlite3.Connection:
        """The writer connection, reopened after a failure, with a finished checkpoint."""
        if self._conn is None:
            # mode=rw: if the file was deleted, fail instead of creating an empty store.
            self._conn = connect(self._db_path, role="writer", busy_timeout=self._busy_timeout)
            self._file_id = file_identity(self._db_path)
            self._last_rowid = None
        conn = self._conn
        if self._last_rowid is None:
            self._last_rowid = last_event_rowid(conn)
        return conn

    def _maybe_rewind(self) -> None:
        """Finish a requested rewind when nobody waits, or when the WAL is too big."""
        wal = self._wal
        idle = not self._events and not self._jobs  # a racy peek is fine: a hint
        if self._conn is None or not self._policy.rewind_now(
            wal.rewind_requested, idle, wal.wal_frames
        ):
            return
        try:
            with wal.lock:  # waits at most for one PASSIVE of the checkpointer
                result = run_checkpoint(self._conn, "passive")
        except sqlite3.Error:
            return  # the next commit reports what is wrong; retry after it
        if result.wal_frames < 0:
            return  # the checkpointer holds the checkpoint lock right now; retry later
        wal.rewind_requested = False
        self.rewind_ms_peak = max(self.rewind_ms_peak, result.ms)
        if result.wal_frames == result.checkpointed:
            self.rewinds += 1  # every frame is copied: the next commit starts the WAL over

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
        self.failing = False
        self._wal_dirty = True
        self._last_commit_at = self._clock.monotonic()

    def _count_failure(self, events: int, error: Exception) -> None:
        self.failures += 1
        self.failed_appends += events
        self.failing = True
        self.last_error = f"{type(error).__name__}: {error}"
        if isinstance(error, sqlite3.Error) and primary_code(error) in RECONNECT_CODES:
            self._drop_connection()

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:
                self.last_error = f"{self.last_error} (and closing the connection failed)"

    def _on_idle(self) -> None:
        now = self._clock.monotonic()
        if self._policy.idle_truncate_due(now, self._last_commit_at, self._wal_dirty):
            self._wal_dirty = not self.truncate()

    def truncate(self) -> bool:
        """Writer thread only: fold the WAL into the database and empty it; True on success."""
        conn = self._conn
        if conn is None:
            return False
        try:
            conn.execute(f"PRAGMA busy_timeout = {_IDLE_TRUNCATE_BUSY_MS}")
            try:
                with self._wal.lock:
                    result = run_checkpoint(conn, "truncate")
            finally:
                conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        except sqlite3.Error:
            return False
        if result.busy:
            return False
        self.truncates += 1
        return True

    def _shutdown_connection(self) -> None:
        self.truncate()
        self._drop_connection()

    def __repr__(self) -> str:
        return (
            f"GroupCommitWriter(commits={self.commits}, pending={self.pending}, "
            f"batch_last={self.batch_last}, failing={self.failing})"
        )
