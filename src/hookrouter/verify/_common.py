"""Pieces every verifier shares: precomputed HMAC keys, strict decoders,
timestamp checks and the tolerant body peeking used for event id and type.

Why precomputed keys: ``hmac.new(key, msg, ...)`` hashes the key pads on every
call. Building an ``hmac.HMAC`` once per secret and ``copy()``-ing it per
request skips that work, and is cheaper than ``hmac.new`` or the one-shot
``hmac.digest`` (figures in docs/performance.md, "Verification"). ``HmacKey``
goes one step further and keeps the two keyed ``hashlib`` states of RFC 2104
itself (inner and outer pad hashed once): ``hmac.HMAC.copy``/``update``/
``digest`` are Python-level wrappers, three interpreted calls per message,
while ``hashlib`` objects are C. Tests check
it against ``hmac`` for keys shorter and longer than the block, and the
providers' SDKs verify what it signs.

With the native helper built (``hookrouter._native._hmac``), SHA-256 keys
skip hashlib altogether: its per-message EVP context copies, not the
hashing, were most of the cost, where two plain SHA-256 states copy by value
(``_native/hmac_sha256.c``). Other
algorithms, and builds without it, use the hashlib states.

Signatures are decoded to bytes before comparison: ``hmac.compare_digest``
raises ``TypeError`` on ``str`` with non-ASCII characters, and header values
are attacker-chosen latin-1 text.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, NoReturn
from urllib.parse import parse_qsl

import msgspec
import orjson

from hookrouter._native.accel import hmac as native_hmac
from hookrouter.errors import VerificationFailed
from hookrouter.verify.base import (
    BAD_SIGNATURE,
    MALFORMED_SIGNATURE,
    MISSING_SIGNATURE,
    MISSING_TIMESTAMP,
    STALE_TIMESTAMP,
)
from hookrouter.verify.json_head import DECODE_HEAD

# Senders put one or two signatures in a header (two during a secret
# rotation); 16 leaves room for any real sender while bounding the work an
# attacker can ask for with one oversized header.
MAX_SIGNATURES: Final = 16
# Unix seconds have 10 digits until 2286; 15 also admits milliseconds (which
# then fail the tolerance check, honestly) but refuses absurd digit strings.
_MAX_TIMESTAMP_DIGITS: Final = 15
# Bound once: compiled code looks a module attribute up by name at every call
# (a getattr on the module), a Final name is a C static.
_compare_digest: Final = hmac.compare_digest
_unhexlify: Final = binascii.unhexlify


def fail(reason: str, message: str) -> NoReturn:
    """Raise the one exception a verifier may raise."""
    raise VerificationFailed(message, reason=reason)


# The RFC 2104 pads, as translation tables over key bytes (as the stdlib does).
_IPAD = bytes(b ^ 0x36 for b in range(256))
_OPAD = bytes(b ^ 0x5C for b in range(256))


# (state, parts) -> MAC with a state from key_state(key); None without the helper.
_NATIVE_DIGEST: Final[Callable[[bytes, Sequence[bytes]], bytes] | None] = (
    None if native_hmac is None else native_hmac.digest
)


class HmacKey:
    """One secret's HMAC (RFC 2104): both padded keys hashed once, copied per message."""

    __slots__ = ("_inner", "_native", "_outer", "digest_size", "name")

    def __init__(self, key: bytes, algorithm: str = "sha256", *, native: bool = True) -> None:
        """``native=False`` keeps SHA-256 on hashlib too (tests compare the two)."""
        self._native: bytes | None = None
        if native and native_hmac is not None and algorithm == "sha256":
            self._native = native_hmac.key_state(key)
        self._inner: Any = None
        self._outer: Any = None
        if self._native is not None and _NATIVE_DIGEST is not None:
            # The native state serves every digest: hashing the padded keys with
            # hashlib too was most of building a key, paid on a tenant's first event.
            self.digest_size: int = 32
            self.name = "hmac-sha256"
            return
        inner, outer = hashlib.new(algorithm), hashlib.new(algorithm)
        block = inner.block_size
        if len(key) > block:  # a long key is replaced by its hash, per the RFC
            key = hashlib.new(algorithm, key).digest()
        key = key.ljust(block, b"\0")
        inner.update(key.translate(_IPAD))
        outer.update(key.translate(_OPAD))
        self._inner, self._outer = inner, outer
        self.digest_size = inner.digest_size
        self.name = f"hmac-{inner.name}"

    def digest(self, *parts: bytes) -> bytes:
        """HMAC of the concatenation of ``parts`` (no concatenated copy made)."""
        return self.digest_of(parts)

    def digest_of(self, parts: Sequence[bytes]) -> bytes:
        """``digest(*parts)`` for parts already in hand: compiled code calls this
        directly, where a star call goes through the generic Python call path."""
        state = self._native
        if state is not None and _NATIVE_DIGEST is not None:
            return _NATIVE_DIGEST(state, parts)
        inner = self._inner.copy()
        for part in parts:
            inner.update(part)
        outer = self._outer.copy()
        outer.update(inner.digest())
        mac: bytes = outer.digest()
        return mac

    def __repr__(self) -> str:
        return f"HmacKey({self.name})"  # never show key material


