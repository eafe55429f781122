"""Fixtures for delivery tests: real receivers on 127.0.0.1 and a throwaway CA."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path

import pytest
import uvloop
from tests.support.delivery_servers import Handler, Receiver, ThrowawayCA, make_test_ca

StartReceiver = Callable[..., Awaitable[Receiver]]


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Run every async delivery test on both loops: production uses uvloop, whose
    transports differ from asyncio's (connection_made timing, class hierarchy).
    Slow tests run on uvloop only, the loop ``hookrouter serve`` uses."""
    if item.get_closest_marker("slow") is not None:
        return {"uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture
async def receivers() -> AsyncIterator[StartReceiver]:
    started: list[Receiver] = []

    async def start(handler: Handler | None = None, *, tls: ThrowawayCA | None = None) -> Receiver:
        r = Receiver(handler)
        await r.start(tls.server_context() if tls else None)
        started.append(r)
        return r

    yield start
    for r in started:
        await r.stop()


@pytest.fixture(scope="session")
def test_ca(tmp_path_factory: pytest.TempPathFactory) -> ThrowawayCA:
    return make_test_ca(Path(tmp_path_factory.mktemp("tls")))
