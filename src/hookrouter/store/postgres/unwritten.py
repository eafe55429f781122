"""Deliveries whose outcome is recorded but not yet written, by endpoint.

A page of pending work must not list a delivery whose outcome was recorded
before the page was asked for (the ledger's ordering guarantee). Writing
the queued outcomes first keeps that promise at the price of one outcome
write per page, each with its own commit, and a cluster's owner pages in
after every work notice. Leaving those deliveries out of the page keeps it
without a write: ``record`` can only move a delivery out of pending
(``lifecycle.RECORDED``), so once written none of them would be listed.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from typing import Final

from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.ledger import OutcomeRecord

_NONE: Final[frozenset[DeliveryRef]] = frozenset()


class Unwritten:
    """The refs of queued outcomes, by endpoint id; emptied when the queue is written."""

    def __init__(self) -> None:
        self._by_endpoint: dict[str, set[DeliveryRef]] = {}

    def add(self, outcomes: Iterable[OutcomeRecord]) -> None:
        by_endpoint = self._by_endpoint
        for o in outcomes:
            ref = o.ref
            refs = by_endpoint.get(ref.endpoint_id)
            if refs is None:
                by_endpoint[ref.endpoint_id] = {ref}
            else:
                refs.add(ref)

    def clear(self) -> None:
        """The queue went into the chain: a page submitted from now on runs after its write."""
        # A new dict, not .clear(): a page submitted earlier keeps the set it was given.
        self._by_endpoint = {}

    def of(self, endpoint_id: str) -> Set[DeliveryRef]:
        """This endpoint's unwritten refs (a live view until the next ``clear``)."""
        return self._by_endpoint.get(endpoint_id, _NONE)


__all__ = ["Unwritten"]
