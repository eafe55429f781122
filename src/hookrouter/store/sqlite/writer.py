"""Group commit on a dedicated writer thread (``grouping="thread"``).

``submit`` runs on the event-loop thread. It creates the future the caller
awaits, appends the event to the pending list under a lock (uncontended,
cheap) and, only if the writer thread is parked, wakes it. The thread takes
the whole pending list (up to one statement's worth), commits it, and hands
every result back to the loop with a single ``loop.call_soon_threadsafe``.
While it commits, new appends pile up and become the next batch, so the
batch size follows the load with no timer anywhere. Thread wakes are
costly, so the design pays at most two per *batch*, never per event.

The appeal: SQLite's b-tree work and the fsync run without the GIL on the
other core, and a slow disk never stalls the event loop. The catch
(``store.py``): the thread must win the GIL back from a busy loop after
each statement, and pipelining halves the batches; on a small host that
cost more than it saved, so this design is the alternative, not the default.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

from hookrouter.errors import StoreError, StoreUnavailable
from hookrouter.store.base import AppendResult, NewEvent
from hookrouter.store.sqlite.batch import WriteJob
from hookrouter.store.sqlite.committer import Committer
from hookrouter.store.sqlite.cycle import Cycle, Waiter

log = logging.getLogger(__name__)


class ThreadCommitter(Committer):
    """Commits on its own thread (see module docstring)."""

    design = "thread"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._idle = False
        self._current: Cycle | None = None  # the cycle being committed, for the crash path
        # daemon: a program that forgets close() must still exit; what was acked is committed.
        self._thread = threading.Thread(
            target=self._run, name="hookrouter-store-writer", daemon=True
        )

    # ---- loop thread -------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def _enqueue(self, event: NewEvent, waiter: Waiter[AppendResult]) -> None:
        """Queue ``event`` for the next commit (hot path: one lock, no thread wake if busy)."""
        if self.crashed is not None:
            raise StoreUnavailable(self.last_error or "writer thread crashed")
        with self._lock:
            self._events.append(event)
            self._futs.append(waiter)
            if self._idle:
                self._idle = False
                self._cond.notify()
        self.appends += 1

    def submit_job(self, job: WriteJob, *, synced: bool = True) -> asyncio.Future[Any]:
        """Run ``job(conn)`` in the next job transaction; resolves with its return value."""
        if self.crashed is not None:
            raise StoreUnavailable(self.last_error or "writer thread crashed")
        fut: asyncio.Future[Any] = self._loop.create_future()
        with self._lock:
            self._queue_job(job, fut, synced)
            if self._idle:
                self._idle = False
                self._cond.notify()
        return fut

    async def aclose(self) -> None:
        await asyncio.to_thread(self.stop)

    def stop(self) -> None:
        """Ask the thread to commit what is pending and exit (blocks until it has)."""
        with self._lock:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()

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
            self._maybe_rewind(idle=not self._events and not self._jobs)  # racy peek: a hint
            cycle = self._take()
            if cycle is None:
                return
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
        """Wait for work; None means: stop, nothing is left."""
        with self._lock:
            while not self._events and not self._jobs:
                if self._stopping:
                    return None
                self._idle = True
                self._cond.wait()
                self._idle = False
            return self._take_cycle()
