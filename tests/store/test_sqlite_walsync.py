"""The loop design's WAL syncer: no acknowledgement before the fdatasync, failures refuse writes.

Faults are injected by replacing ``os.fdatasync`` for WAL files (a disk whose
flush blocks or fails on demand cannot be had here); every other sync runs.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.support.store_backends import make_event

from hookrouter.errors import StoreUnavailable
from hookrouter.store.sqlite import SqliteStore

REAL_FDATASYNC = os.fdatasync


def _is_wal(fd: int) -> bool:
    return os.readlink(f"/proc/self/fd/{fd}").endswith("-wal")


@pytest.fixture
def wal_sync(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[int], None]], None]]:
    """Install ``fn`` as what an fdatasync of a WAL file does."""

    def install(fn: Callable[[int], None]) -> None:
        def fdatasync(fd: int) -> None:
            if _is_wal(fd):
                fn(fd)
            else:
                REAL_FDATASYNC(fd)

        monkeypatch.setattr(os, "fdatasync", fdatasync)

    yield install


async def _open(path: Path, **options: object) -> SqliteStore:
    store = SqliteStore(path, grouping="loop", **options)  # type: ignore[arg-type]
    await store.open()
    return store


@pytest.mark.parametrize("bucket", [None, 3600], ids=["one file", "partitions"])
async def test_an_append_is_acknowledged_only_after_its_wal_is_synced(
    tmp_path: Path, wal_sync: Callable[[Callable[[int], None]], None], bucket: int | None
) -> None:
    store = await _open(tmp_path / "store", bucket_seconds=bucket)
    try:
        await store.append(make_event())  # the newest file and its WAL exist
        gate = threading.Event()
        synced: list[str] = []

        def slow_disk(fd: int) -> None:
            gate.wait(10)
            REAL_FDATASYNC(fd)
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))

        wal_sync(slow_disk)
        first = store.append(make_event())
        await asyncio.sleep(0.2)
        assert not first.done()  # committed, but its WAL is not on disk yet
        # Appends made meanwhile wait for the next commit: one batch after the sync.
        later = [store.append(make_event()) for _ in range(30)]
        await asyncio.sleep(0.05)
        assert not any(f.done() for f in later)
        commits = store.stats()["commits"]
        gate.set()
        await asyncio.gather(first, *later)
        newest = tmp_path / "store" / store.catalog.newest.file
        assert synced and set(synced) == {f"{newest}-wal"}
        assert store.stats()["commits"] == commits + 1
        assert len(await store.list_events(limit=100)) == 32
    finally:
        gate.set()
        await store.close()


async def test_a_failed_wal_sync_fails_its_appends_and_refuses_more(
    tmp_path: Path, wal_sync: Callable[[Callable[[int], None]], None]
) -> None:
    store = await _open(tmp_path / "store")
    try:
        await store.append(make_event())

        def broken_disk(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        wal_sync(broken_disk)
        results = await asyncio.gather(
            *(store.append(make_event()) for _ in range(5)), return_exceptions=True
        )
        assert all(isinstance(r, StoreUnavailable) for r in results), results
        assert "Input/output error" in str(results[0])
        with pytest.raises(StoreUnavailable):
            await store.append(make_event())
    finally:
        await store.close()


async def test_close_waits_for_the_sync_in_flight(
    tmp_path: Path, wal_sync: Callable[[Callable[[int], None]], None]
) -> None:
    store = await _open(tmp_path / "store")
    await store.append(make_event())
    gate = threading.Event()

    def slow_disk(fd: int) -> None:
        gate.wait(10)
        REAL_FDATASYNC(fd)

    wal_sync(slow_disk)
    pending = store.append(make_event())
    asyncio.get_running_loop().call_later(0.2, gate.set)
    await store.close()
    assert (await pending).duplicate is False  # acknowledged, not dropped by the close
