"""The stop sequence: a stage that fails does not skip the ones after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.support.router import base_config

from hookrouter.config import parse_config
from hookrouter.errors import ShutdownIncomplete, StoreUnavailable
from hookrouter.ingress.engine import IngressEngine
from hookrouter.runtime import Router


class FaultyStopEngine:
    """A real engine whose ``stop`` raises after doing its work (an injected fault)."""

    def __init__(self, inner: IngressEngine) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def stop(self) -> None:
        await self.inner.stop()
        raise RuntimeError("injected engine fault")


async def test_a_failing_stage_still_lets_delivery_and_the_store_stop(tmp_path: Path) -> None:
    router = Router(parse_config(base_config(tmp_path / "data", 0)))
    await router.start()
    assert router.engine is not None and router.store is not None
    router.engine = FaultyStopEngine(router.engine)  # type: ignore[assignment]
    store = router.store

    with pytest.raises(ShutdownIncomplete) as failure:
        await router.stop()

    assert failure.value.stages == ["ingress engine"]
    assert "ingress engine" in failure.value.message
    with pytest.raises(StoreUnavailable) as closed:  # the last stage ran all the same
        await store.ping()
    assert closed.value.reason == "store_closed"
