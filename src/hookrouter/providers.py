"""What each provider does when we do not answer 2xx: its documented retry behaviour.

This decides whether shedding load (429/503) is safe. A sender that retries
will come back; a sender that does not loses the event, so for those we keep
accepting while physically possible and raise a loud signal instead.

Sources (as published by each provider; re-check when they change):

* Stripe — live mode retries "for up to three days with an exponential back
  off"; test mode three times over a few hours.
  https://docs.stripe.com/webhooks#retries
* GitHub — does not redeliver failed deliveries automatically; they must be
  redelivered by hand or through the REST API.
  https://docs.github.com/en/webhooks/using-webhooks/handling-failed-webhook-deliveries
* Shopify — since 2024-09-10, 8 retries over 4 hours with exponential backoff.
  https://shopify.dev/changelog/updates-to-webhook-retry-mechanism
* Slack Events API — 3 retries: nearly immediately, after 1 minute, after 5 minutes.
  https://api.slack.com/apis/events-api#retries
* Standard Webhooks — the specification requires senders to retry failed
  deliveries with exponential backoff (Svix: 8 attempts over ~27 h).
  https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md
* Generic HMAC — unknown sender; assumed not to retry unless configured.
* api — the router's own publish API (``admin.publish``): its callers are
  told to retry with the same ``Idempotency-Key``, remembered at least a day.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class RetryBehaviour:
    """A provider's documented redelivery after a non-2xx answer."""

    retries: bool
    window_seconds: float  # how long the sender keeps trying (0 = never retries)
    summary: str


PROVIDER_RETRIES: Final[dict[str, RetryBehaviour]] = {
    "stripe": RetryBehaviour(True, 3 * 86400, "retries for up to 3 days (live mode)"),
    "github": RetryBehaviour(False, 0, "does not redeliver automatically"),
    "shopify": RetryBehaviour(True, 4 * 3600, "retries 8 times over 4 hours"),
    "slack": RetryBehaviour(True, 6 * 60, "retries 3 times within about 6 minutes"),
    "standard": RetryBehaviour(True, 27 * 3600, "retries with exponential backoff per the spec"),
    "hmac": RetryBehaviour(False, 0, "unknown sender; assumed not to retry"),
    "api": RetryBehaviour(True, 86400, "retries with the same Idempotency-Key"),
}


def sender_retries(provider: str) -> bool:
    """True when ``provider`` documents automatic redelivery after a non-2xx answer."""
    behaviour = PROVIDER_RETRIES.get(provider)
    return behaviour is not None and behaviour.retries
