"""What the operator-event tests share: the hook's secret, verified reads, waiting."""

from __future__ import annotations

from typing import Any

import orjson
import standardwebhooks
from tests.support.delivery_servers import ThreadedReceiver

OPERATOR_SECRET = "whsec_b3BlcmF0b3Itc2VjcmV0LWZvci10ZXN0cw=="


def verified_events(receiver: ThreadedReceiver) -> list[dict[str, Any]]:
    """Every operator event received, each verified with the standardwebhooks library."""
    out = []
    for request in list(receiver.receiver.requests):
        verified = standardwebhooks.Webhook(OPERATOR_SECRET).verify(
            request.body.decode(), request.headers
        )
        assert orjson.loads(request.body) == verified
        out.append(verified)
    return out


def types_of(receiver: ThreadedReceiver) -> list[str]:
    return [e["type"] for e in verified_events(receiver)]


def hook(port: int, events: list[str] | None = None) -> dict[str, Any]:
    table: dict[str, Any] = {"url": f"http://127.0.0.1:{port}/ops", "secret": OPERATOR_SECRET}
    if events is not None:
        table["events"] = events
    return table
