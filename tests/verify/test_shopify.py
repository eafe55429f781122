"""Shopify verification; signatures computed with hmac + base64 (Shopify publishes no vector)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from tests.support.verify_signers import EVENT_BODY, NOW, SECRETS, reason, shopify_headers

from hookrouter.verify import build_verifier

OLD, NEW = SECRETS["shopify"]


@pytest.fixture
def verifier():
    return build_verifier("shopify", [OLD], 300, {})


def test_valid_signature_gives_delivery_id_and_topic(verifier):
    event = verifier.verify(shopify_headers(OLD, EVENT_BODY, NOW), EVENT_BODY, NOW)
    assert event.provider_event_id == "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"
    assert event.event_type == "orders/create"


def test_webhook_id_wins_over_the_shared_event_id(verifier):
    # X-Shopify-Event-Id is shared by every delivery of one merchant action, so it
    # must not be the dedup key while the per-delivery webhook id is there.
    headers = shopify_headers(OLD, EVENT_BODY, NOW) | {"x-shopify-event-id": "shared-1"}
    assert verifier.verify(headers, EVENT_BODY, NOW).provider_event_id.startswith("b54557e4")


def test_event_id_fallback_is_scoped_by_topic(verifier):
    headers = shopify_headers(OLD, EVENT_BODY, NOW)
    del headers["x-shopify-webhook-id"]
    create = verifier.verify(headers | {"x-shopify-event-id": "e-7"}, EVENT_BODY, NOW)
    update = verifier.verify(
        headers | {"x-shopify-event-id": "e-7", "x-shopify-topic": "orders/updated"},
        EVENT_BODY,
        NOW,
    )
    assert create.provider_event_id == "orders/create:e-7"
    assert update.provider_event_id != create.provider_event_id


def test_no_id_headers_gives_none(verifier):
    headers = {
        "x-shopify-hmac-sha256": shopify_headers(OLD, EVENT_BODY, NOW)["x-shopify-hmac-sha256"]
    }
    event = verifier.verify(headers, EVENT_BODY, NOW)
    assert (event.provider_event_id, event.event_type) == (None, None)


def test_events_preview_header_names_are_accepted(verifier):
    sig = base64.b64encode(hmac.new(OLD.encode(), EVENT_BODY, hashlib.sha256).digest()).decode()
    headers = {"shopify-hmac-sha256": sig, "shopify-webhook-id": "w-1", "shopify-topic": "Product"}
    event = verifier.verify(headers, EVENT_BODY, NOW)
    assert (event.provider_event_id, event.event_type) == ("w-1", "Product")


def test_tampered_body_is_bad_signature(verifier):
    headers = shopify_headers(OLD, EVENT_BODY, NOW)
    assert reason(verifier, headers, EVENT_BODY[:-1]) == "bad_signature"


def test_wrong_secret_is_bad_signature(verifier):
    assert reason(verifier, shopify_headers(NEW, EVENT_BODY, NOW), EVENT_BODY) == "bad_signature"


def test_rotation_second_secret_matches():
    rotated = build_verifier("shopify", [OLD, NEW], 300, {})
    headers = shopify_headers(NEW, EVENT_BODY, NOW)
    assert rotated.verify(headers, EVENT_BODY, NOW).event_type == "orders/create"


def test_no_timestamp_so_old_requests_still_verify(verifier):
    headers = shopify_headers(OLD, EVENT_BODY, NOW)
    assert verifier.verify(headers, EVENT_BODY, NOW + 10**7).event_type == "orders/create"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("not base64!!", "malformed_signature"),
        ("ab" * 32, "malformed_signature"),  # hex is not what Shopify sends
        (base64.b64encode(b"x" * 20).decode(), "malformed_signature"),
        (base64.b64encode(b"x" * 32).decode(), "bad_signature"),
    ],
)
def test_malformed_headers(verifier, value, expected):
    assert reason(verifier, {"x-shopify-hmac-sha256": value}, EVENT_BODY) == expected


def test_missing_header(verifier):
    assert reason(verifier, {"x-shopify-topic": "orders/create"}, EVENT_BODY) == "missing_signature"
