"""Stripe: ``Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]``.

The signed payload is ``{t}.{raw body}``, HMAC-SHA256, hex. The key is the
whole signing-secret string as UTF-8 bytes, ``whsec_`` prefix included: the
official SDK (``stripe.WebhookSignature._compute_signature``) keys the HMAC
with ``secret.encode("utf-8")`` and never base64-decodes it.

Several ``v1`` entries appear while Stripe rolls a secret; ``v0`` (legacy
test-mode) and unknown schemes are ignored. Unlike the SDK, which only
rejects old timestamps, the tolerance applies in both directions.

Event id and type come from the body's ``id`` and ``type``; a body that is
not a JSON object yields ``None`` for both (the signature still decides).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from mypy_extensions import mypyc_attr

from hookrouter.verify._common import (
    HmacKey,
    check_fresh,
    collect,
    decode_hex,
    fail,
    header,
    json_head,
    key_count,
    mac_keys,
    parse_timestamp,
    require_match,
    require_signature,
    split_keys,
    text_value,
)
from hookrouter.verify.base import MALFORMED_SIGNATURE, VerifiedEvent

SIGNATURE_HEADER: Final = "stripe-signature"


def _split(value: str) -> tuple[str | None, list[str]]:
    """(timestamp text, v1 signature texts) from a Stripe-Signature value."""
    timestamp: str | None = None
    signatures: list[str] = []
    for item in value.split(","):
        key, sep, text = item.strip().partition("=")
        if not sep:
            continue  # not key=value: ignore, as the SDK does
        if key == "t":
            if timestamp is not None and timestamp != text:
                fail(MALFORMED_SIGNATURE, "Stripe-Signature carries two different timestamps")
            timestamp = text
        elif key == "v1":
            signatures.append(text)
    return timestamp, signatures


def sign_header(secret: str, timestamp: int, body: bytes) -> str:
    """A ``Stripe-Signature`` value as Stripe would send it (for test senders and benches)."""
    stamp = str(int(timestamp)).encode("ascii")
    mac = HmacKey(secret.encode("utf-8")).digest(stamp, b".", body)
    return f"t={int(timestamp)},v1={mac.hex()}"


# Nothing it reaches refers back to it: the collector need not track it (heap.py).
@mypyc_attr(acyclic=True)
class StripeVerifier:
    """Verifies Stripe webhook signatures for one source."""

    __slots__ = ("_key", "_older", "tolerance")
    provider = "stripe"

    def __init__(self, secrets: Sequence[str], tolerance_seconds: int) -> None:
        self._key, self._older = split_keys(mac_keys(s.encode("utf-8") for s in secrets))
        self.tolerance = tolerance_seconds

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> VerifiedEvent:
        """Check ``Stripe-Signature``; return the body's ``id`` and ``type``."""
        value = require_signature(header(headers, SIGNATURE_HEADER), "Stripe-Signature")
        ts_text, encoded = _split(value)
        if not encoded:
            fail(MALFORMED_SIGNATURE, "Stripe-Signature has no v1 signature")
        timestamp, ts_raw = parse_timestamp(ts_text, "Stripe-Signature t=")
        candidates = collect(encoded, decode_hex, 32)
        require_match(self._key, self._older, candidates, ts_raw, b".", body)
        check_fresh(timestamp, now, self.tolerance)
        head = json_head(body)
        if head is None:
            return VerifiedEvent(None, None)
        return VerifiedEvent(text_value(head[0]), text_value(head[1]))

    def __repr__(self) -> str:
        secrets = key_count(self._key, self._older)
        return f"StripeVerifier(secrets={secrets}, tolerance={self.tolerance}s)"
