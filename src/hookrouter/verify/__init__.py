"""Signature verification: pure verifiers per provider, and the outbound signer.

Theory of operation
-------------------
Each source gets one verifier, built by ``build_verifier`` when the config
loads; it decodes secrets and keys one HMAC state per secret then, so the
per-request cost is a copy of that state plus the hash of the body. Stripe
and Standard Webhooks read id/type with ``json_head`` (msgspec), because
orjson builds every nested object of a body only for two fields to be read
(figures in docs/performance.md, "Verification").

``verify(headers, body, now)`` either returns a ``VerifiedEvent``
(the provider's event id for dedup, the event type for filters, and an
optional reply such as Slack's challenge) or raises ``VerificationFailed``
whose ``reason`` is one of ``REASONS``. Nothing else escapes, whatever the
headers and body hold.

Order of checks: headers present and well-formed, then the MAC against every
configured secret and every signature carried (rotation on either side), and
only then the timestamp tolerance -- so ``stale_timestamp`` always means
"authentic but too old or too new" (a replay or a skewed clock), never a
forgery. Id and type are read last, and a body that cannot be read for them
gives None rather than an error: verification is about the signature.
"""

from hookrouter.verify.base import (
    BAD_SIGNATURE,
    MALFORMED_SIGNATURE,
    MISSING_SIGNATURE,
    MISSING_TIMESTAMP,
    REASONS,
    STALE_TIMESTAMP,
    VerifiedEvent,
    Verifier,
)
from hookrouter.verify.generic import GenericHmacVerifier, HmacOptions
from hookrouter.verify.github import GitHubVerifier
from hookrouter.verify.registry import PROVIDERS, build_verifier, validate_source_options
from hookrouter.verify.shopify import ShopifyVerifier
from hookrouter.verify.slack import SlackVerifier
from hookrouter.verify.standard import (
    StandardSigner,
    StandardVerifier,
    decode_secret,
    new_secret,
    sign,
)
from hookrouter.verify.stripe import StripeVerifier

__all__ = [
    "BAD_SIGNATURE",
    "MALFORMED_SIGNATURE",
    "MISSING_SIGNATURE",
    "MISSING_TIMESTAMP",
    "PROVIDERS",
    "REASONS",
    "STALE_TIMESTAMP",
    "GenericHmacVerifier",
    "GitHubVerifier",
    "HmacOptions",
    "ShopifyVerifier",
    "SlackVerifier",
    "StandardSigner",
    "StandardVerifier",
    "StripeVerifier",
    "VerifiedEvent",
    "Verifier",
    "build_verifier",
    "decode_secret",
    "new_secret",
    "sign",
    "validate_source_options",
]
