"""An event's status on SQLite: stored only where the deliveries cannot tell it.

``EventStatus`` follows the event's deliveries (``store/ledger.py``): pending
while any delivery is open (pending, retry, parked), else failed if any was
dead-lettered or disabled, else delivered. Schema version 1 kept that in
``events.status`` and rewrote it after every finished delivery: an UPDATE of
the event row (body included, so a WAL page per ~3 events) and a move in the
status index, nearly half the SQLite work an outcome cost
(``tests/store/bench_delivery_path.py``). Now the column holds only what the
deliveries cannot answer with one primary-key probe:

* ``unrouted``: written at insert; such an event has no deliveries.
* ``failed``: written when the last open delivery of an event finishes and one
  of them is dead or disabled (rare); a replay sets it back to ``pending``.
* ``pending`` otherwise (``delivered`` in rows finished by version-1 code, which
  means the same): the status is *derived* when read, pending while one of the
  event's deliveries is open (a fresh delivery without a row counts as open,
  ``fanout``), else delivered.

Every way an open delivery can become final goes through the ledger's outcome
write, which runs ``MARK_FAILED`` for the events it finished, and the only way
back to open for a final delivery is a replay, which runs ``REOPEN``; so a
stored ``failed`` never coexists with an open delivery.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from hookrouter.store.base import OPEN_STATES, EventStatus
from hookrouter.store.sqlite.fanout import HAS_FRESH

_OPEN_VALUES: Final = frozenset(s.value for s in OPEN_STATES)
# Literal comparisons, not ``IN (...)``: inside an UPDATE SQLite builds an
# ephemeral table per row for an IN list (measurable per outcome).
_D_OPEN: Final = "(" + " OR ".join(f"d.state = '{s.value}'" for s in OPEN_STATES) + ")"
# Open: a row in an open state, or a fresh delivery without a row yet
# (``fanout``: only events above the watermark can have one).
_ANY_OPEN: Final = (
    f"(EXISTS (SELECT 1 FROM deliveries AS d WHERE d.event_id = events.event_id AND {_D_OPEN})"
    f" OR {HAS_FRESH})"
)
_STORED: Final = "status = 'failed' OR status = 'unrouted'"

# The status as a column expression over ``events`` (one primary-key probe of
# ``deliveries`` per row when not stored).
STATUS_SQL: Final = (
    f"CASE WHEN {_STORED} THEN status WHEN {_ANY_OPEN} THEN 'pending' ELSE 'delivered' END"
)

# WHERE terms selecting events in one status. ``failed``/``unrouted`` compare
# literally, so the partial index ``events_tenant_stored_status`` serves them.
STATUS_FILTER: Final[dict[EventStatus, str]] = {
    EventStatus.FAILED: "status = 'failed'",
    EventStatus.UNROUTED: "status = 'unrouted'",
    EventStatus.PENDING: f"NOT ({_STORED}) AND {_ANY_OPEN}",
    EventStatus.DELIVERED: f"NOT ({_STORED}) AND NOT {_ANY_OPEN}",
}

# Events (a JSON array of ids) whose last open delivery was just finished and
# one of whose deliveries is dead or disabled. Runs once per outcome batch; for
# a delivered event it costs one primary-key probe of its deliveries.
MARK_FAILED: Final = f"""
UPDATE events SET status = 'failed'
WHERE event_id IN (
        SELECT d.event_id FROM json_each(?1) AS j JOIN deliveries AS d ON d.event_id = j.value
        WHERE d.state = 'dead' OR d.state = 'disabled')
    AND status <> 'failed' AND NOT {_ANY_OPEN}"""

# Whether an ``events`` row is past its retention (``store.retention``), given
# the cutoffs as event ids (``:delivered_floor``, ``:failed_floor``; '' keeps
# that kind forever). Failed events have their own cutoff; delivered and
# unrouted ones share the other; an event with an open delivery never expires.
EXPIRED: Final = f"""(CASE
    WHEN status = 'failed' THEN event_id < :failed_floor
    WHEN status = 'unrouted' THEN event_id < :delivered_floor
    ELSE event_id < :delivered_floor END) AND NOT {_ANY_OPEN}"""

# A replay made deliveries of the event open again.
REOPEN: Final = "UPDATE events SET status = 'pending' WHERE event_id = ? AND status = 'failed'"


def derive(stored: str, delivery_states: Iterable[str]) -> EventStatus:
    """The status of an event whose row says ``stored`` and whose deliveries are in these states."""
    if stored in ("failed", "unrouted"):
        return EventStatus(stored)
    # Exactly what STATUS_SQL answers, so a listing and a lookup always agree.
    if any(s in _OPEN_VALUES for s in delivery_states):
        return EventStatus.PENDING
    return EventStatus.DELIVERED


__all__ = ["EXPIRED", "MARK_FAILED", "REOPEN", "STATUS_FILTER", "STATUS_SQL", "derive"]
