"""What a retention pass hands the store and gets back: cutoffs and batch results.

The policy itself (how long each kind of finished event is kept) is a
config value, ``config.retention.RetentionPolicy``; its ``cutoffs(now)`` gives
the arrival times before which a backend's ``EventStore.prune`` deletes.
"""

from __future__ import annotations

from dataclasses import dataclass

from hookrouter.config.retention import DAY, Cutoffs, RetentionPolicy


@dataclass(frozen=True, slots=True)
class PruneResult:
    """One batch of a retention pass.

    ``scanned`` events were looked at, ``deleted`` of them removed (with their
    deliveries and attempts). ``resume_after`` is the event id the next batch
    starts after; ``None`` means the pass reached the cutoff.
    """

    scanned: int
    deleted: int
    resume_after: str | None


__all__ = ["DAY", "Cutoffs", "PruneResult", "RetentionPolicy"]
