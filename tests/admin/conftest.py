"""Shared by the admin API's tests: a webhook receiver, a polling wait, an entity service."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from tests.support.delivery_servers import ThreadedReceiver

from hookrouter.admin.entities import EntityService
from hookrouter.clock import ManualClock
from hookrouter.store.sqlite import SqliteStore


def wait_for(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def receiver() -> Iterator[ThreadedReceiver]:
    with ThreadedReceiver() as server:
        yield server


STRIPE = "whsec_test_stripe_secret_0123456789abcdef"
ENDPOINT_SECRET = "whsec_" + "YmVuY2gtc3RhbmRhcmQtd2ViaG9va3Mtc2VjcmV0IQ=="
TENANTS = 100


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[EntityService]:
    clock = ManualClock(wall=time.time())
    store = SqliteStore(tmp_path / "data", clock=clock)
    await store.open()
    entities = EntityService(store, clock)
    for i in range(TENANTS):
        await add_tenant(entities, i)
    yield entities
    await store.close()


async def add_tenant(entities: EntityService, i: int) -> None:
    await entities.put("tenant", {"id": f"t{i}"})
    await entities.put(
        "source", {"id": f"s{i}", "tenant": f"t{i}", "provider": "stripe", "secrets": [STRIPE]}
    )
    await entities.put(
        "endpoint",
        {
            "id": f"e{i}",
            "tenant": f"t{i}",
            "url": "https://hooks.example.com/in",
            "secret": ENDPOINT_SECRET,
        },
    )
