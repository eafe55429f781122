"""The SQL of the delivery ledger (``ledger``), each statement with the index it uses.

Indexes on ``deliveries`` are partial (schema version 2, ``schema``):

* ``deliveries_undelivered`` (state, tenant_id, event_id) holds every
  delivery not yet delivered: open ones (pending, retry, parked) to page in,
  resume and count, dead/disabled ones to replay. A successful delivery, the
  usual outcome, leaves it instead of moving inside it.
* ``deliveries_retry_due`` (next_attempt_at) holds retries only; pending and
  delivered rows never touch it.

SQLite uses a partial index only when the query's WHERE implies the index's
WHERE term by term (https://www.sqlite.org/partialindex.html, section 2), and
it cannot tell that ``state = 'pending'`` implies ``state <> 'delivered'``:
every query meant for ``deliveries_undelivered`` repeats ``UNDELIVERED``
literally. ``tests/store/test_sqlite_schema.py`` checks each plan.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

from hookrouter.store.ledger import ReplayFilter
from hookrouter.store.lifecycle import TRANSITIONS, DeliveryEvent, DeliveryState, replayable, source
from hookrouter.telemetry.tracing import TRACE_HEADER

# The moves the bulk statements make, read from the lifecycle table (store/lifecycle.py).
_DUE_FROM: Final = source(DeliveryEvent.DUE).value  # retry
_DUE_TO: Final = TRANSITIONS[source(DeliveryEvent.DUE), DeliveryEvent.DUE].value  # pending
_PARK_FROM: Final = source(DeliveryEvent.PARK).value  # pending
_PARK_TO: Final = TRANSITIONS[source(DeliveryEvent.PARK), DeliveryEvent.PARK].value  # parked
_RESUME_FROM: Final = source(DeliveryEvent.RESUME).value  # parked
_RESUME_TO: Final = TRANSITIONS[source(DeliveryEvent.RESUME), DeliveryEvent.RESUME].value
_REPLAY_TO: Final = TRANSITIONS[DeliveryState.DEAD, DeliveryEvent.REPLAY].value  # pending

UNDELIVERED: Final = "state <> 'delivered'"  # the WHERE of deliveries_undelivered
_B32: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # the alphabet of hookrouter.ids

# An outcome writes its delivery's row whether or not the row exists yet (a
# fresh delivery has none, ``fanout``). Parameters ?1-?9 are the new
# values (see ledger._attempt_rows), ?10/?11 the delivery, ?12 its tenant.
# No next attempt and no error come as -1.0 and '' rather than None: Python's
# sqlite3 binds None through its adapter lookup (see store/process.py),
# and a delivered outcome has both.
_UPSERT_SET: Final = """
ON CONFLICT (event_id, endpoint_id) DO UPDATE SET
    state = excluded.state, attempts = excluded.attempts,
    next_attempt_at = excluded.next_attempt_at, last_status_code = excluded.last_status_code,
    last_error = excluded.last_error, updated_at = excluded.updated_at,
    last_attempt = excluded.last_attempt, last_started_at = excluded.last_started_at,
    last_duration_ms = excluded.last_duration_ms"""
_UPSERT_INTO: Final = """
INSERT INTO deliveries (event_id, endpoint_id, tenant_id, state, attempts, next_attempt_at,
                        last_status_code, last_error, updated_at,
                        last_attempt, last_started_at, last_duration_ms)"""
# The tenant given: no lookup of the event (cheaper per outcome than the
# guarded form); an event deleted meanwhile fails the foreign key.
UPDATE_DELIVERY: Final = (
    _UPSERT_INTO
    + " VALUES (?10, ?11, ?12, ?1, ?2, NULLIF(?3, -1.0), ?4, NULLIF(?5, ''), ?6, ?7, ?8, ?9)"
    + _UPSERT_SET
)
# The tenant read from the event; an event deleted meanwhile gets no row.
UPDATE_DELIVERY_GUARDED: Final = (
    _UPSERT_INTO
    + " SELECT ?10, ?11, tenant_id, ?1, ?2, NULLIF(?3, -1.0), ?4, NULLIF(?5, ''), ?6, ?7, ?8, ?9"
    + " FROM events WHERE event_id = ?10"
    + _UPSERT_SET
)
# A decision without an attempt (park, disable, defer): the state changes, the
# attempt count and last result stay (a fresh delivery: none made, due since arrival).
SET_STATE: Final = """
INSERT INTO deliveries (event_id, endpoint_id, tenant_id, state, attempts,
                        next_attempt_at, updated_at)
