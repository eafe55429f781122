"""The dedup tiers on SQLite: the runs file, probes, and opening (recovery).

Runs live in ``<path>/dedup.db``, beside ``events.db``, written only by the
dedup worker (``dedup_worker``) so that flushes and merges never hold
the events writer. The file is derived data: everything in it can be rebuilt
from ``events``, so it is written with ``synchronous=NORMAL`` (consistent
after a crash, perhaps a few commits behind, which ``flushed_rowid`` tells).
The events writer and reader attach it read-only as ``dd``.

Tables: ``runs`` (one row per run: level, key count, state ``building``,
``live`` or ``dead``), one table ``run_<id>`` (``dedup_tiers.key_hash`` of
the key, event id; ``WITHOUT ROWID``) per run, so that a replaced run goes
with one ``DROP TABLE`` instead of a delete per key, and ``meta``
(``store_id``, ``flushed_rowid``, ``key_hash``: the name of the hash function
the runs were written with).

Opening (``open_tiers``): runs that were being built or were already
replaced are deleted; if the file is missing, belongs to another store, was
written with another key hash (an upgrade), or is ahead of ``events`` (a
backup of ``events.db`` restored beside a newer ``dedup.db``), it is emptied
and every stored key is written into one run; then each live run's filter is
rebuilt by reading its hashes and the hot tier from the events
above ``flushed_rowid``.
"""

from __future__ import annotations

import logging
import math
import secrets
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final

import orjson
from rbloom import Bloom

from hookrouter.store.base import NewEvent
from hookrouter.store.sqlite import partition_sql
from hookrouter.store.sqlite.dedup_tiers import (
    IDLE,
    KEY_HASH_NAME,
    DedupTiers,
    Run,
    TierPolicy,
    dedup_key,
    key_hash,
)
from hookrouter.store.sqlite.partitions import LEGACY_FILE, Catalog, Partition

log = logging.getLogger(__name__)

DEDUP_FILENAME: Final = "dedup.db"
ATTACHED_AS: Final = "dd"
_EVENTS_AS: Final = "ev"  # events.db, as the dedup worker's connection attaches it

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS runs (run INTEGER PRIMARY KEY, level INTEGER NOT NULL,"
    " keys INTEGER NOT NULL, state TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID",
)
EXISTING_SQL: Final = (
    "SELECT event_id FROM events WHERE event_id IN (SELECT j.value FROM json_each(?) AS j)"
)
CONFIRM_SQL: Final = (
    "SELECT event_id FROM events WHERE event_id = ?1 AND source_id = ?2 AND provider_event_id = ?3"
)


# The catalog of a store that never switched: events.db alone.
SINGLE_FILE: Final = Catalog()


def run_table(run_id: int) -> str:
    """The table holding one run (ids are ours, never user input)."""
    return f"run_{int(run_id)}"


def create_run_sql(run_id: int) -> str:
    """DDL of one run's table: (hash, event id) pairs, a hash may repeat."""
    return (
        f"CREATE TABLE {run_table(run_id)} (h INTEGER NOT NULL, event_id TEXT NOT NULL,"
        " PRIMARY KEY (h, event_id)) WITHOUT ROWID"
    )


def probe_sql(run_id: int) -> str:
    """An events connection's lookup of one hashed key in one run, confirmed on the event."""
    return (
        f"SELECT e.event_id FROM {ATTACHED_AS}.{run_table(run_id)} AS r"
        " JOIN main.events AS e ON e.event_id = r.event_id"
        " WHERE r.h = ?1 AND e.source_id = ?2 AND e.provider_event_id = ?3"
    )


def run_ids_sql(run_id: int) -> str:
    """The event ids one run holds for a hashed key (to be confirmed in their partitions)."""
    return f"SELECT event_id FROM {ATTACHED_AS}.{run_table(run_id)} WHERE h = ?"