# A secret ready to MAC with: the native helper's key state for SHA-256 when it
# is built, else an ``HmacKey``. A tuple of key states (bytes) leaves the
# collector's view after its first pass, where every HmacKey of a source or an
# endpoint stayed tracked (and traversed) for as long as its owner lives.
MacKey = bytes | HmacKey


def mac_keys(secrets: Iterable[bytes], algorithm: str = "sha256") -> tuple[MacKey, ...]:
    """One :data:`MacKey` per secret, for :func:`require_match` and :func:`key_digest`."""
    if native_hmac is not None and _NATIVE_DIGEST is not None and algorithm == "sha256":
        return tuple(native_hmac.key_state(secret) for secret in secrets)
    return tuple(HmacKey(secret, algorithm) for secret in secrets)


def key_digest(key: MacKey, parts: Sequence[bytes]) -> bytes:
    """The MAC of the concatenation of ``parts`` under ``key``."""
    if isinstance(key, HmacKey):
        return key.digest_of(parts)
    assert _NATIVE_DIGEST is not None  # key states come from the native helper only
    return _NATIVE_DIGEST(key, parts)


def split_keys(keys: Sequence[MacKey]) -> tuple[MacKey | None, tuple[MacKey, ...]]:
    """The newest secret's key and the older ones' (``require_match``); None: no secret."""
    return (keys[0], tuple(keys[1:])) if keys else (None, ())


def key_count(first: MacKey | None, older: Sequence[MacKey]) -> int:
    """How many secrets a verifier holds, as ``split_keys`` gave them (for its repr)."""
    return len(older) + (first is not None)


def _matches_key(key: MacKey, candidates: Sequence[bytes], parts: Sequence[bytes]) -> bool:
    """True when ``key``'s MAC over ``parts`` equals a candidate (constant time each)."""
    mac = key_digest(key, parts)
    found = False
    for candidate in candidates:
        found = _compare_digest(mac, candidate) or found
    return found


def require_match(
    first: MacKey | None, older: Sequence[MacKey], candidates: Sequence[bytes], *parts: bytes
) -> None:
    """Raise ``bad_signature`` unless a configured secret produced a candidate.

    ``first`` and ``older`` are a verifier's keys as ``split_keys`` gives them:
    a signature by the newest secret, nearly every one, is then checked
    without reading the tuple of the others, one object fewer per event for
    the CPU's caches when events are spread over many sources.
    """
    if first is not None and _matches_key(first, candidates, parts):
        return
    for key in older:
        if _matches_key(key, candidates, parts):
            return
    fail(BAD_SIGNATURE, "no signature matches a configured secret")


def header(headers: Mapping[str, str], *names: str) -> str | None:
    """The first present, non-blank header among ``names`` (already lower-cased)."""
    for name in names:
        value = headers.get(name)
        if value is not None:
            value = value.strip()
            if value:
                return value
    return None


