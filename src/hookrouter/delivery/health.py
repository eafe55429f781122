"""One endpoint's recent health: success ratio and latency percentiles, in bounded memory.

Theory of operation
-------------------
Every attempt that reached a decision about the endpoint (an answer, or a
transport error) is counted in the current *slot* of ``SLOT_SECONDS``: one
success or failure, and its duration in a fixed latency histogram. Two slots
are kept, the current one and the one before, so the window read is the last
``SLOT_SECONDS`` to ``2 * SLOT_SECONDS`` (5 to 10 minutes): the memory is
two small arrays per endpoint whatever its traffic, an attempt costs a
bisect and three additions, and a read merges two histograms. Percentiles
are the upper bound of the bucket they fall in (like Prometheus'
``histogram_quantile`` without interpolation): "p99 ≤ 250 ms"; the last
bucket also holds anything slower than its bound.

Times are wall seconds (the outcome's ``at``); nothing here does I/O.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from dataclasses import dataclass
from typing import Final

from hookrouter.delivery.breaker import BreakerStats, Transition

SLOT_SECONDS: Final = 300.0
# Upper bounds in ms: a same-host receiver (a few ms) up to the default
# attempt timeout (30 s); the last bucket also takes anything slower.
BOUNDS_MS: Final = (5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
                    10000.0, 30000.0)  # fmt: skip
_BUCKETS: Final = len(BOUNDS_MS)


@dataclass(frozen=True, slots=True)
class HealthStats:
    window_seconds: float  # how far back these figures reach (at most two slots)
    attempts: int
    successes: int
    p50_ms: float | None  # a bucket's upper bound; None without attempts
    p99_ms: float | None

    @property
    def success_ratio(self) -> float | None:
        return self.successes / self.attempts if self.attempts else None


@dataclass(frozen=True, slots=True)
class EndpointReport:
    """What the admin API and the console show of one endpoint's delivery health."""

    health: HealthStats
    breaker: BreakerStats | None  # None: no attempt since the router started
    history: tuple[Transition, ...]  # the breaker's last transitions, newest first
    wall_offset: float  # add to the breaker's (monotonic) times for wall seconds


# A slot is one array: successes, failures, then the latency bucket counts;
# a slot object around the array was one more object for the collector.
_SUCCESSES: Final = 0
_FAILURES: Final = 1
_FIRST_BUCKET: Final = 2
_SLOT_BYTES: Final = 4 * (_FIRST_BUCKET + _BUCKETS)


class EndpointHealth:
    """The current and the previous slot of one endpoint's attempts."""

    __slots__ = ("_current", "_current_start", "_previous", "_previous_start")

    def __init__(self) -> None:
        self._current: array[int] | None = None
        self._current_start = 0.0
        self._previous: array[int] | None = None
        self._previous_start = 0.0

    def observe(self, success: bool, duration_ms: float, now: float) -> None:
        slot = self._slot(now)
        slot[_SUCCESSES if success else _FAILURES] += 1
        slot[_FIRST_BUCKET + min(bisect_left(BOUNDS_MS, duration_ms), _BUCKETS - 1)] += 1

    def _slot(self, now: float) -> array[int]:
        start = now - now % SLOT_SECONDS
        current = self._current
        if current is not None and self._current_start == start:
            return current
        # A new slot: the old current becomes the previous only if adjacent.
        adjacent = current is not None and self._current_start == start - SLOT_SECONDS
        self._previous = current if adjacent else None
        self._previous_start = self._current_start
        current = self._current = array("I", bytes(_SLOT_BYTES))
        self._current_start = start
        return current

    def stats(self, now: float) -> HealthStats:
        start = now - now % SLOT_SECONDS
        kept = ((self._previous_start, self._previous), (self._current_start, self._current))
        slots = [
            (began, slot)
            for began, slot in kept
            if slot is not None and start - SLOT_SECONDS <= began <= start
        ]
        counts = [sum(s[_FIRST_BUCKET + i] for _, s in slots) for i in range(_BUCKETS)]
        attempts = sum(counts)
        oldest = min((began for began, _ in slots), default=start)
        return HealthStats(
            window_seconds=max(0.0, now - oldest),
            attempts=attempts,
            successes=sum(s[_SUCCESSES] for _, s in slots),
            p50_ms=_quantile(counts, attempts, 0.50),
            p99_ms=_quantile(counts, attempts, 0.99),
        )

    def __repr__(self) -> str:
        current = self._current
        n = 0 if current is None else current[_SUCCESSES] + current[_FAILURES]
        return f"EndpointHealth(current_slot_attempts={n})"


def _quantile(counts: list[int], total: int, q: float) -> float | None:
    """The upper bound of the bucket holding the ``q`` quantile."""
    if total == 0:
        return None
    rank, seen = q * total, 0
    for bound, count in zip(BOUNDS_MS, counts, strict=True):
        seen += count
        if seen >= rank:
            return bound
    return BOUNDS_MS[-1]


__all__ = ["BOUNDS_MS", "SLOT_SECONDS", "EndpointHealth", "EndpointReport", "HealthStats"]
