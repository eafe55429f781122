"""Whether the limiter may talk to Redis right now: a state machine, sans-IO.

Rules
-----
* ``UP``: decisions go to Redis. A failed call (connection refused or reset,
  timeout, cluster down) moves to ``DOWN``.
* ``DOWN``: decisions do not touch Redis at all; ``on_redis_error`` answers
  them at once, so a dead Redis costs neither latency nor connection attempts
  per event. A probe is due ``backoff`` seconds after entering ``DOWN``.
* ``PROBING``: one probe (a PING) is in flight; decisions still take the
  policy. Probe succeeds → ``UP``. Probe fails → ``DOWN`` with the backoff
  doubled (50 ms, 100 ms, ... capped at 2 s, each scaled by a jitter factor in
  [0.5, 1.5) so a fleet of routers does not probe in step).
* A reply that arrives while ``DOWN``/``PROBING`` (a call that was already in
  flight) proves Redis answers: → ``UP``. Late failures change nothing.

Backoff numbers: 50 ms is a few local round trips, so a brief blip recovers
almost at once; the 2 s cap bounds how long a recovered Redis keeps being
bypassed, while costing a dead Redis one probe per router per 2 s.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Health(enum.Enum):
    UP = "up"
    DOWN = "down"
    PROBING = "probing"


class HealthEvent(enum.Enum):
    CALL_OK = "call_ok"
    CALL_FAILED = "call_failed"
    PROBE_START = "probe_start"
    PROBE_OK = "probe_ok"
    PROBE_FAILED = "probe_failed"


_H, _E = Health, HealthEvent
TRANSITIONS: dict[tuple[Health, HealthEvent], Health] = {
    (_H.UP, _E.CALL_OK): _H.UP,
    (_H.UP, _E.CALL_FAILED): _H.DOWN,
    (_H.UP, _E.PROBE_START): _H.UP,  # an explicit health check while up
    (_H.UP, _E.PROBE_OK): _H.UP,
    (_H.UP, _E.PROBE_FAILED): _H.DOWN,
    (_H.DOWN, _E.CALL_OK): _H.UP,
    (_H.DOWN, _E.CALL_FAILED): _H.DOWN,
    (_H.DOWN, _E.PROBE_START): _H.PROBING,
    (_H.PROBING, _E.CALL_OK): _H.UP,
    (_H.PROBING, _E.CALL_FAILED): _H.PROBING,
    (_H.PROBING, _E.PROBE_OK): _H.UP,
    (_H.PROBING, _E.PROBE_FAILED): _H.DOWN,
}

BACKOFF_BASE = 0.05
BACKOFF_CAP = 2.0


def backoff(failures: int, jitter: float) -> float:
    """Delay before the next probe after ``failures`` consecutive failures (≥ 1)."""
    raw = min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** min(max(failures, 1) - 1, 16))
    return raw * (0.5 + jitter)


@dataclass(slots=True)
class HealthMachine:
    """Current health plus when to probe next. Feed it events with ``now``."""

    state: Health = Health.UP
    failures: int = 0
    next_probe_at: float = 0.0
    transitions: int = 0

    @property
    def up(self) -> bool:
        return self.state is Health.UP

    def probe_due(self, now: float) -> bool:
        """True when down and the backoff has elapsed (and no probe is running)."""
        return self.state is Health.DOWN and now >= self.next_probe_at

    def on(self, event: HealthEvent, now: float, jitter: float = 0.5) -> Health:
        """Apply ``event``; returns the new state. Unknown pairs raise ``ValueError``."""
        try:
            new = TRANSITIONS[(self.state, event)]
        except KeyError:
            raise ValueError(f"no transition from {self.state} on {event}") from None
        if event in (HealthEvent.CALL_OK, HealthEvent.PROBE_OK):
            self.failures = 0
        elif new is Health.DOWN and self.state is not Health.DOWN:
            # Entering DOWN (from UP, or a failed probe): back off further.
            self.failures += 1
            self.next_probe_at = now + backoff(self.failures, jitter)
        if new is not self.state:
            self.transitions += 1
        self.state = new
        return new
