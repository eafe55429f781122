"""Event ids: shape, time prefix, and strict order within the process."""

from __future__ import annotations

import pytest

from hookrouter.ids import MonotonicIds, event_id_time_ms, is_event_id, is_valid_name


def test_ids_have_the_evt_shape_and_carry_their_millisecond() -> None:
    ids = MonotonicIds()
    event_id = ids(1_796_000_000_123)
    assert is_event_id(event_id)
    assert event_id.startswith("evt_") and len(event_id) == 30
    assert event_id_time_ms(event_id) == 1_796_000_000_123


def test_ids_minted_in_one_millisecond_keep_arrival_order() -> None:
    ids = MonotonicIds()
    minted = [ids(5000) for _ in range(10_000)]
    assert minted == sorted(minted)
    assert len(set(minted)) == len(minted)


def test_ids_carry_the_time_asked_for_even_after_later_ones() -> None:
    ids = MonotonicIds()
    later = ids(9000)
    earlier = ids(8000)  # a ManualClock in the past, or an NTP step back
    assert event_id_time_ms(earlier) == 8000
    assert earlier < later


def test_new_milliseconds_order_after_old_ones() -> None:
    ids = MonotonicIds()
    assert ids(1000) < ids(1001) < ids(2000)


def test_names_are_restricted_to_a_safe_alphabet() -> None:
    assert is_valid_name("acme-prod_1.eu")
    for bad in ("", "-lead", "has space", "a/b", "x" * 65, "{tag}"):
        assert not is_valid_name(bad)


def test_ids_of_one_millisecond_count_up_by_one_across_digit_carries() -> None:
    # The leading digits are spelled once per 1024 ids; every id must still be
    # the full encoding of its number, across the carries in between.
    ids = MonotonicIds()
    numbers = [_random_part(ids(7000)) for _ in range(5000)]
    assert numbers == list(range(numbers[0], numbers[0] + 5000))


def _random_part(event_id: str) -> int:
    return _decode(event_id[-16:])


def test_the_time_prefix_is_crockford_base32_of_the_millisecond() -> None:
    # Independent of the minting code: the 10 digits after "evt_" spell the
    # millisecond, most significant first, up to the 48-bit maximum.
    for ms in (0, 1, 31, 32, 1023, 1024, 1_796_000_000_123, (1 << 48) - 1):
        assert _decode(MonotonicIds()(ms)[4:14]) == ms


def _decode(digits: str) -> int:
    crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    value = 0
    for char in digits:
        value = value * 32 + crockford.index(char)
    return value


def test_only_the_exact_event_id_shape_is_accepted() -> None:
    good = MonotonicIds()(1_796_000_000_123)
    assert is_event_id(good)
    bad_time = [
        good.lower(),  # digits are upper-case Crockford
        good[:-1],  # too short
        good + "0",  # too long
        "evx_" + good[4:],  # wrong prefix
        good[:4] + "U" + good[5:],  # U, I, L and O are not Crockford digits
        good[:13] + "é" + good[14:],  # not ASCII
        "",
    ]
    bad_random = [good[:-1] + "I", good[:-1] + "é", good[:-2] + "-0"]
    for text in bad_time + bad_random:
        assert not is_event_id(text), text
    for text in bad_time:  # the time decoder checks what it reads, not the random part
        with pytest.raises(ValueError, match="not an event id"):
            event_id_time_ms(text)
