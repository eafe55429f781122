"""Time partitions of the SQLite store: buckets, their catalog, routing by event id.

Theory of operation
-------------------
Issue 34's layout keeps each time bucket's events, with their deliveries,
attempts and delivery counts, in a file of its own, so that the B-trees the
hot path touches stay the size of one bucket and retention unlinks a file
instead of deleting rows (docs/performance.md, "The store at scale"). This
module is the layout's bookkeeping, which every other step reads:

* **Buckets** are multiples of the bucket length since the Unix epoch (UTC),
  so a bucket's start is a function of a time alone. An event id begins
  with its arrival millisecond (``hookrouter.ids``), so the id names its
  bucket and a lookup by id is one probe of one partition.
* The **catalog** is the table ``partitions`` in ``events.db`` (schema
  version 8): one row per partition with its bucket start, its end (NULL
  for the newest, the one the writer commits to), its file and its state.
  Moving the writer to a new bucket is one transaction on this table
  (``record_switch``), so a restart after kill -9 finds the newest partition
  the writer last committed to, never a half-made one. Retention marks a
  partition ``dropping`` before it unlinks the file and forgets the row
  after, so a crash in between is finished at the next open.
* ``events.db`` keeps the entities, ``meta`` and the catalog, and is itself
  the **oldest partition** (start 0): a store written before version 8 is
  read in place, nothing copied. Its rows leave through today's row
  retention; the files of later buckets are unlinked whole.
"""

from __future__ import annotations

import bisect
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from hookrouter.ids import event_id_time_ms

PartitionState = Literal["live", "sealed", "dropping"]

# The single-file layout's file, which stays the catalog and oldest partition.
LEGACY_FILE: Final = "events.db"
# The config's bucket when ``[store.sqlite] bucket`` is not set: one hour
# keeps a partition below the size at which the open-loop tail grew
# (docs/performance.md, "On by default"). ``SqliteStore`` alone does not switch.
DEFAULT_BUCKET_SECONDS: Final = 3600
MIN_BUCKET_SECONDS: Final = 60
MAX_BUCKET_SECONDS: Final = 7 * 86400

CATALOG_SQL: Final = "SELECT start, until, file, state FROM partitions ORDER BY start"


@dataclass(frozen=True, slots=True)
class Partition:
    """One bucket's file: events received in ``[start, end)`` (seconds, UTC)."""

    start: int
    end: int | None  # None: the newest partition, open-ended
    file: str
    state: PartitionState = "live"

    def holds(self, seconds: float) -> bool:
        """True when an event received at ``seconds`` belongs here."""
        return self.start <= seconds and (self.end is None or seconds < self.end)


LEGACY: Final = Partition(0, None, LEGACY_FILE)


