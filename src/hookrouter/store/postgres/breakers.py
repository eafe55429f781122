"""Breakers any node can read (cluster mode): the owner writes each transition.

A breaker lives in the memory of the node that delivers its endpoint's tenant.
So that the admin API and the console show it from every node, the owner
writes each transition to ``breakers`` (one row per endpoint, the last
``HISTORY`` transitions in it). Transitions are rare (a breaker opens, cools,
probes, closes), so one statement each costs nothing beside the deliveries.

The write is fenced like an outcome: it lands only while the writer holds the
tenant's partition at the epoch it names, so a paused former owner cannot put
back a state the new owner has replaced. A new owner's breakers start closed
(as after a restart), and the lease turn that takes partitions closes their
rows (``close_taken``). Removing an endpoint or tenant deletes its rows
(``changes``), and a transition of a removed endpoint does not write one back,
even one racing the removal (both take the change lock before their row
statement).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import orjson

from hookrouter.errors import StoreError
from hookrouter.log_throttle import LogThrottle
from hookrouter.store.base import BreakerRange, StoredBreaker
from hookrouter.store.postgres.changes import SHARE
from hookrouter.store.postgres.conn import Conn
from hookrouter.store.postgres.queries import affected

log = logging.getLogger(__name__)

HISTORY: Final = 20  # transitions kept per endpoint, as the engine keeps in memory
# Transitions waiting to be written while the database is slow: a flapping
# fleet of endpoints must not grow this without bound; the oldest go first,
# counted and logged (the endpoint's next transition writes its state again).
QUEUE_BOUND: Final = 10_000

# $1 endpoint, $2 tenant, $3 partition, $4 state, $5 opened_at, $6 times_opened,
# $7 node, $8 changed_at, $9 the transition as a one-element JSON array, $10 epoch.
_PUBLISH: Final = f"""
INSERT INTO breakers AS b (endpoint_id, tenant_id, partition, state, opened_at, times_opened,
                           node, changed_at, history)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb
WHERE EXISTS (SELECT 1 FROM partitions WHERE partition = $3 AND owner = $7 AND epoch = $10)
    AND NOT EXISTS (SELECT 1 FROM entity_deletions
                    WHERE (kind = 'endpoint' AND id = $1) OR (kind = 'tenant' AND id = $2))
ON CONFLICT (endpoint_id) DO UPDATE SET
    tenant_id = excluded.tenant_id, partition = excluded.partition, state = excluded.state,
    opened_at = excluded.opened_at, times_opened = excluded.times_opened,
    node = excluded.node, changed_at = excluded.changed_at,
    history = jsonb_path_query_array(excluded.history || b.history, '$[0 to {HISTORY - 1}]')
"""

_CLOSE_TAKEN: Final = """
UPDATE breakers SET state = 'closed', opened_at = NULL, node = $2, changed_at = $3
WHERE partition = ANY($1::smallint[]) AND state <> 'closed'
"""

_COLUMNS: Final = (
    "endpoint_id, tenant_id, state, opened_at, times_opened, node, changed_at, history::text"
)


async def publish(conn: Conn, row: StoredBreaker, partition: int, epoch: int) -> bool:
    """Write one transition (``row.history[0]``); False: fenced out (not the owner now).

    The change lock, shared, is held first: a removal of the endpoint either
    committed before the write's snapshot (which then sees its deletion) or
    waits for the write to commit (and then deletes the row it wrote).
    """
    async with conn.transaction():
        await conn.execute(SHARE)
        return await write_transition(conn, row, partition, epoch)


async def write_transition(conn: Conn, row: StoredBreaker, partition: int, epoch: int) -> bool:
    """The fenced row statement alone (inside ``publish``'s transaction, after the lock)."""
    done = await conn.execute(
        _PUBLISH,
        row.endpoint_id,
        row.tenant_id,
        partition,
        row.state,
        row.opened_at,
        row.times_opened,
        row.node,
        row.changed_at,
        orjson.dumps([list(t) for t in row.history[:1]]).decode(),
        epoch,
    )
    return affected(done) == 1


async def close_taken(conn: Conn, partitions: Sequence[int], node: str, now: float) -> int:
    """The rows of partitions this node just took: closed, as its breakers are."""
    return affected(await conn.execute(_CLOSE_TAKEN, list(partitions), node, now))


async def read_page(conn: Conn, wanted: BreakerRange, limit: int) -> list[StoredBreaker]:
    """Up to ``limit`` rows of ``wanted`` by the primary key's order, not the whole table."""
    args: list[Any] = [wanted.after or "", list(wanted.skip), limit]
    where = ["endpoint_id > $1", "NOT (partition = ANY($2::smallint[]))"]
    if wanted.until is not None:
        args.append(wanted.until)
        where.append(f"endpoint_id <= ${len(args)}")
    if wanted.endpoints is not None:
        args.append(list(wanted.endpoints))
        where.append(f"endpoint_id = ANY(${len(args)}::text[])")
    if wanted.tripped:
        where.append("state <> 'closed'")
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM breakers WHERE {' AND '.join(where)}"
        " ORDER BY endpoint_id LIMIT $3",
        *args,
    )
    return [_stored(r) for r in rows]


