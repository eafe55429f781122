"""The loop's commits made durable on a thread: ``fdatasync`` of the WAL, then the hand-back.

The loop design (``loopcommit``) commits a batch of events with
``synchronous = NORMAL`` on the file that takes them: SQLite writes the WAL
frames and returns without syncing. The batch is handed to ``WalSyncer``,
whose thread calls ``fdatasync`` on that WAL file (which covers every frame
written before the call) and hands the batch back to the loop, which only
then resolves the batch's futures. An acknowledged event is on disk as it
was with ``FULL``; the difference is that the loop reads and parses requests
while the disk flushes, instead of sleeping inside the commit (what the
flush cost the loop per commit: docs/performance.md, "The commit's fsync
off the loop").

Why not let SQLite do it on a thread (``grouping = "thread"``): there the
whole commit, b-tree work included, runs on the other thread and competes
with the loop for the GIL and for one of two cores; an ``fdatasync`` holds
neither, it waits for the device.

Checkpoints stay safe without help: SQLite syncs the WAL before it copies
frames into the database and syncs the database before the WAL starts
over, at every synchronous level.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger("hookrouter.store")

T = TypeVar("T")


class WalSyncer(Generic[T]):
    """One thread that fdatasyncs WAL files and hands each submitted item back to the loop.

    ``done(items, error)`` runs on the loop with the items of one sync, in
    submission order; ``error`` is the ``OSError`` of a failed sync (those
    items are then not durable).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        done: Callable[[list[T], OSError | None], None],
    ) -> None:
        self._loop = loop
        self._done = done
        self._cond = threading.Condition()
        self._queue: list[tuple[str, T]] = []
        self._stopping = False
        self._fds: dict[str, int] = {}  # WAL path -> descriptor (the thread's own)
        self._thread = threading.Thread(
            target=self._run, name="hookrouter-store-walsync", daemon=True
        )
        self.syncs = 0  # fdatasync passes done (any thread reads)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def submit(self, wal_path: str, item: T) -> None:
        """Loop thread: sync ``wal_path``, then give ``item`` back through ``done``."""
        with self._cond:
            self._queue.append((wal_path, item))
            self._cond.notify()

    def stop(self) -> None:
        """Sync what was submitted, hand it back, end the thread (blocks until it has)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        try:
            while (batch := self._next()) is not None:
                error = self._sync({path for path, _ in batch})
                self.syncs += 1
                items = [item for _, item in batch]
                try:
                    self._loop.call_soon_threadsafe(self._done, items, error)
                except RuntimeError:  # the loop is closed: nobody waits any more
                    return
        finally:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def _next(self) -> list[tuple[str, T]] | None:
        """Everything submitted since the last pass; None once stopping with nothing left."""
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            batch, self._queue = self._queue, []
        return batch or None

    def _sync(self, paths: set[str]) -> OSError | None:
        """fdatasync each WAL; descriptors of WALs no longer written to are closed."""
        for stale in [p for p in self._fds if p not in paths]:
            os.close(self._fds.pop(stale))
        try:
            for path in sorted(paths):
                os.fdatasync(self._descriptor(path))
        except OSError as exc:
            log.error("store: syncing %s failed: %s", ", ".join(sorted(paths)), exc)
            return exc
        return None

    def _descriptor(self, path: str) -> int:
        """A descriptor of the file now at ``path``.

        SQLite deletes a WAL when its last connection closes it (the writer's
        reconnect after an error) and makes a new one at the next write:
        syncing the old inode would leave the new frames unsynced.
        """
        fd = self._fds.get(path)
        if fd is not None and os.fstat(fd).st_ino == os.stat(path).st_ino:
            return fd
        if fd is not None:
            os.close(self._fds.pop(path))
        fd = self._fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        return fd


__all__ = ["WalSyncer"]
