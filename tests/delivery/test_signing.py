"""Outbound signatures verify with the standardwebhooks library, over a real request."""

from __future__ import annotations

import base64
import os
import time

import pytest

pytest.importorskip("hookrouter.verify.standard")

from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from tests.support.delivery_servers import Received, Reply

from hookrouter.delivery.signing import delivery_headers, endpoint_signer
from hookrouter.delivery.transport import HttpTransport, Origin

from .conftest import StartReceiver

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()
OLD_SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()


async def test_receiver_verifies_delivered_request_with_standardwebhooks(
    receivers: StartReceiver,
) -> None:
    verdicts: list[object] = []

    def handler(req: Received) -> Reply:
        try:
            verdicts.append(Webhook(SECRET).verify(req.body, req.headers))
        except WebhookVerificationError as exc:
            verdicts.append(exc)
        return Reply(status=204, body=b"")

    r = await receivers(handler)
    body = b'{"type":"invoice.paid","data":{"id":"in_1"}}'
    headers = delivery_headers(
        endpoint_signer(SECRET), msg_id="evt_01TEST", now=time.time(), body=body
    )
    t = HttpTransport()
    resp = await t.request(
        Origin("http", "127.0.0.1", r.port, "127.0.0.1"),
        "POST",
        "/",
        headers,
        body,
        total_timeout=2,
    )
    await t.aclose()
    assert resp.status == 204
    assert verdicts == [{"type": "invoice.paid", "data": {"id": "in_1"}}]
    assert r.requests[0].headers["webhook-id"] == "evt_01TEST"


def test_tampered_body_or_wrong_secret_fails_verification() -> None:
    now = time.time()
    body = b'{"a":1}'
    headers = dict(delivery_headers(endpoint_signer(SECRET), msg_id="evt_1", now=now, body=body))
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(b'{"a":2}', headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(OLD_SECRET).verify(body, headers)


def test_rotation_signs_with_every_secret() -> None:
    body = b"{}"
    headers = dict(
        delivery_headers(
            endpoint_signer(SECRET, OLD_SECRET), msg_id="evt_2", now=time.time(), body=body
        )
    )
    assert len(headers["webhook-signature"].split()) == 2
    Webhook(SECRET).verify(body, headers)
    Webhook(OLD_SECRET).verify(body, headers)


def test_retry_is_resigned_with_the_attempt_time_and_extras_cannot_override() -> None:
    signer = endpoint_signer(SECRET)
    first = dict(delivery_headers(signer, msg_id="evt_3", now=1_700_000_000, body=b"{}"))
    later = dict(
        delivery_headers(
            signer,
            msg_id="evt_3",
            now=1_700_003_600,
            body=b"{}",
            extra=[("webhook-signature", "v1,forged"), ("x-tenant", "acme"), ("Host", "evil")],
        )
    )
    assert first["webhook-id"] == later["webhook-id"] == "evt_3"
    assert (first["webhook-timestamp"], later["webhook-timestamp"]) == ("1700000000", "1700003600")
    assert later["webhook-signature"] != "v1,forged" and later["x-tenant"] == "acme"
    assert "Host" not in later
