"""Group commit on PostgreSQL: one statement per loop turn of appends, answered after COMMIT.

The first ``submit`` of a loop turn schedules ``_start`` for the end of the
turn; it takes every append queued by then as one batch and commits it on a
pooled connection. One batch is in flight at a time: appends arriving
meanwhile form the next batch, which starts as soon as the first returns (so
batches grow with the load, and a node's events commit in the order of their
ids, which the delivery engine pages by).

A batch is **one statement** in autocommit (``INSERT_BATCH``): the dedup keys
go into ``event_keys`` with ``ON CONFLICT DO NOTHING``, then the events whose
key went in (or that have none), then their delivery rows, all in one
implicit transaction whose commit (``synchronous_commit`` on: flushed, and on
the synchronous standby if there is one) returns before any future resolves.
In cluster mode the same statement notifies (``pg_notify``, delivered at
commit, only if something was inserted) the batch's lanes with new pending
deliveries (``notices``), so that the nodes owning them page those in
(``cluster``). The router writes the payload from the rows it sends: a
duplicate that lost names its lane needlessly (a page that finds nothing),
which costs less than having the database aggregate every batch.

A key that lost, to an earlier batch or another node, is answered with the
stored event id (a second read, only when there are losers). Keys go in in
sorted order, so two batches racing for the same keys wait on each other in
the same order and cannot deadlock.

Within a batch the first append of a key wins and later ones point at it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Final

import asyncpg
import orjson

from hookrouter.errors import StoreUnavailable
from hookrouter.store.base import AppendDone, AppendResult, NewEvent
from hookrouter.store.postgres import errors, notices
from hookrouter.store.postgres.partitioning import PartitionMap, day_of

log = logging.getLogger(__name__)

INSERT_BATCH: Final = """
WITH keys AS (
    INSERT INTO event_keys (source_id, provider_event_id, event_id)
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
    ON CONFLICT DO NOTHING
    RETURNING event_id
), ev AS (
    INSERT INTO events (event_id, partition, tenant_id, source_id, provider_event_id,
                        event_type, received_at, status, headers, body, fanout)
    SELECT e.event_id, e.partition, e.tenant_id, e.source_id, e.provider_event_id,
           e.event_type, e.received_at, e.status, e.headers::jsonb, e.body, e.fanout
    FROM unnest($4::text[], $5::int2[], $6::text[], $7::text[], $8::text[], $9::text[],
                $10::float8[], $11::text[], $12::text[], $13::bytea[], $14::int2[])
         AS e(event_id, partition, tenant_id, source_id, provider_event_id,
              event_type, received_at, status, headers, body, fanout)
    WHERE e.provider_event_id IS NULL OR e.event_id IN (SELECT event_id FROM keys)
    ON CONFLICT DO NOTHING  -- a key-less event appended twice: stored once, fan-out once
    RETURNING event_id
), dl AS (
    INSERT INTO deliveries (event_id, endpoint_id, partition, tenant_id, state, attempts,
                            next_attempt_at, updated_at)
    SELECT d.event_id, d.endpoint_id, d.partition, d.tenant_id, 'pending', 0, d.at, d.at
    FROM unnest($15::text[], $16::text[], $17::int2[], $18::text[], $19::float8[])
         AS d(event_id, endpoint_id, partition, tenant_id, at)
    WHERE d.event_id IN (SELECT event_id FROM ev)
    RETURNING 1
)
SELECT event_id FROM keys
UNION ALL
SELECT NULL FROM (
    SELECT pg_notify($20, $21) FROM dl HAVING count(*) > 0 AND $20::text IS NOT NULL) AS told"""

ORIGINALS: Final = """
SELECT k.source_id, k.provider_event_id, k.event_id
FROM unnest($1::text[], $2::text[]) AS w(source_id, provider_event_id)
JOIN event_keys AS k USING (source_id, provider_event_id)"""

Waiter = Callable[[AppendResult | None, BaseException | None], None]


class _Pending:
    """One append waiting for its batch."""

    __slots__ = ("done", "event")

    def __init__(self, event: NewEvent, done: Waiter) -> None:
        self.event = event
        self.done = done


class GroupCommitter:
    """Batches appends per loop turn and commits them (see the module docstring)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        loop: asyncio.AbstractEventLoop,
        partition_of: PartitionMap,
        ensure_days: Callable[[set[int]], Any],
        known_days: set[int],
    ) -> None:
        self.notify: tuple[str, str] | None = None  # (channel, node id) in cluster mode
        self._pool = pool
        self._loop = loop
        self._partition_of = partition_of
        self._ensure_days = ensure_days  # async: makes missing days, returns all known
        self.known_days = known_days
        self._queue: list[_Pending] = []
        self._scheduled = False
        self._in_flight: asyncio.Task[None] | None = None
        # Counters (StoreStats / stats()).
        self.appends = 0
        self.resolved = 0
        self.commits = 0
        self.committed_events = 0
        self.batch_last = 0
        self.batch_max = 0
        self.commit_ms_last = 0.0
        self.commit_ms_peak = 0.0
        self.duplicates = 0
        self.failures = 0
        self.failed_appends = 0
        self.failing = False
        self.last_error: str | None = None
        self.events_failed_at: float | None = None

    @property
    def pending(self) -> int:
        return self.appends - self.resolved

    # ---- submission (event-loop thread) ----------------------------------------

    def submit(self, event: NewEvent) -> asyncio.Future[AppendResult]:
        future: asyncio.Future[AppendResult] = self._loop.create_future()

        def done(result: AppendResult | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                assert result is not None
                future.set_result(result)

        self.submit_then(event, done)
        return future

    def submit_then(self, event: NewEvent, done: AppendDone) -> None:
        self.appends += 1
        self._queue.append(_Pending(event, done))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._start)

    def _start(self) -> None:
        self._scheduled = False
        if self._in_flight is not None:
            return  # the batch in flight starts this one when it returns
        batch, self._queue = self._queue, []
        if not batch:
            return
        task = self._loop.create_task(self._commit(batch))
        self._in_flight = task
        task.add_done_callback(self._next)

    def _next(self, _: asyncio.Task[None]) -> None:
        self._in_flight = None
        if self._queue and not self._scheduled:
            self._start()

    async def drain(self) -> None:
        """Commit everything queued and wait for the batches to return."""
        while self._queue or self._in_flight is not None or self._scheduled:
            if self._in_flight is not None:
                await asyncio.wait([self._in_flight])
            elif self._queue and not self._scheduled:
                self._start()
            else:
                await asyncio.sleep(0)

    # ---- one batch -------------------------------------------------------------

    async def _commit(self, batch: list[_Pending]) -> None:
        started = time.perf_counter()
        try:
            results = await self._write(batch)
        except BaseException as exc:
            self._failed(batch, exc)
            if not isinstance(exc, Exception):
                raise
            return
        elapsed_ms = (time.perf_counter() - started) * 1000
        self.commits += 1
        self.committed_events += len(batch)
        self.batch_last = len(batch)
        self.batch_max = max(self.batch_max, len(batch))
        self.commit_ms_last = elapsed_ms
        self.commit_ms_peak = max(self.commit_ms_peak, elapsed_ms)
        self.failing = False
        self.events_failed_at = None
        for pending, result in zip(batch, results, strict=True):
            self.resolved += 1
            if result.duplicate:
                self.duplicates += 1
            pending.done(result, None)

    def _failed(self, batch: list[_Pending], exc: BaseException) -> None:
        self.failures += 1
        self.failed_appends += len(batch)
        self.failing = True
        self.events_failed_at = time.monotonic()
        self.last_error = f"{type(exc).__name__}: {exc}"
        if not errors.is_store_failure(exc):
            log.error("committing %d events failed", len(batch), exc_info=exc)
        for pending in batch:
            self.resolved += 1
            # A fresh exception per waiter: they are mutable and carry tracebacks.
            pending.done(None, errors.unavailable(exc))

    async def _write(self, batch: list[_Pending]) -> list[AppendResult]:
        """Commit ``batch``; the result of each append, in order."""
        results: list[AppendResult | None] = [None] * len(batch)
        winners: dict[tuple[str, str], int] = {}  # key -> index of its first append
        rows: list[int] = []  # indexes of the appends that go to the database
        for index, pending in enumerate(batch):
            event = pending.event
            key = event.provider_event_id
            if key is not None:
                first = winners.get((event.source_id, key))
                if first is not None:
                    continue  # resolved from its first occurrence below
                winners[(event.source_id, key)] = index
            rows.append(index)
        days = {day_of(batch[i].event.event_id) for i in rows}
        if not days <= self.known_days:
            self.known_days = await self._ensure_days(days)
        args = self._arguments(batch, rows)
        try:
            inserted = await self._execute(args)
        except asyncpg.PostgresError as exc:
            if not errors.missing_partition(exc):
                raise
            # A day dropped by retention, or made by another node since: look again.
            self.known_days = await self._ensure_days(days)
            inserted = await self._execute(args)
        originals: dict[tuple[str, str], str] = {}
        lost = [
            (batch[i].event.source_id, batch[i].event.provider_event_id or "")
            for i in rows
            if batch[i].event.provider_event_id is not None
            and batch[i].event.event_id not in inserted
        ]
        if lost:
            originals = await self._originals(lost)
        for index, pending in enumerate(batch):
            event = pending.event
            key = event.provider_event_id
            if key is None:
                results[index] = AppendResult(event.event_id, False)
                continue
            first = winners[(event.source_id, key)]
            first_id = batch[first].event.event_id
            if first_id in inserted:
                results[index] = AppendResult(first_id, index != first)
                continue
            stored = originals.get((event.source_id, key))
            if stored is None:
                raise StoreUnavailable(
                    f"event key ({event.source_id}, {key}) neither inserted nor found",
                    reason="store_dedup_race",
                )
            results[index] = AppendResult(stored, True)
        return [r for r in results if r is not None]

    def _arguments(self, batch: list[_Pending], rows: list[int]) -> tuple[list[Any], ...]:
        keyed = sorted(
            (
                (e.source_id, e.provider_event_id, e.event_id)
                for e in (batch[i].event for i in rows)
                if e.provider_event_id is not None
            ),
        )
        events = [batch[i].event for i in rows]
        partition_of = self._partition_of
        parts = [partition_of(e.tenant_id) for e in events]
        d_event: list[str] = []
        d_endpoint: list[str] = []
        d_part: list[int] = []
        d_tenant: list[str] = []
        d_at: list[float] = []
        for e, part in zip(events, parts, strict=True):
            for endpoint in e.endpoint_ids:
                d_event.append(e.event_id)
                d_endpoint.append(endpoint)
                d_part.append(part)
                d_tenant.append(e.tenant_id)
                d_at.append(e.received_at)
        return (
            [k[0] for k in keyed],
            [k[1] for k in keyed],
            [k[2] for k in keyed],
            [e.event_id for e in events],
            parts,
            [e.tenant_id for e in events],
            [e.source_id for e in events],
            [e.provider_event_id for e in events],
            [e.event_type for e in events],
            [e.received_at for e in events],
            ["pending" if e.endpoint_ids else "unrouted" for e in events],
            [orjson.dumps(e.headers).decode() for e in events],
            [e.body for e in events],
            [len(e.endpoint_ids) for e in events],
            d_event,
            d_endpoint,
            d_part,
            d_tenant,
            d_at,
        )

    async def _execute(self, args: tuple[list[Any], ...]) -> set[str]:
        channel: str | None = None
        payload: str | None = None
        if self.notify is not None:
            # args[14:18]: the delivery rows' event ids, endpoints, partitions, tenants.
            channel, node = self.notify
            payload = notices.encode(node, args[16], args[17], args[15], args[14])
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(INSERT_BATCH, *args, channel, payload)
        return {r[0] for r in rows if r[0] is not None}

    async def _originals(self, lost: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(ORIGINALS, [k[0] for k in lost], [k[1] for k in lost])
        return {(r[0], r[1]): r[2] for r in rows}


__all__ = ["GroupCommitter"]
