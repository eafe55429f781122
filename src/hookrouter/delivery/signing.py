"""Outbound request headers, signed per Standard Webhooks.

Every delivery carries ``webhook-id`` (the event id: stable across retries
and across the endpoints an event fans out to, so a receiver can deduplicate),
``webhook-timestamp`` (the *attempt's* time: each retry is signed afresh, or
a receiver enforcing the spec's 5-minute tolerance would reject every retry
after the first few minutes) and ``webhook-signature``. The HMAC itself is
``hookrouter.verify.standard.StandardSigner``, shared with inbound
verification so the two can never disagree; any Standard Webhooks library
verifies what we send.

An endpoint's own extra headers (``[[endpoints]] headers``) come last; they
may not set the signed headers, the content type, or the framing headers the
transport owns (config validation refuses them, and they are dropped here too).
"""

from __future__ import annotations

from collections.abc import Iterable

from hookrouter.config.delivery import RESERVED_HEADERS
from hookrouter.verify.standard import StandardSigner


def endpoint_signer(secret: str, *previous_secrets: str) -> StandardSigner:
    """A signer for one endpoint (key decoded once). During a rotation pass the
    new secret first and the old ones after: each adds a ``v1,`` signature."""
    return StandardSigner(secret, *previous_secrets)


def delivery_headers(
    signer: StandardSigner,
    *,
    msg_id: str,
    now: float,
    body: bytes,
    content_type: str = "application/json",
    extra: Iterable[tuple[str, str]] = (),
) -> list[tuple[str, str]]:
    """Headers for one attempt: content type, the three signed headers, then extras."""
    headers = [("content-type", content_type), *signer.header_pairs(msg_id, int(now), body)]
    # A loop, not a generator: compiled, a generator is an object per delivery
    # (and extra is usually empty).
    for name, value in extra:
        if name.lower() not in RESERVED_HEADERS:
            headers.append((name, value))
    return headers


__all__ = ["delivery_headers", "endpoint_signer"]
