"""Translate driver and network failures into the hookrouter error tree.

Everything that stops a statement from committing becomes ``StoreUnavailable``
(a 503 with Retry-After on the ingest path: never a 2xx for an event that was
not kept). ``retry_after`` follows what usually clears it: a lock or a
cancelled statement within a second, no reachable primary (a failover, a
restart) within seconds, a full disk only with an operator.
"""

from __future__ import annotations

import asyncio
from typing import Final

import asyncpg

from hookrouter.errors import StoreError, StoreUnavailable

# SQLSTATE -> (reason, retry_after). https://www.postgresql.org/docs/current/errcodes-appendix.html
_BY_STATE: Final[dict[str, tuple[str, float]]] = {
    "55P03": ("store_busy", 1.0),  # lock_not_available (lock_timeout)
    "57014": ("store_busy", 1.0),  # query_canceled (statement_timeout)
    "40P01": ("store_busy", 1.0),  # deadlock_detected
    "40001": ("store_busy", 1.0),  # serialization_failure
    "25006": ("store_readonly", 5.0),  # read_only_sql_transaction: connected to a standby
    "57P01": ("store_unreachable", 5.0),  # admin_shutdown
    "57P02": ("store_unreachable", 5.0),  # crash_shutdown
    "57P03": ("store_unreachable", 5.0),  # cannot_connect_now (starting, recovering)
    "08000": ("store_unreachable", 5.0),  # connection_exception
    "08003": ("store_unreachable", 5.0),  # connection_does_not_exist
    "08006": ("store_unreachable", 5.0),  # connection_failure
    "53100": ("store_full", 30.0),  # disk_full
    "53200": ("store_busy", 5.0),  # out_of_memory
    "53300": ("store_busy", 5.0),  # too_many_connections
}

# Failures of the connection itself (no primary reachable, the link broke).
CONNECTION_ERRORS: Final = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.InterfaceError,  # connection closed / in a bad state
    # A connection that broke mid-statement and was used again before the pool
    # noticed ("cannot switch to state ..."): the link's failure, not a bug here.
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.ConnectionFailureError,
    asyncpg.exceptions.TargetServerAttributeNotMatched,
)


def unavailable(exc: BaseException, what: str = "commit failed") -> StoreUnavailable:
    """A fresh ``StoreUnavailable`` describing ``exc`` (one per future: exceptions are mutable)."""
    if isinstance(exc, StoreUnavailable):
        return StoreUnavailable(exc.message, retry_after=exc.retry_after, reason=exc.reason)
    if isinstance(exc, asyncpg.PostgresError):
        state = str(getattr(exc, "sqlstate", "") or "")
        reason, retry_after = _BY_STATE.get(state, ("store_unavailable", 5.0))
        return StoreUnavailable(
            f"{what}: {state} {type(exc).__name__}: {exc}", retry_after=retry_after, reason=reason
        )
    if isinstance(exc, CONNECTION_ERRORS):
        return StoreUnavailable(
            f"{what}: no PostgreSQL primary reachable ({type(exc).__name__}: {exc})",
            retry_after=5.0,
            reason="store_unreachable",
        )
    return StoreUnavailable(f"{what}: {type(exc).__name__}: {exc}", reason="store_unavailable")


def is_store_failure(exc: BaseException) -> bool:
    """Whether ``exc`` came from the database or the link to it (not a bug of ours)."""
    return isinstance(exc, (asyncpg.PostgresError, StoreError, *CONNECTION_ERRORS))


def missing_partition(exc: BaseException) -> bool:
    """An insert found no time partition for its row (one dropped or not yet made)."""
    return isinstance(exc, asyncpg.PostgresError) and "no partition of relation" in str(exc)


__all__ = ["CONNECTION_ERRORS", "is_store_failure", "missing_partition", "unavailable"]
