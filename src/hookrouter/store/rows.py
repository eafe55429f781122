"""A delivery's rows as records, the same for every backend.

Both backends keep a delivery's last attempt in its own row and every attempt
that did not deliver in ``attempts``; how the two merge into a history is one
rule, so an event page reads the same whichever store is behind it. The
column lists are the order the functions below read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, Protocol

from hookrouter.store.base import AttemptRecord, DeliveryRecord, DeliveryState

DELIVERY_COLUMNS: Final = (
    "endpoint_id, state, attempts, next_attempt_at, last_status_code, last_error, updated_at,"
    " last_attempt, last_started_at, last_duration_ms"
)
ATTEMPT_COLUMNS: Final = (
    "endpoint_id, attempt, started_at, duration_ms, status_code, error, response_excerpt"
)


class Row(Protocol):
    """A fetched row read by position: SQLite's tuples and asyncpg's records."""

    def __getitem__(self, index: int, /) -> Any: ...


def attempts_by_endpoint(rows: Iterable[Row]) -> dict[str, list[AttemptRecord]]:
    """``ATTEMPT_COLUMNS`` rows, in attempt order, grouped by endpoint."""
    history: dict[str, list[AttemptRecord]] = {}
    for a in rows:
        history.setdefault(a[0], []).append(AttemptRecord(a[1], a[2], a[3], a[4], a[5], a[6]))
    return history


def delivery_record(
    event_id: str, d: Row, history: dict[str, list[AttemptRecord]]
) -> DeliveryRecord:
    """One ``DELIVERY_COLUMNS`` row with its endpoint's attempts."""
    return DeliveryRecord(
        event_id=event_id,
        endpoint_id=d[0],
        state=DeliveryState(d[1]),
        attempts=d[2],
        next_attempt_at=d[3],
        last_status_code=d[4],
        last_error=d[5],
        updated_at=d[6],
        history=attempt_history(history.get(d[0], []), d),
    )


def attempt_history(rows: list[AttemptRecord], d: Row) -> tuple[AttemptRecord, ...]:
    """A delivery's ``attempts`` rows and the last attempt its own row keeps.

    An attempt that did not deliver has a row (with the response excerpt),
    which wins; a delivered one lives only in the delivery row, and an older
    row of the same number (numbering restarts after a replay) gives way to it.
    """
    number = d[7]
    if number is None or (
        d[1] != DeliveryState.DELIVERED.value and any(r.attempt == number for r in rows)
    ):
        return tuple(rows)
    kept = [r for r in rows if r.attempt != number]
    kept.append(AttemptRecord(number, d[8], d[9], d[4], d[5]))
    return tuple(sorted(kept, key=lambda r: r.attempt))
