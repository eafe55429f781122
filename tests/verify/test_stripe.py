"""Stripe verification, signed by the stripe SDK and cross-checked against it."""

from __future__ import annotations

import time

import orjson
import pytest
import stripe
from tests.support.verify_signers import EVENT_BODY, NOW, SECRETS, reason, stripe_headers

from hookrouter.verify import build_verifier
from hookrouter.verify.stripe import sign_header

OLD, NEW = SECRETS["stripe"]


@pytest.fixture
def verifier():
    return build_verifier("stripe", [OLD], 300, {})


def test_valid_signature_gives_id_and_type(verifier):
    event = verifier.verify(stripe_headers(OLD, EVENT_BODY, NOW), EVENT_BODY, NOW)
    assert (event.provider_event_id, event.event_type) == ("evt_1NfFz2", "invoice.paid")
    assert event.reply is None


def test_tampered_body_is_bad_signature(verifier):
    headers = stripe_headers(OLD, EVENT_BODY, NOW)
    assert reason(verifier, headers, EVENT_BODY.replace(b"paid", b"void")) == "bad_signature"


def test_wrong_secret_is_bad_signature(verifier):
    assert reason(verifier, stripe_headers(NEW, EVENT_BODY, NOW), EVENT_BODY) == "bad_signature"


def test_rotation_second_secret_matches():
    headers = stripe_headers(NEW, EVENT_BODY, NOW)
    assert reason(build_verifier("stripe", [OLD], 300, {}), headers, EVENT_BODY) == "bad_signature"
    rotated = build_verifier("stripe", [OLD, NEW], 300, {})
    assert rotated.verify(headers, EVENT_BODY, NOW).provider_event_id == "evt_1NfFz2"


def test_any_of_several_v1_signatures_may_match(verifier):
    # While Stripe rolls a secret it sends one v1 per secret; v0 is ignored.
    ours = stripe_headers(OLD, EVENT_BODY, NOW)["stripe-signature"].split(",")[1]
    other = stripe_headers(NEW, EVENT_BODY, NOW)["stripe-signature"].split(",")[1]
    header = f"t={NOW},v0={'0' * 64},{other},{ours},scheme9=xyz"
    assert (
        verifier.verify({"stripe-signature": header}, EVENT_BODY, NOW).event_type == "invoice.paid"
    )


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (NOW + 300, None),
        (NOW - 300, None),
        (NOW + 301, "stale_timestamp"),
        (NOW - 301, "stale_timestamp"),
    ],
)
def test_tolerance_applies_in_both_directions(verifier, now, expected):
    headers = stripe_headers(OLD, EVENT_BODY, NOW)
    if expected is None:
        assert verifier.verify(headers, EVENT_BODY, now).provider_event_id == "evt_1NfFz2"
    else:
        assert reason(verifier, headers, EVENT_BODY, now=now) == expected


def test_zero_tolerance_disables_the_window():
    verifier = build_verifier("stripe", [OLD], 0, {})
    headers = stripe_headers(OLD, EVENT_BODY, NOW)
    assert verifier.verify(headers, EVENT_BODY, NOW + 10**6).event_type == "invoice.paid"


def test_forged_stale_request_reports_bad_signature_not_stale(verifier):
    # The MAC is checked before the clock: stale_timestamp only ever means authentic-but-old.
    headers = stripe_headers(NEW, EVENT_BODY, NOW)
    assert reason(verifier, headers, EVENT_BODY, now=NOW + 10_000) == "bad_signature"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("garbage", "malformed_signature"),
        (f"t={NOW}", "malformed_signature"),  # no v1 at all
        (f"t={NOW},v0={'a' * 64}", "malformed_signature"),
        (f"t={NOW},v1=not-hex", "malformed_signature"),
        (f"t={NOW},v1={'ab' * 8}", "malformed_signature"),  # hex, but not a SHA-256 length
        (f"t=soon,v1={'ab' * 32}", "malformed_signature"),
        (f"t=-5,v1={'ab' * 32}", "malformed_signature"),
        (f"t={NOW},t={NOW + 1},v1={'ab' * 32}", "malformed_signature"),
        (f"v1={'ab' * 32}", "missing_timestamp"),
        (f"t={NOW},v1={'ab' * 32}", "bad_signature"),
    ],
)
def test_malformed_headers(verifier, header, expected):
    assert reason(verifier, {"stripe-signature": header}, EVENT_BODY) == expected


@pytest.mark.parametrize("headers", [{}, {"stripe-signature": ""}, {"stripe-signature": "  "}])
def test_missing_header(verifier, headers):
    assert reason(verifier, headers, EVENT_BODY) == "missing_signature"


def test_non_json_body_verifies_with_no_id(verifier):
    body = b"\xff\xfe not json"
    headers = {"stripe-signature": sign_header(OLD, NOW, body)}
    event = verifier.verify(headers, body, NOW)
    assert (event.provider_event_id, event.event_type) == (None, None)


def test_our_header_passes_the_stripe_sdk():
    # construct_event checks the timestamp against the real clock, so sign "now".
    body = orjson.dumps({"id": "evt_X", "object": "event", "type": "charge.succeeded", "data": {}})
    ts = int(time.time())
    header = sign_header(NEW, ts, body)
    assert stripe.WebhookSignature.verify_header(body, header, NEW, tolerance=300)
    event = stripe.Webhook.construct_event(body, header, NEW)
    assert (event.id, event.type) == ("evt_X", "charge.succeeded")
    # And ours agrees with the SDK's own signer, byte for byte.
    assert header == stripe.WebhookSignature.generate_signature_header(body.decode(), NEW, ts)


def test_repr_shows_no_secret(verifier):
    assert "whsec" not in repr(verifier)
    assert "stripe" in repr(verifier).lower()


def test_empty_or_non_text_id_and_type_become_none(verifier):
    body = b'{"id": "", "type": {"nested": true}}'
    event = verifier.verify({"stripe-signature": sign_header(OLD, NOW, body)}, body, NOW)
    assert (event.provider_event_id, event.event_type) == (None, None)