def dedup_path(store_dir: Path) -> Path:
    """Where a store directory keeps its dedup runs."""
    return store_dir / DEDUP_FILENAME


def attach_runs(conn: sqlite3.Connection, path: Path) -> None:
    """Attach the runs file read-only to an events connection (the writer's, the reader's).

    A runs file deleted under a running store (the writer reconnects after
    the events file was restored, say) is created again, empty, so that the
    store keeps serving; duplicates of events older than the hot tier then go
    unnoticed until the next open rebuilds the file, which is logged.
    """
    if not path.exists():
        log.error("hookrouter dedup: %s is missing; restart to rebuild it from the events", path)
        connect_runs(path, None).close()
    conn.execute(f"ATTACH DATABASE ? AS {ATTACHED_AS}", (f"file:{path}?mode=ro",))


# ---- probes -------------------------------------------------------------------


def find_originals(
    conn: sqlite3.Connection,
    tiers: DedupTiers,
    events: Sequence[NewEvent],
    catalog: Catalog = SINGLE_FILE,
) -> tuple[list[str | None], list[str | None] | None]:
    """Committer: each event's dedup key, and what each duplicate duplicates.

    Returns ``(keys, originals)``; ``originals`` is None when no event of the
    batch is a duplicate (the usual case), else aligned with ``events``: the
    stored (or earlier in-batch) event's id, or None for a new event.
    """
    keys: list[str | None] = [
        None if e.provider_event_id is None else dedup_key(e.source_id, e.provider_event_id)
        for e in events
    ]
    stored = _stored(conn, tiers, events, keys, catalog)
    originals: list[str | None] = [None] * len(events)
    first: dict[str, str] = {}
    duplicates = False
    for index, key in enumerate(keys):
        if key is None:
            continue
        original = stored.get(index) if stored else None
        if original is None:
            original = first.get(key)
        if original is None:
            first[key] = events[index].event_id
        else:
            originals[index] = original
            duplicates = True
    return keys, (originals if duplicates else None)


def _stored(
    conn: sqlite3.Connection,
    tiers: DedupTiers,
    events: Sequence[NewEvent],
    keys: list[str | None],
    catalog: Catalog,
) -> dict[int, str] | None:
    """Index -> id of the stored event with that key (confirmed to exist), or None if none."""
    pins = tiers.pins
    pins.committer = tiers.generation
    try:
        hot = tiers.hot
        flushing = tiers.flushing  # before ``runs``: see dedup_tiers
        runs = tiers.runs
        in_memory: dict[int, str] | None = None
        found: dict[int, str] | None = None
        for index, key in enumerate(keys):
            if key is None:
                continue
            hit = hot.get(key)
            if hit is None and flushing is not None:
                hit = flushing.get(key)
            if hit is not None:
                in_memory = in_memory or {}
                in_memory[index] = hit
                continue
            if runs:
                hashed = key_hash(key)
                candidates = tiers.runs_that_may_hold(hashed, runs)
                if candidates:
                    event = events[index]
                    row = _probe_runs(conn, tiers, candidates, hashed, event, catalog=catalog)
                    if row is not None:
                        found = found or {}
                        found[index] = row
    finally:
        pins.committer = IDLE
    if in_memory:
        existing = _existing(conn, in_memory.values(), catalog)
        for index, event_id in in_memory.items():
            if event_id in existing:
                found = found or {}
                found[index] = event_id
    return found


def _probe_runs(
    conn: sqlite3.Connection,
    tiers: DedupTiers,
    candidates: list[int],
    hashed: int,
    event: NewEvent,
    *,
    catalog: Catalog,
) -> str | None:
    tiers.filter_hits += 1
    assert event.provider_event_id is not None  # keyed events only
    found = _first_in_runs(
        conn, candidates, hashed, (event.source_id, event.provider_event_id), catalog
    )
    if found is None:
        tiers.filter_false_positives += 1  # or the key's event was deleted
    return found


