"""Standard Webhooks: inbound signed by the reference library; outbound verified by it."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime

import orjson
import pytest
import standardwebhooks
from tests.support.verify_signers import EVENT_BODY, NOW, SECRETS, reason, standard_headers

from hookrouter.verify import StandardSigner, build_verifier, decode_secret, new_secret, sign

OLD, NEW = SECRETS["standard"]


@pytest.fixture
def verifier():
    return build_verifier("standard", [OLD], 300, {})


def test_valid_signature_gives_webhook_id_and_body_type(verifier):
    event = verifier.verify(standard_headers(OLD, EVENT_BODY, NOW), EVENT_BODY, NOW)
    assert (event.provider_event_id, event.event_type) == (
        "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
        "invoice.paid",
    )


PADDED = "whsec_" + base64.b64encode(b"k" * 25).decode()  # ends in "=="


@pytest.mark.parametrize(
    ("signed_with", "configured"),
    [
        (OLD, OLD.removeprefix("whsec_")),
        (PADDED, PADDED.rstrip("=")),
        (PADDED, PADDED[6:].rstrip("=")),
    ],
)
def test_secret_spellings_the_libraries_accept(signed_with, configured):
    # Bare base64 and missing padding are accepted by the reference libraries too.
    assert PADDED.endswith("==")
    verifier = build_verifier("standard", [configured], 300, {})
    assert verifier.verify(
        standard_headers(signed_with, EVENT_BODY, NOW), EVENT_BODY, NOW
    ).event_type


def test_other_versions_are_ignored_and_any_v1_may_match(verifier):
    headers = standard_headers(OLD, EVENT_BODY, NOW)
    foreign = standard_headers(NEW, EVENT_BODY, NOW)["webhook-signature"]
    asym = "v1a," + base64.b64encode(b"e" * 64).decode()
    headers["webhook-signature"] = f"{asym} {foreign} {headers['webhook-signature']}"
    assert verifier.verify(headers, EVENT_BODY, NOW).event_type == "invoice.paid"


def test_svix_header_names_are_accepted(verifier):
    headers = {
        k.replace("webhook-", "svix-"): v for k, v in standard_headers(OLD, EVENT_BODY, NOW).items()
    }
    assert (
        verifier.verify(headers, EVENT_BODY, NOW).provider_event_id
        == "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
    )


def test_tampered_body_is_bad_signature(verifier):
    headers = standard_headers(OLD, EVENT_BODY, NOW)
    assert reason(verifier, headers, EVENT_BODY.replace(b"obj_9", b"obj_8")) == "bad_signature"


def test_tampered_id_is_bad_signature(verifier):
    headers = standard_headers(OLD, EVENT_BODY, NOW) | {"webhook-id": "msg_other"}
    assert reason(verifier, headers, EVENT_BODY) == "bad_signature"


def test_wrong_secret_is_bad_signature(verifier):
    assert reason(verifier, standard_headers(NEW, EVENT_BODY, NOW), EVENT_BODY) == "bad_signature"


def test_rotation_second_secret_matches():
    rotated = build_verifier("standard", [OLD, NEW], 300, {})
    assert rotated.verify(standard_headers(NEW, EVENT_BODY, NOW), EVENT_BODY, NOW).event_type


@pytest.mark.parametrize(("now", "ok"), [(NOW - 300, True), (NOW + 301, False), (NOW - 301, False)])
def test_tolerance_both_directions(verifier, now, ok):
    headers = standard_headers(OLD, EVENT_BODY, NOW)
    if ok:
        assert verifier.verify(headers, EVENT_BODY, now).event_type == "invoice.paid"
    else:
        assert reason(verifier, headers, EVENT_BODY, now=now) == "stale_timestamp"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"webhook-signature": "v2,abc"}, "malformed_signature"),
        ({"webhook-signature": "v1,%%%not-base64"}, "malformed_signature"),
        (
            {"webhook-signature": "v1," + base64.b64encode(b"s" * 16).decode()},
            "malformed_signature",
        ),
        ({"webhook-signature": "v1," + base64.b64encode(b"s" * 32).decode()}, "bad_signature"),
        ({"webhook-timestamp": "12:00"}, "malformed_signature"),
        ({"webhook-timestamp": None}, "missing_timestamp"),
        ({"webhook-id": None}, "malformed_signature"),
        ({"webhook-signature": None}, "missing_signature"),
        ({"webhook-signature": ""}, "missing_signature"),
    ],
)
def test_malformed_or_missing_headers(verifier, change, expected):
    headers = standard_headers(OLD, EVENT_BODY, NOW)
    for name, value in change.items():
        if value is None:
            del headers[name]
        else:
            headers[name] = value
    assert reason(verifier, headers, EVENT_BODY) == expected


def test_non_json_body_verifies_with_type_none(verifier):
    body = b"plain text body"
    event = verifier.verify(standard_headers(OLD, body, NOW), body, NOW)
    assert (event.provider_event_id, event.event_type) == ("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", None)


# ---- outbound signer -------------------------------------------------------------------------


def test_signer_headers_pass_the_reference_library():
    body = orjson.dumps({"type": "invoice.paid", "data": {"n": 1}})
    ts = int(time.time())  # the library checks against the real clock
    headers = StandardSigner(NEW).headers("evt_01J9Z0000000000000000000", ts, body)
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    assert standardwebhooks.Webhook(NEW).verify(body, headers) == {
        "type": "invoice.paid",
        "data": {"n": 1},
    }
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        standardwebhooks.Webhook(OLD).verify(body, headers)


def test_sign_matches_the_reference_signer_exactly():
    when = datetime.fromtimestamp(NOW, tz=UTC)
    expected = standardwebhooks.Webhook(OLD).sign("msg_1", when, EVENT_BODY.decode())
    assert sign(OLD, "msg_1", NOW, EVENT_BODY) == expected
    assert StandardSigner(OLD).sign("msg_1", NOW, EVENT_BODY) == expected


def test_rotating_signer_satisfies_receivers_with_either_secret():
    body = b'{"type": "x"}'
    ts = int(time.time())
    headers = StandardSigner(NEW, OLD).headers("msg_r", ts, body)
    assert headers["webhook-signature"].count("v1,") == 2
    for secret in (NEW, OLD):
        standardwebhooks.Webhook(secret).verify(body, headers)


def test_signer_output_verifies_with_our_verifier_too():
    body = b'{"type": "endpoint.test"}'
    headers = StandardSigner(OLD).headers("msg_self", NOW, body)
    event = build_verifier("standard", [OLD], 300, {}).verify(headers, body, NOW)
    assert (event.provider_event_id, event.event_type) == ("msg_self", "endpoint.test")


def test_new_secret_is_usable_by_the_reference_library():
    secret = new_secret()
    assert secret.startswith("whsec_") and len(decode_secret(secret)) == 32
    body = b"{}"
    ts = int(time.time())
    standardwebhooks.Webhook(secret).verify(body, StandardSigner(secret).headers("m", ts, body))
    assert new_secret() != secret


@pytest.mark.parametrize("bad", ["whsec_", "whsec_not*base64", "", "whsec_@@@@"])
def test_invalid_secrets_are_rejected(bad):
    with pytest.raises(ValueError):
        decode_secret(bad)
    with pytest.raises(ValueError):
        StandardSigner(bad)


def test_non_ascii_id_is_verified_as_the_bytes_on_the_wire(verifier):
    # The library signs the UTF-8 id; the ingress hands headers over latin-1 decoded.
    headers = standard_headers(OLD, EVENT_BODY, NOW)
    when = datetime.fromtimestamp(NOW, tz=UTC)
    headers["webhook-signature"] = standardwebhooks.Webhook(OLD).sign(
        "msg_é✓", when, EVENT_BODY.decode()
    )
    headers["webhook-id"] = "msg_é✓".encode().decode("latin-1")
    assert verifier.verify(headers, EVENT_BODY, NOW).provider_event_id == headers["webhook-id"]
