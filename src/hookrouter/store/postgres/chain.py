"""The ledger's chain of jobs: each runs on a pooled connection after the one submitted before.

The order is what the ledger promises (``ledger``): a page query observes
every state change and outcome write submitted before it. A job that fails
fails alone: its caller gets the error (``StoreUnavailable`` for a store
failure) and the jobs after it still run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

from hookrouter.errors import StoreError
from hookrouter.store.postgres import errors
from hookrouter.store.postgres.conn import Conn

T = TypeVar("T")
Job = Callable[[Conn], Awaitable[T]]


class JobChain:
    """Runs submitted jobs one after another, in submission order, until drained."""

    def __init__(self, pool: asyncpg.Pool, loop: asyncio.AbstractEventLoop) -> None:
        self._pool = pool
        self._loop = loop
        self.tail: asyncio.Future[None] | None = None  # done when the last job submitted is
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = False

    def submit(self, job: Job[T]) -> asyncio.Future[T]:
        """Queue ``job`` after every job submitted before; its result, or StoreUnavailable."""
        if self.closed:
            raise errors.unavailable(StoreError("store is closed"), "ledger closed")
        previous = self.tail
        turn: asyncio.Future[None] = self._loop.create_future()
        self.tail = turn
        result: asyncio.Future[T] = self._loop.create_future()
        task = self._loop.create_task(self._run(previous, turn, job, result))
        self._tasks.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._tasks.discard)
        return result

    async def _run(
        self,
        previous: asyncio.Future[None] | None,
        turn: asyncio.Future[None],
        job: Job[T],
        result: asyncio.Future[T],
    ) -> None:
        try:
            if previous is not None:
                await previous
            async with self._pool.acquire() as conn:
                value = await job(conn)
        except Exception as exc:
            if not result.done():
                result.set_exception(
                    errors.unavailable(exc, "ledger write failed")
                    if errors.is_store_failure(exc)
                    else exc
                )
        else:
            if not result.done():
                result.set_result(value)
        finally:
            turn.set_result(None)

    async def drain(self) -> None:
        """Wait for every job submitted so far; refuse new ones from then on."""
        tail = self.tail
        if tail is not None:
            await tail
        self.closed = True


__all__ = ["Job", "JobChain"]
