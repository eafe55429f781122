"""Encoded request bodies: decoded exactly, held to the body limit, or refused with a reason."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib

import orjson
import pytest

from hookrouter.core.content_coding import ACCEPTED_CODINGS, codings, decode_body
from hookrouter.errors import RequestRejected, UnsupportedEncoding

PAYLOAD = orjson.dumps({"id": "evt_1", "type": "invoice.paid", "data": {"n": list(range(200))}})
LIMIT = 64 * 1024


def raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-15)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(
    ("header", "encoded"),
    [
        ("gzip", gzip.compress(PAYLOAD)),
        ("x-gzip", gzip.compress(PAYLOAD)),
        ("GZip", gzip.compress(PAYLOAD)),
        ("deflate", zlib.compress(PAYLOAD)),  # RFC 9110's deflate: zlib-wrapped
        ("deflate", raw_deflate(PAYLOAD)),  # what some senders send under that name
        ("identity", PAYLOAD),
        ("gzip, identity", gzip.compress(PAYLOAD)),
        ("deflate, gzip", gzip.compress(zlib.compress(PAYLOAD))),  # applied in that order
    ],
)
def test_supported_codings_decode_to_the_payload(header: str, encoded: bytes) -> None:
    assert decode_body(header, encoded, LIMIT) == PAYLOAD


def test_gzip_members_back_to_back_are_one_body() -> None:
    half = len(PAYLOAD) // 2
    encoded = gzip.compress(PAYLOAD[:half]) + gzip.compress(PAYLOAD[half:])
    assert decode_body("gzip", encoded, LIMIT) == PAYLOAD


@pytest.mark.parametrize("header", ["br", "zstd", "compress", "gzip, br", "snappy"])
def test_other_codings_are_refused_with_415_naming_what_is_accepted(header: str) -> None:
    with pytest.raises(UnsupportedEncoding) as info:
        decode_body(header, gzip.compress(PAYLOAD), LIMIT)
    assert info.value.status == 415
    assert info.value.reason == "unsupported_content_encoding"
    assert ACCEPTED_CODINGS in info.value.message


def test_a_decoded_body_exactly_at_the_limit_is_accepted() -> None:
    body = b"a" * LIMIT
    assert decode_body("gzip", gzip.compress(body), LIMIT) == body


def test_a_decoded_body_one_byte_over_the_limit_is_413() -> None:
    with pytest.raises(RequestRejected) as info:
        decode_body("gzip", gzip.compress(b"a" * (LIMIT + 1)), LIMIT)
    assert (info.value.status, info.value.reason) == (413, "body_too_large")


def test_a_compression_bomb_is_refused_without_inflating_it() -> None:
    bomb = gzip.compress(bytes(200 * 1024 * 1024))  # 200 MiB of zeros in ~200 KB
    assert len(bomb) < 512 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(RequestRejected) as info:
            decode_body("gzip", bomb, LIMIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.status == 413
    assert peak < 4 * LIMIT + len(bomb)


def test_stacked_codings_are_bounded_at_every_layer() -> None:
    inner = gzip.compress(bytes(10 * LIMIT))
    with pytest.raises(RequestRejected) as info:
        decode_body("gzip, gzip", gzip.compress(inner), LIMIT)
    assert info.value.status == 413


@pytest.mark.parametrize(
    ("header", "encoded"),
    [
        ("gzip", gzip.compress(PAYLOAD)[:-9]),  # truncated
        ("gzip", PAYLOAD),  # not compressed at all
        ("gzip", gzip.compress(PAYLOAD) + b"trailing junk"),
        ("deflate", zlib.compress(PAYLOAD) + b"\x00junk"),
        ("deflate", b"\xff\xfe not deflate"),
        ("gzip", b""),
    ],
)
def test_invalid_data_is_400_bad_content_encoding(header: str, encoded: bytes) -> None:
    with pytest.raises(RequestRejected) as info:
        decode_body(header, encoded, LIMIT)
    assert (info.value.status, info.value.reason) == (400, "bad_content_encoding")
    assert header in info.value.message


def test_codings_lists_what_was_applied_in_order() -> None:
    assert codings(" Deflate ,identity, GZIP ") == ["deflate", "gzip"]
    assert codings("") == []
