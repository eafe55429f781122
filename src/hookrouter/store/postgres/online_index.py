"""An index of a partitioned table built while its partitions take writes.

``CREATE INDEX`` on a partitioned table holds a SHARE lock on every
partition for the whole build (no insert gets through), and PostgreSQL has
no CONCURRENTLY form of it. So the index is made invalid on the parent alone
(``ON ONLY``); each partition's own index is built CONCURRENTLY and attached
to it; the parent's index turns valid when every partition has one.
Partitions created meanwhile get theirs from the parent as they are made.
Once valid, one short transaction drops the indexes it replaces and gives it
its final name (``finish``). The steps that need stronger locks than writers
tolerate go through ``ShortLocks``.

Every step can be repeated: a build interrupted by a crash resumes where it
stopped, and the INVALID leftover of a CONCURRENTLY build that failed is
dropped and built again.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Final

import asyncpg

from hookrouter.errors import StoreError
from hookrouter.store.postgres.conn import Conn
from hookrouter.store.postgres.short_locks import ShortLocks

log = logging.getLogger(__name__)

_PLAIN: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")

_PARTITIONS: Final = """
SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass($1) ORDER BY 1"""

# The partitions whose index is attached to the parent's index $1.
_ATTACHED: Final = """
SELECT t.relname FROM pg_inherits AS i
JOIN pg_index AS x ON x.indexrelid = i.inhrelid
JOIN pg_class AS t ON t.oid = x.indrelid
WHERE i.inhparent = to_regclass($1)"""

_ROUNDS: Final = 5
_VALID: Final = "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)"


@dataclass(frozen=True, slots=True)
class PartitionedIndex:
    """An index of ``table`` named ``name``, ``definition`` being what follows the table name."""

    table: str
    name: str
    definition: str
    replaces: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Names go into DDL unquoted: only the plain lower-case identifiers hookrouter uses.
        for ident in (self.table, self.name, *self.replaces):
            if not _PLAIN.fullmatch(ident):
                raise ValueError(f"not a plain identifier: {ident!r}")

    @property
    def building(self) -> str:
        """The parent's index while it is built (renamed to ``name`` by ``finish``)."""
        return f"{self.name}_building"

    def partition_index(self, partition: str) -> str:
        """The index of one partition, attached to ``building``."""
        return f"{partition}_{self.name.removeprefix(self.table + '_')}_ix"[:63]


async def build(conn: Conn, index: PartitionedIndex, locks: ShortLocks) -> None:
    """Make ``index.building`` valid on every partition of ``index.table``.

    ``conn`` must not be inside a transaction (CONCURRENTLY cannot run in one).
    """
    what = f"building index {index.name} of {index.table}"

    async def on_parent(c: Conn) -> None:
        await c.execute(
            f"CREATE INDEX IF NOT EXISTS {index.building} ON ONLY {index.table} {index.definition}"
        )

    await locks.transaction(conn, what, (index.table,), on_parent)
    # Partitions made during a round get their index from the parent: a second round
    # normally finds none left, and one that keeps finding some is a bug to report.
    for _ in range(_ROUNDS):
        missing = await _without_index(conn, index)
        if not missing:
            break
        log.info("%s: %d partition(s) to index", what, len(missing))
        for partition in missing:
            await _index_partition(conn, index, partition, locks, what)
    if not await conn.fetchval(_VALID, index.building):
        raise StoreError(
            f"{what}: {index.building} is still not valid after {_ROUNDS} rounds"
            f" (partitions without its index: {', '.join(await _without_index(conn, index))})",
            reason="migration_failed",
        )


async def finish(conn: Conn, index: PartitionedIndex) -> None:
    """Drop what ``index`` replaces and rename it (inside the caller's short-lock transaction)."""
    for old in index.replaces:
        await conn.execute(f"DROP INDEX IF EXISTS {old}")
    await conn.execute(f"ALTER INDEX {index.building} RENAME TO {index.name}")


async def _without_index(conn: Conn, index: PartitionedIndex) -> list[str]:
    partitions = [str(r[0]) for r in await conn.fetch(_PARTITIONS, index.table)]
    attached = {str(r[0]) for r in await conn.fetch(_ATTACHED, index.building)}
    return [p for p in partitions if p not in attached]


async def _index_partition(
    conn: Conn, index: PartitionedIndex, partition: str, locks: ShortLocks, what: str
) -> None:
    own = index.partition_index(partition)

    async def attach(c: Conn) -> None:
        await c.execute(f"ALTER INDEX {index.building} ATTACH PARTITION {own}")

    try:
        await _build_concurrently(conn, own, f"{partition} {index.definition}", locks.deadline)
        await locks.transaction(conn, what, (index.table, partition), attach)
    except (asyncpg.exceptions.UndefinedTableError, asyncpg.exceptions.UndefinedObjectError):
        pass  # retention dropped the partition meanwhile: nothing to index


async def _build_concurrently(conn: Conn, name: str, on: str, deadline: float) -> None:
    # A CONCURRENTLY build waits for older transactions to end but locks out no
    # writer, so it waits as long as they take (up to the deadline), not lock_timeout.
    await conn.execute("SET lock_timeout = 0")
    try:
        if await conn.fetchval(_VALID, name) is False:
            # What a failed CONCURRENTLY build leaves: unusable, yet written by every insert.
            await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}", timeout=deadline)
        await conn.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {on}", timeout=deadline
        )
    finally:
        await conn.execute("RESET lock_timeout")


__all__ = ["PartitionedIndex", "build", "finish"]
