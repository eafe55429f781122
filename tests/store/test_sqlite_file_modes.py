"""The store directory is 0700 and its files 0600, whatever the umask (issue 33 item 14)."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.store_backends import make_event

from hookrouter.store.sqlite import SqliteStore
from hookrouter.store.sqlite.backup import backup
from hookrouter.store.sqlite.file_modes import store_files


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The umask most systems default to (022) or looser: it must not matter."""
    old = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(old)


async def _open_and_write(path: Path) -> SqliteStore:
    store = SqliteStore(path)
    await store.open()
    await store.append(make_event(endpoints=("ep_a",)))
    return store


def _files(path: Path) -> list[Path]:
    return [p for p in store_files(path) if p.exists()]


async def test_a_new_store_is_owner_only(tmp_path: Path, loose_umask: None) -> None:
    path = tmp_path / "data"
    store = await _open_and_write(path)
    try:
        assert mode(path) == 0o700
        names = {p.name for p in _files(path)}
        assert {"events.db", "events.db-wal", "events.db-shm", "dedup.db"} <= names
        assert {p.name: mode(p) for p in _files(path)} == dict.fromkeys(names, 0o600)
    finally:
        await store.close()
    assert all(mode(p) == 0o600 for p in path.iterdir())


async def test_a_backup_is_owner_only(tmp_path: Path, loose_umask: None) -> None:
    store = await _open_and_write(tmp_path / "data")
    await store.close()
    dest = tmp_path / "copy.db"
    backup(tmp_path / "data", dest)
    assert mode(dest) == 0o600
    backup(tmp_path / "data", dest, overwrite=True)
    assert mode(dest) == 0o600


async def test_an_existing_world_readable_store_is_tightened_at_open(
    tmp_path: Path, loose_umask: None, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "data"
    store = await _open_and_write(path)
    await store.close()
    path.chmod(0o755)
    for file in _files(path):
        file.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="hookrouter.store"):
        store = SqliteStore(path)
        await store.open()
    try:
        assert mode(path) == 0o700
        assert all(mode(p) == 0o600 for p in _files(path))
        assert len(await store.list_events(limit=10)) == 1
    finally:
        await store.close()
    tightened = [r.getMessage() for r in caplog.records if "owner only" in r.getMessage()]
    assert any(str(path / "events.db") in m and "0644" in m for m in tightened), tightened
    assert any(m.startswith(f"store: {path} was mode 0755") for m in tightened), tightened
