"""What one writer cycle carries, and how its waiters are resolved on the loop.

A ``Cycle`` is built by the writer thread from the pending lists, filled in
with the outcome of its commits, and handed to the loop thread in one
``call_soon_threadsafe``. Errors are created per waiter (an exception object
carries a traceback, so one instance must not be raised in many tasks).

A waiter is an ``asyncio.Future`` (``append``) or a ``CallbackWaiter``
(``append_then``), which calls its callback as it is resolved.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from hookrouter.errors import StoreError, StoreUnavailable
from hookrouter.store.base import AppendDone, AppendResult, NewEvent
from hookrouter.store.sqlite.batch import EventsOutcome, JobResult, WriteJob
from hookrouter.store.sqlite.errors import unavailable

log = logging.getLogger(__name__)

T_contra = TypeVar("T_contra", contravariant=True)


class Waiter(Protocol[T_contra]):
    """What a cycle resolves: the part of ``asyncio.Future`` it uses."""

    def done(self) -> bool: ...

    def set_result(self, result: T_contra, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


class CallbackWaiter:
    """Resolves one append by calling ``done(result, error)`` at once (``append_then``).

    Why not a future: asyncio runs a future's callbacks on a later pass of the
    loop, and uvloop runs the I/O callbacks of the next poll (every request
    read meanwhile) before that pass, so each answer waited a loop turn after
    its own commit; answering from the commit raised throughput and cut CPU
    and latency per request (docs/performance.md).
    """

    __slots__ = ("_callback", "_done")

    def __init__(self, callback: AppendDone) -> None:
        self._callback = callback
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, result: AppendResult, /) -> None:
        self._resolve(result, None)

    def set_exception(self, exception: BaseException, /) -> None:
        self._resolve(None, exception)

    def _resolve(self, result: AppendResult | None, error: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        try:
            self._callback(result, error)
        except Exception:  # a caller's bug must not stop the other callers' answers
            log.exception("append callback failed")


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
        "jobs_synced",
        "outcome",
    )

    def __init__(
        self,
        events: list[NewEvent],
        futs: list[Waiter[AppendResult]],
        jobs: list[WriteJob],
        job_futs: list[asyncio.Future[Any]],
    ) -> None:
        self.events = events
        self.futs = futs
        self.jobs = jobs
        self.job_futs = job_futs
        # False when every job of the cycle was submitted with ``synced=False``.
        self.jobs_synced = True
        self.outcome: EventsOutcome | None = None
        self.events_error: Exception | None = None
        self.job_results: list[JobResult] | None = None
        self.jobs_error: Exception | None = None


class DatabaseMoved(Exception):
    """The database file was deleted or replaced under an open connection."""


def file_identity(path: str | Path) -> tuple[int, int]:
    """(device, inode) of the file at ``path`` (a str path skips pathlib's ``__fspath__``)."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def present_identity(path: str | Path) -> tuple[int, int]:
    """``file_identity`` of the database file; ``DatabaseMoved`` when it is gone."""
    try:
        return file_identity(path)
    except OSError as exc:
        raise DatabaseMoved(f"database file {path} is gone: {exc.strerror}") from exc


def file_error(error: DatabaseMoved | OSError) -> StoreUnavailable:
    """The database file is gone, replaced or unreadable: retry after an operator acted."""
    return StoreUnavailable(str(error), retry_after=30.0, reason="store_io_error")


def fail_all(futs: Sequence[Waiter[Any]], error: Exception | None) -> None:
    for fut in futs:
        if not fut.done():
            fut.set_exception(batch_error(error))


def batch_error(error: Exception | None) -> StoreError:
    """A fresh error per future: exceptions carry tracebacks, so they are not shared."""
    exc: StoreError
    if isinstance(error, sqlite3.Error):
        exc = unavailable(error)
    elif isinstance(error, DatabaseMoved | OSError):
        exc = file_error(error)
    elif isinstance(error, StoreError):
        exc = StoreUnavailable(error.message)
    else:
        exc = StoreError(f"batch could not be written: {error!r}")
    exc.__cause__ = error
    return exc


def resolve_with_errors(futs: list[Waiter[AppendResult]], outcome: EventsOutcome) -> None:
    """Resolve each append of a committed batch with its result, or its own error."""
    errors = outcome.errors or {}
    for index, (fut, result) in enumerate(zip(futs, outcome.results, strict=True)):
        if isinstance(fut, CallbackWaiter):
            # Ingest's appends (append_then): narrowed, one compiled call, not
            # two method lookups by name per event (_resolve ignores a repeat).
            fut._resolve(result, errors[index] if result is None else None)
            continue
        if fut.done():
            continue
        if result is None:
            fut.set_exception(errors[index])
        else:
            fut.set_result(result)
