"""The retention task: a pass over the store every ``interval_seconds``.

A pass asks the store for batches (``EventStore.prune``) from the oldest
event up to the latest cutoff, computed once per pass from the clock. Between
batches it yields for a moment, so that deleting a large expired backlog
(the first pass after an upgrade, or after retention was shortened) takes a
bounded share of the writer instead of one long stall. A failed batch ends
the pass; the next one starts from the beginning after the interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

from hookrouter.clock import Clock
from hookrouter.errors import StoreError
from hookrouter.store.base import EventStore
from hookrouter.store.retention import RetentionPolicy

log = logging.getLogger(__name__)

# Rows the store scans per batch; each batch is one read plus a few small write jobs.
SCAN_LIMIT: Final = 1000
# Pause between batches (a batch is up to four short delete jobs): while a
# large expired backlog is deleted, ingest keeps most of the writer.
BATCH_PAUSE_SECONDS: Final = 0.01


class Pruner:
    """Runs retention passes until stopped (``start``/``stop``), or one on demand."""

    def __init__(
        self,
        store: EventStore,
        policy: RetentionPolicy,
        clock: Clock,
        *,
        scan_limit: int = SCAN_LIMIT,
        batch_pause: float = BATCH_PAUSE_SECONDS,
    ) -> None:
        self._store = store
        self.policy = policy
        self._clock = clock
        self._scan_limit = scan_limit
        self._batch_pause = batch_pause
        self._task: asyncio.Task[None] | None = None
        self.passes = 0
        self.deleted = 0
        self.failures = 0
        self.last_pass_deleted = 0
        self.last_error: str | None = None

    async def run_pass(self) -> int:
        """One pass from the oldest event to the cutoff; returns the events deleted.

        Raises ``StoreError`` when a batch fails (what it deleted so far stays deleted).
        """
        cutoffs = self.policy.cutoffs(self._clock.time())
        if cutoffs.scan_before is None:
            return 0
        deleted = 0
        after: str | None = None
        while True:
            result = await self._store.prune(cutoffs, after=after, scan_limit=self._scan_limit)
            deleted += result.deleted
            self.deleted += result.deleted
            if result.resume_after is None:
                break
            after = result.resume_after
            await asyncio.sleep(self._batch_pause)
        self.passes += 1
        self.last_pass_deleted = deleted
        return deleted

    def start(self) -> None:
        """Run passes in the background: the first one now, then every interval."""
        if self._task is None and not self.policy.keeps_everything:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            try:
                deleted = await self.run_pass()
            except StoreError as exc:
                self.failures += 1
                self.last_error = exc.message
                # At most one line per interval: passes are that far apart.
                log.warning(
                    "retention pass failed (next try in %.0f s): %s",
                    self.policy.interval_seconds,
                    exc.message,
                )
            else:
                if deleted:
                    log.info("retention: deleted %d finished events", deleted)
            await asyncio.sleep(self.policy.interval_seconds)

    def stats(self) -> dict[str, Any]:
        return {
            "passes": self.passes,
            "deleted": self.deleted,
            "last_pass_deleted": self.last_pass_deleted,
            "failures": self.failures,
            "last_error": self.last_error,
        }

    def __repr__(self) -> str:
        return f"Pruner(passes={self.passes}, deleted={self.deleted}, failures={self.failures})"


__all__ = ["Pruner"]
