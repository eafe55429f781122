"""The SQLite backend's entry in the backend table: options, set-up, backup.

``[store.sqlite]`` holds what only this backend reads:

* ``grouping``: ``"loop"`` commits once per event-loop turn (the default,
  the faster design on a small host), ``"thread"`` on a writer thread (less
  event-loop CPU per event, steadier loop latency; ``store.py`` says why).
* ``bucket``: the length of a time partition (``partitions``), a duration
  from one minute to seven days; one hour when not set, ``"off"`` for the
  single-file layout.
* ``[store.sqlite.dedup]``: ``hot_keys`` (keys kept in memory before they are
  written as a run) and ``fanout`` (runs per level before a merge).

Both were once read directly under ``[store]`` (``store.grouping``,
``[store.dedup]``); they are still accepted there, with a warning that names
the new key, and checked with their old key paths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, cast, get_args

from hookrouter.clock import Clock
from hookrouter.config.durations import parse_duration
from hookrouter.config.reader import TableReader
from hookrouter.errors import ConfigIssue
from hookrouter.store.backends import Backup, OptionsInput
from hookrouter.store.base import EventStore
from hookrouter.store.sqlite import backup, process
from hookrouter.store.sqlite.dedup_tiers import TierPolicy
from hookrouter.store.sqlite.partitions import (
    DEFAULT_BUCKET_SECONDS,
    MAX_BUCKET_SECONDS,
    MIN_BUCKET_SECONDS,
)
from hookrouter.store.sqlite.store import DEFAULT_GROUPING, Grouping, SqliteStore

NAME: Final = "sqlite"
# ``bucket = "off"``: the single-file layout, every event in ``events.db``.
BUCKET_OFF: Final = "off"
_BUCKET_HINT: Final = f' (or "{BUCKET_OFF}" for a single file)'
# Keys this backend once read directly under [store].
LEGACY_KEYS: Final = ("grouping", "dedup")


@dataclass(frozen=True, slots=True)
class SqliteOptions:
    """``[store.sqlite]``, validated."""

    grouping: Grouping = DEFAULT_GROUPING
    dedup: TierPolicy = field(default_factory=TierPolicy)
    # None (``bucket = "off"``): the writer never switches partitions.
    bucket_seconds: int | None = DEFAULT_BUCKET_SECONDS


def parse_options(given: OptionsInput) -> SqliteOptions:
    """``[store.sqlite]`` (and the old keys under ``[store]``), problems by key path."""
    own = TableReader({} if given.own is None else given.own, f"store.{NAME}", given.issues)
    legacy = TableReader(given.legacy, "store", given.issues)
    readers = {key: _reader_for(key, own, legacy, given.warnings) for key in LEGACY_KEYS}
    grouping = readers["grouping"].choice("grouping", get_args(Grouping), DEFAULT_GROUPING)
    dedup = parse_dedup(readers["dedup"].sub("dedup"))
    bucket = parse_bucket(own)
    own.finish()
    legacy.finish()
    return SqliteOptions(grouping=cast(Grouping, grouping), dedup=dedup, bucket_seconds=bucket)


def parse_bucket(r: TableReader) -> int | None:
    """``bucket``: a duration, whole seconds, between ``MIN`` and ``MAX_BUCKET_SECONDS``.

    Not set: ``DEFAULT_BUCKET_SECONDS`` (issue 34: on by default). ``"off"``:
    None, the single-file layout; the store's constructor keeps None as its
    own default for library use.
    """
    value = r.raw("bucket")
    if value is None:
        return DEFAULT_BUCKET_SECONDS
    if value == BUCKET_OFF:
        return None
    if not isinstance(value, str):
        r.problem("bucket", f'must be a duration string such as "1h"{_BUCKET_HINT}')
        return DEFAULT_BUCKET_SECONDS
    try:
        seconds = parse_duration(value, maximum=MAX_BUCKET_SECONDS)
    except ValueError as exc:
        r.problem("bucket", f"{exc}{_BUCKET_HINT}")
        return DEFAULT_BUCKET_SECONDS
    if seconds < MIN_BUCKET_SECONDS or seconds != int(seconds):
        r.problem("bucket", f"must be whole seconds and at least one minute, got {value!r}")
        return DEFAULT_BUCKET_SECONDS
    return int(seconds)


def _reader_for(
    key: str, own: TableReader, legacy: TableReader, warnings: list[ConfigIssue]
) -> TableReader:
    """Where ``key`` is read: its own table, else its old place under [store] (with a warning)."""
    if not legacy.has(key):
        return own
    new_path = own.key_path(key)
    if own.has(key):
        legacy.raw(key)  # seen: the warning says what happened to it
        warnings.append(ConfigIssue(legacy.key_path(key), f"is ignored: {new_path} is set"))
        return own
    warnings.append(ConfigIssue(legacy.key_path(key), f"is deprecated: move it to {new_path}"))
    return legacy


def parse_dedup(r: TableReader | None) -> TierPolicy:
    """``dedup``: ``hot_keys`` (keys kept in memory before a flush), ``fanout``."""
    default = TierPolicy()
    if r is None:
        return default
    policy = TierPolicy(
        # 1k..16M: below, runs are tiny and merges constant; above, GBs of memory.
        hot_limit=r.integer("hot_keys", default.hot_limit, minimum=1024, maximum=1 << 24),
        fanout=r.integer("fanout", default.fanout, minimum=2, maximum=64),
    )
    r.finish()
    return policy


class SqliteBackend:
    """``StoreBackend`` for ``SqliteStore``."""

    name: Final = NAME

    def parse_options(self, given: OptionsInput) -> SqliteOptions:
        return parse_options(given)

    def open(self, path: Path, options: object, *, clock: Clock) -> SqliteStore:
        assert isinstance(options, SqliteOptions), options
        return SqliteStore(
            path,
            clock=clock,
            grouping=options.grouping,
            dedup_policy=options.dedup,
            bucket_seconds=options.bucket_seconds,
        )

    @property
    def store_class(self) -> Callable[..., EventStore]:
        return SqliteStore

    def prepare_process(self) -> None:
        process.disable_memory_status()  # before any connection opens (see the module)
        process.register_identity_adapters()

    @property
    def backup(self) -> Backup:
        return _backup


def _backup(store_path: Path, dest: Path, overwrite: bool) -> backup.BackupResult:
    return backup.backup(store_path, dest, overwrite=overwrite)


BACKEND: Final = SqliteBackend()

__all__ = [
    "BACKEND",
    "BUCKET_OFF",
    "LEGACY_KEYS",
    "SqliteBackend",
    "SqliteOptions",
    "parse_options",
]
