"""Fixtures for the store tests: one ``backend`` per store kind, and an opened ``store``."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.postgres_store import OpenStore, store_options
from tests.support.store_backends import BACKEND_KINDS, StoreBackend, backend_for

from hookrouter.store import EventStore
from hookrouter.store.postgres import PostgresStore
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


@pytest.fixture(params=["loop", "thread"])
async def open_sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OpenSqlite]:
    """Open ``SqliteStore``s under ``tmp_path`` with chosen options; all closed at teardown.

    Runs each test once per grouping design (commits on the loop / on a thread).
    """
    opened: list[SqliteStore] = []

    async def factory(path: Path | None = None, **options: Any) -> SqliteStore:
        options.setdefault("grouping", request.param)
        store = SqliteStore(path or tmp_path / "store", **options)
        await store.open()
        opened.append(store)
        return store

    yield factory
    for store in opened:
        await store.close()


@pytest.fixture(autouse=True)
def no_store_threads_left() -> Iterator[None]:
    """Every store a test opens must be closed, its threads gone."""
    yield
    left = [t.name for t in threading.enumerate() if t.name.startswith("hookrouter-store")]
    assert left == [], f"threads still running after the test: {left}"


@pytest.fixture
async def open_store(tmp_path: Path) -> AsyncIterator[OpenStore]:
    """Open ``PostgresStore``s on this test's schema (one per "node"); all closed at teardown."""
    opened: list[PostgresStore] = []

    async def factory(**overrides: Any) -> PostgresStore:
        store = PostgresStore(**{**store_options(tmp_path), **overrides})  # type: ignore[arg-type]
        await store.open()
        opened.append(store)
        return store

    yield factory
    for store in opened:
        await store.close()
