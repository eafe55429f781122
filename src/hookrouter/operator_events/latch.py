"""A condition that is told once when it starts and once when it ends. Sans-IO.

Samples come from a poll: a bad sample raises the latch at once; it clears
only after ``clear_after`` seconds of good samples in a row, so a condition
that flaps (Redis up one second, down the next) makes one pair of events,
not one per flap.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Change(enum.Enum):
    RAISED = "raised"
    CLEARED = "cleared"


@dataclass(slots=True)
class Latch:
    clear_after: float
    raised: bool = False
    raised_at: float = 0.0
    good_since: float | None = None

    def observe(self, bad: bool, now: float) -> Change | None:
        """Feed one sample; returns the change it makes, if any."""
        if bad:
            self.good_since = None
            if self.raised:
                return None
            self.raised, self.raised_at = True, now
            return Change.RAISED
        if not self.raised:
            return None
        if self.good_since is None:
            self.good_since = now
        if now - self.good_since < self.clear_after:
            return None
        self.raised, self.good_since = False, None
        return Change.CLEARED
