"""Typed, prefixed identifiers.

Event ids are time-ordered (48-bit millisecond timestamp, then 80 random
bits, Crockford base32 like ULID) and strictly increasing within a process,
so that ``ORDER BY id`` is arrival order and an id alone tells roughly when
an event arrived. The prefix (``evt_``) makes
an id's kind obvious in logs and admin output, as Svix does.
"""

from __future__ import annotations

import os
import re
import time
from typing import Final, NewType

EventId = NewType("EventId", str)
TenantId = NewType("TenantId", str)
SourceId = NewType("SourceId", str)
EndpointId = NewType("EndpointId", str)

EVENT_PREFIX: Final = "evt_"
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Names users choose for tenants, sources and endpoints: they appear in URLs
# and Redis keys, so keep them to a safe, unambiguous set.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


# Every 10-bit value as two digits: the 48-bit millisecond (10 digits) becomes
# 5 lookups and the 80 random bits 8. (base64.b32encode is pure Python before
# 3.13, and a digit-by-digit loop is one interpreted step per digit.)
_PAIRS: Final = [a + b for a in _ALPHABET for b in _ALPHABET]
_MS_SHIFTS: Final = (40, 30, 20, 10, 0)
_HIGH_SHIFTS: Final = (70, 60, 50, 40, 30, 20, 10)
_RAND_LIMIT: Final = 1 << 80
_ID_LENGTH: Final = len(EVENT_PREFIX) + 26  # 10 time digits, 16 random ones
_ALPHABET_BYTES: Final = _ALPHABET.encode()
# Byte table: a Crockford digit becomes int()'s base-32 digit, anything else
# "!", which int() refuses. (A str.maketrans dict costs one dict lookup per
# character; a bytes table is one C loop.)
_INT_DIGIT = dict(zip(_ALPHABET, "0123456789abcdefghijklmnopqrstuv", strict=True))
_TO_INT_DIGITS: Final = bytes(ord(_INT_DIGIT.get(chr(b), "!")) for b in range(256))
# Bound once: compiled code looks a module attribute up by name at every call
# (a getattr on the module), a Final name is a C static.
_time: Final = time.time
_urandom: Final = os.urandom


class MonotonicIds:
    """Mints event ids that strictly increase within the process.

    Like a monotonic ULID: a new millisecond draws fresh random bits; within
    the same millisecond the previous id's random part is incremented, so
    ``ORDER BY id`` is arrival order. The delivery engine pages spilled work
    in by id and relies on that. An id always carries the millisecond it was
    asked for (time windows are derived from ids), so a clock stepping back
    yields ids that sort before earlier ones, as their timestamps say.
    """

    __slots__ = ("_high", "_ms", "_prefix", "_rand")

    def __init__(self) -> None:
        self._ms = -1
        self._prefix = ""
        self._rand = 0
        self._high = -1  # rand >> 10 that ``_prefix`` spells (-1: none yet)

    def __call__(self, now_ms: int | None = None) -> EventId:
        ms = int(_time() * 1000) if now_ms is None else now_ms
        if ms != self._ms:
            self._ms = ms
            # Top bit clear: 2**79 increments of headroom within one millisecond.
            self._rand = int.from_bytes(_urandom(10), "big") >> 1
            self._high = -1
        else:
            self._rand += 1
            if self._rand >= _RAND_LIMIT:  # unreachable in practice: ~10**23 ids in 1 ms
                self._rand = 0
        rand = self._rand
        high = rand >> 10
        if high != self._high:
            # All but the last two digits change once per 1024 ids of a millisecond,
            # so they are spelled then, not per id.
            self._high = high
            self._prefix = EVENT_PREFIX + "".join(
                [_PAIRS[(ms >> s) & 1023] for s in _MS_SHIFTS]
                + [_PAIRS[(rand >> s) & 1023] for s in _HIGH_SHIFTS]
            )
        return EventId(self._prefix + _PAIRS[rand & 1023])


new_event_id: Final = MonotonicIds()
"""A fresh event id such as ``evt_01J9Z...`` (``new_event_id(now_ms=None)``)."""


def event_id_time_ms(event_id: str) -> int:
    """The millisecond timestamp encoded in an event id.

    Checks the prefix, the length and the ten time digits, not the random
    part (``is_event_id`` checks all): it runs once per delivery, for the
    latency histogram, on ids the router minted itself.
    """
    if len(event_id) != _ID_LENGTH or not event_id.startswith(EVENT_PREFIX):
        raise ValueError(f"not an event id: {event_id!r}")
    # Crockford digits mapped onto int()'s base-32 digits: C calls, not a loop.
    digits = event_id[len(EVENT_PREFIX) : len(EVENT_PREFIX) + 10].encode()
    try:
        return int(digits.translate(_TO_INT_DIGITS), 32)
    except ValueError:
        raise ValueError(f"not an event id: {event_id!r}") from None


def is_event_id(text: str) -> bool:
    """True when ``text`` has the shape of an event id."""
    return (
        len(text) == _ID_LENGTH
        and text.isascii()
        and text.startswith(EVENT_PREFIX)
        and not text[len(EVENT_PREFIX) :].encode().translate(None, _ALPHABET_BYTES)
    )


def is_valid_name(text: str) -> bool:
    """True when ``text`` may name a tenant, source or endpoint."""
    return bool(_NAME_RE.match(text))
