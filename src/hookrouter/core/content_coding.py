"""Request bodies sent with a ``Content-Encoding``: decoded, bounded, or refused.

Senders sign a payload, not its compressed wire form, and receivers downstream
expect the JSON they subscribed to. So an encoded body is decoded once at
ingest; verification, storage and delivery all see the decoded bytes (the
received headers are kept as sent). Without this a gzip body would fail its
signature check as ``bad_signature``, or, under a scheme that signs the wire
bytes, be stored and forwarded as compressed bytes labelled JSON.

The decoded size is held to the same ``max_body_bytes`` as a plain body, and
it is checked while inflating, so a small compressed bomb never expands in
memory. At most two codings are undone, and codings other than gzip and
deflate (br, zstd, compress, unknown) get 415 with ``Accept-Encoding``
naming what is understood, as RFC 9110 §15.5.16 asks.

Sans-IO: bytes and headers in, bytes or a ``RequestRejected`` out.
"""

from __future__ import annotations

import zlib
from typing import Final

from hookrouter.errors import RequestRejected, UnsupportedEncoding

ACCEPTED_CODINGS: Final = "gzip, deflate"
# nginx (gunzip) and Envoy (decompressor filter) undo one coding; we allow two
# (a sender behind a compressing proxy) and refuse a stack before inflating any.
MAX_CODINGS: Final = 2
# wbits for zlib: 16+15 gzip only, 15 zlib-wrapped deflate (what RFC 9110 calls
# "deflate"), -15 raw deflate (what some senders send under that name).
_GZIP: Final = 31
_ZLIB: Final = 15
_RAW_DEFLATE: Final = -15
_WBITS: Final = {"gzip": (_GZIP,), "x-gzip": (_GZIP,), "deflate": (_ZLIB, _RAW_DEFLATE)}


def codings(header: str) -> list[str]:
    """The codings named by a Content-Encoding value, in the order applied; identity dropped."""
    names = [part.strip().lower() for part in header.split(",")]
    return [name for name in names if name and name != "identity"]


def decode_body(header: str, body: bytes, max_bytes: int) -> bytes:
    """``body`` with the codings of Content-Encoding ``header`` undone.

    Raises ``UnsupportedEncoding`` (415) for a coding not understood, a 413
    ``RequestRejected`` when the decoded body would exceed ``max_bytes``,
    and a 400 one when the body is not valid for its coding. More than
    ``MAX_CODINGS`` layers are refused (415) before any is decoded: each
    layer costs a full inflate on the event loop.
    """
    applied = codings(header)
    if len(applied) > MAX_CODINGS:
        raise UnsupportedEncoding(
            f"{len(applied)} content codings are stacked; at most {MAX_CODINGS} are decoded"
        )
    for name in applied:
        if name not in _WBITS:
            raise UnsupportedEncoding(
                f"content-encoding {name!r} is not supported (use {ACCEPTED_CODINGS})"
            )
    # Codings are listed in the order they were applied: undo the last first.
    for name in reversed(applied):
        body = _inflate(name, body, max_bytes)
    return body


def _inflate(name: str, data: bytes, max_bytes: int) -> bytes:
    error: zlib.error | None = None
    for wbits in _WBITS[name]:
        try:
            return _inflate_members(data, wbits, max_bytes)
        except zlib.error as exc:
            error = exc
    raise RequestRejected(
        f"body is not valid {name} data: {error}", status=400, reason="bad_content_encoding"
    )


def _inflate_members(data: bytes, wbits: int, max_bytes: int) -> bytes:
    """Inflate every member (gzip allows several back to back), never past ``max_bytes``."""
    out: list[bytes] = []
    size = 0
    while True:
        inflater = zlib.decompressobj(wbits)
        # max_length bounds what one call may produce: +1 tells "over" from "exactly at".
        chunk = inflater.decompress(data, max_bytes - size + 1)
        size += len(chunk)
        if size > max_bytes:
            raise RequestRejected(
                f"decoded request body exceeds {max_bytes} bytes",
                status=413,
                reason="body_too_large",
            )
        out.append(chunk)
        if not inflater.eof:
            raise zlib.error("truncated data")
        data = inflater.unused_data
        if not data or wbits != _GZIP:
            break
    if data:
        raise zlib.error(f"{len(data)} bytes after the end of the compressed data")
    return b"".join(out)


__all__ = ["ACCEPTED_CODINGS", "MAX_CODINGS", "codings", "decode_body"]
