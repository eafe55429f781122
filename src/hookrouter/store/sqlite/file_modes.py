"""Owner-only permissions on the store: the directory 0700, its files 0600.

The store holds every event body and every secret in plaintext, so nobody
but the router's user may read it. SQLite creates a database 0644 less the
umask, and its ``-wal``, ``-shm`` and ``-journal`` with the database's mode;
so the databases are created here first, 0600, and every mode is set
explicitly (``chmod``), whatever the umask. A store made by an older version
(0755/0644) is tightened when opened, with one log line per path.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Final

from hookrouter.store.sqlite.dedup import DEDUP_FILENAME
from hookrouter.store.sqlite.schema import DB_FILENAME

log = logging.getLogger("hookrouter.store")

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600
DATABASES: Final = (DB_FILENAME, DEDUP_FILENAME)
# What SQLite keeps beside each database (rollback journal, WAL and its index).
_SIDE_FILES: Final = ("", "-wal", "-shm", "-journal")


def store_files(directory: Path) -> list[Path]:
    """Every file of a store in ``directory`` that may exist."""
    return [directory / (name + side) for name in DATABASES for side in _SIDE_FILES]


def create_private(path: Path) -> None:
    """Create ``path`` empty with mode 0600 if it does not exist (an empty SQLite database)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # the umask only removes bits; set the mode outright
    finally:
        os.close(fd)


def restrict(path: Path, mode: int) -> int | None:
    """Set ``path``'s permission bits to ``mode``; the old bits if they differed, else None."""
    try:
        old = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None
    if old == mode:
        return None
    path.chmod(mode)
    return old


def secure_store_dir(directory: Path) -> None:
    """Create ``directory`` (0700) and the databases (0600); tighten what exists, and log it."""
    directory.mkdir(parents=True, exist_ok=True)
    _tighten(directory, DIR_MODE)
    for path in store_files(directory):
        _tighten(path, FILE_MODE)
    for name in DATABASES:
        create_private(directory / name)


def secure_store_files(directory: Path) -> None:
    """After SQLite opened the store: its side files (``-wal``, ``-shm``) are 0600 too."""
    for path in store_files(directory):
        restrict(path, FILE_MODE)


def _tighten(path: Path, mode: int) -> None:
    old = restrict(path, mode)
    if old is not None:
        log.warning("store: %s was mode %04o, now %04o (owner only)", path, old, mode)


__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "create_private",
    "restrict",
    "secure_store_dir",
    "secure_store_files",
    "store_files",
]