def bucket_start(seconds: float, length: int) -> int:
    """The start of the bucket of ``length`` seconds holding the time ``seconds``."""
    if length < 1:
        raise ValueError(f"bucket length must be at least one second, got {length}")
    return int(seconds // length) * length


def partition_file(start: int) -> str:
    """The file name of the partition whose bucket begins at ``start``."""
    return time.strftime("events-%Y%m%dT%H%M%SZ.db", time.gmtime(start))


class Catalog:
    """The partitions a store reads, oldest first (``dropping`` ones left out)."""

    __slots__ = ("_partitions", "_starts")

    def __init__(self, partitions: Iterable[Partition] = (LEGACY,)) -> None:
        kept = sorted((p for p in partitions if p.state != "dropping"), key=lambda p: p.start)
        if not kept:
            raise ValueError("a store has at least one partition")
        if kept[-1].end is not None:
            raise ValueError(f"the newest partition ({kept[-1].file}) must be open-ended")
        self._partitions: tuple[Partition, ...] = tuple(kept)
        self._starts = [p.start for p in kept]

    @property
    def partitions(self) -> tuple[Partition, ...]:
        """Every readable partition, oldest first."""
        return self._partitions

    @property
    def newest(self) -> Partition:
        """The partition the writer commits to."""
        return self._partitions[-1]

    def newest_first(self) -> tuple[Partition, ...]:
        """The order listings walk, so that ``limit`` stops the walk early."""
        return self._partitions[::-1]

    def route_time(self, seconds: float) -> Partition:
        """The partition of an event received at ``seconds``.

        Times before the oldest bucket go to the oldest partition and times
        past the newest bucket's start (a clock ahead) to the newest: the
        writer never has a second file open for them.
        """
        index = bisect.bisect_right(self._starts, seconds) - 1
        return self._partitions[max(index, 0)]

    def route(self, event_id: str) -> Partition:
        """The partition holding ``event_id``; ``ValueError`` when it is no event id."""
        return self.route_time(event_id_time_ms(event_id) / 1000)

    def holding(self, event_id: str) -> Partition:
        """``route``, but the newest partition for a string that is no event id."""
        try:
            return self.route(event_id)
        except ValueError:  # only the newest partition could hold it
            return self.newest

    def overlapping(self, since: float | None, until: float | None) -> tuple[Partition, ...]:
        """The partitions an arrival window ``[since, until)`` touches, newest first."""
        return tuple(
            p
            for p in self.newest_first()
            if (until is None or p.start < until)
            and (since is None or p.end is None or since < p.end)
        )


class Settled:
    """Sealed partitions known to hold no open delivery and no fresh one: walks skip them.

    A walk after open work (page-in, due retries, counts) would otherwise
    attach every partition of a long retention, several times a second.
    Learned when a walk finds a sealed partition idle; forgotten when the
    writer inserts a late event into it or a replay reopens a delivery in
    it, the only ways a delivery becomes open again (``store.lifecycle``).
    Empty at open: every partition is visited until found idle. Written on
    the writer's thread; a new frozenset each time, so readers need no lock.
    """

    __slots__ = ("_starts",)

    def __init__(self) -> None:
        self._starts: frozenset[int] = frozenset()

    def skip(self, partition: Partition) -> bool:
        """True when ``partition`` is known idle (never the newest, which takes events)."""
        return partition.start in self._starts

    def add(self, partition: Partition) -> None:
        """``partition`` was found idle (sealed ones only)."""
        if partition.end is not None and partition.start not in self._starts:
            self._starts = self._starts | {partition.start}

    def discard(self, partition: Partition) -> None:
        """``partition`` may hold open work again."""
        if partition.start in self._starts:
            self._starts = self._starts - {partition.start}

    def __len__(self) -> int:
        return len(self._starts)

    def __repr__(self) -> str:
        return f"Settled({len(self._starts)} partitions)"


def has_catalog(conn: sqlite3.Connection) -> bool:
    """True when the file has the ``partitions`` table (schema version 8 and later)."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'partitions'"
    ).fetchone()
    return row is not None


def load(conn: sqlite3.Connection) -> Catalog:
    """The catalog stored in ``events.db`` (the legacy partition alone before version 8)."""
    if not has_catalog(conn):
        return Catalog()
    rows = conn.execute(CATALOG_SQL).fetchall()
    return Catalog(Partition(int(r[0]), r[1], str(r[2]), r[3]) for r in rows)


def record_switch(conn: sqlite3.Connection, start: int) -> Partition:
    """Seal the newest partition at ``start`` and record the new one (caller's transaction).

    The new bucket's file must exist already (created ahead of time). A
    start that is not after the newest partition's is refused: buckets only
    move forward, whatever the clock did.
    """
    newest = load(conn).newest
    if start <= newest.start:
        raise ValueError(f"a new bucket must start after {newest.start}, not at {start}")
    conn.execute("UPDATE partitions SET until = ?, state = 'sealed' WHERE until IS NULL", (start,))
    added = Partition(start, None, partition_file(start))
    conn.execute(
        "INSERT INTO partitions (start, until, file, state) VALUES (?, NULL, ?, 'live')",
        (start, added.file),
    )
    return added


def mark_dropping(conn: sqlite3.Connection, start: int) -> None:
    """Retention's first step: readers stop seeing the partition from the next load."""
    conn.execute(
        "UPDATE partitions SET state = 'dropping' WHERE start = ? AND state = 'sealed'", (start,)
    )


def forget(conn: sqlite3.Connection, start: int) -> None:
    """Retention's last step, once the file is gone."""
    conn.execute("DELETE FROM partitions WHERE start = ? AND state = 'dropping'", (start,))


def replace_file(conn: sqlite3.Connection, start: int, old: str, new: str) -> None:
    """Compaction's swap: the sealed partition at ``start`` is in ``new`` (caller's transaction)."""
    changed = conn.execute(
        "UPDATE partitions SET file = ? WHERE start = ? AND file = ? AND state = 'sealed'",
        (new, start, old),
    ).rowcount
    if changed != 1:
        raise sqlite3.OperationalError(f"partition {old} is no longer sealed in the catalog")


def dropping(conn: sqlite3.Connection) -> list[Partition]:
    """Partitions whose removal a crash interrupted (finished at open)."""
    if not has_catalog(conn):
        return []
    rows = conn.execute(
        "SELECT start, until, file, state FROM partitions WHERE state = 'dropping'"
    ).fetchall()
    return [Partition(int(r[0]), r[1], str(r[2]), r[3]) for r in rows]


__all__ = [
    "CATALOG_SQL",
    "DEFAULT_BUCKET_SECONDS",
    "LEGACY",
    "LEGACY_FILE",
    "MAX_BUCKET_SECONDS",
    "MIN_BUCKET_SECONDS",
    "Catalog",
    "Partition",
    "PartitionState",
    "Settled",
    "bucket_start",
    "dropping",
    "forget",
    "has_catalog",
    "load",
    "mark_dropping",
    "partition_file",
    "record_switch",
    "replace_file",
]
