"""Two kinds of partition, both fixed by arithmetic every node agrees on.

* **Ownership partitions**: a tenant hashes to one of ``partitions`` numbers
  (fixed when the schema is created, ``meta.partitions``); the ``partitions``
  table leases each number to one node with an epoch, and every delivery row
  carries its tenant's number so outcome writes can be fenced by it.
* **Time partitions**: ``events``, ``deliveries`` and ``attempts`` are range
  partitioned by event id, one partition per UTC day. Event ids begin with
  their millisecond (``hookrouter.ids``), so a day is an id range, a
  delivery lives in the same day as its event, and retention drops whole days.
"""

from __future__ import annotations

import datetime
import hashlib
from typing import Final

from hookrouter.ids import EVENT_PREFIX, event_id_time_ms

DAY_MS: Final = 86_400_000
_ALPHABET: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # hookrouter.ids' digits, in byte order
_RANDOM_DIGITS: Final = 16


def tenant_partition(tenant_id: str, partitions: int) -> int:
    """The ownership partition of ``tenant_id``: a hash stable across processes and hosts."""
    digest = hashlib.blake2b(tenant_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


class PartitionMap:
    """``tenant_partition`` with a cache: it runs once per appended event."""

    __slots__ = ("_cache", "count")

    def __init__(self, count: int) -> None:
        self.count = count
        self._cache: dict[str, int] = {}

    def __call__(self, tenant_id: str) -> int:
        found = self._cache.get(tenant_id)
        if found is None:
            if len(self._cache) > 100_000:  # tenants come and go: bound the memory
                self._cache.clear()
            found = self._cache[tenant_id] = tenant_partition(tenant_id, self.count)
        return found


def id_floor(ms: int) -> str:
    """The smallest event id ``hookrouter.ids`` can mint at millisecond ``ms``."""
    digits = []
    value = max(0, ms)
    for _ in range(10):
        digits.append(_ALPHABET[value & 31])
        value >>= 5
    return EVENT_PREFIX + "".join(reversed(digits)) + "0" * _RANDOM_DIGITS


def wall_floor(wall_seconds: float) -> str:
    """``id_floor`` of a wall-clock time in seconds."""
    return id_floor(int(wall_seconds * 1000))


def day_of(event_id: str) -> int:
    """The UTC day (days since the epoch) an event id belongs to; ValueError if not an id."""
    return event_id_time_ms(event_id) // DAY_MS


def day_bounds(day: int) -> tuple[str, str]:
    """The id range ``[lower, upper)`` of one day's time partition."""
    return id_floor(day * DAY_MS), id_floor((day + 1) * DAY_MS)


def day_suffix(day: int) -> str:
    """The table-name suffix of one day (``p20261203``)."""
    date = datetime.date(1970, 1, 1) + datetime.timedelta(days=day)
    return f"p{date:%Y%m%d}"


__all__ = [
    "DAY_MS",
    "PartitionMap",
    "day_bounds",
    "day_of",
    "day_suffix",
    "id_floor",
    "tenant_partition",
    "wall_floor",
]
