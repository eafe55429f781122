"""A consistent copy of a live SQLite store (``hookrouter backup``).

SQLite's online backup API copies the database page by page through an
ordinary read connection, so the router keeps committing while it runs (WAL
readers never block the writer). It runs as **one** step: a step-wise
backup restarts from the first page whenever another connection writes the
source, which a busy router does every few milliseconds, so it might never
finish. One step holds one read snapshot for the whole copy: the copy is
exactly the store as of the moment it began, and the checkpointer cannot
recycle the WAL past that snapshot until it ends (the WAL grows meanwhile).

Time partitions other than ``events.db`` (``partitions``) are copied the
same way into ``<dest>.partitions/``, each the files its catalog lists as
of the copy of ``events.db`` (read from the copy itself). New events go to
the newest partition (and, just after a switch, late ones of the previous
bucket to theirs) and each delivery lives with its event, so copies of the
files taken one after the other are as consistent as the store is after a
crash; a partition the writer switched to after the catalog was copied is
left out, like events a crash would have cut off. A store of one partition
writes no such directory.

The copy is then made self-contained (rollback journal instead of WAL, so it
is one file) and checked with ``PRAGMA quick_check`` before it is reported
good. Restoring is a file copy while no router runs (docs/operations.md, "Backups"):
the copy as ``events.db``, the partition copies beside it.
``backend.py`` offers it as the backend's backup.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

from hookrouter.errors import StoreError
from hookrouter.store.backends import BackupResult
from hookrouter.store.sqlite import partitions
from hookrouter.store.sqlite.file_modes import DIR_MODE, create_private
from hookrouter.store.sqlite.partitions import Partition
from hookrouter.store.sqlite.schema import DB_FILENAME, connect, schema_version

# Enough for a router's brief write-lock holds; a backup only ever reads.
_BUSY_TIMEOUT = 5.0


def backup(store_dir: Path, dest: Path, *, overwrite: bool = False) -> BackupResult:
    """Copy the store in ``store_dir`` to the file ``dest``; raise ``StoreError`` on failure.

    ``dest`` must not exist unless ``overwrite``; a failed backup leaves no file behind.
    """
    source_path = store_dir / DB_FILENAME
    if not source_path.is_file():
        raise StoreError(f"no hookrouter store at {store_dir} (missing {DB_FILENAME})")
    if (dest.exists() or partitions_dir(dest).exists()) and not overwrite:
        raise StoreError(f"{dest} already exists (use --force to replace it)")
    if not dest.parent.is_dir():
        raise StoreError(f"directory {dest.parent} does not exist")
    started = time.monotonic()
    partial = dest.with_name(dest.name + ".partial")
    parts_partial = partitions_dir(partial)
    try:
        create_private(partial)  # the copy holds the secrets too: 0600 from the start
        _copy(source_path, partial)
        events, version = _finish(partial)
        extra = _copy_partitions(store_dir, _later_partitions(partial), parts_partial)
        events += extra
        _put_in_place(partial, dest)
    except sqlite3.Error as exc:
        raise StoreError(f"backup of {source_path} failed: {exc}") from exc
    except OSError as exc:
        raise StoreError(f"backup to {dest} failed: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(parts_partial, ignore_errors=True)
    size = sum(p.stat().st_size for p in (dest, *_files(partitions_dir(dest))))
    return BackupResult(dest, size, events, version, time.monotonic() - started)


def partitions_dir(dest: Path) -> Path:
    """Where the copies of the partitions other than ``events.db`` go."""
    return dest.with_name(dest.name + ".partitions")


def _files(directory: Path) -> list[Path]:
    return sorted(directory.iterdir()) if directory.is_dir() else []


def _later_partitions(copy: Path) -> list[Partition]:
    """The partitions the copied catalog lists, but ``events.db`` (the copy itself)."""
    conn = sqlite3.connect(copy)
    try:
        catalog = partitions.load(conn)
    finally:
        conn.close()
    return [p for p in catalog.partitions if p.file != partitions.LEGACY_FILE]


def _copy_partitions(store_dir: Path, later: list[Partition], target: Path) -> int:
    """Copy each partition file into ``target`` (made 0700); returns their events."""
    if not later:
        return 0
    target.mkdir(mode=DIR_MODE)
    events = 0
    for partition in later:
        copy = target / partition.file
        create_private(copy)
        _copy(store_dir / partition.file, copy)
        events += _finish(copy)[0]
    return events


def _put_in_place(partial: Path, dest: Path) -> None:
    """Move the finished copies to ``dest`` (and its partitions directory)."""
    parts, parts_partial = partitions_dir(dest), partitions_dir(partial)
    if parts.exists():
        shutil.rmtree(parts)  # an older backup's (dest itself was checked or --force given)
    if parts_partial.exists():
        parts_partial.replace(parts)
    partial.replace(dest)


def _copy(source_path: Path, target: Path) -> None:
    source = connect(source_path, role="reader", busy_timeout=_BUSY_TIMEOUT)
    try:
        copy = sqlite3.connect(target)
        try:
            source.backup(copy, pages=-1)  # one step, one snapshot (module docstring)
        finally:
            copy.close()
    finally:
        source.close()


def _finish(path: Path) -> tuple[int, int]:
    """Make the copy one self-contained file and check it; returns (events, schema version)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = DELETE")
        verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
        if verdict != "ok":
            raise StoreError(f"the copy failed its integrity check: {verdict}")
        events = int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
        return events, schema_version(conn)
    finally:
        conn.close()


__all__ = ["BackupResult", "backup", "partitions_dir"]