def wire_bytes(value: str) -> bytes:
    """A header value as the bytes that were on the wire.

    Headers arrive latin-1 decoded (see ``base``), so latin-1 restores the
    exact octets the sender signed, UTF-8 ids included. Text that cannot be
    latin-1 did not come off the wire that way; UTF-8 is the best guess.
    """
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")


def decode_hex(text: str) -> bytes | None:
    """Strict hex (even length, hex digits only) to bytes, or None."""
    try:
        return _unhexlify(text)
    except ValueError:  # binascii.Error is a ValueError; so is non-ASCII str
        return None


def decode_b64(text: str) -> bytes | None:
    """Strict standard base64 to bytes, or None.

    ``a2b_base64(strict_mode=True)`` accepts and rejects what
    ``b64decode(validate=True)`` does, without the regex pass b64decode adds.
    """
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except ValueError:
        return None


def collect(
    encoded: Sequence[str], decode: Callable[[str], bytes | None], size: int
) -> list[bytes]:
    """Decode signature candidates of the expected ``size``, or fail as malformed.

    Candidates that do not decode, or decode to the wrong length, are dropped:
    they cannot match, and one garbled entry must not hide a good one.
    """
    if len(encoded) > MAX_SIGNATURES:
        fail(MALFORMED_SIGNATURE, f"more than {MAX_SIGNATURES} signatures in one header")
    out: list[bytes] = []
    for text in encoded:
        raw = decode(text)
        if raw is not None and len(raw) == size:
            out.append(raw)
    if not out:
        fail(MALFORMED_SIGNATURE, "no well-formed signature in the signature header")
    return out


def require_signature(value: str | None, name: str) -> str:
    """The header value, or a ``missing_signature`` failure naming the header."""
    if value is None:
        fail(MISSING_SIGNATURE, f"{name} header is missing")
    return value


def parse_timestamp(text: str | None, name: str) -> tuple[int, bytes]:
    """(Unix seconds, the exact bytes sent) from a decimal value; missing or malformed fails.

    The bytes are what the sender signed, so they go into the MAC as sent
    rather than re-formatted from the integer.
    """
    if text is None:
        fail(MISSING_TIMESTAMP, f"{name} is missing")
    if not (text.isascii() and text.isdigit() and len(text) <= _MAX_TIMESTAMP_DIGITS):
        fail(MALFORMED_SIGNATURE, f"{name} is not a decimal Unix timestamp")
    return int(text), text.encode("ascii")


def check_fresh(timestamp: int, now: float, tolerance: int) -> None:
    """Refuse a signed timestamp further than ``tolerance`` seconds from ``now``.

    Both directions: a timestamp from the future is as suspicious as an old
    one (it would extend a captured request's replay window). ``tolerance``
    0 disables the check, as the Stripe SDK does.
    """
    if tolerance > 0 and abs(now - timestamp) > tolerance:
        fail(STALE_TIMESTAMP, f"signed timestamp is more than {tolerance}s from now")


def json_object(body: bytes) -> dict[str, Any] | None:
    """The body as a JSON object, or None when it is not one (never raises)."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def form_fields(body: bytes) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as a dict (last value wins)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return {}
    return dict(parse_qsl(text, keep_blank_values=True))


def form_payload_json(body: bytes) -> dict[str, Any] | None:
    """The JSON object in a form body's ``payload`` field (GitHub, Slack), or None."""
    payload = form_fields(body).get("payload")
    return None if payload is None else json_object(payload.encode("utf-8"))


def text_value(value: object) -> str | None:
    """A usable id/type: non-empty strings as is, integers as decimal, else None."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def dig(obj: object, path: Sequence[str]) -> object:
    """Follow a dotted path through nested JSON objects; None when it breaks."""
    for step in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(step)
    return obj


def json_head(body: bytes) -> tuple[object, object] | None:
    """(top-level ``id``, ``type``) of a JSON object body, or None when it is not one.

    Never raises: malformed JSON, a non-object document and nesting too deep
    to decode all give None (the signature alone decides whether the event
    is accepted). See ``verify/json_head.py`` for why msgspec.
    """
    try:
        head = DECODE_HEAD(body)
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        return None
    return head.id, head.type
