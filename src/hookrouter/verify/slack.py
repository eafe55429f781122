"""Slack: ``X-Slack-Signature: v0=<hex>``, HMAC-SHA256 (signing secret as
UTF-8) over ``v0:{X-Slack-Request-Timestamp}:{raw body}``; the timestamp must
be within the tolerance (Slack recommends five minutes).

What the body tells us, by kind:

* Events API (JSON): id = ``event_id`` (stable across Slack's retries), type =
  ``event.type`` (``app_mention``), else the top-level ``type``
  (``app_rate_limited``).
* ``{"type": "url_verification", "challenge": ...}``: the endpoint handshake.
  The result carries ``reply = {"challenge": ...}`` (JSON) for the router to
  send back instead of its usual ack; type ``url_verification``, no id.
* Form bodies (``application/x-www-form-urlencoded``): interactivity sends
  ``payload=<json>``, whose ``type`` (``block_actions``) becomes the type;
  slash commands get the type ``slash_command``. Neither carries an id meant
  for deduplication, so the id is None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from hookrouter.verify._common import (
    check_fresh,
    collect,
    decode_hex,
    fail,
    form_fields,
    header,
    json_object,
    key_count,
    mac_keys,
    parse_timestamp,
    require_match,
    require_signature,
    split_keys,
    text_value,
)
from hookrouter.verify.base import MALFORMED_SIGNATURE, VerifiedEvent

SIGNATURE_HEADER = "x-slack-signature"
TIMESTAMP_HEADER = "x-slack-request-timestamp"
_PREFIX = "v0="


class SlackVerifier:
    """Verifies Slack request signatures for one source."""

    __slots__ = ("_key", "_older", "tolerance")
    provider = "slack"

    def __init__(self, secrets: Sequence[str], tolerance_seconds: int) -> None:
        self._key, self._older = split_keys(mac_keys(s.encode("utf-8") for s in secrets))
        self.tolerance = tolerance_seconds

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> VerifiedEvent:
        """Check the v0 signature and timestamp; describe the event."""
        value = require_signature(header(headers, SIGNATURE_HEADER), "X-Slack-Signature")
        timestamp, ts_raw = parse_timestamp(
            header(headers, TIMESTAMP_HEADER), "X-Slack-Request-Timestamp"
        )
        items = [item.strip() for item in value.split(",")]
        if not all(item.startswith(_PREFIX) for item in items):
            fail(MALFORMED_SIGNATURE, "X-Slack-Signature must look like v0=<hex>")
        candidates = collect([item[len(_PREFIX) :] for item in items], decode_hex, 32)
        require_match(self._key, self._older, candidates, b"v0:", ts_raw, b":", body)
        check_fresh(timestamp, now, self.tolerance)
        doc = json_object(body)
        return _describe_form(body) if doc is None else _describe_json(doc)

    def __repr__(self) -> str:
        secrets = key_count(self._key, self._older)
        return f"SlackVerifier(secrets={secrets}, tolerance={self.tolerance}s)"


def _describe_json(doc: dict[str, Any]) -> VerifiedEvent:
    kind = text_value(doc.get("type"))
    if kind == "url_verification":
        challenge = doc.get("challenge")
        reply = orjson.dumps({"challenge": challenge}) if isinstance(challenge, str) else None
        return VerifiedEvent(None, kind, reply=reply)
    event = doc.get("event")
    inner = text_value(event.get("type")) if isinstance(event, dict) else None
    return VerifiedEvent(text_value(doc.get("event_id")), inner or kind)


def _describe_form(body: bytes) -> VerifiedEvent:
    fields = form_fields(body)
    payload = fields.get("payload")
    if payload is not None:
        doc = json_object(payload.encode("utf-8"))
        return VerifiedEvent(None, None if doc is None else text_value(doc.get("type")))
    if "command" in fields:
        return VerifiedEvent(None, "slash_command")
    return VerifiedEvent(None, None)
