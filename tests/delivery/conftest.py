"""Fixtures for delivery tests: real receivers on 127.0.0.1 and a throwaway CA."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from tests.support.delivery_servers import Handler, Receiver, ThrowawayCA, make_test_ca

StartReceiver = Callable[..., Awaitable[Receiver]]


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
