"""Translate ``sqlite3`` failures into the hookrouter error tree.

``retry_after`` is what the ingress handler sends providers in Retry-After:
a full disk or a read-only file needs an operator (minutes, so ask for 30 s
and let providers back off further), a lock held by another process usually
clears within a second, anything else gets a middle value.
"""

from __future__ import annotations

import sqlite3

from hookrouter.errors import StoreUnavailable

# Primary result codes (https://www.sqlite.org/rescode.html); extended codes
# keep the primary code in their low byte.
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_READONLY = 8
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_CANTOPEN = 14
SQLITE_NOTADB = 26

# Codes after which the connection itself is suspect (file moved, deleted,
# I/O errors): the writer closes it and reopens before the next batch.
RECONNECT_CODES = frozenset(
    {SQLITE_READONLY, SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_CANTOPEN, SQLITE_NOTADB}
)

_BY_CODE: dict[int, tuple[str, float]] = {
    SQLITE_FULL: ("store_full", 30.0),
    SQLITE_BUSY: ("store_busy", 1.0),
    SQLITE_LOCKED: ("store_busy", 1.0),
    SQLITE_READONLY: ("store_readonly", 30.0),
    SQLITE_IOERR: ("store_io_error", 5.0),
    SQLITE_CANTOPEN: ("store_io_error", 5.0),
}


def primary_code(exc: sqlite3.Error) -> int:
    """The primary SQLite result code of ``exc`` (0 when unknown)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return int(code) & 0xFF if code is not None else 0


def unavailable(exc: sqlite3.Error, what: str = "commit failed") -> StoreUnavailable:
    """A fresh ``StoreUnavailable`` describing ``exc`` (one per future: exceptions are mutable)."""
    reason, retry_after = _BY_CODE.get(primary_code(exc), ("store_unavailable", 5.0))
    name = getattr(exc, "sqlite_errorname", type(exc).__name__)
    return StoreUnavailable(f"{what}: {name}: {exc}", retry_after=retry_after, reason=reason)
