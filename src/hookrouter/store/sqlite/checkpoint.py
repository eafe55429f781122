"""Deliberate WAL checkpoints, so commits never pay for them.

"The writer" below is whichever committer owns the writing connection
(``committer``: on the event loop, or on its own thread).

Why: with SQLite's automatic checkpoint, the COMMIT that pushes the WAL past
1000 pages copies the whole WAL into the database file and fsyncs it before
returning, which showed up as long p99 commit stalls. The
writer connection therefore runs with ``wal_autocheckpoint=0`` and the work
is split three ways:

1. **Copy, off the commit path.** After a commit the writer nudges the
   checkpointer thread (an ``Event.set``: at most one thread wake per
   checkpoint, not per commit). The checkpointer runs ``PASSIVE`` from its
   own connection: it copies committed frames into the database file while
   the writer keeps appending; PASSIVE never takes the write lock and never
   waits. SQLite fsyncs the database file only when a checkpoint copies the
   WAL's last frame, so after a partial copy the checkpointer fdatasyncs it
   itself: otherwise the next full copy -- under load, the writer's rewind
   below -- would flush every page copied since the last one. It then rests
   ``min_interval``, bounding the extra fsyncs per second at full load.
2. **Rewind, on the writer, when it costs little.** PASSIVE alone cannot
   bound the WAL under load: SQLite rewinds the WAL to its start only when a
   write transaction begins while *every* frame is already copied, and the
   writer keeps adding frames. Once the WAL holds ``rewind_frames`` the
   checkpointer copies again at once, round after round, until a round had
   at most ``settle_frames`` to copy (or ``max_rounds`` ran), and then asks
   for a rewind: the writer runs a PASSIVE itself on the frames left (so its
   next commit starts the WAL over) as soon as it finds nothing pending,
   i.e. when nobody waits for it. The rounds are what keeps that stall
   short: what is left for the writer is what was committed during the last,
   small round, not during a whole copying cycle (measured: much shorter
   writer rewinds and a lower ingest p99; docs/performance.md). A lock keeps
   the two threads' checkpoints apart (SQLite would refuse the second); the
   writer never waits for it, it tries again at its next idle moment. Only
   if the WAL reaches ``force_frames`` without such a gap (sustained
   saturation) does the writer do it between two batches anyway, waiting
   for the lock if it must. The WAL file is reused
   in place (fdatasync on a file that does not grow is cheaper than on one
   that does).
3. **Truncate when idle.** After ``idle_after`` seconds without commits the
   checkpointer runs ``TRUNCATE``, which folds the rest in and empties the
   WAL file, so a quiet store keeps everything in ``events.db``.

Against SQLite's automatic checkpoints, these gave shorter commit p99 and
maximum and more appends per second (``tests/store/bench_group_commit.py``;
the figures are in docs/performance.md).

The decisions are in :class:`CheckpointPolicy` (pure: numbers and ``now``
in, decisions out); the threads only execute them. The two threads share
one :class:`WalState`.
"""

from __future__ import annotations

import enum
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from hookrouter.clock import Clock
from hookrouter.store.sqlite.cycle import DatabaseMoved
from hookrouter.store.sqlite.follow import FollowedConnection

CheckpointMode = Literal["passive", "restart", "truncate"]

# The idle TRUNCATE needs the write lock; a commit arriving then waits for it.
_TRUNCATE_BUSY_MS: Final = 100


class CheckpointStep(enum.Enum):
    """What to do after a PASSIVE checkpoint returned."""

    DONE = "done"  # the WAL is small enough; wait for more commits
    AGAIN = "again"  # big WAL, many frames left: copy again before involving the writer
    REWIND = "rewind"  # big WAL, few frames left: ask the writer to finish and rewind it


