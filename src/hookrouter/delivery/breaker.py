"""Per-endpoint circuit breaker: an enum, a transition table, and a window of results.

Rules (the table below is the whole state machine)
--------------------------------------------------
* CLOSED: every attempt is allowed. Results go into a sliding window of
  ``window_seconds`` (1-second buckets). When the window holds at least
  ``min_requests`` results and failures / total >= ``failure_ratio`` the
  breaker trips: CLOSED --TRIP--> OPEN.
* OPEN: no attempt is allowed (the worker parks the endpoint's deliveries and
  their credits return). Once ``cooldown_seconds`` have passed since it opened,
  the next ``poll``/``allow`` moves OPEN --COOLDOWN_ELAPSED--> HALF_OPEN.
* HALF_OPEN: up to ``half_open_probes`` attempts may be in flight at once.
  A successful probe closes it (HALF_OPEN --PROBE_SUCCEEDED--> CLOSED, with an
  empty window); a failed one re-opens it (HALF_OPEN --PROBE_FAILED--> OPEN,
  cooldown restarts).
* Results of attempts that started in an earlier state (a slow request that
  began while CLOSED and ends while OPEN) are ignored outside CLOSED, except in
  HALF_OPEN where any result counts as the probe's answer: the endpoint spoke.
* ``reset`` (an operator's command) goes to CLOSED from anywhere.

Every transition is returned to the caller (decide synchronously, act after):
on OPEN the worker parks queued work, on CLOSED it resumes parked work.
The thresholds are a ``BreakerSettings`` (``[delivery.breaker]``, whose
defaults are stated on the class in ``config/delivery.py``).
"""

from __future__ import annotations

import enum
from array import array
from dataclasses import dataclass

from mypy_extensions import mypyc_attr

from hookrouter.config.delivery import BreakerSettings


class BreakerState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class BreakerSignal(enum.StrEnum):
    TRIP = "trip"
    COOLDOWN_ELAPSED = "cooldown_elapsed"
    PROBE_SUCCEEDED = "probe_succeeded"
    PROBE_FAILED = "probe_failed"
    RESET = "reset"


_S = BreakerState
_G = BreakerSignal
TRANSITIONS: dict[tuple[BreakerState, BreakerSignal], BreakerState] = {
    (_S.CLOSED, _G.TRIP): _S.OPEN,
    (_S.OPEN, _G.COOLDOWN_ELAPSED): _S.HALF_OPEN,
    (_S.HALF_OPEN, _G.PROBE_SUCCEEDED): _S.CLOSED,
    (_S.HALF_OPEN, _G.PROBE_FAILED): _S.OPEN,
    (_S.CLOSED, _G.RESET): _S.CLOSED,
    (_S.OPEN, _G.RESET): _S.CLOSED,
    (_S.HALF_OPEN, _G.RESET): _S.CLOSED,
}
"""(state, signal) -> next state. A pair missing here is a bug, not a no-op."""


@dataclass(frozen=True, slots=True)
class Transition:
    """A state change the caller must act on."""

    endpoint_id: str
    before: BreakerState
    after: BreakerState
    signal: BreakerSignal
    at: float


@dataclass(frozen=True, slots=True)
class BreakerStats:
    endpoint_id: str
    state: BreakerState
    window_requests: int
    window_failures: int
    probes_in_flight: int
    opened_at: float | None
    times_opened: int


