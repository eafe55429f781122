"""Group commit on the event-loop thread, once per loop turn (``grouping="loop"``, default).

The first ``submit`` of a loop turn schedules ``_flush`` with ``call_soon``;
every append made until the loop gets to it (the rest of this turn's
callbacks, and the I/O the loop polls before running ready callbacks again)
joins the same batch. ``_flush`` commits the batch with one statement and
resolves the futures directly: no thread, no lock, no cross-thread hand-off.
The loop is blocked while the statement runs (the b-tree work and the
fsync), which is what makes the next batch big:
the busier the store, the more each commit carries.

Why this is the default: ``store.py``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from hookrouter.errors import StoreError, StoreUnavailable
from hookrouter.store.base import AppendResult, NewEvent
from hookrouter.store.sqlite.batch import WriteJob
from hookrouter.store.sqlite.committer import Committer
from hookrouter.store.sqlite.cycle import Cycle, Waiter

log = logging.getLogger(__name__)


class LoopCommitter(Committer):
    """Commits on the event-loop thread (see module docstring)."""

    design = "loop"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._scheduled = False
        self._jobs_turn = False  # the next turn commits the jobs that waited (_take_turn)

    def start(self) -> None:
        """Nothing to start: work runs in loop callbacks."""

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
        while self._events or self._jobs:
            self._flush()
        self._shutdown_connection()

    def _flush(self) -> None:
        """Commit one statement's worth of what is queued; reschedule if more is left."""
        self._scheduled = False
        if not self._events and not self._jobs:
            return
        cycle = self._take_turn()
        try:
            self._commit(cycle)
            self._finish(cycle)
        except Exception as exc:  # a bug: fail the callers, refuse further work
            self._crash(cycle, exc)
            return
        if self._events or self._jobs:  # a burst beyond one statement: let others run first
            self._scheduled = True
            self._loop.call_soon(self._flush)
        else:
            # Nobody waits right now: the cheapest moment to rewind the WAL.
            self._maybe_rewind(idle=True)
        if self.on_commit is not None and not self.failing:
            self.on_commit()

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
        log.exception("hookrouter store committer crashed; the store refuses writes")
        queued = Cycle(self._events, self._futs, self._jobs, self._job_futs)
        self._events, self._futs, self._jobs, self._job_futs = [], [], [], []
        for failed in (cycle, queued):
            failed.outcome = failed.job_results = None
            failed.events_error = failed.jobs_error = StoreError(self.last_error)
            self._finish(failed)