SELECT ?4, ?5, tenant_id, ?1, 0, coalesce(?2, received_at), ?3 FROM events WHERE event_id = ?4
ON CONFLICT (event_id, endpoint_id) DO UPDATE SET
    state = excluded.state, next_attempt_at = coalesce(?2, next_attempt_at),
    updated_at = excluded.updated_at"""
INSERT_ATTEMPT: Final = (
    "INSERT OR REPLACE INTO attempts (event_id, endpoint_id, attempt, started_at,"
    " duration_ms, status_code, error, response_excerpt) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
# One endpoint's pending deliveries (a credit lane, flow/credits.py) in event id
# order. The endpoint id is part of the primary key, so each index entry holds
# it: entries of the tenant's other endpoints are skipped without a table read.
PAGE_FROM: Final = (
    "SELECT event_id, endpoint_id FROM deliveries"
    f" WHERE tenant_id = ? AND state = 'pending' AND {UNDELIVERED}"
    " AND endpoint_id = ? AND event_id >= ? ORDER BY event_id LIMIT ?"
)
PAGE_ALL: Final = (
    "SELECT event_id, endpoint_id FROM deliveries"
    f" WHERE tenant_id = ? AND state = 'pending' AND {UNDELIVERED}"
    " AND endpoint_id = ? ORDER BY event_id LIMIT ?"
)
PROMOTE_DUE: Final = f"""
UPDATE deliveries SET state = '{_DUE_TO}'
WHERE (event_id, endpoint_id) IN (
    SELECT event_id, endpoint_id FROM deliveries
    WHERE state = '{_DUE_FROM}' AND next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ?)
RETURNING tenant_id, event_id, endpoint_id, next_attempt_at"""
PARK_PENDING: Final = f"""
UPDATE deliveries SET state = '{_PARK_TO}', updated_at = ?
WHERE (event_id, endpoint_id) IN (
    SELECT event_id, endpoint_id FROM deliveries
    WHERE tenant_id = ? AND state = '{_PARK_FROM}' AND {UNDELIVERED} AND endpoint_id = ?
    ORDER BY event_id LIMIT ?)"""
RESUME_PARKED: Final = f"""
UPDATE deliveries SET state = '{_RESUME_TO}'
WHERE (event_id, endpoint_id) IN (
    SELECT event_id, endpoint_id FROM deliveries
    WHERE tenant_id = ? AND state = '{_RESUME_FROM}' AND {UNDELIVERED} AND endpoint_id = ?
    ORDER BY event_id LIMIT ?)