# Nothing it reaches refers back to it: the collector need not track it (heap.py).
@mypyc_attr(acyclic=True)
class CircuitBreaker:
    """One endpoint's breaker. ``now`` is always an argument (monotonic seconds)."""

    __slots__ = (
        "_buckets",
        "_failures",
        "_opened_at",
        "_probes",
        "_requests",
        "_times_opened",
        "config",
        "endpoint_id",
        "state",
    )

    def __init__(self, endpoint_id: str, config: BreakerSettings | None = None) -> None:
        self.endpoint_id = endpoint_id
        self.config = config or BreakerSettings()
        self.state = BreakerState.CLOSED
        # Second, successes, failures of each 1-second bucket, oldest first, flat
        # in one array: one object for the cyclic collector to traverse, where a
        # list of lists was one per bucket and one more.
        self._buckets: array[int] = array("q")
        # Totals over ``_buckets``, kept as buckets come and go, so a result
        # costs the same whatever the window's length.
        self._requests = 0
        self._failures = 0
        self._opened_at: float | None = None
        self._probes = 0
        self._times_opened = 0

    def _move(self, signal: BreakerSignal, now: float) -> Transition:
        before = self.state
        self.state = TRANSITIONS[(before, signal)]
        if self.state is BreakerState.OPEN:
            self._opened_at = now
            self._times_opened += 1
        elif self.state is BreakerState.CLOSED:
            self._opened_at = None
            del self._buckets[:]
            self._requests = self._failures = 0
        self._probes = 0
        return Transition(self.endpoint_id, before, self.state, signal, now)

    def poll(self, now: float) -> Transition | None:
        """Apply the cooldown if it has elapsed; the worker calls this on its timer."""
        if self.state is BreakerState.OPEN and now >= self.reopen_at():
            return self._move(BreakerSignal.COOLDOWN_ELAPSED, now)
        return None

    def reopen_at(self) -> float:
        """When an OPEN breaker will allow probes (``inf`` when not OPEN)."""
        if self._opened_at is None:
            return float("inf")
        return self._opened_at + self.config.cooldown_seconds

    def allow(self, now: float) -> tuple[bool, Transition | None]:
        """May an attempt start now? Counts a granted probe in HALF_OPEN."""
        transition = self.poll(now)
        if self.state is BreakerState.CLOSED:
            return True, transition
        if self.state is BreakerState.HALF_OPEN and self._probes < self.config.half_open_probes:
            self._probes += 1
            return True, transition
        return False, transition

    def record(self, success: bool, now: float) -> Transition | None:
        """Feed one attempt's result; returns the transition it caused, if any."""
        if self.state is BreakerState.HALF_OPEN:
            signal = BreakerSignal.PROBE_SUCCEEDED if success else BreakerSignal.PROBE_FAILED
            return self._move(signal, now)
        if self.state is BreakerState.OPEN:
            return None
        self._add(success, now)
        total, failures = self._window(now)
        cfg = self.config
        if total >= cfg.min_requests and failures >= cfg.failure_ratio * total:
            return self._move(BreakerSignal.TRIP, now)
        return None

    def cancel_probe(self) -> None:
        """A granted probe was abandoned before it produced a result (shutdown)."""
        if self.state is BreakerState.HALF_OPEN and self._probes > 0:
            self._probes -= 1

    def reset(self, now: float) -> Transition:
        """Operator override: close now."""
        return self._move(BreakerSignal.RESET, now)

    def _add(self, success: bool, now: float) -> None:
        second = int(now)
        buckets = self._buckets
        if not buckets or buckets[-3] != second:
            buckets.extend((second, 0, 0))
        self._requests += 1
        if success:
            buckets[-2] += 1
        else:
            buckets[-1] += 1
            self._failures += 1

    def _window(self, now: float) -> tuple[int, int]:
        horizon = now - self.config.window_seconds
        buckets = self._buckets
        while buckets and buckets[0] + 1 <= horizon:
            successes, failures = buckets[1], buckets[2]
            del buckets[:3]
            self._requests -= successes + failures
            self._failures -= failures
        return self._requests, self._failures

    def stats(self, now: float) -> BreakerStats:
        total, failures = self._window(now)
        return BreakerStats(
            endpoint_id=self.endpoint_id,
            state=self.state,
            window_requests=total,
            window_failures=failures,
            probes_in_flight=self._probes,
            opened_at=self._opened_at,
            times_opened=self._times_opened,
        )

    def __repr__(self) -> str:
        return (
            f"CircuitBreaker({self.endpoint_id!r}, state={self.state.value}, "
            f"probes={self._probes}, opened_at={self._opened_at})"
        )


__all__ = [
    "TRANSITIONS",
    "BreakerSignal",
    "BreakerState",
    "BreakerStats",
    "CircuitBreaker",
    "Transition",
]
