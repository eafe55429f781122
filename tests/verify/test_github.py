"""GitHub verification, against the test vector GitHub publishes."""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlencode

import pytest
from tests.support.verify_signers import EVENT_BODY, NOW, SECRETS, github_headers, reason

from hookrouter.errors import VerificationFailed
from hookrouter.verify import build_verifier

OLD, NEW = SECRETS["github"]

# docs.github.com, "Validating webhook deliveries" -> "Testing the webhook payload validation".
DOC_SECRET = "It's a Secret to Everybody"
DOC_PAYLOAD = b"Hello, World!"
DOC_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


@pytest.fixture
def verifier():
    return build_verifier("github", [OLD], 300, {})


def test_githubs_published_vector_verifies():
    verifier = build_verifier("github", [DOC_SECRET], 300, {})
    headers = {
        "x-hub-signature-256": DOC_SIGNATURE,
        "x-github-event": "ping",
        "x-github-delivery": "d-1",
    }
    event = verifier.verify(headers, DOC_PAYLOAD, NOW)
    # The body is not JSON, so no action is appended.
    assert (event.provider_event_id, event.event_type) == ("d-1", "ping")
    assert reason(verifier, headers, b"Hello, World?") == "bad_signature"


def test_action_is_appended_to_the_event_type(verifier):
    event = verifier.verify(github_headers(OLD, EVENT_BODY, NOW), EVENT_BODY, NOW)
    assert event.provider_event_id == "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    assert event.event_type == "issues.opened"


def test_append_action_can_be_switched_off():
    verifier = build_verifier("github", [OLD], 300, {"append_action": False})
    assert (
        verifier.verify(github_headers(OLD, EVENT_BODY, NOW), EVENT_BODY, NOW).event_type
        == "issues"
    )


def test_action_less_event_keeps_bare_name(verifier):
    body = b'{"ref": "refs/heads/main"}'
    headers = github_headers(OLD, body, NOW) | {"x-github-event": "push"}
    assert verifier.verify(headers, body, NOW).event_type == "push"


def test_form_encoded_payload_is_understood(verifier):
    body = urlencode({"payload": '{"action": "closed", "number": 1}'}).encode()
    headers = github_headers(OLD, body, NOW) | {"x-github-event": "pull_request"}
    assert verifier.verify(headers, body, NOW).event_type == "pull_request.closed"


def test_tampered_body_is_bad_signature(verifier):
    headers = github_headers(OLD, EVENT_BODY, NOW)
    assert reason(verifier, headers, EVENT_BODY + b" ") == "bad_signature"


def test_wrong_secret_is_bad_signature(verifier):
    assert reason(verifier, github_headers(NEW, EVENT_BODY, NOW), EVENT_BODY) == "bad_signature"


def test_rotation_second_secret_matches():
    headers = github_headers(NEW, EVENT_BODY, NOW)
    rotated = build_verifier("github", [OLD, NEW], 300, {})
    assert rotated.verify(headers, EVENT_BODY, NOW).event_type == "issues.opened"


def test_no_timestamp_so_old_requests_still_verify(verifier):
    headers = github_headers(OLD, EVENT_BODY, NOW)
    assert verifier.verify(headers, EVENT_BODY, NOW + 10**7).event_type == "issues.opened"


def test_only_legacy_sha1_header_is_missing_signature(verifier):
    sha1 = "sha1=" + hmac.new(OLD.encode(), EVENT_BODY, hashlib.sha1).hexdigest()
    with pytest.raises(VerificationFailed) as info:
        verifier.verify({"x-hub-signature": sha1}, EVENT_BODY, NOW)
    assert info.value.reason == "missing_signature"
    assert "X-Hub-Signature-256" in info.value.message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", "malformed_signature"),
        ("sha1=757107ea0eb2509fc211221cce984b8a37570b6d", "malformed_signature"),
        ("sha256=zz", "malformed_signature"),
        ("sha256=" + "ab" * 20, "malformed_signature"),
        ("sha256=" + "ab" * 32, "bad_signature"),
    ],
)
def test_malformed_headers(verifier, value, expected):
    assert reason(verifier, {"x-hub-signature-256": value}, EVENT_BODY) == expected


def test_missing_header(verifier):
    assert reason(verifier, {"x-github-event": "push"}, EVENT_BODY) == "missing_signature"


def test_missing_id_and_event_headers_give_none(verifier):
    headers = {"x-hub-signature-256": github_headers(OLD, EVENT_BODY, NOW)["x-hub-signature-256"]}
    event = verifier.verify(headers, EVENT_BODY, NOW)
    assert (event.provider_event_id, event.event_type) == (None, None)
