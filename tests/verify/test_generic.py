"""The configurable HMAC verifier; signatures computed with hmac in the test."""

from __future__ import annotations

import base64
import hashlib
import hmac

import orjson
import pytest
from tests.support.verify_signers import (
    EVENT_BODY,
    GENERIC_OPTIONS,
    NOW,
    SECRETS,
    hmac_headers,
    reason,
)

from hookrouter.verify import build_verifier

OLD, NEW = SECRETS["hmac"]


@pytest.fixture
def verifier():
    return build_verifier("hmac", [OLD], 300, GENERIC_OPTIONS)


def test_defaults_hex_sha256_of_body_without_prefix():
    verifier = build_verifier("hmac", [OLD], 300, {"header": "X-Sig"})
    sig = hmac.new(OLD.encode(), EVENT_BODY, hashlib.sha256).hexdigest()
    event = verifier.verify({"x-sig": sig}, EVENT_BODY, NOW + 10**7)  # no timestamp: no window
    assert (event.provider_event_id, event.event_type) == (None, None)
    assert reason(verifier, {"x-sig": sig}, EVENT_BODY + b"!") == "bad_signature"


def test_timestamped_sha512_base64_with_dotted_id_field(verifier):
    event = verifier.verify(hmac_headers(OLD, EVENT_BODY, NOW), EVENT_BODY, NOW)
    assert (event.provider_event_id, event.event_type) == ("obj_9", "invoice.paid")


def test_id_and_type_headers_win_over_fields():
    options = GENERIC_OPTIONS | {"id_header": "X-Request-Id", "type_header": "X-Kind"}
    verifier = build_verifier("hmac", [OLD], 300, options)
    headers = hmac_headers(OLD, EVENT_BODY, NOW) | {"x-request-id": "r-1", "x-kind": "k"}
    event = verifier.verify(headers, EVENT_BODY, NOW)
    assert (event.provider_event_id, event.event_type) == ("r-1", "k")
    # Header absent on a request: fall back to the configured field.
    event = verifier.verify(hmac_headers(OLD, EVENT_BODY, NOW), EVENT_BODY, NOW)
    assert event.provider_event_id == "obj_9"


def test_numeric_ids_become_text_and_odd_values_none(verifier):
    body = orjson.dumps({"type": ["list"], "data": {"id": 12345}})
    event = verifier.verify(hmac_headers(OLD, body, NOW), body, NOW)
    assert (event.provider_event_id, event.event_type) == ("12345", None)


def test_non_json_body_verifies_with_no_id(verifier):
    body = b"\x00\x01binary"
    event = verifier.verify(hmac_headers(OLD, body, NOW), body, NOW)
    assert (event.provider_event_id, event.event_type) == (None, None)


def test_wrong_secret_and_rotation():
    headers = hmac_headers(NEW, EVENT_BODY, NOW)
    assert (
        reason(build_verifier("hmac", [OLD], 300, GENERIC_OPTIONS), headers, EVENT_BODY)
        == "bad_signature"
    )
    rotated = build_verifier("hmac", [OLD, NEW], 300, GENERIC_OPTIONS)
    assert rotated.verify(headers, EVENT_BODY, NOW).event_type == "invoice.paid"


def test_tampered_body_and_timestamp(verifier):
    headers = hmac_headers(OLD, EVENT_BODY, NOW)
    assert reason(verifier, headers, EVENT_BODY[1:]) == "bad_signature"
    assert reason(verifier, headers | {"x-timestamp": str(NOW - 1)}, EVENT_BODY) == "bad_signature"


@pytest.mark.parametrize(("now", "ok"), [(NOW + 300, True), (NOW + 301, False), (NOW - 301, False)])
def test_tolerance_both_directions(verifier, now, ok):
    headers = hmac_headers(OLD, EVENT_BODY, NOW)
    if ok:
        assert verifier.verify(headers, EVENT_BODY, now).event_type == "invoice.paid"
    else:
        assert reason(verifier, headers, EVENT_BODY, now=now) == "stale_timestamp"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"x-signature": "sha256=" + base64.b64encode(b"s" * 64).decode()}, "malformed_signature"),
        ({"x-signature": "sha512=" + "ab" * 64}, "malformed_signature"),  # hex where base64 is due
        ({"x-signature": "sha512=" + base64.b64encode(b"s" * 32).decode()}, "malformed_signature"),
        ({"x-signature": "sha512=" + base64.b64encode(b"s" * 64).decode()}, "bad_signature"),
        ({"x-timestamp": "now"}, "malformed_signature"),
        ({"x-timestamp": None}, "missing_timestamp"),
        ({"x-signature": None}, "missing_signature"),
    ],
)
def test_malformed_or_missing_headers(verifier, change, expected):
    headers = hmac_headers(OLD, EVENT_BODY, NOW)
    for name, value in change.items():
        if value is None:
            del headers[name]
        else:
            headers[name] = value
    assert reason(verifier, headers, EVENT_BODY) == expected
