"""The delivery ledger on PostgreSQL: ordered jobs, batched outcomes fenced by epoch.

Ordering: every state change and every page query is a job in one chain
(``chain``), run one after the other on pooled connections in submission
order, so ``page_pending`` observes every ``record``, ``promote_due``,
``park_pending`` and ``resume_parked`` submitted before it (the guarantee
``store/ledger.py`` promises); ``record`` flushes its queue into the chain
before any later job but a page, which leaves the queued outcomes'
deliveries out instead (``unwritten``); page-ins asked one after another
share a statement (``page_batch``). Bodies (``load``) are read outside the
chain: their rows were committed before anyone asked for them, and a page
reads the bodies of the deliveries it lists (``prefetch``), so ``load``
reads only the others.

Outcomes are batched as on SQLite (at most every ``FLUSH_DELAY``, or at once
at ``FLUSH_BATCH``); a batch the database refused is queued again, before
newer outcomes, and written after ``RETRY_DELAY``.

Fencing: each outcome write names the epochs this node holds for the
partitions it touches (``outcome_write``). Outcomes for a partition whose
epoch moved on (another node took it over) are not written and are counted
in ``stale_outcomes``: the new owner attempts those deliveries again (at
least once). A store opened on its own holds every
partition at the epoch the table says; in cluster mode ``leases`` keeps
``held`` to the leases this node holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence, Set
from typing import Final, TypeVar

import asyncpg

from hookrouter.errors import StoreError
from hookrouter.flow.credits import DeliveryRef, new_ref
from hookrouter.log_throttle import LogThrottle
from hookrouter.store.base import DeliveryState
from hookrouter.store.ledger import (
    DeliveryWork,
    OutcomeRecord,
    Payload,
    ReplayFilter,
    Resumed,
)
from hookrouter.store.postgres import errors, notices
from hookrouter.store.postgres import ledger_sql as sql
from hookrouter.store.postgres.chain import Job, JobChain
from hookrouter.store.postgres.conn import Conn
from hookrouter.store.postgres.outcome_write import OutcomeWriter
from hookrouter.store.postgres.page_batch import PageAsk, PageBatcher
from hookrouter.store.postgres.partitioning import PartitionMap
from hookrouter.store.postgres.prefetch import Prefetched
from hookrouter.store.postgres.queries import affected
from hookrouter.store.postgres.unwritten import Unwritten

FLUSH_DELAY: Final = 0.005
FLUSH_BATCH: Final = 512
RETRY_DELAY: Final = 1.0
# Events remembered as having one delivery (``load``) before the memory is cleared.
SOLE_MEMORY: Final = 100_000

log = logging.getLogger(__name__)

T = TypeVar("T")


class PostgresLedger:
    """``DeliveryLedger`` over a ``PostgresStore``'s pool."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        loop: asyncio.AbstractEventLoop,
        partition_of: PartitionMap,
        held: dict[int, int],
    ) -> None:
        self._pool = pool
        self._loop = loop
        self._partition_of = partition_of
        self.held = held  # partition -> the epoch this node holds it at
        self._chain = JobChain(pool, loop)
        self._writer = OutcomeWriter(partition_of, held)
        self._pages = PageBatcher(self._chain, loop)
        self._outcomes: list[OutcomeRecord] = []
        self._unwritten = Unwritten()  # the refs of ``_outcomes``, for pages
        self._flush_future: asyncio.Future[None] | None = None
        self._last_waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._backing_off = False
        self._failure_log = LogThrottle()
        self.recorded = 0
        self.write_failures = 0
        self.pending_scans = 0  # PENDING_ENDPOINTS runs
        self.pending_scans_avoided = 0  # work notices whose lanes were named instead
        self.notify: tuple[str, str] | None = None  # (channel, node id) in cluster mode
        self._prefetched = Prefetched()  # read with a page, for ``load``

    async def settled(self) -> None:
        """Return once every job submitted so far has run (submits none itself)."""
        tail = self._chain.tail
        if tail is not None:
            await tail

    async def drain(self) -> None:
        """Write what is queued and wait for every job submitted so far (at close)."""
        if self._outcomes:
            self.flush()
        await self._chain.drain()
        if self._timer is not None:
            self._timer.cancel()

    # ---- outcomes --------------------------------------------------------------------

    def record(self, outcomes: Sequence[OutcomeRecord]) -> asyncio.Future[None]:
        self._outcomes.extend(outcomes)
        self._unwritten.add(outcomes)
        if self._flush_future is None:
            self._flush_future = self._loop.create_future()
        if not outcomes or (len(self._outcomes) >= FLUSH_BATCH and not self._backing_off):
            self.flush()
            assert self._last_waiter is not None
            return self._last_waiter
        if self._timer is None:
            self._timer = self._loop.call_later(FLUSH_DELAY, self._flush_due)
        return self._flush_future

    def _flush_due(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Put the queued outcomes into the chain now, as one job."""
        self._backing_off = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        outcomes, self._outcomes = self._outcomes, []
        self._unwritten.clear()
        waiter, self._flush_future = self._flush_future, None
        if waiter is None:
            waiter = self._loop.create_future()
        self._last_waiter = waiter
        if not outcomes:
            tail = self._chain.tail
            if tail is None or tail.done():
                if not waiter.done():
                    waiter.set_result(None)
            else:
                tail.add_done_callback(lambda _: _resolve(waiter))
            return
        self.recorded += len(outcomes)
        try:
            job = self._chain.submit(lambda conn: self._writer.write(conn, outcomes))
        except StoreError as exc:
            waiter.set_exception(exc)
            waiter.exception()
            return
        job.add_done_callback(lambda done: self._written(done, outcomes, waiter))

    def _written(
        self, job: asyncio.Future[None], outcomes: list[OutcomeRecord], waiter: asyncio.Future[None]
    ) -> None:
        exc = job.exception()
        if not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)
                waiter.exception()  # whoever awaits it is told; not "never retrieved"
        if exc is None:
            return
        if not isinstance(exc, StoreError):
            log.error("writing %d delivery outcomes failed", len(outcomes), exc_info=exc)
            return
        self.write_failures += 1
        self.recorded -= len(outcomes)
        self._outcomes[:0] = outcomes  # before newer ones: each delivery's outcomes in order
        self._unwritten.add(outcomes)
        skipped = self._failure_log.should_log(self._loop.time())
        if skipped is not None:
            log.warning(
                "writing %d delivery outcomes failed (%s); retrying in %.0f s%s",
                len(outcomes),
                exc,
                RETRY_DELAY,
                f" ({skipped} more failures since the last message)" if skipped else "",
            )
        if self._chain.closed:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._backing_off = True
        if self._flush_future is None:
            self._flush_future = self._loop.create_future()
        self._timer = self._loop.call_later(RETRY_DELAY, self._flush_due)

    # ---- ordered state changes and page queries --------------------------------------

    async def _ordered(self, job: Job[T]) -> T:
        self.flush()  # earlier outcomes first: the ordering guarantee
        return await self._chain.submit(job)

    async def page_pending(
        self, tenant_id: str, endpoint_id: str, after: DeliveryRef | None, limit: int
    ) -> list[DeliveryRef]:
        start = "" if after is None else after[0]
        partition = self._partition_of(tenant_id)
        # Outcomes recorded before this page and not yet written (``unwritten``):
        # their rows still say pending, so ask for as many more and leave them out.
        unwritten = self._unwritten.of(endpoint_id)
        ask = PageAsk(
            tenant_id, endpoint_id, start, limit, partition=partition, unwritten=unwritten
        )
        rows = await self._pages.ask(ask)  # after every job submitted before it
        return self._paged(tenant_id, rows, unwritten, limit)

    def _paged(
        self,
        tenant_id: str,
        rows: list[asyncpg.Record],
        unwritten: Set[DeliveryRef],
        limit: int,
    ) -> list[DeliveryRef]:
        """A page's refs, the ``unwritten`` left out; what ``load`` will want of each, kept."""
        epoch = self.held.get(self._partition_of(tenant_id), 0)
        refs: list[DeliveryRef] = []
        for r in rows:
            ref = new_ref(r[0], r[1])
            if ref in unwritten:
                continue
            if len(refs) == limit:
                break
            refs.append(ref)
            if r[4] is not None:  # NULL: the event is missing, ``load`` skips it
                work = DeliveryWork(ref, tenant_id, r[2], r[3], Payload(bytes(r[4]), r[5], r[6]))
                self._prefetched.put(work, epoch, r[7])
        return refs

    async def promote_due(self, now: float, limit: int) -> list[tuple[str, DeliveryRef]]:
        partitions = sorted(self.held)

        async def job(conn: Conn) -> list[tuple[str, DeliveryRef]]:
            rows = sorted(await conn.fetch(sql.PROMOTE_DUE, now, limit, partitions), key=_due)
            return [(r[0], new_ref(r[1], r[2])) for r in rows]

        return await self._ordered(job)

    async def park_pending(self, tenant_id: str, endpoint_id: str, now: float, limit: int) -> int:
        partition = self._partition_of(tenant_id)

        async def job(conn: Conn) -> int:
            return affected(
                await conn.execute(sql.PARK_PENDING, now, tenant_id, endpoint_id, limit, partition)
            )

        return await self._ordered(job)

    async def resume_parked(
        self, tenant_id: str, endpoint_id: str, limit: int | None = None
    ) -> Resumed:
        async def job(conn: Conn) -> Resumed:
            rows = await conn.fetch(sql.RESUME_PARKED, tenant_id, endpoint_id, limit)
            oldest = min((DeliveryRef(r[0], r[1]) for r in rows), default=None)
            return Resumed(tenant_id, endpoint_id, len(rows), oldest)

        return await self._ordered(job)

    async def replay(self, selection: ReplayFilter, limit: int = 10_000) -> list[Resumed]:
        where, params = sql.replay_where(selection)
        statement = sql.replay_sql(where, len(params) + 1)

        async def job(conn: Conn) -> list[Resumed]:
            async with conn.transaction():
                rows = await conn.fetch(statement, *params, limit)
                await conn.execute(sql.REOPEN, sorted({r[1] for r in rows}))
                if rows and self.notify is not None:
                    await self._notify_work(conn, rows)
            per: dict[tuple[str, str], list[DeliveryRef]] = {}
            for tenant, event_id, endpoint_id in rows:
                per.setdefault((tenant, endpoint_id), []).append(DeliveryRef(event_id, endpoint_id))
            return [Resumed(t, e, len(refs), min(refs)) for (t, e), refs in per.items()]

        return await self._ordered(job)

    async def _notify_work(self, conn: Conn, reopened: list[asyncpg.Record]) -> None:
        """Tell the owners of the ``(tenant, event, endpoint)`` rows made pending (at commit).

        The notice a commit sends (``notices``), so a replay made on a node
        that does not own the tenant is paged in by its owner at once.
        """
        assert self.notify is not None
        channel, node = self.notify
        tenants = [r[0] for r in reopened]
        partition_of = self._partition_of
        payload = notices.encode(
            node,
            [partition_of(t) for t in tenants],
            tenants,
            [r[2] for r in reopened],
            [r[1] for r in reopened],
        )
        await conn.execute("SELECT pg_notify($1, $2)", channel, payload)

    async def count_replayable(self, selection: ReplayFilter) -> int:
        where, params = sql.replay_where(selection)

        async def job(conn: Conn) -> int:
            return int(
                await conn.fetchval(f"SELECT count(*) FROM deliveries AS d WHERE {where}", *params)
            )

        return await self._ordered(job)

    async def pending_endpoints(self) -> list[Resumed]:
        return await self.pending_in(sorted(self.held))

    async def pending_in(self, partitions: Sequence[int], since: str = "") -> list[Resumed]:
        """Pending deliveries per endpoint in ``partitions``, from event id ``since`` on."""

        async def job(conn: Conn) -> list[Resumed]:
            self.pending_scans += 1
            if since:
                rows = await conn.fetch(sql.PENDING_SINCE, list(partitions), since)
            else:
                rows = await conn.fetch(sql.PENDING_ENDPOINTS, list(partitions))
            return [Resumed(t, e, n, DeliveryRef(oldest, e)) for t, e, n, oldest in rows]

        return await self._ordered(job)

    def pending_named(self, lanes: Sequence[notices.Lane]) -> list[Resumed]:
        """What ``pending_in`` would find for lanes a work notice named, without asking."""
        self.pending_scans_avoided += 1
        return [
            Resumed(lane.tenant_id, lane.endpoint_id, lane.pending,
                    DeliveryRef(lane.oldest, lane.endpoint_id))
            for lane in lanes
        ]  # fmt: skip

    async def resume_partitions(self, partitions: Sequence[int]) -> int:
        """Parked deliveries of ``partitions`` -> pending (a takeover); how many."""

        async def job(conn: Conn) -> int:
            return affected(await conn.execute(sql.RESUME_PARTITIONS, list(partitions)))

        return await self._ordered(job)

    async def ordered(self, job: Job[T]) -> T:
        """Run ``job`` after every outcome recorded and every job submitted before it."""
        return await self._ordered(job)

    async def state_counts(
        self, states: Collection[DeliveryState] | None = None
    ) -> dict[tuple[str, DeliveryState], int]:
        # Open work only where this node holds the partition: its engine runs
        # those tenants, and the nodes' metrics then add up to the cluster's.
        query, params = sql.state_counts(states, self.held)

        async def job(conn: Conn) -> dict[tuple[str, DeliveryState], int]:
            return {(r[0], DeliveryState(r[1])): r[2] for r in await conn.fetch(query, *params)}

        return await self._ordered(job)

    # ---- reads -------------------------------------------------------------------------

    async def load(self, refs: Sequence[DeliveryRef]) -> list[DeliveryWork]:
        found, missing = self._prefetched.take(refs, self._epoch_of)
        rows: list[asyncpg.Record] = []
        if missing:
            try:
                async with self._pool.acquire() as conn:
                    rows = await conn.fetch(
                        sql.LOAD, [r.event_id for r in missing], [r.endpoint_id for r in missing]
                    )
            except Exception as exc:
                if errors.is_store_failure(exc):
                    raise errors.unavailable(exc, "load failed") from exc
                raise
        sole = self._writer.sole
        if len(sole) > SOLE_MEMORY:  # loaded, never finished here (a lease moved): forget
            sole.clear()
        sole.update(ref.event_id for ref, (_, fanout) in found.items() if fanout == 1)
        sole.update(missing[r[0] - 1].event_id for r in rows if r[7] == 1)
        works = {ref: work for ref, (work, _) in found.items()}
        for r in rows:
            ref = missing[r[0] - 1]
            works[ref] = DeliveryWork(ref, r[1], r[2], r[3], Payload(bytes(r[4]), r[5], r[6]))
        return [works[ref] for ref in refs if ref in works]  # in the order asked

    @property
    def page_statements(self) -> int:
        """Statements the page-ins took (``page_batch``: page-ins asked together share one)."""
        return self._pages.statements

    @property
    def stale_outcomes(self) -> int:
        """Outcomes refused by the epoch check (``outcome_write``)."""
        return self._writer.stale_outcomes

    def _epoch_of(self, tenant_id: str) -> int | None:
        return self.held.get(self._partition_of(tenant_id))

    def __repr__(self) -> str:
        return (
            f"PostgresLedger(queued={len(self._outcomes)}, recorded={self.recorded},"
            f" stale={self.stale_outcomes})"
        )


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _due(row: asyncpg.Record) -> float:
    return float(row[3])


__all__ = ["PostgresLedger"]
