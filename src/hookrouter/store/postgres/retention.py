"""Retention on PostgreSQL: drop whole days, never a mass DELETE.

A day's partitions (events, deliveries, attempts) are dropped together once
every event in it is past its kind's cutoff and none has an open delivery.
A day holding one event that must stay (an open delivery, a failed event
inside its longer retention) is kept whole until that event may go: the
price of dropping partitions instead of deleting rows (no bloat, no vacuum
debt, a constant-time drop). Dedup keys are kept (``schema``).
"""

from __future__ import annotations

from typing import Final

from hookrouter.store.postgres.conn import Conn
from hookrouter.store.postgres.partitioning import day_suffix, wall_floor
from hookrouter.store.postgres.queries import OPEN_SQL
from hookrouter.store.postgres.schema import drop_day
from hookrouter.store.retention import Cutoffs

# Days past the latest cutoff, oldest first: (day, upper id bound).
_CANDIDATES: Final = (
    "SELECT day, upper_id FROM time_partitions WHERE upper_id <= $1 ORDER BY day LIMIT $2"
)


async def prune_days(conn: Conn, cutoffs: Cutoffs, limit: int) -> tuple[int, int, list[int]]:
    """Drop the expired days (up to ``limit`` looked at): (events scanned, events dropped, days)."""
    scan_before = cutoffs.scan_before
    if scan_before is None:
        return 0, 0, []
    delivered = None if cutoffs.delivered_before is None else wall_floor(cutoffs.delivered_before)
    failed = None if cutoffs.failed_before is None else wall_floor(cutoffs.failed_before)
    scanned = dropped = 0
    days: list[int] = []
    for day, upper in await conn.fetch(_CANDIDATES, wall_floor(scan_before), limit):
        suffix = day_suffix(day)
        # Checked under the lock the drop takes anyway: no replay can reopen one meanwhile.
        async with conn.transaction():
            await conn.execute(
                f"LOCK TABLE deliveries_{suffix}, events_{suffix} IN ACCESS EXCLUSIVE MODE"
            )
            counts = await conn.fetchrow(
                f"SELECT count(*), count(*) FILTER (WHERE status = 'failed'),"
                f" (SELECT count(*) FROM deliveries_{suffix} WHERE state IN {OPEN_SQL})"
                f" FROM events_{suffix}"
            )
            assert counts is not None
            total, failed_count, open_count = int(counts[0]), int(counts[1]), int(counts[2])
            scanned += total
            others_expire = total == failed_count or (delivered is not None and upper <= delivered)
            failed_expire = failed_count == 0 or (failed is not None and upper <= failed)
            if open_count or not others_expire or not failed_expire:
                continue
            await drop_day(conn, day)
        dropped += total
        days.append(day)
    return scanned, dropped, days


__all__ = ["prune_days"]
