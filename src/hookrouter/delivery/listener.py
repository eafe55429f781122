"""What the ingest path tells delivery: an event was committed (``CommitListener``).

Ingress calls it around each append and the delivery engine implements it;
it lives here, below ingress, so that delivery never imports the ingest path.
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

    def event_appending(self, event: NewEvent) -> None:
        """``event`` goes to the store now; ``event_committed`` or ``event_not_stored`` follows.

        Its commit may be visible to the store's readers before the listener
        hears of it: a page-in read in between must leave it to that call.
        """

    def event_committed(self, event: NewEvent) -> None:
        raise NotImplementedError

    def event_not_stored(self, event: NewEvent) -> None:
        """``event``, announced by ``event_appending``, was not stored (failed, or a duplicate)."""


__all__ = ["CommitListener"]
