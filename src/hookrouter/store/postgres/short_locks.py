"""Schema changes that take their locks briefly, or wait and try again.

A DDL statement queues for its lock behind every open transaction on the
table, and while it waits every later insert queues behind *it*: one long
transaction of another node would stop all ingest for its duration. So each
such transaction here runs with a short ``lock_timeout``; when the lock is
not free in that time it is rolled back, writers go on, and it is tried
again after a growing pause, until a deadline says the node gives up with a
message naming what held the lock.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

import asyncpg

from hookrouter.errors import StoreError
from hookrouter.store.postgres.conn import Conn

log = logging.getLogger(__name__)

DEFAULT_LOCK_TIMEOUT_MS: Final = 100
DEFAULT_DEADLINE: Final = 600.0
_FIRST_PAUSE: Final = 0.2
_LONGEST_PAUSE: Final = 2.0

Step = Callable[[Conn], Awaitable[None]]

# Who holds a lock on the relations named by $1 (text[]): for the message of a node giving up.
_HOLDERS: Final = """
SELECT DISTINCT a.pid, coalesce(a.application_name, ''), a.state,
       coalesce(extract(epoch FROM now() - a.xact_start), 0)::int
FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.granted AND l.pid <> pg_backend_pid()
  AND l.relation = ANY (SELECT to_regclass(name)::oid FROM unnest($1::text[]) AS name)
ORDER BY 4 DESC LIMIT 5"""


@dataclass(frozen=True, slots=True)
class ShortLocks:
    """How long one try may wait for a lock, and how long to keep trying."""

    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
    deadline: float = DEFAULT_DEADLINE

    async def transaction(self, conn: Conn, what: str, tables: tuple[str, ...], step: Step) -> None:
        """Run ``step`` in one transaction whose lock waits are short; retry until the deadline.

        ``what`` names the change in logs and in the error; ``tables`` are the
        relations it locks, so that the error can say who held them.
        """
        give_up = time.monotonic() + self.deadline
        pause = _FIRST_PAUSE
        tries = 0
        while True:
            tries += 1
            try:
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL lock_timeout = {int(self.lock_timeout_ms)}")
                    await step(conn)
                return
            except asyncpg.exceptions.LockNotAvailableError:
                if time.monotonic() >= give_up:
                    locked = ", ".join(tables) or "the tables it changes"
                    held = await _holders(conn, tables) if tables else "see pg_locks"
                    raise StoreError(
                        f"{what}: could not lock {locked} in {self.deadline:.0f} s"
                        f" ({tries} tries); {held}. Nothing was changed; end those"
                        " transactions and start this node again",
                        reason="migration_blocked",
                    ) from None
                if tries in (1, 10) or tries % 100 == 0:
                    log.info("%s: waiting for a lock on %s (try %d)", what, tables, tries)
            await asyncio.sleep(pause * random.uniform(0.5, 1.0))
            pause = min(pause * 2, _LONGEST_PAUSE)


async def _holders(conn: Conn, tables: tuple[str, ...]) -> str:
    rows = await conn.fetch(_HOLDERS, list(tables))
    if not rows:
        return "no transaction holds them now"
    held = "; ".join(f"pid {r[0]} ({r[1] or 'no name'}, {r[2]}, open {r[3]} s)" for r in rows)
    return f"held by {held}"


__all__ = ["DEFAULT_DEADLINE", "DEFAULT_LOCK_TIMEOUT_MS", "ShortLocks", "Step"]
