"""Slack verification, against the worked example in Slack's docs."""

from __future__ import annotations

from urllib.parse import urlencode

import orjson
import pytest
from tests.support.verify_signers import NOW, SECRETS, reason, slack_headers

from hookrouter.verify import build_verifier

OLD, NEW = SECRETS["slack"]

# docs.slack.dev / api.slack.com, "Verifying requests from Slack" (a slash command).
DOC_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
DOC_TIMESTAMP = 1531420618
DOC_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
    b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
    b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibI"
    b"GlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)
DOC_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"

EVENT = orjson.dumps(
    {
        "type": "event_callback",
        "event_id": "Ev08MFMKH6",
        "event": {"type": "app_mention", "text": "hi"},
    }
)


@pytest.fixture
def verifier():
    return build_verifier("slack", [OLD, NEW], 300, {})


def test_slacks_published_example_verifies():
    verifier = build_verifier("slack", [DOC_SECRET], 300, {})
    headers = {"x-slack-signature": DOC_SIGNATURE, "x-slack-request-timestamp": str(DOC_TIMESTAMP)}
    event = verifier.verify(headers, DOC_BODY, DOC_TIMESTAMP + 60)
    assert (event.provider_event_id, event.event_type) == (None, "slash_command")
    assert reason(verifier, headers, DOC_BODY, now=DOC_TIMESTAMP + 301) == "stale_timestamp"


def test_events_api_gives_event_id_and_inner_type(verifier):
    event = verifier.verify(slack_headers(OLD, EVENT, NOW), EVENT, NOW)
    assert (event.provider_event_id, event.event_type) == ("Ev08MFMKH6", "app_mention")
    assert event.reply is None


def test_outer_type_when_there_is_no_inner_event(verifier):
    body = b'{"type": "app_rate_limited", "team_id": "T1"}'
    assert (
        verifier.verify(slack_headers(OLD, body, NOW), body, NOW).event_type == "app_rate_limited"
    )


def test_url_verification_returns_the_challenge_reply(verifier):
    body = orjson.dumps(
        {
            "token": "t",
            "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
            "type": "url_verification",
        }
    )
    event = verifier.verify(slack_headers(OLD, body, NOW), body, NOW)
    assert event.event_type == "url_verification"
    assert event.provider_event_id is None
    assert event.reply_content_type == "application/json"
    assert orjson.loads(event.reply) == {
        "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    }


def test_unsigned_url_verification_is_refused(verifier):
    body = b'{"type": "url_verification", "challenge": "x"}'
    assert reason(verifier, {"x-slack-request-timestamp": str(NOW)}, body) == "missing_signature"


def test_interactivity_form_payload_verifies(verifier):
    payload = {"type": "block_actions", "trigger_id": "13345224609.738474920.8088930838d88f008e0"}
    body = urlencode({"payload": orjson.dumps(payload).decode()}).encode()
    event = verifier.verify(slack_headers(NEW, body, NOW), body, NOW)
    assert (event.provider_event_id, event.event_type) == (None, "block_actions")


def test_unreadable_form_body_still_verifies(verifier):
    body = b"payload=%7Bnot-json&x=%FF"
    event = verifier.verify(slack_headers(OLD, body, NOW), body, NOW)
    assert (event.provider_event_id, event.event_type) == (None, None)


def test_tampered_body_is_bad_signature(verifier):
    headers = slack_headers(OLD, EVENT, NOW)
    assert reason(verifier, headers, EVENT.replace(b"hi", b"ho")) == "bad_signature"


def test_tampered_timestamp_is_bad_signature(verifier):
    headers = slack_headers(OLD, EVENT, NOW) | {"x-slack-request-timestamp": str(NOW + 1)}
    assert reason(verifier, headers, EVENT) == "bad_signature"


def test_wrong_secret_is_bad_signature():
    verifier = build_verifier("slack", [OLD], 300, {})
    assert reason(verifier, slack_headers(NEW, EVENT, NOW), EVENT) == "bad_signature"


def test_rotation_second_secret_matches(verifier):
    # The fixture holds [OLD, NEW]; this request is signed with NEW only.
    assert verifier.verify(slack_headers(NEW, EVENT, NOW), EVENT, NOW).event_type == "app_mention"


@pytest.mark.parametrize(("now", "ok"), [(NOW + 300, True), (NOW + 301, False), (NOW - 301, False)])
def test_tolerance_both_directions(verifier, now, ok):
    headers = slack_headers(OLD, EVENT, NOW)
    if ok:
        assert verifier.verify(headers, EVENT, now).provider_event_id == "Ev08MFMKH6"
    else:
        assert reason(verifier, headers, EVENT, now=now) == "stale_timestamp"


@pytest.mark.parametrize(
    ("signature", "timestamp", "expected"),
    [
        ("v1=" + "ab" * 32, str(NOW), "malformed_signature"),
        ("v0=xyz", str(NOW), "malformed_signature"),
        ("ab" * 32, str(NOW), "malformed_signature"),
        ("v0=" + "ab" * 32, "yesterday", "malformed_signature"),
        ("v0=" + "ab" * 32, "1.5e9", "malformed_signature"),
        ("v0=" + "ab" * 32, None, "missing_timestamp"),
        ("v0=" + "ab" * 32, str(NOW), "bad_signature"),
    ],
)
def test_malformed_headers(verifier, signature, timestamp, expected):
    headers = {"x-slack-signature": signature}
    if timestamp is not None:
        headers["x-slack-request-timestamp"] = timestamp
    assert reason(verifier, headers, EVENT) == expected


def test_missing_signature(verifier):
    assert reason(verifier, {"x-slack-request-timestamp": str(NOW)}, EVENT) == "missing_signature"