def _first_in_runs(
    conn: sqlite3.Connection,
    candidates: list[int],
    hashed: int,
    key: tuple[str, str],
    catalog: Catalog,
) -> str | None:
    """The event of the newest of ``candidates`` that holds this key for an existing event.

    With time partitions, the run gives the event ids and each is confirmed
    in the one partition its id names: a probe attaches one file, not all.
    """
    for run_id in candidates:
        try:
            if len(catalog.partitions) == 1:
                found = conn.execute(probe_sql(run_id), (hashed, *key)).fetchone()
                if found is not None:
                    return str(found[0])
                continue
            found = _confirmed(conn, run_id, hashed, key, catalog)
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            continue  # a runs file recreated under a running store (``attach_runs``)
        if found is not None:
            return found
    return None


def _confirmed(
    conn: sqlite3.Connection, run_id: int, hashed: int, key: tuple[str, str], catalog: Catalog
) -> str | None:
    """The newest event id of one run's ``hashed`` entries whose event holds ``key``."""
    ids = [str(r[0]) for r in conn.execute(run_ids_sql(run_id), (hashed,)).fetchall()]
    for event_id in sorted(ids, reverse=True):
        part = partition_sql.On(conn, catalog.holding(event_id))
        if part.execute(CONFIRM_SQL, (event_id, *key)).fetchone() is not None:
            return event_id
    return None


def _existing(
    conn: sqlite3.Connection, event_ids: Iterable[str], catalog: Catalog = SINGLE_FILE
) -> set[str]:
    """The ids of ``event_ids`` that are stored, each looked for in the partition it names."""
    groups: dict[Partition, list[str]] = {}
    for event_id in set(event_ids):
        groups.setdefault(catalog.holding(event_id), []).append(event_id)
    found: set[str] = set()
    for partition, ids in groups.items():
        part = partition_sql.On(conn, partition)
        rows = part.execute(EXISTING_SQL, (orjson.dumps(sorted(ids)),)).fetchall()
        found.update(str(r[0]) for r in rows)
    return found


def find_stored(
    conn: sqlite3.Connection,
    tiers: DedupTiers,
    source_id: str,
    provider_event_id: str,
    catalog: Catalog = SINGLE_FILE,
) -> str | None:
    """Read thread: the id of the stored event with this dedup key, or None."""
    key = dedup_key(source_id, provider_event_id)
    pins = tiers.pins
    pins.reader = tiers.generation
    try:
        hit = tiers.find_in_memory(key)
        runs = tiers.runs  # after the flushing tier: see dedup_tiers
        if hit is not None:
            return hit if _existing(conn, (hit,), catalog) else None
        hashed = key_hash(key)
        candidates = tiers.runs_that_may_hold(hashed, runs)
        return _first_in_runs(conn, candidates, hashed, (source_id, provider_event_id), catalog)
    finally:
        pins.reader = IDLE


# ---- opening ------------------------------------------------------------------


