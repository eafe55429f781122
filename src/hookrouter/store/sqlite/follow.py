"""A connection that follows the database file: reopened when the file was replaced under it.

In WAL mode SQLite keeps using a database file that was deleted or replaced
while open (``Committer._file_moved`` explains why that matters for the
writer, which checks after each commit and reconnects). The reader and the
checkpointer hold connections of their own; without this they would go on
reading, and checkpointing into, the deleted copy after an operator restored
``events.db`` under a running store: admin reads would answer from the old
file until a restart and the restored file's WAL would never be folded back.

Each use checks the file's identity first (one ``stat``, about a microsecond;
reads and checkpoints run per batch, never per request) and reopens the
connection on the file now at the path. A missing file raises
``DatabaseMoved``: the caller reports it, and nothing is created.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from hookrouter.store.sqlite.cycle import DatabaseMoved, file_identity, present_identity


class FollowedConnection:
    """One thread's connection to ``db_path``, reopened by ``open_conn`` when the file changes."""

    def __init__(
        self, db_path: Path, conn: sqlite3.Connection, open_conn: Callable[[], sqlite3.Connection]
    ) -> None:
        self._db_path = db_path
        self._open_conn = open_conn
        self._conn: sqlite3.Connection | None = conn
        self._identity = file_identity(db_path)

    def current(self) -> sqlite3.Connection:
        """The connection to the file at ``db_path`` now; raises ``DatabaseMoved`` if it is gone."""
        try:
            identity = present_identity(self._db_path)
        except DatabaseMoved:
            self.close()
            raise
        if self._conn is None or identity != self._identity:
            self.close()
            self._conn = self._open_conn()  # mode=rw: never creates the file
            self._identity = identity
        return self._conn

    def close(self) -> None:
        """Close the connection (the next ``current`` opens a new one)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


__all__ = ["FollowedConnection"]
