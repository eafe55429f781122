"""Deliberate WAL checkpoints, so commits never pay for them.

Why: with SQLite's automatic checkpoint, the COMMIT that pushes the WAL past
1000 pages copies the whole WAL into the database file and fsyncs it before
returning; on this machine that showed up as ~20 ms p99 commit stalls. The
writer connection therefore runs with ``wal_autocheckpoint=0`` and the work
is split three ways:

1. **Bulk copy, off the commit path.** After a commit the writer nudges the
   checkpointer thread (an ``Event.set``, at most one thread wake per
   checkpoint, not per commit). The checkpointer runs ``PASSIVE`` from its
   own connection: it copies committed frames into the database file while
   the writer keeps appending to the WAL; PASSIVE never takes the write lock
   and never waits. It then rests ``min_interval`` so at full load it costs a
   bounded number of extra fsyncs per second.
2. **Restart, on the writer, cheaply.** PASSIVE alone cannot bound the WAL
   under sustained load: SQLite rewinds the WAL to its start only when a
   write transaction begins while *every* frame is already copied, and the
   writer keeps adding frames. Once the WAL exceeds ``restart_frames`` the
   checkpointer repeats PASSIVE until only a few frames remain and then asks
   the writer to finish: before its next batch the writer runs PASSIVE on
   the few remaining frames (one small copy + fsync, ~1 ms instead of ~20),
   and its next transaction starts the WAL over. The WAL file therefore stays
   near ``restart_frames`` pages and is reused in place (fdatasync on a file
   that does not grow is cheaper than on one that does).
3. **Truncate when idle.** After ``idle_after`` seconds without commits the
   writer runs ``TRUNCATE``, which folds the rest in and empties the WAL
   file, so a quiet store holds everything in ``events.db``.

The decisions are in :class:`CheckpointPolicy` (pure, takes numbers and
``now``); the threads only execute them.
"""

from __future__ import annotations

import enum
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

CheckpointMode = Literal["passive", "restart", "truncate"]


class CheckpointStep(enum.Enum):
    """What to do after a PASSIVE checkpoint returned."""

    DONE = "done"  # the WAL is small enough; wait for more commits
    AGAIN = "again"  # big WAL, many frames left: copy again before involving the writer
    RESTART = "restart"  # big WAL, few frames left: let the writer finish and rewind it


@dataclass(frozen=True, slots=True)
class CheckpointPolicy:
    """When to copy, rewind and truncate the WAL. Pure: no I/O, no clock.

    ``restart_frames`` 2048 pages (8 MiB at 4 KiB pages): twice SQLite's own
    automatic threshold of 1000 pages, so rewinds are rare, and small enough
    that reading through the WAL index stays cheap. ``settle_frames`` 256
    pages (1 MiB): what the writer may have to copy itself, about one fsync'd
    megabyte (~1 ms here). ``idle_after`` 1 s: long enough that a steady
    trickle of events does not truncate (and regrow) the file every commit.
    """

    restart_frames: int = 2048
    settle_frames: int = 256
    max_rounds: int = 4
    idle_after: float = 1.0
    min_interval: float = 0.1  # rest between PASSIVE runs: at most ~10 extra fsyncs/s

    def after_passive(self, wal_frames: int, checkpointed: int, rounds: int) -> CheckpointStep:
        """Decide the next step from PASSIVE's (log, checkpointed) frame counts."""
        if wal_frames < self.restart_frames:
            return CheckpointStep.DONE
        if wal_frames - checkpointed > self.settle_frames and rounds < self.max_rounds:
            return CheckpointStep.AGAIN
        return CheckpointStep.RESTART

    def idle_truncate_due(self, now: float, last_commit_at: float, wal_dirty: bool) -> bool:
        """True when the writer has been idle long enough to empty the WAL file."""
        return wal_dirty and now - last_commit_at >= self.idle_after


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    """What ``PRAGMA wal_checkpoint`` reported, and how long it took."""

    busy: bool  # a RESTART/TRUNCATE could not finish (readers or another checkpointer)
    wal_frames: int
    checkpointed: int
    ms: float


def run_checkpoint(conn: sqlite3.Connection, mode: CheckpointMode) -> CheckpointResult:
    """Run one checkpoint on ``conn`` (any connection to the database)."""
    started = time.perf_counter()
    busy, log, done = conn.execute(f"PRAGMA wal_checkpoint({mode.upper()})").fetchone()
    ms = (time.perf_counter() - started) * 1000.0
    return CheckpointResult(bool(busy), int(log), int(done), ms)


class Checkpointer:
    """A thread that runs PASSIVE checkpoints when nudged (see module docstring)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        policy: CheckpointPolicy,
        request_restart: Callable[[], None],
    ) -> None:
        self.conn = conn  # used only by this thread until stop(); the store closes it
        self._policy = policy
        self._request_restart = request_restart
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="hookrouter-store-checkpoint", daemon=True
        )
        self.checkpoints = 0
        self.restart_requests = 0
        self.wal_frames = 0
        self.last_ms = 0.0
        self.peak_ms = 0.0
        self.errors = 0
        self.last_error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def nudge(self) -> None:
        """Called by the writer after a commit; cheap when already nudged."""
        if not self._wake.is_set():
            self._wake.set()

    def stop(self) -> None:
        """Stop the thread (waits for a running checkpoint to finish)."""
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            if self._stopping.is_set():
                return
            self._wake.clear()
            try:
                self._one_cycle()
            except sqlite3.Error as exc:
                # A failing checkpoint only lets the WAL grow; commits report
                # their own errors. Keep the thread alive and try again later.
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
            if self._stopping.wait(self._policy.min_interval):
                return

    def _one_cycle(self) -> None:
        for rounds in range(1, self._policy.max_rounds + 1):
            result = run_checkpoint(self.conn, "passive")
            self.checkpoints += 1
            self.wal_frames = result.wal_frames
            self.last_ms = result.ms
            self.peak_ms = max(self.peak_ms, result.ms)
            step = self._policy.after_passive(result.wal_frames, result.checkpointed, rounds)
            if step is CheckpointStep.DONE:
                return
            if step is CheckpointStep.RESTART:
                self.restart_requests += 1
                self._request_restart()
                return

    def __repr__(self) -> str:
        return (
            f"Checkpointer(checkpoints={self.checkpoints}, wal_frames={self.wal_frames}, "
            f"peak_ms={self.peak_ms:.1f})"
        )
