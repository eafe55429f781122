"""HmacKey computes RFC 2104 HMAC itself (padded keys hashed once): it must equal the stdlib's.

SHA-256 keys use the native helper when it is built (``_native/hmac_sha256.c``):
each test runs once with it and once on hashlib.
"""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookrouter._native.accel import hmac as native_hmac
from hookrouter.verify._common import HmacKey

NATIVE = pytest.param(
    True, marks=pytest.mark.skipif(native_hmac is None, reason="native HMAC not built")
)


@pytest.mark.parametrize("native", [NATIVE, False])
@pytest.mark.parametrize("algorithm", ["sha256", "sha512", "sha1"])
@pytest.mark.parametrize("key_len", [0, 1, 32, 63, 64, 65, 127, 128, 129, 300])
def test_hmac_key_matches_the_stdlib_for_keys_around_the_block_size(
    algorithm: str, key_len: int, native: bool
) -> None:
    key = bytes(range(256))[:key_len] if key_len <= 256 else hashlib.sha512(b"k").digest() * 5
    key = key[:key_len]
    parts = (b"1700000000", b".", b'{"id":"evt_1"}' * 80)
    expected = hmac.new(key, b"".join(parts), algorithm).digest()
    mac = HmacKey(key, algorithm, native=native)
    assert mac.digest(*parts) == expected
    assert mac.digest(*parts) == expected  # the keyed states are copied, never consumed
    assert mac.digest_of(parts) == expected
    assert mac.digest_of([b"".join(parts)]) == expected  # however the bytes are cut
    assert mac.digest_size == len(expected)


def test_hmac_key_never_shows_key_material() -> None:
    assert "secret" not in repr(HmacKey(b"secret"))


@pytest.mark.skipif(native_hmac is None, reason="native HMAC not built")
@given(st.binary(max_size=200), st.lists(st.binary(max_size=300), max_size=6))
def test_native_hmac_equals_the_stdlib_for_any_key_and_cut(key: bytes, parts: list[bytes]) -> None:
    expected = hmac.new(key, b"".join(parts), "sha256").digest()
    assert HmacKey(key).digest_of(parts) == expected
    assert HmacKey(key).digest_of([memoryview(p) for p in parts]) == expected  # bytes-like


@pytest.mark.skipif(native_hmac is None, reason="native HMAC not built")
def test_native_hmac_refuses_what_is_not_a_key_state_or_bytes() -> None:
    assert native_hmac is not None
    with pytest.raises(TypeError):
        native_hmac.digest(b"short", [b"x"])
    state = native_hmac.key_state(b"k")
    with pytest.raises(TypeError):
        native_hmac.digest(state, [b"ok", "text"])
    with pytest.raises(TypeError):
        native_hmac.digest(state, 5)


@pytest.mark.skipif(native_hmac is None, reason="native HMAC not built")
def test_a_native_key_state_is_two_chaining_values() -> None:
    """64 bytes, two cache lines at most: with events spread over many tenants an
    event's key is rarely in the CPU's caches, and every line read is a miss."""
    assert native_hmac is not None
    for key in (b"", b"k", b"x" * 64, b"y" * 65, b"z" * 1000):
        assert len(native_hmac.key_state(key)) == 64
