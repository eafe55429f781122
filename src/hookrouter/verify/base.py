"""The verifier contract: a pure function of (headers, body, now).

A verifier checks a provider's signature over the raw body with every
configured secret (several secrets = rotation), enforces the timestamp
tolerance where the scheme signs a timestamp, and reports where the provider
put its event id and event type. It does no I/O and reads no clock: ``now``
(wall seconds) is an argument.

Headers arrive as a mapping with lower-cased names and latin-1 decoded
values; a repeated header is joined with ", " as RFC 9110 allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

# ``VerificationFailed.reason`` values; the ingress handler and metrics count by them.
MISSING_SIGNATURE: Final = "missing_signature"  # the signature header is absent or blank
MALFORMED_SIGNATURE: Final = "malformed_signature"  # present but unparseable / wrong shape
BAD_SIGNATURE: Final = "bad_signature"  # well-formed, matches no configured secret
MISSING_TIMESTAMP: Final = "missing_timestamp"  # the scheme signs a timestamp; none sent
STALE_TIMESTAMP: Final = "stale_timestamp"  # authentic, but outside the tolerance window
REASONS: Final = frozenset(
    {MISSING_SIGNATURE, MALFORMED_SIGNATURE, BAD_SIGNATURE, MISSING_TIMESTAMP, STALE_TIMESTAMP}
)


# Not frozen: built once or twice per request, and a frozen dataclass's
# __setattr__ detour makes construction slower; treat instances as immutable.
@dataclass(slots=True)
class VerifiedEvent:
    """What a successful verification tells the router about the event."""

    provider_event_id: str | None  # dedup key (with the source id); None = no dedup possible
    event_type: str | None  # used for endpoint filters such as "invoice.*"
    # A reply the provider requires instead of the standard JSON ack (Slack's
    # url_verification challenge). The event is still stored.
    reply: bytes | None = None
    reply_content_type: str = "application/json"

    # Written out: mypyc leaves a dataclass's generated __init__ interpreted
    # (mypyc/mypyc#817; docs/engines.md, "Compiled hot paths").
    def __init__(
        self,
        provider_event_id: str | None,
        event_type: str | None,
        reply: bytes | None = None,
        reply_content_type: str = "application/json",
    ) -> None:
        self.provider_event_id = provider_event_id
        self.event_type = event_type
        self.reply = reply
        self.reply_content_type = reply_content_type


class Verifier(Protocol):
    """Checks one source's signatures; raises ``VerificationFailed`` on failure."""

    provider: str

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> VerifiedEvent:
        """Return the verified event facts, or raise ``VerificationFailed`` with a reason."""
        ...
