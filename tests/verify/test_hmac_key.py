"""HmacKey computes RFC 2104 HMAC itself (padded keys hashed once): it must equal the stdlib's."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from hookrouter.verify._common import HmacKey


@pytest.mark.parametrize("algorithm", ["sha256", "sha512", "sha1"])
@pytest.mark.parametrize("key_len", [0, 1, 32, 63, 64, 65, 127, 128, 129, 300])
def test_hmac_key_matches_the_stdlib_for_keys_around_the_block_size(
    algorithm: str, key_len: int
) -> None:
    key = bytes(range(256))[:key_len] if key_len <= 256 else hashlib.sha512(b"k").digest() * 5
    key = key[:key_len]
    parts = (b"1700000000", b".", b'{"id":"evt_1"}' * 80)
    expected = hmac.new(key, b"".join(parts), algorithm).digest()
    mac = HmacKey(key, algorithm)
    assert mac.digest(*parts) == expected
    assert mac.digest(*parts) == expected  # the keyed states are copied, never consumed
    assert mac.digest_of(parts) == expected
    assert mac.digest_of([b"".join(parts)]) == expected  # however the bytes are cut
    assert mac.digest_size == len(expected)


def test_hmac_key_never_shows_key_material() -> None:
    assert "secret" not in repr(HmacKey(b"secret"))
