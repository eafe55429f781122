"""Independent signers for webhook providers, for tests that need signed requests.

``from tests.support.verify_signers import SIGNERS, SECRETS`` gives, per
provider, a function ``(secret, body, timestamp) -> headers`` (lower-cased
names) that a verifier built by ``build_verifier(provider, SECRETS[p], ...,
OPTIONS.get(p, {}))`` accepts. Every signer here is written with the standard
library (or the provider's own SDK) and shares no code with
``hookrouter.verify``: a test that signs with these and verifies with
hookrouter checks the scheme, not an echo of itself.
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

import orjson
import pytest
import standardwebhooks
import stripe

from hookrouter.errors import VerificationFailed
from hookrouter.verify import REASONS, Verifier

NOW = 1_700_000_000  # a fixed wall time; the verifiers take `now` as an argument

Headers = dict[str, str]
Signer = Callable[[str, bytes, int], Headers]  # (secret, body, timestamp) -> headers


def _hex(key: bytes, msg: bytes, algo: str = "sha256") -> str:
    return hmac.new(key, msg, algo).hexdigest()


def _b64(key: bytes, msg: bytes, algo: str = "sha256") -> str:
    return base64.b64encode(hmac.new(key, msg, algo).digest()).decode()


def stripe_headers(secret: str, body: bytes, ts: int) -> Headers:
    """Signed by the Stripe SDK itself."""
    value = stripe.WebhookSignature.generate_signature_header(body.decode(), secret, timestamp=ts)
    return {"stripe-signature": value}


def github_headers(secret: str, body: bytes, ts: int) -> Headers:
    return {
        "x-hub-signature-256": "sha256=" + _hex(secret.encode(), body),
        "x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "x-github-event": "issues",
    }


def shopify_headers(secret: str, body: bytes, ts: int) -> Headers:
    return {
        "x-shopify-hmac-sha256": _b64(secret.encode(), body),
        "x-shopify-webhook-id": "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
        "x-shopify-topic": "orders/create",
    }


def slack_headers(secret: str, body: bytes, ts: int) -> Headers:
    base = b"v0:" + str(ts).encode() + b":" + body
    return {
        "x-slack-signature": "v0=" + _hex(secret.encode(), base),
        "x-slack-request-timestamp": str(ts),
    }


def standard_headers(secret: str, body: bytes, ts: int) -> Headers:
    """Signed by the standardwebhooks reference library."""
    msg_id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
    when = datetime.fromtimestamp(ts, tz=UTC)
    sig = standardwebhooks.Webhook(secret).sign(msg_id, when, body.decode())
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": sig}


def hmac_headers(secret: str, body: bytes, ts: int) -> Headers:
    """For the generic verifier built with GENERIC_OPTIONS below."""
    return {
        "x-signature": "sha512=" + _b64(secret.encode(), str(ts).encode() + b"." + body, "sha512"),
        "x-timestamp": str(ts),
    }


GENERIC_OPTIONS = {
    "header": "X-Signature",
    "algorithm": "sha512",
    "encoding": "base64",
    "prefix": "sha512=",
    "timestamp_header": "X-Timestamp",
    "id_field": "data.id",
    "type_field": "type",
}

# Secrets in each provider's own format (Standard Webhooks: whsec_ + base64).
SECRETS = {
    "stripe": ("whsec_old0000000000000000000000", "whsec_new1111111111111111111111"),
    "github": ("It's a Secret to Everybody", "another github secret"),
    "shopify": ("shpss_old_client_secret", "shpss_new_client_secret"),
    "slack": ("8f742231b10e8888abcd99yyyzzz85a5", "0123456789abcdef0123456789abcdef"),
    "standard": (
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
    ),
    "hmac": ("generic-old-secret", "generic-new-secret"),
}
SIGNERS: dict[str, Signer] = {
    "stripe": stripe_headers,
    "github": github_headers,
    "shopify": shopify_headers,
    "slack": slack_headers,
    "standard": standard_headers,
    "hmac": hmac_headers,
}
OPTIONS: dict[str, dict[str, object]] = {"hmac": GENERIC_OPTIONS}
TIMESTAMPED = ("stripe", "slack", "standard", "hmac")

EVENT_BODY = orjson.dumps(
    {"id": "evt_1NfFz2", "type": "invoice.paid", "action": "opened", "data": {"id": "obj_9"}}
)


def reason(verifier: Verifier, headers: Mapping[str, str], body: bytes, now: float = NOW) -> str:
    """The failure reason; fails the test if verification succeeds."""
    with pytest.raises(VerificationFailed) as info:
        verifier.verify(headers, body, now)
    assert info.value.reason in REASONS
    assert info.value.status == 401
    return info.value.reason
