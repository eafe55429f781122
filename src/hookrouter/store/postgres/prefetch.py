"""What a page of pending deliveries read besides their ids, kept until the engine loads them.

A page-in (``ledger.page_pending``) reads each delivery's body, attempt count
and fan-out in the same statement as the page itself, and the engine loads
the paged deliveries soon after (it pages only as many as it has credits
for). ``load`` takes them from here, so a paged delivery costs no statement
of its own to load: on PostgreSQL a statement's fixed cost is larger than
its rows' (docs/performance.md, issue 32).

An entry holds while this node holds the delivery's partition at the epoch
it was read at: no other node can have attempted the delivery in between,
so its attempt count is still true. Entries are taken once; ones never taken
(their refs were evicted or disowned) are dropped, oldest first, past
``MEMORY``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.ledger import DeliveryWork

# Paged deliveries kept at most (bodies included): a few pages of the
# largest size (``flow.credits.MAX_PAGE``) per busy lane.
MEMORY: Final = 10_000


class Prefetched:
    """Loaded deliveries by ref, each with the partition epoch it was read at and its fan-out."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[DeliveryRef, tuple[DeliveryWork, int, int | None]] = {}

    def put(self, work: DeliveryWork, epoch: int, fanout: int | None) -> None:
        entries = self._entries
        entries[work.ref] = (work, epoch, fanout)
        if len(entries) > MEMORY:
            for ref in list(entries)[: MEMORY // 2]:
                del entries[ref]

    def take(
        self, refs: Sequence[DeliveryRef], epoch_of: Callable[[str], int | None]
    ) -> tuple[dict[DeliveryRef, tuple[DeliveryWork, int | None]], list[DeliveryRef]]:
        """(the entries of ``refs`` still valid, with their fan-out; the refs to read).

        ``epoch_of(tenant)``: the epoch this node holds the tenant's partition at now.
        """
        found: dict[DeliveryRef, tuple[DeliveryWork, int | None]] = {}
        missing: list[DeliveryRef] = []
        entries = self._entries
        for ref in refs:
            entry = entries.pop(ref, None)
            if entry is not None and entry[1] == epoch_of(entry[0].tenant_id):
                found[ref] = (entry[0], entry[2])
            else:
                missing.append(ref)
        return found, missing

    def __len__(self) -> int:
        return len(self._entries)


__all__ = ["MEMORY", "Prefetched"]
