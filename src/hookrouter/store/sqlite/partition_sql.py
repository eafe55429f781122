"""Running the store's SQL on one time partition: schema names, attachments, rowids.

Theory of operation
-------------------
Every connection of a store opens ``events.db`` as ``main`` (entities, the
catalog, the oldest partition) and attaches later partitions as
``p<start>`` when a statement first needs one (``Attachments``). The store's statements name their
tables unqualified (``events``, ``tenant_events``, ``tenant_runs``, ``deliveries``,
``attempts``, ``delivery_counts``, ``meta``); ``qualify`` prefixes those names with a
partition's schema, and ``On`` is a connection whose ``execute`` does that,
so a query written for one file runs unchanged on any partition. A
statement that must see every partition runs once per partition
(``Catalog.newest_first``); one about one event runs on the partition its
id routes to (``Catalog.route``): the writer inserts each event into that
partition, so the route is exact.

Attached on demand, because SQLite attaches at most ``SQLITE_LIMIT_ATTACHED``
files per connection (10 in Debian's 3.40, the dedup runs among them)
while a store keeps as many partitions as its retention spans. Each
connection made by ``schema.connect`` (a ``PartitionConnection``) keeps the
partitions it attached in least-recently-used order; ``On.execute`` attaches
the partition it runs on, detaching the least recently used one that no
statement or transaction holds (SQLite 3.40 allows ATTACH inside a
transaction, and DETACH of a file the transaction has not touched). The
writer pins the newest partition, so the per-event path never attaches. A
write-job transaction that would need more partitions than fit at once (a
walk over every partition) is committed in steps (``Attachments.split``,
set by ``batch.commit_jobs``): each such walk is a sequence of
per-partition statements that stand on their own.

Rowids stay per file. Where the store keeps one number for "every event up
to here" (the dedup tiers' ``flushed_rowid``), ``global_rowid`` places a
partition's rowids above every earlier partition's: ``base`` is the
bucket's start in minutes shifted past any rowid one file reaches.
"""

from __future__ import annotations

import re
import sqlite3
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final, Protocol

from hookrouter.store.sqlite.partitions import LEGACY_FILE, Catalog, Partition

# The tables a partition file holds where a statement names them as tables
# (``attempts`` is also a column of ``deliveries``), and ``events.`` as a
# column qualifier (``fanout.HAS_FRESH``).
_TABLE: Final = re.compile(
    r"\b(FROM|INTO|JOIN|UPDATE)(\s+)(?:main\.)?"
    r"(events|tenant_events|tenant_runs|deliveries|attempts|delivery_counts|meta)\b"
    r"|(?<![\w.])(events)\.(?=\w)",
    re.IGNORECASE,
)
_QUALIFIED: Final[dict[tuple[str, str], str]] = {}
_QUALIFIED_MAX: Final = 4096
# Rowids of one partition stay below 2**32 (billions of events per bucket).
_ROWID_BITS: Final = 32
_FULL: Final = 2  # PRAGMA synchronous = FULL


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
        """``conn.execute`` on this partition (attached first if it is not)."""
        return self.conn.execute(qualify(sql, ready(self.conn, self.partition)), params)

    def executemany(self, sql: str, rows: Iterable[Any]) -> sqlite3.Cursor:
        """``conn.executemany`` on this partition (attached first if it is not)."""
        return self.conn.executemany(qualify(sql, ready(self.conn, self.partition)), rows)

    @property
    def in_transaction(self) -> bool:
        """Whether the connection is inside a transaction."""
        return self.conn.in_transaction

    def __repr__(self) -> str:
        return f"On({self.name})"


def each(conn: sqlite3.Connection, catalog: Catalog) -> list[On]:
    """``conn`` on every partition, newest first (the order listings walk)."""
    return [On(conn, p) for p in catalog.newest_first()]