def connect_runs(path: Path, events_db: Path | None) -> sqlite3.Connection:
    """The dedup worker's connection: the runs file, with ``events_db`` attached read-only."""
    conn = sqlite3.connect(
        f"file:{path}?mode=rwc", uri=True, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        # Derived data: a crash may lose the newest commits, never consistency.
        conn.execute("PRAGMA synchronous = NORMAL")
        # 8 MiB: a level-0 run being written (~1.5 MiB per 32k keys) stays in
        # the cache until its commit, so each of its pages is written once,
        # whatever the order of its keys; merges write in order anyway.
        conn.execute("PRAGMA cache_size = -8192")
        # A flush chunk or merge chunk is one statement inside a bigger
        # transaction, so SQLite keeps a statement journal for it; past 64 KiB
        # that spilled to a temporary file (~0.6 pwrite64 and ~1.3 KB per
        # event end to end). In memory it stays bounded by one chunk's pages.
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute("PRAGMA busy_timeout = 5000")
        for statement in _SCHEMA:
            conn.execute(statement)
        if events_db is not None:
            conn.execute(f"ATTACH DATABASE ? AS {_EVENTS_AS}", (f"file:{events_db}?mode=ro",))
    except BaseException:
        conn.close()
        raise
    return conn


def ensure_store_id(events_conn: sqlite3.Connection) -> str:
    """The events file's random identity (written once, at its first open)."""
    events_conn.execute(
        "INSERT INTO meta (key, value) VALUES ('store_id', ?) ON CONFLICT DO NOTHING",
        (secrets.token_hex(16),),
    )
    return str(events_conn.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()[0])


def open_tiers(
    conn: sqlite3.Connection,
    store_id: str,
    policy: TierPolicy,
    store_dir: Path | None = None,
    catalog: Catalog = SINGLE_FILE,
) -> DedupTiers:
    """Recover the tiers from the runs file ``conn`` (see module docstring).

    Rowids are ``partition_sql.global_rowid``s: one number orders the
    events of every partition of ``catalog`` (files in ``store_dir``).
    """
    _drop_unfinished(conn)
    return _recover(conn, store_id, policy, _EventFiles(conn, store_dir, catalog))


class _EventFiles:
    """Each partition's events as the runs connection reads them, one file attached at a time.

    One at a time: a store may keep more partitions than SQLite attaches
    to one connection (``partition_sql``).
    """

    __slots__ = ("_catalog", "_conn", "_dir")

    def __init__(self, conn: sqlite3.Connection, store_dir: Path | None, catalog: Catalog) -> None:
        self._conn, self._dir, self._catalog = conn, store_dir, catalog

    def each(self) -> Iterator[tuple[Partition, str]]:
        """(partition, schema name), oldest first; each file is detached before the next."""
        for partition in self._catalog.partitions:
            if partition.file == LEGACY_FILE or self._dir is None:
                yield partition, _EVENTS_AS
                continue
            name = f"{_EVENTS_AS}{partition_sql.schema(partition)}"
            path = self._dir / partition.file
            self._conn.execute(f"ATTACH DATABASE ? AS {name}", (f"file:{path}?mode=ro",))
            try:
                yield partition, name
            finally:
                self._conn.execute(f"DETACH DATABASE {name}")


def _recover(
    conn: sqlite3.Connection,
    store_id: str,
    policy: TierPolicy,
    parts: _EventFiles,
) -> DedupTiers:
    flushed = _flushed_rowid(conn, store_id, parts)
    if flushed is None:
        flushed = _rebuild(conn, store_id, policy, parts)
    live = conn.execute(
        "SELECT run, level, keys FROM runs WHERE state = 'live' ORDER BY run DESC"
    ).fetchall()
    run_keys = sum(int(count) for _, _, count in live)
    summary, capacity = policy.new_summary(run_keys)
    runs = tuple(
        load_run(conn, policy, run_id, level, count, summary=summary)
        for run_id, level, count in live
    )
    tiers = DedupTiers(policy, runs, flushed)
    tiers.install_summary(summary, capacity - run_keys)
    for partition, name in parts.each():
        after = flushed - partition_sql.base(partition)
        rows = conn.execute(
            f"SELECT source_id, provider_event_id, event_id FROM {name}.events"
            " WHERE rowid > ? AND provider_event_id IS NOT NULL ORDER BY rowid",
            (max(after, 0),),
        )
        tiers.hot.update((dedup_key(s, p), e) for s, p, e in rows)
    return tiers


def _drop_unfinished(conn: sqlite3.Connection) -> None:
    """Drop runs being built or already replaced, and any run table without a live row."""
    live = {r for (r,) in conn.execute("SELECT run FROM runs WHERE state = 'live'")}
    tables = [
        str(name)
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'run_[0-9]*'"
        )
    ]
    conn.execute("BEGIN IMMEDIATE")
    try:
        for name in tables:
            if int(name.removeprefix("run_")) not in live:
                conn.execute(f"DROP TABLE {name}")
        conn.execute("DELETE FROM runs WHERE state <> 'live'")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _flushed_rowid(conn: sqlite3.Connection, store_id: str, parts: _EventFiles) -> int | None:
    """How far the runs cover ``events``, or None when they cannot be trusted."""
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("store_id") != store_id or "flushed_rowid" not in meta:
        return None
    if meta.get("key_hash") != KEY_HASH_NAME:
        log.warning(
            "hookrouter dedup: the runs were written with key hash %s, this version uses %s;"
            " rebuilding them from the events",
            meta.get("key_hash", "blake2b-64"),
            KEY_HASH_NAME,
        )
        return None
    flushed = int(meta["flushed_rowid"])
    return flushed if flushed <= _newest_rowid(conn, parts) else None


