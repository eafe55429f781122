"""The PostgreSQL backend's entry in the backend table: ``[store.postgres]`` options.

* ``dsn`` (required): a libpq URI; several hosts with
  ``target_session_attrs=read-write`` follow a failover. ``env:NAME`` reads it
  from the environment (it may hold a password).
* ``pool_size`` (default 8): connections per node.
* ``partitions`` (default 256): tenant hash partitions, the unit of ownership
  in a cluster; fixed when the schema is created.
* ``schema`` (default ``public``): where the tables live, created if missing.

``[store] path`` is not used. There is no ``hookrouter backup`` for this
backend: PostgreSQL's own tools (``pg_dump``, ``pg_basebackup``) do it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from hookrouter.clock import Clock
from hookrouter.config.reader import TableReader
from hookrouter.store.backends import BACKENDS, Backup, OptionsInput
from hookrouter.store.base import EventStore
from hookrouter.store.postgres.schema import DEFAULT_PARTITIONS, MAX_PARTITIONS
from hookrouter.store.postgres.store import DEFAULT_POOL_SIZE, PostgresStore

NAME: Final = "postgres"


@dataclass(frozen=True, slots=True)
class PostgresOptions:
    """``[store.postgres]``, validated."""

    dsn: str = ""
    pool_size: int = DEFAULT_POOL_SIZE
    partitions: int = DEFAULT_PARTITIONS
    schema: str = "public"


def parse_options(given: OptionsInput) -> PostgresOptions:
    """``[store.postgres]``, problems by key path; other keys under [store] are problems too."""
    own = TableReader({} if given.own is None else given.own, f"store.{NAME}", given.issues)
    options = PostgresOptions(
        dsn=own.secret("dsn", required=True),
        pool_size=own.integer("pool_size", DEFAULT_POOL_SIZE, minimum=2, maximum=1000),
        partitions=own.integer("partitions", DEFAULT_PARTITIONS, minimum=1, maximum=MAX_PARTITIONS),
        schema=own.string("schema", "public") or "public",
    )
    if options.dsn and not options.dsn.startswith(("postgresql://", "postgres://")):
        own.problem("dsn", "must be a postgresql:// URI")
    own.finish()
    # Another backend's own table may stay in the file while this one is chosen.
    TableReader(given.legacy, "store", given.issues).finish(extra_known=tuple(BACKENDS))
    return options


class PostgresBackend:
    """``StoreBackend`` for ``PostgresStore``."""

    name: Final = NAME

    def parse_options(self, given: OptionsInput) -> PostgresOptions:
        return parse_options(given)

    def open(self, path: Path, options: object, *, clock: Clock) -> PostgresStore:
        assert isinstance(options, PostgresOptions), options
        return PostgresStore(
            options.dsn,
            clock=clock,
            pool_size=options.pool_size,
            partitions=options.partitions,
            schema_name=options.schema,
        )

    @property
    def store_class(self) -> Callable[..., EventStore]:
        return PostgresStore

    def prepare_process(self) -> None:
        """Nothing process-wide: asyncpg needs no set-up."""

    @property
    def backup(self) -> Backup | None:
        return None


BACKEND: Final = PostgresBackend()

__all__ = ["BACKEND", "PostgresBackend", "PostgresOptions", "parse_options"]
