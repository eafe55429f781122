"""Shopify: ``X-Shopify-Hmac-Sha256: <base64>``, HMAC-SHA256 of the raw body
keyed with the app's client secret (UTF-8). No timestamp is signed.

Event id, chosen from Shopify's current header table (shopify.dev, "Webhooks
delivery structure"):

* ``X-Shopify-Webhook-Id`` -- "a unique composite key per delivery. Use to
  identify and deduplicate individual deliveries." This is the dedup key.
* ``X-Shopify-Event-Id`` -- "a unique ID shared across all deliveries
  produced by the same merchant action". One action can fan out to several
  topics, so deduplicating on it alone would drop distinct deliveries. It is
  only a fallback, and then combined with the topic: ``<topic>:<event id>``.

Type: ``X-Shopify-Topic`` (``orders/create``). The unprefixed header names
of Shopify's Events developer preview (``Shopify-Hmac-Sha256``,
``Shopify-Webhook-Id``, ``Shopify-Topic``) are accepted as fallbacks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hookrouter.verify._common import (
    collect,
    decode_b64,
    header,
    key_count,
    mac_keys,
    require_match,
    require_signature,
    split_keys,
)
from hookrouter.verify.base import VerifiedEvent

SIGNATURE_HEADERS = ("x-shopify-hmac-sha256", "shopify-hmac-sha256")
WEBHOOK_ID_HEADERS = ("x-shopify-webhook-id", "shopify-webhook-id")
EVENT_ID_HEADERS = ("x-shopify-event-id", "shopify-event-id")
TOPIC_HEADERS = ("x-shopify-topic", "shopify-topic")


class ShopifyVerifier:
    """Verifies Shopify webhook HMACs for one source."""

    __slots__ = (
        "_key",
        "_older",
    )
    provider = "shopify"

    def __init__(self, secrets: Sequence[str]) -> None:
        self._key, self._older = split_keys(mac_keys(s.encode("utf-8") for s in secrets))

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> VerifiedEvent:
        """Check the base64 body HMAC; id from the webhook (delivery) id."""
        value = require_signature(header(headers, *SIGNATURE_HEADERS), "X-Shopify-Hmac-Sha256")
        candidates = collect([part.strip() for part in value.split(",")], decode_b64, 32)
        require_match(self._key, self._older, candidates, body)
        topic = header(headers, *TOPIC_HEADERS)
        event_id = header(headers, *WEBHOOK_ID_HEADERS)
        if event_id is None:
            shared = header(headers, *EVENT_ID_HEADERS)
            if shared is not None:
                event_id = f"{topic or ''}:{shared}"
        return VerifiedEvent(event_id, topic)

    def __repr__(self) -> str:
        secrets = key_count(self._key, self._older)
        return f"ShopifyVerifier(secrets={secrets})"
