"""Entity ids kept in order, so that a list request reads one page, not every entity.

A platform has hundreds of thousands of tenants: sorting a kind's ids on
each ``GET /admin/v1/tenants`` blocked the event loop (ingest included), and
an answer held all of them (docs/performance.md has the measurements).
Ids are kept sorted as they come and go (a bisect and a list insert: the
insert moves pointers, which stays well under the admin API's latency
target up to the router's tenant limit), and a page is a bisect plus a
slice. (``sortedcontainers`` scales further; at the router's limits a
plain list does, without another dependency.)
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from heapq import nsmallest
from typing import Final

DEFAULT_PAGE: Final = 100
MAX_PAGE: Final = 1000  # the most a list answers at once


class SortedIds:
    """A set of ids in sorted order, read a page at a time."""

    __slots__ = ("_ids",)

    def __init__(self, ids: Iterable[str] = ()) -> None:
        # dict.fromkeys keeps the order it is given: ids read in order sort in one pass.
        self._ids = sorted(dict.fromkeys(ids))

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, entity_id: str) -> None:
        ids = self._ids
        at = bisect_left(ids, entity_id)
        if at == len(ids) or ids[at] != entity_id:
            ids.insert(at, entity_id)

    def discard(self, entity_id: str) -> None:
        ids = self._ids
        at = bisect_left(ids, entity_id)
        if at < len(ids) and ids[at] == entity_id:
            del ids[at]

    def page(self, after: str | None, limit: int) -> tuple[list[str], str | None]:
        """Up to ``limit`` ids past ``after`` (exclusive), and the cursor for the next page.

        The cursor is None on the last page. A cursor need not be a current
        id: one deleted since still marks its place.
        """
        ids = self._ids
        start = 0 if after is None else bisect_right(ids, after)
        chunk = ids[start : start + limit]
        more = start + limit < len(ids)
        return chunk, (chunk[-1] if more and chunk else None)


def page_of(ids: Iterable[str], after: str | None, limit: int) -> tuple[list[str], str | None]:
    """The same page over distinct ids not kept in order (one tenant's sources, held breakers).

    A partial sort: the ``limit`` smallest past ``after``, not all of them in order.
    """
    chunk = nsmallest(limit + 1, ids if after is None else (i for i in ids if i > after))
    if len(chunk) > limit:
        del chunk[limit:]
        return chunk, chunk[-1]
    return chunk, None


__all__ = ["DEFAULT_PAGE", "MAX_PAGE", "SortedIds", "page_of"]
