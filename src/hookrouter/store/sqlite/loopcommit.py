"""Group commit on the event-loop thread, once per loop turn (``grouping="loop"``, default).

The first ``submit`` of a loop turn schedules ``_flush`` with ``call_soon``;
every append made until the loop gets to it (the rest of this turn's
callbacks, and the I/O the loop polls before running ready callbacks again)
joins the same batch. ``_flush`` commits the batch with one statement and
resolves the futures directly: no thread, no lock, no cross-thread hand-off.
The loop is blocked while the statement runs (the b-tree work), but not
while the disk flushes: the events' file commits with ``synchronous =
NORMAL`` and a ``WalSyncer`` thread fdatasyncs its WAL before the batch's
futures resolve (``walsync``). One batch is in flight at a time: appends
made while it syncs wait for the next commit, which is what makes that
batch big: the busier the store, the more each commit carries.

Why this is the default: ``store.py``.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from typing import Any

from hookrouter.errors import StoreError, StoreUnavailable
from hookrouter.store.base import AppendResult, NewEvent
from hookrouter.store.sqlite.batch import EventsOutcome, WriteJob
from hookrouter.store.sqlite.committer import Committer
from hookrouter.store.sqlite.cycle import Cycle, Waiter
from hookrouter.store.sqlite.partition_sql import schema
from hookrouter.store.sqlite.walsync import WalSyncer

log = logging.getLogger(__name__)


class LoopCommitter(Committer):
    """Commits on the event-loop thread (see module docstring)."""

    design = "loop"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._scheduled = False
        self._jobs_turn = False  # the next turn commits the jobs that waited (_take_turn)
        self._syncer: WalSyncer[Cycle] = WalSyncer(self._loop, self._synced)
        self._syncing: asyncio.Future[None] | None = None  # the batch whose WAL is syncing
        self._unsynced_wal: str | None = None  # the WAL the last event commit left unsynced

    def start(self) -> None:
        """Start the WAL syncer; commits run in loop callbacks."""
        self._syncer.start()

    def _enqueue(self, event: NewEvent, waiter: Waiter[AppendResult]) -> None:
        """Queue ``event`` for this loop turn's commit (hot path: two list appends)."""
        if self.crashed is not None:
            raise StoreUnavailable(self.last_error or "store committer crashed")
        self._events.append(event)
        self._futs.append(waiter)
        self.appends += 1
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def submit_job(self, job: WriteJob, *, synced: bool = True) -> asyncio.Future[Any]:
        """Run ``job(conn)`` in this loop turn's job transaction; resolves with its value."""
        if self.crashed is not None:
            raise StoreUnavailable(self.last_error or "store committer crashed")
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._queue_job(job, fut, synced)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)
        return fut

    async def aclose(self) -> None:
        self._stopping = True
        while self._events or self._jobs or self._syncing is not None:
            if self._syncing is not None:
                await self._syncing
            else:
                self._flush()
        self._syncer.stop()
        self._shutdown_connection()

    def _flush(self) -> None:
        """Commit one statement's worth of what is queued; reschedule if more is left."""
        self._scheduled = False
        if self._syncing is not None or (not self._events and not self._jobs):
            return  # a batch is syncing: its hand-back schedules the next commit
        cycle = self._take_turn()
        try:
            self._commit(cycle)
        except Exception as exc:  # a bug: fail the callers, refuse further work
            self._crash(cycle, exc)
            return
        wal, self._unsynced_wal = self._unsynced_wal, None
        if wal is not None and cycle.outcome is not None:
            self._syncing = self._loop.create_future()
            self._syncer.submit(wal, cycle)
        else:
            self._finish(cycle)
            self._after_turn()
        if self.on_commit is not None and not self.failing:
            self.on_commit()

    def _after_turn(self) -> None:
        """Schedule the next commit, or rewind the WAL while nobody waits."""
        if self._events or self._jobs:  # a burst beyond one statement: let others run first
            if not self._scheduled:
                self._scheduled = True
                self._loop.call_soon(self._flush)
        else:
            # Nobody waits right now: the cheapest moment to rewind the WAL.
            self._maybe_rewind(idle=True)

    def _synced(self, cycles: list[Cycle], error: OSError | None) -> None:
        """Loop thread: the WAL of ``cycles`` is on disk (or failed to get there)."""
        syncing, self._syncing = self._syncing, None
        if error is not None:
            self._sync_failed(cycles, error)
        else:
            for cycle in cycles:
                self._finish(cycle)
            self._after_turn()
        if syncing is not None and not syncing.done():
            syncing.set_result(None)

    def _sync_failed(self, cycles: list[Cycle], error: OSError) -> None:
        """After a failed fdatasync the file's state is unknown: fail the batch, stop writing."""
        failure = StoreUnavailable(f"syncing the store's WAL failed: {error}")
        for cycle in cycles:
            self._count_failure(len(cycle.events), error)
            cycle.outcome, cycle.events_error = None, failure
            self._finish(cycle)
        self._crash(Cycle([], [], [], []), error)

    def _commit_events(self, conn: sqlite3.Connection, events: list[NewEvent]) -> EventsOutcome:
        """The batch's commit without its fsync on the newest file; ``walsync`` does that."""
        newest = self.catalog.newest
        name = schema(newest)
        conn.execute(f"PRAGMA {name}.synchronous = NORMAL")
        try:
            outcome = super()._commit_events(conn, events)
        finally:
            if conn.in_transaction:  # the level cannot change inside one
                conn.execute("ROLLBACK")
            conn.execute(f"PRAGMA {name}.synchronous = FULL")
        self._unsynced_wal = f"{self._db_path.parent / newest.file}-wal"
        return outcome

    def _take_turn(self) -> Cycle:
        """This turn's commit: events, or the jobs that waited behind a turn of events.

        Jobs (the ledger's rounds, outcome flushes) get a turn of their own, so
        the events committed before them are acknowledged without waiting for
        the jobs' transaction, and the loop polls its sockets in between.
        """
        if self._events and not self._jobs_turn:
            self._jobs_turn = bool(self._jobs)
            return self._take_events()
        self._jobs_turn = False
        return self._take_jobs() if self._jobs else self._take_events()

    def _crash(self, cycle: Cycle, exc: Exception) -> None:
        self.crashed = exc
        self.last_error = f"store committer crashed: {exc!r}"
        log.error("hookrouter store committer crashed; the store refuses writes", exc_info=exc)
        queued = Cycle(self._events, self._futs, self._jobs, self._job_futs)
        self._events, self._futs, self._jobs, self._job_futs = [], [], [], []
        for failed in (cycle, queued):
            failed.outcome = failed.job_results = None
            failed.events_error = failed.jobs_error = StoreError(self.last_error)
            self._finish(failed)
