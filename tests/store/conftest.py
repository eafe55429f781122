"""Fixtures for the store tests: one ``backend`` per store kind, and an opened ``store``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.store_backends import BACKEND_KINDS, StoreBackend, backend_for

from hookrouter.store import EventStore


@pytest.fixture(params=BACKEND_KINDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> StoreBackend:
    return backend_for(request.param, tmp_path)


@pytest.fixture
async def store(backend: StoreBackend) -> AsyncIterator[EventStore]:
    s = backend.build()
    await s.open()
    yield s
    await s.close()