async def read_one(conn: Conn, endpoint_id: str) -> StoredBreaker | None:
    row = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM breakers WHERE endpoint_id = $1", endpoint_id
    )
    return None if row is None else _stored(row)


def _stored(row: Any) -> StoredBreaker:
    history = tuple((float(t[0]), str(t[1]), str(t[2]), str(t[3])) for t in orjson.loads(row[7]))
    return StoredBreaker(row[0], row[1], row[2], row[3], row[4], row[5], row[6], history)


Run = Callable[[Callable[[Conn], Awaitable[Any]]], Awaitable[Any]]


class BreakerBoard:
    """This node's side of ``breakers``: writes its transitions in order, reads everyone's."""

    def __init__(
        self,
        run: Run,
        node_id: str,
        partition_of: Callable[[str], int],
        held: dict[int, int],
        failed: Callable[[str, BaseException], None],
        *,
        bound: int = QUEUE_BOUND,
    ) -> None:
        self._run = run
        self.node_id = node_id
        self._partition_of = partition_of
        self._held = held  # partition -> epoch, the lease keeper's (and the ledger's) own
        self._failed = failed  # logs, throttled with the node's other failures
        self._queue: deque[StoredBreaker] = deque()
        self._bound = bound
        self._drop_log = LogThrottle()
        self._writer: asyncio.Task[None] | None = None
        self.written = 0
        self.fenced = 0  # refused: the partition had moved on
        self.failed = 0
        self.dropped = 0  # never written: the queue was full

    def publish(self, row: StoredBreaker) -> None:
        """Any time on the loop: queue a transition; one task writes them in order."""
        if len(self._queue) >= self._bound:
            self._dropped(self._queue.popleft())
        self._queue.append(row)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._queue:
            row = self._queue.popleft()
            partition = self._partition_of(row.tenant_id)
            epoch = self._held.get(partition)
            if epoch is None:
                self.fenced += 1
                continue
            try:
                landed = await self._run(
                    functools.partial(publish, row=row, partition=partition, epoch=epoch)
                )
            except StoreError as exc:
                self.failed += 1  # the next transition writes the state again
                self._failed("breaker write", exc)
                continue
            if landed:
                self.written += 1
            else:
                self.fenced += 1

    def _dropped(self, row: StoredBreaker) -> None:
        self.dropped += 1
        skipped = self._drop_log.should_log(asyncio.get_running_loop().time())
        if skipped is not None:
            log.warning(
                "breaker transition of tenant %s endpoint %s (%s) not written: %d transitions"
                " wait for the database; its next transition writes its state%s",
                row.tenant_id,
                row.endpoint_id,
                row.state,
                len(self._queue),
                f" ({skipped} more dropped since the last message)" if skipped else "",
            )

    async def taken(self, partitions: Sequence[int], now: float) -> None:
        """After a lease turn took ``partitions``: their rows say closed, as our breakers are."""
        await self._run(lambda c: close_taken(c, partitions, self.node_id, now))

    async def page(self, wanted: BreakerRange, limit: int) -> list[StoredBreaker]:
        """Up to ``limit`` stored rows of ``wanted``, in endpoint id order."""
        found: list[StoredBreaker] = await self._run(lambda c: read_page(c, wanted, limit))
        return found

    def own_partitions(self) -> tuple[int, ...]:
        """The partitions this node holds now, whose breakers it has in memory."""
        return tuple(self._held)

    async def one(self, endpoint_id: str) -> StoredBreaker | None:
        found: StoredBreaker | None = await self._run(lambda c: read_one(c, endpoint_id))
        return found

    async def stop(self) -> None:
        """Let the queued transitions be written (the leases are released after)."""
        if self._writer is not None:
            await asyncio.wait({self._writer})

    def stats(self) -> dict[str, int]:
        return {"breakers_written": self.written, "breakers_fenced": self.fenced,
                "breakers_failed": self.failed, "breakers_dropped": self.dropped}  # fmt: skip
