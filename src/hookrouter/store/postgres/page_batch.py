"""Page-ins asked one after another, with no other ledger job between them, as one statement.

A cluster's owner pages in every lane a work notice names, and the engine
asks for each lane on its own; on PostgreSQL a statement's fixed cost (a
round trip, a transaction, the executor's start) is larger than its rows'.
A page-in asked while the previous one still waits for its turn in the
chain (``chain``) joins it, as long as no other job was submitted in
between: a page must run after every job submitted before it (the
ledger's ordering guarantee), and joining a job queued before such a job
would run it too early. The joined asks are read with ``PAGE_LANES``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Set

import asyncpg

from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.postgres import ledger_sql as sql
from hookrouter.store.postgres.chain import JobChain
from hookrouter.store.postgres.conn import Conn

Rows = list[asyncpg.Record]
_LANE = 8  # PAGE_LANES: the column after PAGE's eight


class PageAsk:
    """One lane's page-in: ``PAGE``'s arguments and the deliveries it must leave out."""

    __slots__ = ("endpoint_id", "limit", "partition", "start", "tenant_id", "unwritten")

    def __init__(
        self,
        tenant_id: str,
        endpoint_id: str,
        start: str,
        limit: int,
        *,
        partition: int,
        unwritten: Set[DeliveryRef],
    ) -> None:
        self.tenant_id = tenant_id
        self.endpoint_id = endpoint_id
        self.start = start
        self.limit = limit
        self.partition = partition
        self.unwritten = unwritten  # outcomes recorded before the ask, not yet written

    def rows_wanted(self) -> int:
        """Rows to read: the page, and as many as it may have to leave out."""
        return self.limit + len(self.unwritten)


_Batch = list[tuple[PageAsk, "asyncio.Future[Rows]"]]


class PageBatcher:
    """Joins page-ins into the chain's last job while it is a page job that has not started."""

    def __init__(self, chain: JobChain, loop: asyncio.AbstractEventLoop) -> None:
        self._chain = chain
        self._loop = loop
        self._open: _Batch | None = None  # the batch asks may still join
        self._open_turn: asyncio.Future[None] | None = None  # the chain's tail when it opened
        self.statements = 0

    def ask(self, page: PageAsk) -> asyncio.Future[Rows]:
        """The page's rows (``PAGE``'s columns), read after every job submitted before."""
        rows: asyncio.Future[Rows] = self._loop.create_future()
        batch = self._open
        if batch is not None and self._chain.tail is self._open_turn:
            batch.append((page, rows))
            return rows
        batch = [(page, rows)]
        done = self._chain.submit(lambda conn: self._read(conn, batch))  # StoreError if closed
        self._open, self._open_turn = batch, self._chain.tail
        done.add_done_callback(lambda job: self._ended(job, batch))
        return rows

    async def _read(self, conn: Conn, batch: _Batch) -> None:
        if self._open is batch:
            self._open = None  # asks from now on go into a job after this one
        asks = [page for page, _ in batch]
        self.statements += 1
        found = await _fetch(conn, asks)
        for (_, rows), lane_rows in zip(batch, found, strict=True):
            if not rows.done():  # its asker may have been cancelled
                rows.set_result(lane_rows)

    def _ended(self, job: asyncio.Future[None], batch: _Batch) -> None:
        if self._open is batch:
            self._open = None  # the job failed before it ran
        exc = job.exception()
        if exc is None:
            return
        for _, rows in batch:
            if not rows.done():
                rows.set_exception(exc)
                rows.exception()  # the asker is told; not "never retrieved" if it left


async def _fetch(conn: Conn, asks: list[PageAsk]) -> list[Rows]:
    if len(asks) == 1:
        a = asks[0]
        query = (sql.PAGE, a.tenant_id, a.endpoint_id, a.start, a.rows_wanted(), a.partition)
        return [await conn.fetch(*query)]
    found: list[Rows] = [[] for _ in asks]
    for row in await conn.fetch(
        sql.PAGE_LANES,
        [a.tenant_id for a in asks],
        [a.endpoint_id for a in asks],
        [a.start for a in asks],
        [a.rows_wanted() for a in asks],
        [a.partition for a in asks],
    ):
        found[row[_LANE] - 1].append(row)
    return found


__all__ = ["PageAsk", "PageBatcher"]
