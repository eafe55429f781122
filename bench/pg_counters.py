"""A PostgreSQL server's own counters over a stretch of load, per delivered event.

``snapshot`` reads the server-wide counters that say where a server's CPU
goes besides statement execution: transactions, shared-buffer misses and
who wrote the evicted pages, WAL records, full-page images, bytes and
flushes, and the user/system split of the server's CPU (``/proc``). Two
snapshots around a round, ``per_event`` divides their difference by the
events delivered. The statistics views are updated when a backend goes idle
(at most once a second), so take the second snapshot after the load is quiet.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Final

from tests.support.postgres_servers import PostgresServer

_TICKS: Final = 100.0  # clock ticks per second in /proc/<pid>/stat (Linux's USER_HZ)

_QUERY: Final = """
SELECT d.xact_commit, d.blks_read, d.blks_hit,
       b.buffers_alloc, b.buffers_backend, b.buffers_clean, b.buffers_checkpoint,
       w.wal_records, w.wal_fpi, w.wal_bytes, w.wal_buffers_full, w.wal_write, w.wal_sync
FROM pg_stat_database AS d, pg_stat_bgwriter AS b, pg_stat_wal AS w
WHERE d.datname = current_database()"""
_NAMES: Final = (
    "xact",
    "blks_read",
    "blks_hit",
    "buf_alloc",
    "buf_backend",
    "buf_clean",
    "buf_checkpoint",
    "wal_records",
    "wal_fpi",
    "wal_bytes",
    "wal_buffers_full",
    "wal_write",
    "wal_sync",
)


def _cpu(pid: int) -> tuple[float, float]:
    """(user, system) seconds of ``pid`` and of its reaped children."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    return (int(fields[11]) + int(fields[13])) / _TICKS, (
        int(fields[12]) + int(fields[14])
    ) / _TICKS


def server_cpu(postmaster: int) -> tuple[float, float]:
    """(user, system) CPU seconds of the postmaster, its live backends and the exited ones."""
    user, system = _cpu(postmaster)
    with contextlib.suppress(OSError):
        for child in Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split():
            u, s = _cpu(int(child))
            user, system = user + u, system + s
    return user, system


def snapshot(pg: PostgresServer) -> dict[str, float]:
    """The server's counters and CPU now."""
    row = pg.psql(_QUERY, user="postgres").strip().split("|")
    out = {name: float(value or 0) for name, value in zip(_NAMES, row, strict=True)}
    out["cpu_user"], out["cpu_sys"] = server_cpu(pg.pid or 0)
    return out


def per_event(before: dict[str, float], after: dict[str, float], events: int) -> dict[str, float]:
    """Each counter's growth per event (CPU in µs)."""
    n = max(1, events)
    out = {k: (after[k] - before[k]) / n for k in before}
    out["cpu_user"] *= 1e6
    out["cpu_sys"] *= 1e6
    return out


def describe(c: dict[str, float]) -> str:
    """One line of the per-event counters."""
    return (
        f"server CPU user {c['cpu_user']:.0f} + sys {c['cpu_sys']:.0f} µs/ev;"
        f" {c['xact']:.2f} xact/ev; buffers: {c['blks_read']:.2f} read, {c['blks_hit']:.1f} hit,"
        f" {c['buf_backend']:.2f} written by backends, {c['buf_clean']:.2f} by bgwriter,"
        f" {c['buf_checkpoint']:.2f} at checkpoints; WAL: {c['wal_records']:.1f} records,"
        f" {c['wal_fpi']:.2f} FPI, {c['wal_bytes']:.0f} B, {c['wal_sync']:.3f} syncs,"
        f" {c['wal_buffers_full']:.3f} buffers-full writes"
    )


__all__ = ["describe", "per_event", "server_cpu", "snapshot"]
