"""Running the store's SQL on one time partition: schema names, attachments, rowids.

Theory of operation
-------------------
Every connection of a store opens ``events.db`` as ``main`` (entities, the
catalog, the oldest partition) and attaches each later partition of the
catalog as ``p<start>`` (``attach``). The store's statements name their
tables unqualified (``events``, ``deliveries``, ``attempts``,
``delivery_counts``, ``meta``); ``qualify`` prefixes those names with a
partition's schema, and ``On`` is a connection whose ``execute`` does that,
so a query written for one file runs unchanged on any partition. A
statement that must see every partition runs once per partition
(``Catalog.newest_first``); one about one event runs on the partition its
id routes to (``Catalog.route``): the writer inserts each event into that
partition, so the route is exact.

Rowids stay per file. Where the store keeps one number for "every event up
to here" (the dedup tiers' ``flushed_rowid``), ``global_rowid`` places a
partition's rowids above every earlier partition's: ``base`` is the
bucket's start in minutes shifted past any rowid one file reaches.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, Protocol

from hookrouter.store.sqlite.partitions import LEGACY_FILE, Catalog, Partition

# The tables a partition file holds where a statement names them as tables
# (``attempts`` is also a column of ``deliveries``), and ``events.`` as a
# column qualifier (``fanout.HAS_FRESH``).
_TABLE: Final = re.compile(
    r"\b(FROM|INTO|JOIN|UPDATE)(\s+)(?:main\.)?(events|deliveries|attempts|delivery_counts|meta)\b"
    r"|(?<![\w.])(events)\.(?=\w)",
    re.IGNORECASE,
)
_QUALIFIED: Final[dict[tuple[str, str], str]] = {}
_QUALIFIED_MAX: Final = 4096
# Rowids of one partition stay below 2**32 (billions of events per bucket).
_ROWID_BITS: Final = 32


class Executes(Protocol):
    """A connection, or one partition of it (``On``): what read-only queries need."""

    def execute(self, sql: str, params: Any = ..., /) -> sqlite3.Cursor: ...


def schema(partition: Partition) -> str:
    """The schema name a partition is attached under (``main`` for events.db)."""
    return "main" if partition.file == LEGACY_FILE else f"p{partition.start}"


def qualify(sql: str, name: str) -> str:
    """``sql`` with the partition tables it names moved to schema ``name``."""
    if name == "main":
        return sql
    key = (sql, name)
    text = _QUALIFIED.get(key)
    if text is None:
        if len(_QUALIFIED) >= _QUALIFIED_MAX:
            _QUALIFIED.clear()
        text = _QUALIFIED[key] = _TABLE.sub(lambda m: _moved(m, name), sql)
    return text


def _moved(match: re.Match[str], name: str) -> str:
    if match.group(4) is not None:
        return f"{name}.events."
    return f"{match.group(1)}{match.group(2)}{name}.{match.group(3)}"


class On:
    """``conn`` as seen by one partition: its statements run on that partition's tables."""

    __slots__ = ("conn", "name", "partition")

    def __init__(self, conn: sqlite3.Connection, partition: Partition) -> None:
        self.conn = conn
        self.partition = partition
        self.name = schema(partition)

    def execute(self, sql: str, params: Any = (), /) -> sqlite3.Cursor:
        """``conn.execute`` on this partition."""
        return self.conn.execute(qualify(sql, self.name), params)

    def executemany(self, sql: str, rows: Iterable[Any]) -> sqlite3.Cursor:
        """``conn.executemany`` on this partition."""
        return self.conn.executemany(qualify(sql, self.name), rows)

    @property
    def in_transaction(self) -> bool:
        """Whether the connection is inside a transaction."""
        return self.conn.in_transaction

    def __repr__(self) -> str:
        return f"On({self.name})"


def each(conn: sqlite3.Connection, catalog: Catalog) -> list[On]:
    """``conn`` on every partition, newest first (the order listings walk)."""
    return [On(conn, p) for p in catalog.newest_first()]


def attach(conn: sqlite3.Connection, store_dir: Path, catalog: Catalog) -> None:
    """Attach the catalog's partitions ``conn`` lacks and detach the ones it no longer lists.

    Outside a transaction (SQLite refuses ATTACH and DETACH inside one).
    """
    attached = {str(r[1]) for r in conn.execute("PRAGMA database_list")}
    wanted = {schema(p): p for p in catalog.partitions if p.file != LEGACY_FILE}
    for name in sorted(attached):
        if name.startswith("p") and name[1:].isdigit() and name not in wanted:
            conn.execute(f"DETACH DATABASE {name}")
    for name, partition in wanted.items():
        if name not in attached:
            path = store_dir / partition.file
            conn.execute(f"ATTACH DATABASE ? AS {name}", (f"file:{path}?mode=rw",))
            # Per file: a commit that returned is on disk, as for events.db.
            conn.execute(f"PRAGMA {name}.synchronous = FULL")


def base(partition: Partition) -> int:
    """The number added to a partition's rowids to order them after earlier partitions'."""
    if partition.file == LEGACY_FILE:
        return 0
    return (partition.start // 60) << _ROWID_BITS


def global_rowid(partition: Partition, rowid: int) -> int:
    """A partition's rowid as one number ordered across partitions."""
    return base(partition) + rowid


__all__ = ["Executes", "On", "attach", "base", "each", "global_rowid", "qualify", "schema"]
