"""The SQLite store backend: ``SqliteStore`` and the modules behind it."""

from __future__ import annotations

from hookrouter.store.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