@dataclass(frozen=True, slots=True)
class CheckpointPolicy:
    """When to copy, rewind and truncate the WAL. Pure: no I/O, no clock.

    ``rewind_frames`` 4096 pages (16 MiB at 4 KiB pages): four times SQLite's
    own automatic threshold of 1000 pages, so rewinds are rare; reads through
    a WAL of that size stay cheap (the WAL index is a hash table). Rarer but
    longer rewind stalls were worse: 16384/65536 raised ingest p99.
    ``force_frames`` 16384 pages (64 MiB, the journal size limit) bounds the
    WAL when the writer never idles. ``settle_frames`` 256 pages (1 MiB): a
    copying round this small is quick enough that what the writer is left
    with (the commits made during it) is a short stall.
    ``idle_after`` 1 s: long enough that a trickle of events does not
    truncate (and regrow) the file at every commit.
    """

    rewind_frames: int = 4096
    force_frames: int = 16384
    settle_frames: int = 256
    max_rounds: int = 4
    idle_after: float = 1.0
    min_interval: float = 0.1  # rest between checkpoint cycles: bounds the extra fsyncs

    def after_passive(self, wal_frames: int, copied: int, rounds: int) -> CheckpointStep:
        """Decide the next step from the WAL's length and the frames this PASSIVE copied."""
        if wal_frames < self.rewind_frames:
            return CheckpointStep.DONE
        if copied > self.settle_frames and rounds < self.max_rounds:
            return CheckpointStep.AGAIN
        return CheckpointStep.REWIND

    def rewind_now(self, requested: bool, writer_idle: bool, wal_frames: int) -> bool:
        """Should the writer rewind before its next batch?"""
        return requested and (writer_idle or self.forced(wal_frames))

    def forced(self, wal_frames: int) -> bool:
        """The WAL is too long to wait for an idle moment: rewind even under load."""
        return wal_frames >= self.force_frames

    def idle_truncate_due(self, now: float, last_commit_at: float, wal_dirty: bool) -> bool:
        """True when the writer has been idle long enough to empty the WAL file."""
        return wal_dirty and now - last_commit_at >= self.idle_after


@dataclass(slots=True)
class WalState:
    """Shared by the checkpointer thread and the writer.

    ``lock`` serialises their checkpoints: SQLite lets only one checkpoint run
    at a time and answers a second one with "busy" without waiting, so
    without it the writer's rewind would keep failing while the checkpointer
    copies. The plain fields are GIL-atomic.
    """

    wal_frames: int = 0  # frames in the WAL at the last PASSIVE that ran
    rewind_requested: bool = False
    # The same for the newest time partition, which takes the appends when a
    # bucket is set: its WAL needs the writer's rewind just as events.db's does.
    partition_frames: int = 0
    partition_rewind_requested: bool = False
    rewound_frames: int = -1  # the WAL's length when the writer last rewound it
    lock: threading.Lock = field(default_factory=threading.Lock)
    commits: int = 0
    dirty: bool = False  # committed since the last TRUNCATE
    last_commit_at: float = 0.0  # clock.monotonic() of the last commit

    def committed(self, now: float) -> None:
        """The committer's note after each successful commit."""
        self.commits += 1
        self.dirty = True
        self.last_commit_at = now


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    """What ``PRAGMA wal_checkpoint`` reported, and how long it took."""

    busy: bool  # a RESTART/TRUNCATE could not finish (readers or another checkpointer)
    wal_frames: int  # -1 when the checkpoint could not run at all
    checkpointed: int
    ms: float

    @property
    def partial(self) -> bool:
        """Some frames copied, not all: SQLite did not sync the database file then."""
        return 0 < self.checkpointed < self.wal_frames


def run_checkpoint(
    conn: sqlite3.Connection, mode: CheckpointMode, schema: str = "main"
) -> CheckpointResult:
    """Run one checkpoint on ``conn`` (any connection to the database)."""
    started = time.perf_counter()
    # A schema always: the writer also has the dedup runs attached, which are not
    # ours to checkpoint, and time partitions, which are checkpointed one by one.
    busy, log, done = conn.execute(f"PRAGMA {schema}.wal_checkpoint({mode.upper()})").fetchone()
    ms = (time.perf_counter() - started) * 1000.0
    return CheckpointResult(bool(busy), int(log), int(done), ms)


