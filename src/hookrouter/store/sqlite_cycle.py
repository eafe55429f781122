"""What one writer cycle carries, and how its futures are resolved on the loop.

A ``Cycle`` is built by the writer thread from the pending lists, filled in
with the outcome of its commits, and handed to the loop thread in one
``call_soon_threadsafe``. Errors are created per future (an exception object
carries a traceback, so one instance must not be raised in many tasks).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Any

from hookrouter.errors import StoreError, StoreUnavailable
from hookrouter.store.base import AppendResult, NewEvent
from hookrouter.store.sqlite_batch import EventsOutcome, JobResult, WriteJob
from hookrouter.store.sqlite_errors import unavailable


class Cycle:
    """One writer cycle: what it took, and (filled in by the writer) how it went."""

    __slots__ = (
        "events",
        "events_error",
        "futs",
        "job_futs",
        "job_results",
        "jobs",
        "jobs_error",
        "outcome",
    )

    def __init__(
        self,
        events: list[NewEvent],
        futs: list[asyncio.Future[AppendResult]],
        jobs: list[WriteJob],
        job_futs: list[asyncio.Future[Any]],
    ) -> None:
        self.events = events
        self.futs = futs
        self.jobs = jobs
        self.job_futs = job_futs
        self.outcome: EventsOutcome | None = None
        self.events_error: Exception | None = None
        self.job_results: list[JobResult] | None = None
        self.jobs_error: Exception | None = None


class DatabaseMoved(Exception):
    """The database file was deleted or replaced under an open connection."""


def file_identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def fail_all(futs: list[asyncio.Future[Any]], error: Exception | None) -> None:
    for fut in futs:
        if not fut.done():
            fut.set_exception(batch_error(error))


def batch_error(error: Exception | None) -> StoreError:
    """A fresh error per future: exceptions carry tracebacks, so they are not shared."""
    exc: StoreError
    if isinstance(error, sqlite3.Error):
        exc = unavailable(error)
    elif isinstance(error, DatabaseMoved | OSError):
        exc = StoreUnavailable(str(error), retry_after=30.0, reason="store_io_error")
    elif isinstance(error, StoreError):
        exc = StoreUnavailable(error.message)
    else:
        exc = StoreError(f"batch could not be written: {error!r}")
    exc.__cause__ = error
    return exc


def resolve_with_errors(futs: list[asyncio.Future[AppendResult]], outcome: EventsOutcome) -> None:
    errors = outcome.errors or {}
    for index, (fut, result) in enumerate(zip(futs, outcome.results, strict=True)):
        if fut.done():
            continue
        if result is None:
            fut.set_exception(errors[index])
        else:
            fut.set_result(result)
