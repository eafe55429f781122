"""How long finished events are kept: the retention policy, as plain values.

Every acknowledged event stays in the store until its deliveries are
finished; after that it is history (the admin event view, replay, duplicate
detection), and history is what fills a disk. The policy says how long each
kind of finished event is kept, counted from its arrival:

* ``delivered_seconds``: events whose every delivery succeeded, and events
  that matched no endpoint (``unrouted``). Default 7 days.
* ``failed_seconds``: events with a dead-lettered or disabled delivery, kept
  longer because an operator may still want to replay them. Default 30 days.

``None`` keeps that kind forever. Events with an open delivery (pending,
retry, parked) are never expired, whatever their age: they are acknowledged
and not yet delivered.

Deleting an event also forgets its provider event id, so a redelivery that
arrives after that is accepted as a new event. Retention shorter than a
sender's retry window therefore weakens duplicate detection;
:func:`dedup_conflicts` lists such sources (``config`` warns about them).

Pure, and parsed once by ``config``: the store backends delete
(``EventStore.prune``), ``store.pruner`` runs the passes, ``store.retention``
holds the cutoff records they share.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from hookrouter.providers import PROVIDER_RETRIES

DAY: Final = 86_400.0
DEFAULT_DELIVERED_SECONDS: Final = 7 * DAY
DEFAULT_FAILED_SECONDS: Final = 30 * DAY
# A pass a minute keeps the store within about a minute of its policy; one
# pass over a store with nothing to delete is a few index probes.
DEFAULT_INTERVAL_SECONDS: Final = 60.0


@dataclass(frozen=True, slots=True)
class Cutoffs:
    """Arrival times (wall seconds) before which finished events are expired.

    ``None`` for a kind that is kept forever.
    """

    delivered_before: float | None
    failed_before: float | None

    @property
    def scan_before(self) -> float | None:
        """The latest cutoff: no event received after it can be expired."""
        present = [t for t in (self.delivered_before, self.failed_before) if t is not None]
        return max(present) if present else None


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long finished events are kept after arrival (see the module docstring)."""

    delivered_seconds: float | None = DEFAULT_DELIVERED_SECONDS
    failed_seconds: float | None = DEFAULT_FAILED_SECONDS
    interval_seconds: float = DEFAULT_INTERVAL_SECONDS

    @property
    def keeps_everything(self) -> bool:
        return self.delivered_seconds is None and self.failed_seconds is None

    def cutoffs(self, now: float) -> Cutoffs:
        """The cutoffs at wall time ``now``."""
        return Cutoffs(
            delivered_before=None
            if self.delivered_seconds is None
            else now - self.delivered_seconds,
            failed_before=None if self.failed_seconds is None else now - self.failed_seconds,
        )


@dataclass(frozen=True, slots=True)
class DedupConflict:
    """A source whose sender may redeliver after its delivered events are deleted."""

    source_id: str
    provider: str
    window_seconds: float


def dedup_conflicts(
    policy: RetentionPolicy, sources: Iterable[tuple[str, str]]
) -> list[DedupConflict]:
    """The ``(source_id, provider)`` pairs whose provider retries for longer than retention.

    Only delivered/unrouted retention matters: a sender retries until it got
    a 2xx, and a 2xx'd event that is still within its sender's retry window
    is what duplicate detection needs.
    """
    keep = policy.delivered_seconds
    if keep is None:
        return []
    conflicts = []
    for source_id, provider in sources:
        behaviour = PROVIDER_RETRIES.get(provider)
        if behaviour is not None and behaviour.retries and behaviour.window_seconds > keep:
            conflicts.append(DedupConflict(source_id, provider, behaviour.window_seconds))
    return conflicts


__all__ = [
    "DAY",
    "DEFAULT_DELIVERED_SECONDS",
    "DEFAULT_FAILED_SECONDS",
    "DEFAULT_INTERVAL_SECONDS",
    "Cutoffs",
    "DedupConflict",
    "RetentionPolicy",
    "dedup_conflicts",
]
