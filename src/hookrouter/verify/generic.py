"""Generic HMAC: for senders with a home-grown "HMAC of the body in a header".

Options (a source's ``hmac`` table):

``header``            required; the signature header name
``algorithm``         ``sha256`` (default) or ``sha512``
``encoding``          ``hex`` (default) or ``base64``
``prefix``            text before the signature, e.g. ``sha256=`` (default none)
``timestamp_header``  if set, the signed content is ``{timestamp}.{body}`` and
                      the tolerance applies; otherwise it is the body alone
``id_header`` / ``type_header``  where the event id / type live, or
``id_field`` / ``type_field``    dotted paths into a JSON body (``data.id``);
                                 a header wins over a field when both are set

The header holds one signature. A body that is not a JSON object yields
None for the field-based id/type. Timestamps are Unix seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hookrouter.verify._common import (
    check_fresh,
    collect,
    decode_b64,
    decode_hex,
    dig,
    fail,
    header,
    json_object,
    key_count,
    mac_keys,
    parse_timestamp,
    require_match,
    require_signature,
    split_keys,
    text_value,
)
from hookrouter.verify.base import MALFORMED_SIGNATURE, VerifiedEvent

ALGORITHMS = {"sha256": 32, "sha512": 64}  # name -> digest size in bytes
ENCODINGS = {"hex": decode_hex, "base64": decode_b64}
_HEADER_KEYS = ("header", "timestamp_header", "id_header", "type_header")
_FIELD_KEYS = ("id_field", "type_field")
OPTION_KEYS = frozenset({"algorithm", "encoding", "prefix", *_HEADER_KEYS, *_FIELD_KEYS})


@dataclass(frozen=True, slots=True)
class HmacOptions:
    """Validated generic-HMAC options; header names lower-cased, paths split."""

    header: str
    algorithm: str = "sha256"
    encoding: str = "hex"
    prefix: str = ""
    timestamp_header: str | None = None
    id_header: str | None = None
    type_header: str | None = None
    id_field: tuple[str, ...] | None = None
    type_field: tuple[str, ...] | None = None


def _check_option(key: str, value: Any) -> str | None:
    """Why ``value`` is not acceptable for option ``key``, or None."""
    if key not in OPTION_KEYS:
        return "unknown option"
    if not isinstance(value, str):
        return "must be a string"
    if key == "algorithm" and value not in ALGORITHMS:
        return f"unknown algorithm {value!r}; use one of {', '.join(ALGORITHMS)}"
    if key == "encoding" and value not in ENCODINGS:
        return f"unknown encoding {value!r}; use one of {', '.join(ENCODINGS)}"
    if key in _HEADER_KEYS and not _is_token(value):
        return "must be an HTTP header name"
    if key in _FIELD_KEYS and (not value or not all(value.split("."))):
        return "must be a dotted path such as data.id"
    return None


def _is_token(name: str) -> bool:
    # RFC 9110 token characters; a name outside them can never match a header.
    return bool(name) and all(c.isascii() and (c.isalnum() or c in "!#$%&'*+-.^_`|~") for c in name)


def option_issues(options: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(option key, message) for everything wrong with generic-HMAC options."""
    issues = [(key, msg) for key, value in options.items() if (msg := _check_option(key, value))]
    if "header" not in options:
        issues.append(("header", "required: the name of the signature header"))
    return issues


def parse_options(options: Mapping[str, Any]) -> HmacOptions:
    """Options to ``HmacOptions``; ValueError if ``option_issues`` finds anything."""
    issues = option_issues(options)
    if issues:
        raise ValueError("; ".join(f"{k}: {m}" for k, m in issues))

    def name(key: str) -> str | None:
        value = options.get(key)
        return None if value is None else str(value).lower()

    def path(key: str) -> tuple[str, ...] | None:
        value = options.get(key)
        return None if value is None else tuple(str(value).split("."))

    return HmacOptions(
        header=str(options["header"]).lower(),
        algorithm=str(options.get("algorithm", "sha256")),
        encoding=str(options.get("encoding", "hex")),
        prefix=str(options.get("prefix", "")),
        timestamp_header=name("timestamp_header"),
        id_header=name("id_header"),
        type_header=name("type_header"),
        id_field=path("id_field"),
        type_field=path("type_field"),
    )


class GenericHmacVerifier:
    """Verifies a configurable HMAC header for one source."""

    __slots__ = ("_decode", "_key", "_older", "_size", "options", "tolerance")
    provider = "hmac"

    def __init__(
        self, secrets: Sequence[str], tolerance_seconds: int, options: HmacOptions
    ) -> None:
        self.options = options
        self.tolerance = tolerance_seconds
        self._key, self._older = split_keys(
            mac_keys((s.encode("utf-8") for s in secrets), options.algorithm)
        )
        self._size = ALGORITHMS[options.algorithm]
        self._decode = ENCODINGS[options.encoding]

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> VerifiedEvent:
        """Check the configured header; id/type from the configured places."""
        opts = self.options
        value = require_signature(header(headers, opts.header), opts.header)
        if not value.startswith(opts.prefix):
            fail(MALFORMED_SIGNATURE, f"{opts.header} must start with {opts.prefix!r}")
        candidates = collect([value[len(opts.prefix) :].strip()], self._decode, self._size)
        if opts.timestamp_header is None:
            require_match(self._key, self._older, candidates, body)
        else:
            ts_text = header(headers, opts.timestamp_header)
            timestamp, ts_raw = parse_timestamp(ts_text, opts.timestamp_header)
            require_match(self._key, self._older, candidates, ts_raw, b".", body)
            check_fresh(timestamp, now, self.tolerance)
        return self._describe(headers, body)

    def _describe(self, headers: Mapping[str, str], body: bytes) -> VerifiedEvent:
        opts = self.options
        event_id = header(headers, opts.id_header) if opts.id_header else None
        event_type = header(headers, opts.type_header) if opts.type_header else None
        need_id = event_id is None and opts.id_field is not None
        need_type = event_type is None and opts.type_field is not None
        if need_id or need_type:
            doc = json_object(body)
            if need_id and opts.id_field is not None:
                event_id = text_value(dig(doc, opts.id_field))
            if need_type and opts.type_field is not None:
                event_type = text_value(dig(doc, opts.type_field))
        return VerifiedEvent(event_id, event_type)

    def __repr__(self) -> str:
        o = self.options
        return (
            f"GenericHmacVerifier(header={o.header!r}, {o.algorithm}/{o.encoding}, "
            f"secrets={key_count(self._key, self._older)}, tolerance={self.tolerance}s)"
        )
