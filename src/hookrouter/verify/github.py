"""GitHub: ``X-Hub-Signature-256: sha256=<hex>`` over the raw body.

No timestamp is signed, so there is no replay window to enforce; dedup on
``X-GitHub-Delivery`` (a GUID per delivery) is the replay defence. The legacy
SHA-1 ``X-Hub-Signature`` is not accepted: a request carrying only that one
fails as ``missing_signature`` with a message saying so.

Event type: ``X-GitHub-Event``, and, by default, the body's top-level
``action`` appended after a dot (``issues`` + ``opened`` -> ``issues.opened``;
``push`` has no action and stays ``push``). Dotted types let endpoint filters
such as ``pull_request.*`` or ``issues.opened`` select what GitHub's own
subscription UI cannot; a filter on the bare event name must then be written
``issues.*`` (or ``issues`` for action-less events). The option
``append_action = false`` keeps the bare header value and skips parsing the
body (GitHub payloads are often tens of KB). Bodies sent as
``application/x-www-form-urlencoded`` (``payload=<json>``) are understood;
a body that is neither yields the bare event name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hookrouter.verify._common import (
    collect,
    decode_hex,
    fail,
    form_payload_json,
    header,
    json_object,
    key_count,
    mac_keys,
    require_match,
    split_keys,
    text_value,
)
from hookrouter.verify.base import MALFORMED_SIGNATURE, MISSING_SIGNATURE, VerifiedEvent

SIGNATURE_HEADER = "x-hub-signature-256"
LEGACY_SHA1_HEADER = "x-hub-signature"
DELIVERY_HEADER = "x-github-delivery"
EVENT_HEADER = "x-github-event"
_PREFIX = "sha256="


class GitHubVerifier:
    """Verifies GitHub webhook signatures for one source."""

    __slots__ = ("_key", "_older", "append_action")
    provider = "github"

    def __init__(self, secrets: Sequence[str], *, append_action: bool = True) -> None:
        self._key, self._older = split_keys(mac_keys(s.encode("utf-8") for s in secrets))
        self.append_action = append_action

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> VerifiedEvent:
        """Check ``X-Hub-Signature-256``; id from ``X-GitHub-Delivery``."""
        value = header(headers, SIGNATURE_HEADER)
        if value is None:
            if header(headers, LEGACY_SHA1_HEADER) is not None:
                fail(
                    MISSING_SIGNATURE, "only SHA-1 X-Hub-Signature sent; X-Hub-Signature-256 needed"
                )
            fail(MISSING_SIGNATURE, "X-Hub-Signature-256 header is missing")
        # A repeated header arrives joined with ", ".
        items = [item.strip() for item in value.split(",")]
        if not all(item.startswith(_PREFIX) for item in items):
            fail(MALFORMED_SIGNATURE, "X-Hub-Signature-256 must look like sha256=<hex>")
        candidates = collect([item[len(_PREFIX) :] for item in items], decode_hex, 32)
        require_match(self._key, self._older, candidates, body)
        return VerifiedEvent(header(headers, DELIVERY_HEADER), self._event_type(headers, body))

    def _event_type(self, headers: Mapping[str, str], body: bytes) -> str | None:
        event = header(headers, EVENT_HEADER)
        if event is None or not self.append_action:
            return event
        doc = json_object(body)
        if doc is None:
            doc = form_payload_json(body)
        action = None if doc is None else text_value(doc.get("action"))
        return event if action is None else f"{event}.{action}"

    def __repr__(self) -> str:
        secrets = key_count(self._key, self._older)
        return f"GitHubVerifier(secrets={secrets}, append_action={self.append_action})"