def _newest_rowid(conn: sqlite3.Connection, parts: _EventFiles) -> int:
    """The largest global rowid of the attached events (0 when empty)."""
    newest = 0
    for partition, name in parts.each():
        local = conn.execute(f"SELECT coalesce(max(rowid), 0) FROM {name}.events").fetchone()[0]
        newest = max(newest, partition_sql.global_rowid(partition, int(local)))
    return newest


def _rebuild(
    conn: sqlite3.Connection, store_id: str, policy: TierPolicy, parts: _EventFiles
) -> int:
    """Empty the runs file and write every stored key into one run; return its rowid cover.

    In steps, one partition file attached at a time (``_EventFiles``): the
    run counts only once its row and ``flushed_rowid`` are written last, so
    a crash before that leaves a table ``_drop_unfinished`` drops and no
    cover, and the next open rebuilds again.
    """
    newest = _newest_rowid(conn, parts)
    conn.execute("BEGIN IMMEDIATE")
    try:
        for (run_id,) in conn.execute("SELECT run FROM runs").fetchall():
            conn.execute(f"DROP TABLE IF EXISTS {run_table(run_id)}")
        conn.execute("DELETE FROM runs")
        conn.execute("DELETE FROM meta WHERE key = 'flushed_rowid'")
        conn.execute(create_run_sql(1))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.create_function("dedup_hash", 2, _hash_of, deterministic=True)
    count = 0
    for _, name in parts.each():
        count += conn.execute(
            f"INSERT INTO {run_table(1)} (h, event_id)"
            " SELECT dedup_hash(source_id, provider_event_id), event_id"
            f" FROM {name}.events WHERE provider_event_id IS NOT NULL"
            " ORDER BY 1 ON CONFLICT DO NOTHING"
        ).rowcount
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "INSERT INTO runs (run, level, keys, state) VALUES (1, ?, ?, 'live')",
            (level_for(count, policy), count),
        )
        conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (("store_id", store_id), ("flushed_rowid", newest), ("key_hash", KEY_HASH_NAME)),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return newest


def _hash_of(source_id: str, provider_event_id: str) -> int:
    return key_hash(dedup_key(source_id, provider_event_id))


def level_for(keys: int, policy: TierPolicy) -> int:
    """The level a run of ``keys`` keys belongs to (level 0 holds one flush)."""
    if keys <= policy.hot_limit:
        return 0
    return math.ceil(math.log(keys / policy.hot_limit, policy.fanout))


def load_run(
    conn: sqlite3.Connection,
    policy: TierPolicy,
    run_id: int,
    level: int,
    count: int,
    *,
    summary: Bloom,
) -> Run:
    """A run of ``count`` keys, its filter built by reading its hashes from ``conn``.

    The hashes go into ``summary`` as well.
    """
    bloom = policy.new_filter(count)
    add, add_to_summary = bloom.add, summary.add
    # Row by row: the GIL is released at every step, so the event loop runs meanwhile.
    for (hashed,) in conn.execute(f"SELECT h FROM {run_table(run_id)}"):
        add(hashed)
        add_to_summary(hashed)
    return Run(run_id, level, count, bloom)
