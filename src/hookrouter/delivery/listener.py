"""What the ingest path tells delivery: an event was committed (``CommitListener``).

Ingress calls it after each commit and the delivery engine implements it; it
lives here, below ingress, so that delivery never imports the ingest path.
"""

from __future__ import annotations

from hookrouter.store.base import NewEvent


class CommitListener:
    """Told about every newly committed (non-duplicate) event: the delivery engine.

    A base class rather than a Protocol, as ``clock.Clock`` explains: the
    compiled handler then reaches a compiled listener through its vtable
    instead of a method lookup by name, once per event.
    """

    __slots__ = ()

    def event_committed(self, event: NewEvent) -> None:
        raise NotImplementedError


__all__ = ["CommitListener"]
