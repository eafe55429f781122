"""Where a SQLite store's events are on disk, for tests that look at its files.

A router's store keeps its events in time partitions by default
(``[store.sqlite] bucket``): ``events.db`` holds the entities and the
catalog, and each hour's events live in an ``events-<start>.db`` beside it.
Tests that read rows go through ``files_holding`` instead of opening
``events.db``.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from hookrouter.store.sqlite.partitions import LEGACY_FILE


def event_files(store_dir: Path) -> list[Path]:
    """``events.db`` and every partition file beside it, oldest bucket first."""
    return [store_dir / LEGACY_FILE, *sorted(store_dir.glob("events-*.db"))]


def event_ids_in(path: Path) -> set[str]:
    """The ids of the events one file holds (read-only: the router may be running)."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return {row[0] for row in conn.execute("SELECT event_id FROM events")}


def files_holding(store_dir: Path, event_ids: Iterable[str]) -> dict[str, str]:
    """The file name each of ``event_ids`` is stored in (missing ids are left out)."""
    wanted = set(event_ids)
    found: dict[str, str] = {}
    for path in event_files(store_dir):
        for event_id in event_ids_in(path) & wanted:
            found[event_id] = path.name
    return found
