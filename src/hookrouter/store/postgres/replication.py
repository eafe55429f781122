"""Does "acknowledged" mean on two disks? What the connected server says about its standbys.

A commit waits for a standby when the primary names it in
``synchronous_standby_names`` and ``synchronous_commit`` is ``on`` or
``remote_apply`` (flushed there) or ``remote_write`` (in its memory): an
event is then answered 2xx only once the standby has it, and while no named
standby is connected commits wait rather than go through alone. Without one,
an acknowledged event is on the primary's disk only, and a failover to an
asynchronous standby can lose the last ones. ``pg_stat_replication`` shows
which standbys stream in which mode; a role without ``pg_read_all_stats``
sees its rows without those columns ("?").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import asyncpg

from hookrouter.store.postgres.conn import Conn

STATUS: Final = """
SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names'),
       current_setting('synchronous_commit'),
       coalesce((SELECT array_agg(coalesce(application_name, '?') || ' ' ||
                                  coalesce(sync_state, '?') ORDER BY application_name)
                 FROM pg_stat_replication), '{}')"""
_WAITS: Final = ("on", "remote_apply", "remote_write")


@dataclass(frozen=True, slots=True)
class ReplicationStatus:
    in_recovery: bool
    standby_names: str  # synchronous_standby_names
    synchronous_commit: str
    streaming: tuple[str, ...]  # "name sync_state" per connected standby ("?": not visible)

    @property
    def synchronous(self) -> bool:
        """Commits wait for a synchronous standby."""
        return bool(self.standby_names) and self.synchronous_commit in _WAITS

    def summary(self) -> str:
        """One line for the start-up log and ``hookrouter doctor``."""
        if self.in_recovery:
            return "connected to a standby (read-only), not a primary"
        streaming = ", ".join(self.streaming) or "none connected"
        if self.synchronous:
            waiting = "" if self.streaming else "; commits wait until one connects"
            return (
                f"synchronous standby: yes ({self.standby_names}; standbys: {streaming}"
                f"{waiting}): an acknowledged event is on the primary and the standby"
            )
        why = (
            f"synchronous_commit = {self.synchronous_commit}"
            if self.standby_names
            else "synchronous_standby_names is empty"
        )
        return (
            f"synchronous standby: no ({why}; standbys: {streaming}): an acknowledged event "
            "is on the primary's disk only; see docs/cluster.md, 'Synchronous standby'"
        )


async def replication_status(conn: Conn) -> ReplicationStatus:
    row = await conn.fetchrow(STATUS)
    assert row is not None
    return ReplicationStatus(bool(row[0]), str(row[1]), str(row[2]), tuple(row[3]))


PROBE_SECONDS: Final = 5.0


async def probe_dsn(dsn: str) -> ReplicationStatus:
    """Connect to ``dsn`` once and read the status (``hookrouter doctor``)."""
    conn = await asyncpg.connect(dsn, timeout=PROBE_SECONDS, command_timeout=PROBE_SECONDS)
    try:
        return await replication_status(conn)
    finally:
        await conn.close()


__all__ = ["ReplicationStatus", "probe_dsn", "replication_status"]
