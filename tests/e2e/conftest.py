"""Fixtures for end-to-end tests against a real router process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import pytest
import standardwebhooks
import stripe
import uvloop
from tests.support.router import (
    ENDPOINT_SECRET,
    STANDARD_SECRET,
    STRIPE_SECRET,
    RouterProcess,
    base_config,
)

if TYPE_CHECKING:
    from hookrouter.runtime import Router


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Tests marked ``serve_loop`` run in-process on uvloop, as ``hookrouter serve`` does."""
    if item.get_closest_marker("serve_loop") is None:
        return {"asyncio": asyncio.new_event_loop}
    return {"uvloop": uvloop.new_event_loop}


def available_engines() -> list[str]:
    """Every ingress engine this machine can run: the e2e suite runs on each."""
    from hookrouter import _native
    from hookrouter.ingress.doctor import probe

    engines = ["asyncio"]
    if _native.AVAILABLE:
        engines.append("epoll")
        if probe(zcrx_interface=None).io_uring_usable:
            engines.append("io_uring")
    return engines


ENGINES = available_engines()


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def router(tmp_path: Path, engine: str) -> Iterator[RouterProcess]:
    """A running router; its teardown checks that SIGTERM stops it cleanly."""
    proc = RouterProcess(tmp_path, base_config(tmp_path / "data", 0, engine)).start()
    assert proc.proc is not None
    try:
        yield proc
    finally:
        running = proc.proc.poll() is None
        code = proc.stop()
    if running:
        assert code == 0, f"the router did not stop cleanly (exit {code}):\n{proc.log()}"


def stripe_event(
    event_id: str,
    event_type: str = "invoice.paid",
    *,
    ts: int | None = None,
    secret: str = STRIPE_SECRET,
    extra: dict[str, object] | None = None,
) -> tuple[bytes, dict[str, str]]:
    """A Stripe event body and headers, signed by the stripe SDK."""
    data = {"object": {"amount": 100, **(extra or {})}}
    body = orjson.dumps({"id": event_id, "object": "event", "type": event_type, "data": data})
    stamp = int(time.time()) if ts is None else ts
    header = stripe.WebhookSignature.generate_signature_header(
        body.decode(), secret, timestamp=stamp
    )
    return body, {"Stripe-Signature": header, "Content-Type": "application/json"}


def standard_event(
    msg_id: str, event_type: str = "user.created", *, secret: str = STANDARD_SECRET
) -> tuple[bytes, dict[str, str]]:
    """A Standard Webhooks event, signed by the standardwebhooks library."""
    body = orjson.dumps({"type": event_type, "data": {"user": 1}})
    now = datetime.now(tz=UTC)
    signature = standardwebhooks.Webhook(secret).sign(msg_id, now, body.decode())
    return body, {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
        "Content-Type": "application/json",
    }  # fmt: skip


async def put_stripe_tenants(
    router: Router, count: int, receiver_port: int, prefix: str = "c"
) -> None:
    """Tenants ``c0``.. each with a Stripe source ``c<i>-in`` and an endpoint ``c<i>-out``.

    Made through the router's entity service, as a platform does on sign-up; the
    endpoints post to ``/c<i>`` on a receiver on 127.0.0.1. ``prefix`` replaces
    the ``c`` (metric series are process-wide: another test's names stay unseen).
    """
    entities = router.entities
    assert entities is not None
    for i in range(count):
        tenant = f"{prefix}{i}"
        await entities.put("tenant", {"id": tenant})
        await entities.put(
            "source",
            {"id": f"{tenant}-in", "tenant": tenant, "provider": "stripe",
             "secrets": [STRIPE_SECRET]},
        )  # fmt: skip
        await entities.put(
            "endpoint",
            {"id": f"{tenant}-out", "tenant": tenant,
             "url": f"http://127.0.0.1:{receiver_port}/{tenant}", "secret": ENDPOINT_SECRET},
        )  # fmt: skip
