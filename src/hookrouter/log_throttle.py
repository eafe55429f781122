"""One log line per interval for conditions that repeat (Redis down, out of descriptors)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class LogThrottle:
    """Allow one log line per ``interval`` seconds; count the ones held back."""

    interval: float = 10.0
    last_at: float | None = None
    suppressed: int = 0

    def should_log(self, now: float) -> int | None:
        """``None``: stay quiet. Otherwise log, mentioning the returned count of skipped lines."""
        if self.last_at is not None and now - self.last_at < self.interval:
            self.suppressed += 1
            return None
        skipped, self.suppressed, self.last_at = self.suppressed, 0, now
        return skipped
