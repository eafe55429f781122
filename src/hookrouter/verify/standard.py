"""Standard Webhooks (standardwebhooks.com), inbound and outbound.

Headers ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and
``webhook-signature`` (space-separated ``v1,<base64>`` entries; other
versions such as the asymmetric ``v1a`` are ignored). The signed content is
``{id}.{timestamp}.{raw body}``, HMAC-SHA256. Secrets are ``whsec_`` followed
by base64 of the key bytes; the bare base64 is accepted too, and missing
``=`` padding is tolerated, as the reference libraries do. The ``svix-*``
header names (the same scheme under Svix's original names) are accepted as
fallbacks, so Svix-powered senders verify unchanged.

Event id = ``webhook-id`` (stable across the sender's retries); type = the
body's JSON ``type`` (None if the body is not a JSON object).

The outbound half, ``sign`` / ``StandardSigner``, is what the delivery engine
uses to sign requests to tenant endpoints; any Standard Webhooks library
verifies them.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping, Sequence
from typing import Final

from mypy_extensions import mypyc_attr

from hookrouter.verify._common import (
    MacKey,
    check_fresh,
    collect,
    decode_b64,
    fail,
    header,
    json_head,
    key_count,
    key_digest,
    mac_keys,
    parse_timestamp,
    require_match,
    require_signature,
    split_keys,
    text_value,
    wire_bytes,
)
from hookrouter.verify.base import MALFORMED_SIGNATURE, VerifiedEvent

SECRET_PREFIX = "whsec_"
ID_HEADERS: Final = ("webhook-id", "svix-id")
TIMESTAMP_HEADERS: Final = ("webhook-timestamp", "svix-timestamp")
SIGNATURE_HEADERS: Final = ("webhook-signature", "svix-signature")
_b2a_base64: Final = binascii.b2a_base64  # a C static, not a module getattr per call
# The spec asks for secrets of 24 to 64 random bytes; new ones get 32.
NEW_SECRET_BYTES = 32


def decode_secret(secret: str) -> bytes:
    """Key bytes of a ``whsec_<base64>`` (or bare base64) secret; ValueError if invalid."""
    text = secret.removeprefix(SECRET_PREFIX)
    try:
        # What base64.b64decode(validate=True) calls, without its interpreted
        # frames: decoded on every endpoint's first attempt.
        key = binascii.a2b_base64(text + "=" * (-len(text) % 4), strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("secret is not valid base64 after the whsec_ prefix") from exc
    if not key:
        raise ValueError("secret decodes to no key bytes")
    return key


def new_secret(nbytes: int = NEW_SECRET_BYTES) -> str:
    """A fresh random ``whsec_`` secret for an endpoint."""
    return SECRET_PREFIX + base64.b64encode(os.urandom(nbytes)).decode("ascii")


# Nothing it reaches refers back to it: the collector need not track it (heap.py).
@mypyc_attr(acyclic=True)
class StandardVerifier:
    """Verifies Standard Webhooks signatures for one source."""

    __slots__ = ("_key", "_older", "tolerance")
    provider = "standard"

    def __init__(self, secrets: Sequence[str], tolerance_seconds: int) -> None:
        self._key, self._older = split_keys(mac_keys(decode_secret(s) for s in secrets))
        self.tolerance = tolerance_seconds

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> VerifiedEvent:
        """Check ``webhook-signature``; id from ``webhook-id``, type from the body."""
        value = require_signature(header(headers, *SIGNATURE_HEADERS), "webhook-signature")
        timestamp, ts_raw = parse_timestamp(
            header(headers, *TIMESTAMP_HEADERS), "webhook-timestamp"
        )
        msg_id = header(headers, *ID_HEADERS)
        if msg_id is None:
            fail(
                MALFORMED_SIGNATURE,
                "webhook-id header is missing; it is part of the signed content",
            )
        encoded = []
        # rstrip(","): a repeated header arrives joined with ", ".
        for entry in value.split():
            version, _, sig = entry.rstrip(",").partition(",")
            if version == "v1":
                encoded.append(sig)
        if not encoded:
            fail(MALFORMED_SIGNATURE, "webhook-signature has no v1 signature")
        candidates = collect(encoded, decode_b64, 32)
        require_match(
            self._key, self._older, candidates, wire_bytes(msg_id), b".", ts_raw, b".", body
        )
        check_fresh(timestamp, now, self.tolerance)
        head = json_head(body)
        return VerifiedEvent(msg_id, None if head is None else text_value(head[1]))

    def __repr__(self) -> str:
        secrets = key_count(self._key, self._older)
        return f"StandardVerifier(secrets={secrets}, tolerance={self.tolerance}s)"


# Nothing it reaches refers back to it: the collector need not track it (heap.py).
@mypyc_attr(acyclic=True)
class StandardSigner:
    """Signs outbound requests per Standard Webhooks; the key is decoded once.

    Extra secrets (a rotation: new first, old after) add one more ``v1,``
    entry each to ``webhook-signature``, so receivers holding either verify.
    """

    __slots__ = ("_key", "_older")

    def __init__(self, secret: str, *more_secrets: str) -> None:
        keys = mac_keys(decode_secret(s) for s in (secret, *more_secrets))
        # The newest key apart from the rest, as a verifier keeps it: a signer
        # with one secret (nearly all) then signs without reading the tuple.
        self._key = keys[0]
        self._older = keys[1:]  # the empty tuple, shared, when there is one secret

    def sign(self, msg_id: str, timestamp: int, body: bytes) -> str:
        """``"v1,<base64>"`` (space-separated entries when several secrets)."""
        return self._signature(msg_id, str(int(timestamp)), body)

    def _signature(self, msg_id: str, stamp: str, body: bytes) -> str:
        parts = (msg_id.encode("utf-8"), b".", stamp.encode("ascii"), b".", body)
        # b2a_base64: base64.b64encode is a Python wrapper around it (per delivery).
        # A list, not a generator: compiled, a generator is an object of its own.
        signature = _entry(self._key, parts)
        if not self._older:
            return signature
        return " ".join([signature, *[_entry(key, parts) for key in self._older]])

    def headers(self, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
        """The three ``webhook-*`` headers for one outbound request."""
        return dict(self.header_pairs(msg_id, timestamp, body))

    def header_pairs(self, msg_id: str, timestamp: int, body: bytes) -> list[tuple[str, str]]:
        """:meth:`headers` as (name, value) pairs, the shape a request is written from."""
        stamp = str(int(timestamp))
        return [
            ("webhook-id", msg_id),
            ("webhook-timestamp", stamp),
            ("webhook-signature", self._signature(msg_id, stamp, body)),
        ]

    def __repr__(self) -> str:
        return f"StandardSigner(secrets={key_count(self._key, self._older)})"


def _entry(key: MacKey, parts: Sequence[bytes]) -> str:
    """One ``v1,<base64>`` entry of ``webhook-signature``."""
    return "v1," + _b2a_base64(key_digest(key, parts), newline=False).decode("ascii")


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """One-off ``"v1,<base64>"`` signature; prefer ``StandardSigner`` on hot paths."""
    return StandardSigner(secret).sign(msg_id, timestamp, body)