# Sealed partitions take only late events and outcomes: their WALs are
# checkpointed every this many rounds (and at idle), the newest every round.
_ALL_PARTITIONS_EVERY = 16


def _has_wal(path: Path) -> bool:
    """Whether the database at ``path`` has frames in its WAL file."""
    try:
        return os.stat(f"{path}-wal").st_size > 0
    except FileNotFoundError:
        return False


def _sync_partial(path: Path, result: CheckpointResult) -> None:
    """fdatasync a partition file after a partial copy, as ``_sync_copied`` does events.db.

    Left unsynced, those pages were flushed by the next full copy: the
    writer's rewind, on the event loop (docs/performance.md, issue 34).
    """
    if not result.partial:
        return
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _wait_for_locks(conn: sqlite3.Connection) -> None:
    # Only TRUNCATE waits for locks; when idle a reader or commit is done within ms.
    conn.execute(f"PRAGMA busy_timeout = {_TRUNCATE_BUSY_MS}")


class Checkpointer:
    """A thread that runs PASSIVE checkpoints when nudged (see module docstring)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        policy: CheckpointPolicy,
        wal: WalState,
        clock: Clock,
        db_path: Path,
        *,
        reopen: Callable[[], sqlite3.Connection],
        partition_files: Callable[[], list[Path]] | None = None,
    ) -> None:
        self._db_path = db_path
        # The time partitions' files but events.db, newest first (``partitions``).
        self._partition_files = partition_files
        self._partition_cycles = 0
        self._open_conn = reopen
        # Synced after each partial PASSIVE (see _sync_copied); None once stopped.
        self._db_fd: int | None = os.open(db_path, os.O_RDONLY | os.O_CLOEXEC)
        self._copied_to = 0  # PASSIVE's last "checkpointed" count
        _wait_for_locks(conn)
        # Used only by this thread until stop(); close() closes it. It follows the
        # file (follow): a restored events.db gets checkpointed too.
        self._conn = FollowedConnection(db_path, conn, self._reopen)
        self._policy = policy
        self._wal = wal
        self._clock = clock
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="hookrouter-store-checkpoint", daemon=True
        )
        self.checkpoints = 0
        self.skipped = 0
        self.rewind_requests = 0
        self.truncates = 0
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
        fd, self._db_fd = self._db_fd, None
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        """Close the connection (after ``stop``)."""
        self._conn.close()

    def _reopen(self) -> sqlite3.Connection:
        """A connection to the file now at the store's path, whose fd is synced from now on."""
        conn = self._open_conn()
        _wait_for_locks(conn)
        self._copied_to = 0
        if self._db_fd is not None:
            os.close(self._db_fd)
        self._db_fd = os.open(self._db_path, os.O_RDONLY | os.O_CLOEXEC)
        return conn

    def _run(self) -> None:
        while True:
            woken = self._wake.wait(self._policy.idle_after if self._wal.dirty else None)
            if self._stopping.is_set():
                return
            self._wake.clear()
            try:
                if woken:
                    self._one_cycle()
                    self._partition_cycles += 1
                    every = self._partition_cycles % _ALL_PARTITIONS_EVERY == 0
                    self._checkpoint_partitions("passive", newest_only=not every)
                else:
                    self._truncate_if_idle()
            except (sqlite3.Error, OSError, DatabaseMoved) as exc:
                # A failing checkpoint (or fdatasync of the database file) only
                # lets the WAL grow: SQLite syncs the file again before it reuses
                # the WAL, and commits report their own errors. Keep the thread
                # alive and try again later.
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
            if woken and self._stopping.wait(self._policy.min_interval):
                return

    def _truncate_if_idle(self) -> None:
        wal = self._wal
        if not self._policy.idle_truncate_due(
            self._clock.monotonic(), wal.last_commit_at, wal.dirty
        ):
            return
        commits = wal.commits
        with wal.lock:
            result = run_checkpoint(self._conn.current(), "truncate")
        if not result.busy and wal.commits == commits:  # nothing committed meanwhile
            wal.dirty = False
            self.truncates += 1
        self._checkpoint_partitions("truncate", newest_only=False)

    def _checkpoint_partitions(self, mode: CheckpointMode, *, newest_only: bool) -> None:
        """Checkpoint the newest partition (busy: it takes the appends), or all of them.

        Each from a connection of its own, closed at once, under the WAL lock:
        a partition being removed is out of the catalog before its removal
        takes the lock (``SqliteStore.drop_expired_partitions``). One without
        a WAL to copy is passed over with a ``stat``: most sealed ones, since
        the last connection to let go of a file folds its WAL in and removes
        it, and a store keeps as many partitions as its retention spans.
        """
        if self._partition_files is None or not self._partition_files():
            return  # the single-file layout: not even the lock
        with self._wal.lock:
            paths = self._partition_files()
            for path in paths[:1] if newest_only else paths:
                if not _has_wal(path):
                    continue
                conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, isolation_level=None)
                try:
                    if mode == "truncate":
                        _wait_for_locks(conn)
                    result = run_checkpoint(conn, mode)
                finally:
                    conn.close()
                _sync_partial(path, result)
                if path == paths[0] and mode == "passive":
                    self._note_newest_partition(result)

    def _note_newest_partition(self, result: CheckpointResult) -> None:
        """Ask the writer to rewind the newest partition's WAL once it is long.

        PASSIVE alone never restarts a WAL that keeps taking commits (see the
        module docstring, step 2); without this the newest partition's WAL
        grew for its whole bucket (docs/performance.md, the soak).
        """
        if result.wal_frames < 0:
            return  # another connection is checkpointing it
        self._wal.partition_frames = result.wal_frames
        if result.wal_frames >= self._policy.rewind_frames:
            self._wal.partition_rewind_requested = True

    def _one_cycle(self) -> None:
        conn = self._conn.current()
        for rounds in range(1, self._policy.max_rounds + 1):
            with self._wal.lock:
                result = run_checkpoint(conn, "passive")
            if result.wal_frames < 0:  # another process is checkpointing this database
                self.skipped += 1
                return
            self.checkpoints += 1
            self._sync_copied(result)
            copied = self._count_copied(result)
            self._wal.wal_frames = result.wal_frames
            self.last_ms = result.ms
            self.peak_ms = max(self.peak_ms, result.ms)
            step = self._policy.after_passive(result.wal_frames, copied, rounds)
            if step is CheckpointStep.DONE:
                return
            if step is CheckpointStep.REWIND:
                # The length of the last rewind: the old WAL, before the commit that restarts it.
                stale = result.wal_frames == self._wal.rewound_frames
                if not stale and not self._wal.rewind_requested:
                    self.rewind_requests += 1
                    self._wal.rewind_requested = True
                return

    def _count_copied(self, result: CheckpointResult) -> int:
        """Frames this PASSIVE copied (SQLite reports the running total)."""
        copied = result.checkpointed - self._copied_to
        self._copied_to = result.checkpointed
        return copied if copied >= 0 else result.checkpointed  # < 0: the WAL started over

    def _sync_copied(self, result: CheckpointResult) -> None:
        """fdatasync the database file after a partial PASSIVE (SQLite syncs only full ones)."""
        if self._db_fd is not None and result.partial:
            os.fdatasync(self._db_fd)

    def __repr__(self) -> str:
        return (
            f"Checkpointer(checkpoints={self.checkpoints}, wal_frames={self._wal.wal_frames}, "
            f"peak_ms={self.peak_ms:.1f})"
        )
