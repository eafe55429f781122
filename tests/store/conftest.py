"""Fixtures for the store tests: one ``backend`` per store kind, and an opened ``store``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tests.support.store_backends import BACKEND_KINDS, StoreBackend, backend_for

from hookrouter.store import EventStore
from hookrouter.store.sqlite import SqliteStore


@pytest.fixture(params=BACKEND_KINDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> StoreBackend:
    return backend_for(request.param, tmp_path)


@pytest.fixture
async def store(backend: StoreBackend) -> AsyncIterator[EventStore]:
    s = backend.build()
    await s.open()
    yield s
    await s.close()


OpenSqlite = Callable[..., Awaitable[SqliteStore]]


@pytest.fixture
async def open_sqlite(tmp_path: Path) -> AsyncIterator[OpenSqlite]:
    """Open ``SqliteStore``s under ``tmp_path`` with chosen options; all closed at teardown."""
    opened: list[SqliteStore] = []

    async def factory(path: Path | None = None, **options: Any) -> SqliteStore:
        store = SqliteStore(path or tmp_path / "store", **options)
        await store.open()
        opened.append(store)
        return store

    yield factory
    for store in opened:
        await store.close()