RETURNING event_id, endpoint_id"""
# From the event, so that a fresh delivery (no row yet) loads too: no attempt made.
# Deliveries of ?1, a JSON array of [event id, endpoint id] pairs, with the
# position of each in the array: one statement per page-in batch (about half
# the cost of a statement per delivery). A missing event
# (deleted meanwhile) has no row.
LOAD: Final = (
    "SELECT j.key, e.tenant_id, coalesce(d.attempts, 0), e.event_type, e.body,"
    " json_extract(e.headers, '$.\"content-type\"'),"
    f" json_extract(e.headers, '$.\"{TRACE_HEADER}\"')"
    " FROM json_each(?1) AS j"
    " JOIN events AS e ON e.event_id = json_extract(j.value, '$[0]')"
    " LEFT JOIN deliveries AS d"
    " ON d.event_id = e.event_id AND d.endpoint_id = json_extract(j.value, '$[1]')"
)
PENDING_ENDPOINTS: Final = (
    "SELECT tenant_id, endpoint_id, count(*), min(event_id) FROM deliveries"
    f" WHERE state = 'pending' AND {UNDELIVERED} GROUP BY tenant_id, endpoint_id"
)


def state_counts_sql(states: Collection[DeliveryState] | None) -> str:
    """Count deliveries per (tenant, state), of ``states`` only unless None.

    Without ``delivered`` among them the counts kept by triggers answer
    (``delivery_counts``, schema version 7): a read of a row per tenant and
    state, however many deliveries are open. Counting delivered rows means
    reading the whole table.
    """
    if states is None:
        return "SELECT tenant_id, state, count(*) FROM deliveries GROUP BY tenant_id, state"
    if DeliveryState.DELIVERED not in states:
        listed = ", ".join(f"'{s.value}'" for s in sorted(states))
        return (
            f"SELECT tenant_id, state, n FROM delivery_counts WHERE n > 0 AND state IN ({listed})"
        )
    where = " OR ".join(f"state = '{s.value}'" for s in sorted(states)) or "0"
    return f"SELECT tenant_id, state, count(*) FROM deliveries WHERE {where} GROUP BY 1, 2"


def replay_sql(where: str) -> str:
    """Reopen up to ``?`` (the last parameter) deliveries matching ``where``, oldest first."""
    return (
        f"UPDATE deliveries SET state = '{_REPLAY_TO}', attempts = 0, next_attempt_at = NULL"
        " WHERE (event_id, endpoint_id) IN ("
        f" SELECT d.event_id, d.endpoint_id FROM deliveries d WHERE {where}"
        " ORDER BY d.event_id LIMIT ?)"
        " RETURNING tenant_id, event_id, endpoint_id"
    )


def replay_where(f: ReplayFilter) -> tuple[str, list[Any]]:
    """The WHERE (over ``deliveries d``) and parameters that select ``f``'s deliveries.

    Raises ``ValueError`` for a state the lifecycle does not let ``replay`` leave.
    """
    for state in f.states:
        if not replayable(state):
            raise ValueError(f"deliveries in state {state.value!r} cannot be replayed")
    states = f"d.state IN ({', '.join('?' * len(f.states))})"
    params: list[Any] = [s.value for s in f.states]
    if f.event_id is not None:
        # One event: its primary-key range beats a walk of every dead delivery;
        # the unary + keeps the planner from seeking the state index instead.
        clauses = [f"+{states}"]
    elif DeliveryState.DELIVERED in f.states:
        clauses = [states]  # only the whole table holds delivered rows
    else:
        clauses = [states, f"d.{UNDELIVERED}"]  # dead/disabled: in the partial index
    for clause, value in (
        ("d.tenant_id = ?", f.tenant_id),
        ("d.endpoint_id = ?", f.endpoint_id),
        ("d.event_id = ?", f.event_id),
    ):
        if value is not None:
            clauses.append(clause)
            params.append(value)
    # Event ids start with their arrival time (hookrouter.ids), so a time
    # window is an id range the primary key serves directly.
    if f.since is not None:
        clauses.append("d.event_id >= ?")
        params.append(event_id_floor(f.since))
    if f.until is not None:
        clauses.append("d.event_id < ?")
        params.append(event_id_floor(f.until))
    return " AND ".join(clauses), params


def event_id_floor(wall_seconds: float) -> str:
    """The smallest event id that ``hookrouter.ids`` can make at ``wall_seconds``."""
    ms = max(0, int(wall_seconds * 1000))
    chars = []
    for _ in range(10):
        chars.append(_B32[ms & 31])
        ms >>= 5
    return "evt_" + "".join(reversed(chars)) + "0" * 16