class PartitionConnection(sqlite3.Connection):
    """A store connection that attaches partitions on demand (``schema.connect`` makes these)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.attachments = Attachments(self)


class Attachments:
    """The partitions one connection has attached, least recently used first.

    At most as many as SQLite lets the connection attach beside what else it
    has attached (the dedup runs). ``pinned`` partitions are never detached
    to make room (the writer's newest). ``split``, when set, commits the
    current transaction, runs its argument and begins the next: called when
    every attached partition is held by that transaction and one more is
    needed.
    """

    __slots__ = ("_dir", "_owner", "attaches", "detaches", "names", "pinned", "split", "splits")

    def __init__(self, conn: sqlite3.Connection) -> None:
        # Weak: the connection holds this object, and a cycle between the two
        # would be freed only by the cyclic GC, in a pause of whichever thread.
        self._owner = weakref.ref(conn)
        self._dir: Path | None = None  # events.db's directory, read at the first attach
        self.names: OrderedDict[str, Partition] = OrderedDict()
        self.pinned: frozenset[str] = frozenset()
        self.split: Callable[[Callable[[], object]], None] | None = None
        self.attaches = 0
        self.detaches = 0
        self.splits = 0

    @property
    def _conn(self) -> sqlite3.Connection:
        conn = self._owner()
        if conn is None:  # only while the connection itself is being freed
            raise sqlite3.ProgrammingError("the connection is gone")
        return conn

    def want(self, partition: Partition) -> str:
        """The schema name of ``partition`` on this connection, attached now if it was not."""
        name = schema(partition)
        if name == "main":
            return name
        names = self.names
        if name in names:
            names.move_to_end(name)
            return name
        self._make_room()
        path = self._store_dir() / partition.file
        conn = self._conn
        conn.execute(f"ATTACH DATABASE ? AS {name}", (f"file:{path}?mode=rw",))
        names[name] = partition
        self.attaches += 1
        self._full_sync(name)
        return name

    def _full_sync(self, name: str) -> None:
        """Per file: a commit that returned is on disk, as for events.db (``schema.connect``).

        FULL is SQLite's default, so this is usually one read. The level may
        not change inside a transaction: a write job's is committed first; a
        reader's is left (it writes nothing).
        """
        conn = self._conn
        if int(conn.execute(f"PRAGMA {name}.synchronous").fetchone()[0]) >= _FULL:
            return
        sql = f"PRAGMA {name}.synchronous = FULL"
        if not conn.in_transaction:
            conn.execute(sql)
        elif self.split is not None:
            self.split(lambda: conn.execute(sql))
            self.splits += 1

    def keep(self, catalog: Catalog, pinned: Iterable[Partition] = ()) -> None:
        """Detach what ``catalog`` no longer lists (removed, or compacted into another file).

        Then attach ``pinned``. Outside a transaction: a partition retention
        removes is let go of here, before its file is unlinked.
        """
        # A compacted partition keeps its name but not its file (``compaction``).
        listed = {schema(p): p.file for p in catalog.partitions}
        for name in [n for n, p in self.names.items() if listed.get(n) != p.file]:
            if not self._detach(name):  # its file is about to be unlinked: never keep it
                raise sqlite3.OperationalError(f"cannot let go of removed partition {name}")
        wanted = [p for p in pinned if schema(p) != "main"]
        self.pinned = frozenset(schema(p) for p in wanted)
        for partition in wanted:
            self.want(partition)

    def _store_dir(self) -> Path:
        if self._dir is None:
            rows = self._conn.execute("PRAGMA database_list").fetchall()
            self._dir = Path(next(str(r[2]) for r in rows if r[1] == "main")).parent
        return self._dir

    def _room(self) -> int:
        """How many partitions fit beside the other files attached (read only when attaching)."""
        rows = self._conn.execute("PRAGMA database_list").fetchall()
        others = sum(1 for r in rows if r[1] not in ("main", "temp") and r[1] not in self.names)
        return self._conn.getlimit(sqlite3.SQLITE_LIMIT_ATTACHED) - others

    def _make_room(self) -> None:
        """Detach the least recently used partition no statement holds, while none is free."""
        room = self._room()
        while len(self.names) >= room:
            if self._detach_one():
                continue
            if self.split is None or not self._conn.in_transaction:
                raise sqlite3.OperationalError(
                    f"more than {room} time partitions are in use at once on one connection"
                )
            if not self._split_and_detach(self.split):
                raise sqlite3.OperationalError("no time partition could be detached")

    def _split_and_detach(self, split: Callable[[Callable[[], object]], None]) -> bool:
        """Every attached file is held by the transaction (BEGIN IMMEDIATE takes them all):
        detach one between its commit and the next."""
        freed: list[bool] = []
        split(lambda: freed.append(self._detach_one()))
        self.splits += 1
        return freed == [True]

    def _detach_one(self) -> bool:
        # Least recently used first; ``any`` stops at the first one detached.
        return any(name not in self.pinned and self._detach(name) for name in list(self.names))

    def _detach(self, name: str) -> bool:
        try:
            self._conn.execute(f"DETACH DATABASE {name}")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            return False  # a statement or the open transaction uses it
        del self.names[name]
        self.detaches += 1
        return True

    def __repr__(self) -> str:
        return (
            f"Attachments(attached={len(self.names)}, pinned={len(self.pinned)}, "
            f"attaches={self.attaches}, detaches={self.detaches}, splits={self.splits})"
        )


def attachments_of(conn: sqlite3.Connection) -> Attachments | None:
    """``conn``'s attachments; None for a connection not made by ``schema.connect``."""
    return conn.attachments if isinstance(conn, PartitionConnection) else None


def attached(conn: sqlite3.Connection, partition: Partition) -> bool:
    """Whether ``partition`` is attached to ``conn`` now (always, on a bare connection)."""
    attachments = attachments_of(conn)
    name = schema(partition)
    return attachments is None or name == "main" or name in attachments.names


def ready(conn: sqlite3.Connection, partition: Partition) -> str:
    """The schema name of ``partition`` on ``conn``, attaching it first if need be."""
    if isinstance(conn, PartitionConnection):
        return conn.attachments.want(partition)
    return schema(partition)  # a bare connection: its caller attached what it needs


def attach(conn: sqlite3.Connection, catalog: Catalog, pinned: Iterable[Partition] = ()) -> None:
    """Bring ``conn`` in line with ``catalog``: let go of removed partitions, attach ``pinned``.

    Every other partition is attached when a statement needs it (``ready``).
    """
    attachments = attachments_of(conn)
    if attachments is not None:
        attachments.keep(catalog, pinned)


def base(partition: Partition) -> int:
    """The number added to a partition's rowids to order them after earlier partitions'."""
    if partition.file == LEGACY_FILE:
        return 0
    return (partition.start // 60) << _ROWID_BITS


def global_rowid(partition: Partition, rowid: int) -> int:
    """A partition's rowid as one number ordered across partitions."""
    return base(partition) + rowid


__all__ = [
    "Attachments",
    "Executes",
    "On",
    "PartitionConnection",
    "attach",
    "attached",
    "attachments_of",
    "base",
    "each",
    "global_rowid",
    "qualify",
    "ready",
    "schema",
]
