"""Reads on one pooled connection: events, their status, entities (writes: ``changes``).

An event's status is stored only where its deliveries cannot tell it
(``unrouted`` at insert, ``failed`` once its last open delivery finished and
one is dead or disabled, ``pending`` back on a replay: ``ledger``); otherwise
it is derived when read: pending while any delivery is open, else delivered.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from hookrouter.store.base import (
    OPEN_STATES,
    Entity,
    EntityKind,
    EventRecord,
    EventStatus,
)
from hookrouter.store.postgres.conn import Conn
from hookrouter.store.rows import (
    ATTEMPT_COLUMNS,
    DELIVERY_COLUMNS,
    attempts_by_endpoint,
    delivery_record,
)

OPEN_SQL: Final = "(" + ", ".join(f"'{s.value}'" for s in OPEN_STATES) + ")"
_STORED: Final = "e.status IN ('failed', 'unrouted')"
_ANY_OPEN: Final = (
    "EXISTS (SELECT 1 FROM deliveries AS d"
    f" WHERE d.event_id = e.event_id AND d.state IN {OPEN_SQL})"
)
STATUS_SQL: Final = (
    f"CASE WHEN {_STORED} THEN e.status WHEN {_ANY_OPEN} THEN 'pending' ELSE 'delivered' END"
)
STATUS_FILTER: Final[dict[EventStatus, str]] = {
    EventStatus.FAILED: "e.status = 'failed'",
    EventStatus.UNROUTED: "e.status = 'unrouted'",
    EventStatus.PENDING: f"NOT {_STORED} AND {_ANY_OPEN}",
    EventStatus.DELIVERED: f"NOT {_STORED} AND NOT {_ANY_OPEN}",
}
_EVENT_COLUMNS: Final = (
    "e.event_id, e.tenant_id, e.source_id, e.provider_event_id, e.event_type, e.received_at"
)


async def get_event(conn: Conn, event_id: str, with_body: bool) -> EventRecord | None:
    """The event with its deliveries and attempt history, from one snapshot."""
    body = ", e.body" if with_body else ""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        row = await conn.fetchrow(
            f"SELECT {_EVENT_COLUMNS}, {STATUS_SQL}, e.headers::text{body}"
            " FROM events AS e WHERE e.event_id = $1",
            event_id,
        )
        if row is None:
            return None
        deliveries = await conn.fetch(
            f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE event_id = $1 ORDER BY endpoint_id",
            event_id,
        )
        attempts = await conn.fetch(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE event_id = $1"
            " ORDER BY endpoint_id, attempt",
            event_id,
        )
    history = attempts_by_endpoint(attempts)
    return EventRecord(
        event_id=row[0],
        tenant_id=row[1],
        source_id=row[2],
        provider_event_id=row[3],
        event_type=row[4],
        received_at=row[5],
        status=EventStatus(row[6]),
        headers=orjson.loads(row[7]),
        body=bytes(row[8]) if with_body else b"",
        deliveries=tuple(delivery_record(event_id, d, history) for d in deliveries),
    )


async def list_events(
    conn: Conn,
    *,
    tenant_id: str | None,
    partition: int | None,
    status: EventStatus | None,
    limit: int,
    before: str | None,
) -> list[EventRecord]:
    """Newest first, without headers, bodies or deliveries (``partition``: the tenant's)."""
    if tenant_id is not None and partition is not None and status is EventStatus.PENDING:
        return await _list_pending(conn, tenant_id, partition, limit, before)
    clauses: list[str] = []
    params: list[Any] = []
    for clause, value in (("e.tenant_id = ${}", tenant_id), ("e.event_id < ${}", before)):
        if value is not None:
            params.append(value)
            clauses.append(clause.format(len(params)))
    if status is not None:
        clauses.append(STATUS_FILTER[status])
    params.append(limit)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = await conn.fetch(
        f"SELECT {_EVENT_COLUMNS}, {STATUS_SQL} FROM events AS e{where}"
        f" ORDER BY e.event_id DESC LIMIT ${len(params)}",
        *params,
    )
    return [EventRecord(r[0], r[1], r[2], r[3], r[4], r[5], EventStatus(r[6])) for r in rows]


# One tenant's events with an open delivery, newest first, from the open-work
# indexes. By the tenant's events index, testing each event, a page with fewer
# pending events than its limit read every event the tenant has. Pending rows
# are indexed per endpoint (deliveries_pending): a skip scan finds the
# tenant's endpoints with pending work (one index probe each) and each gives
# its newest ``limit`` (the index leads with the tenant's partition); retry and
# parked rows come from deliveries_waiting.
# An event with an open delivery is pending unless its row says otherwise
# (one statement sees one snapshot), so no per-event EXISTS is needed; the
# ids are an array so the events are read by primary key, whatever the plan.
# Parameters: $1 tenant, $2 limit, $3 the tenant's partition, $4 the exclusive
# cursor when paged.
def pending_sql(paged: bool) -> str:
    """The pending listing of one tenant (see above)."""
    own = "d.tenant_id = $1" + (" AND d.event_id < $4" if paged else "")
    lane = "d.partition = $3 AND d.tenant_id = $1 AND d.state = 'pending'"
    return f"""
WITH RECURSIVE endpoints (endpoint_id) AS (
    (SELECT d.endpoint_id FROM deliveries AS d WHERE {lane}
     ORDER BY d.endpoint_id LIMIT 1)
    UNION ALL
    SELECT (SELECT d.endpoint_id FROM deliveries AS d
            WHERE {lane} AND d.endpoint_id > p.endpoint_id
            ORDER BY d.endpoint_id LIMIT 1)
    FROM endpoints AS p WHERE p.endpoint_id IS NOT NULL
), open_events (event_id) AS (
    SELECT newest.event_id FROM endpoints AS p CROSS JOIN LATERAL (
        SELECT d.event_id FROM deliveries AS d
        WHERE d.partition = $3 AND d.endpoint_id = p.endpoint_id AND d.state = 'pending'
            AND {own}
        ORDER BY d.event_id DESC LIMIT $2) AS newest
    UNION ALL
    (SELECT d.event_id FROM deliveries AS d WHERE d.state = 'retry' AND {own}
     ORDER BY d.event_id DESC LIMIT $2)
    UNION ALL
    (SELECT d.event_id FROM deliveries AS d WHERE d.state = 'parked' AND {own}
     ORDER BY d.event_id DESC LIMIT $2)
)
SELECT {_EVENT_COLUMNS}, 'pending' FROM events AS e
WHERE e.event_id = ANY (ARRAY(
        SELECT DISTINCT event_id FROM open_events ORDER BY event_id DESC LIMIT $2))
    AND NOT {_STORED}
ORDER BY e.event_id DESC"""


async def _list_pending(
    conn: Conn, tenant_id: str, partition: int, limit: int, before: str | None
) -> list[EventRecord]:
    params = (
        (tenant_id, limit, partition) if before is None else (tenant_id, limit, partition, before)
    )
    rows = await conn.fetch(pending_sql(before is not None), *params)
    return [EventRecord(r[0], r[1], r[2], r[3], r[4], r[5], EventStatus(r[6])) for r in rows]


async def find_event(conn: Conn, source_id: str, provider_event_id: str) -> str | None:
    found: str | None = await conn.fetchval(
        "SELECT event_id FROM event_keys WHERE source_id = $1 AND provider_event_id = $2",
        source_id,
        provider_event_id,
    )
    return found


async def list_entities(conn: Conn, kind: EntityKind) -> list[Entity]:
    rows = await conn.fetch(
        "SELECT kind, id, tenant_id, doc::text, updated_at FROM entities WHERE kind = $1"
        " ORDER BY id",
        kind,
    )
    return [Entity(r[0], r[1], r[2], orjson.loads(r[3]), r[4]) for r in rows]


def affected(status: str) -> int:
    """The row count in a command tag such as ``UPDATE 3``."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


__all__ = [
    "OPEN_SQL",
    "STATUS_FILTER",
    "STATUS_SQL",
    "affected",
    "find_event",
    "get_event",
    "list_entities",
    "list_events",
    "pending_sql",
]
