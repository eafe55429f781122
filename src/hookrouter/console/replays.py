"""Bulk replay as a job the page watches: replayed out of total, live.

A click on "Replay" counts what matches (the dry run), starts a job that
replays in batches of the admin API's limit as the session's principal,
and answers with the job's page, whose progress part the page's script
polls. A job stops when a batch comes back short, or once it has replayed
the count it started with: deliveries that die again while it runs cannot
keep it going, so a job always ends.

Jobs live in this process, at most ``MAX_JOBS`` (the oldest finished ones
go first). A job belongs to the site and the tenant (or the operator) that
started it; for anyone else its id answers 404, as an unknown one does.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from hookrouter.clock import Clock

log = logging.getLogger(__name__)

MAX_JOBS = 100
# One batch: the selection (a dict for POST /replay) and its size; answers how many it replayed.
ReplayBatch = Callable[[dict[str, Any], int], Awaitable[int]]
Owner = tuple[str, str | None]  # (site prefix, tenant or None for the operator)


@dataclass(slots=True)
class ReplayJob:
    id: str
    owner: Owner
    selection: dict[str, Any]
    total: int  # the dry run's count when the job started
    started_at: float  # wall seconds
    replayed: int = 0
    batches: int = 0
    state: str = "running"  # running, done or failed
    error: str = ""
    finished_at: float | None = None

    @property
    def running(self) -> bool:
        return self.state == "running"


class ReplayJobs:
    """The replay jobs of one console; ``batch_size`` is the admin API's replay limit."""

    def __init__(self, clock: Clock, *, batch_size: int = 1000, max_jobs: int = MAX_JOBS) -> None:
        self._clock = clock
        self.batch_size = batch_size
        self._max = max_jobs
        self._jobs: OrderedDict[str, ReplayJob] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def start(
        self, owner: Owner, selection: dict[str, Any], total: int, batch: ReplayBatch
    ) -> ReplayJob:
        job = ReplayJob(secrets.token_urlsafe(12), owner, selection, total, self._clock.time())
        self._jobs[job.id] = job
        self._trim()
        task = asyncio.get_running_loop().create_task(self._run(job, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    def get(self, owner: Owner, job_id: str) -> ReplayJob | None:
        job = self._jobs.get(job_id)
        return job if job is not None and job.owner == owner else None

    async def _run(self, job: ReplayJob, batch: ReplayBatch) -> None:
        try:
            while job.replayed < job.total:
                size = min(self.batch_size, job.total - job.replayed)
                done = await batch(job.selection, size)
                job.replayed += done
                job.batches += 1
                if done < size:
                    break
            job.state = "done"
        except asyncio.CancelledError:
            job.state, job.error = "failed", "the router stopped"
            raise
        except Exception as exc:  # shown on the job's page; the log has the trace
            log.exception("replay job %s failed", job.id)
            job.state, job.error = "failed", str(exc) or type(exc).__name__
        finally:
            job.finished_at = self._clock.time()

    def _trim(self) -> None:
        """Drop the oldest finished jobs beyond the cap (running ones stay)."""
        for job_id in [j.id for j in self._jobs.values() if not j.running]:
            if len(self._jobs) <= self._max:
                break
            del self._jobs[job_id]

    async def stop(self) -> None:
        """Cancel the running jobs (the router is stopping)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def __len__(self) -> int:
        return len(self._jobs)


__all__ = ["MAX_JOBS", "ReplayBatch", "ReplayJob", "ReplayJobs"]
