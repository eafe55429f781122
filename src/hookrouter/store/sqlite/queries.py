"""Read queries and small write jobs, as plain functions of a connection.

Reads run on the store's read connection in its worker thread, each inside
one read transaction so an event and its deliveries come from the same
snapshot. Writes other than appends are ``WriteJob`` callables handed to the
writer thread, so there is only ever one writer and no lock contention with
the group commit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import orjson

from hookrouter.store.base import (
    OPEN_STATES,
    DeliveryState,
    Entity,
    EntityKind,
    EventRecord,
    EventStatus,
)
from hookrouter.store.rows import (
    ATTEMPT_COLUMNS,
    DELIVERY_COLUMNS,
    attempts_by_endpoint,
    delivery_record,
)
from hookrouter.store.sqlite import tenant_index
from hookrouter.store.sqlite.batch import WriteJob
from hookrouter.store.sqlite.fanout import HAS_FRESH, WATERMARK_SQL
from hookrouter.store.sqlite.ledger_sql import UNDELIVERED, event_id_floor
from hookrouter.store.sqlite.partition_sql import Executes, On
from hookrouter.store.sqlite.partitions import Catalog
from hookrouter.store.sqlite.status import STATUS_FILTER, STATUS_SQL, derive

_EVENT_COLUMNS: Final = (
    "event_id, tenant_id, source_id, provider_event_id, event_type, received_at, status"
)
_LISTED_COLUMNS: Final = (
    "event_id, tenant_id, source_id, provider_event_id, event_type, received_at, " + STATUS_SQL
)
# The event's endpoints when it is above the watermark (it may have fresh
# deliveries, ``fanout``), else NULL.
_FRESH_ENDPOINTS: Final = f"CASE WHEN rowid > {WATERMARK_SQL} THEN endpoints END"


@contextmanager
def read_transaction(conn: Executes) -> Iterator[Executes]:
    """One snapshot for several SELECTs (WAL readers never block the writer)."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        conn.execute("COMMIT")


def find_event(
    conn: sqlite3.Connection, catalog: Catalog, event_id: str, with_body: bool
) -> EventRecord | None:
    """``get_event`` in the partition the id names, then (a switch recorded by hand) the others."""
    first = catalog.holding(event_id)
    for partition in (first, *(p for p in catalog.newest_first() if p != first)):
        record = get_event(On(conn, partition), event_id, with_body)
        if record is not None:
            return record
    return None


def get_event(conn: Executes, event_id: str, with_body: bool) -> EventRecord | None:
    """The event, its headers (and body if asked), deliveries and attempt history."""
    body_column = ", body" if with_body else ""
    with read_transaction(conn):
        row = conn.execute(
            f"SELECT {_EVENT_COLUMNS}, {_FRESH_ENDPOINTS}, headers{body_column}"
            " FROM events WHERE event_id = ?",
            (event_id,),
        ).fetchone()
        if row is None:
            return None
        deliveries = conn.execute(
            f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE event_id = ? ORDER BY endpoint_id",
            (event_id,),
        ).fetchall()
        deliveries = _with_fresh(deliveries, row[7], row[5])
        attempts = conn.execute(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE event_id = ?"
            " ORDER BY endpoint_id, attempt",
            (event_id,),
        ).fetchall()
    history = attempts_by_endpoint(attempts)
    return EventRecord(
        event_id=row[0],
        tenant_id=row[1],
        source_id=row[2],
        provider_event_id=row[3],
        event_type=row[4],
        received_at=row[5],
        status=derive(row[6], (d[1] for d in deliveries)),
        headers=orjson.loads(row[8]),
        body=bytes(row[9]) if with_body else b"",
        deliveries=tuple(delivery_record(event_id, d, history) for d in deliveries),
    )


def _with_fresh(
    rows: list[tuple[Any, ...]], fresh_endpoints: str | None, received_at: float
) -> list[tuple[Any, ...]]:
    """The delivery rows plus a pending one for each fresh delivery (``fanout``)."""
    if fresh_endpoints is None:
        return rows
    have = {d[0] for d in rows}
    pending = DeliveryState.PENDING.value
    missing = [
        (endpoint, pending, 0, received_at, None, None, received_at, None, None, None)
        for endpoint in orjson.loads(fresh_endpoints)
        if endpoint not in have
    ]
    return sorted(rows + missing, key=lambda d: str(d[0])) if missing else rows


def list_across(
    conn: sqlite3.Connection,
    catalog: Catalog,
    *,
    tenant_id: str | None,
    status: EventStatus | None,
    limit: int,
    before: str | None,
) -> list[EventRecord]:
    """``list_events`` over every partition, newest first, until ``limit`` rows.

    Each partition holds the event ids of its own bucket (the writer inserts
    by ``Catalog.route``), so the newest-first walk is already in id order.
    """
    found: list[EventRecord] = []
    for partition in catalog.newest_first():
        if before is not None and partition.start and before <= event_id_floor(partition.start):
            continue  # the cursor is older than the whole bucket
        found += list_events(
            On(conn, partition),
            tenant_id=tenant_id,
            status=status,
            limit=limit - len(found),
            before=before,
        )
        if len(found) >= limit:
            break
    return found


def list_events(
    conn: Executes,
    *,
    tenant_id: str | None,
    status: EventStatus | None,
    limit: int,
    before: str | None,
) -> list[EventRecord]:
    """Newest first, without headers, bodies or deliveries (see ``list_events_sql``)."""
    params = {"tenant": tenant_id, "before": before, "limit": limit}
    paged = before is not None
    if tenant_id is None or status not in _BY_TENANT_INDEX:
        rows = conn.execute(
            list_events_sql(tenant_id is not None, status, paged), params
        ).fetchall()
    else:
        with read_transaction(conn):  # the runs and their arms: one snapshot
            sql = list_events_sql(True, status, paged, tenant_index.runs(conn))
            rows = conn.execute(sql, params).fetchall()
    return [EventRecord(r[0], r[1], r[2], r[3], r[4], r[5], EventStatus(r[6])) for r in rows]


def list_events_sql(
    by_tenant: bool, status: EventStatus | None, paged: bool, runs: Sequence[int] = ()
) -> str:
    """The listing query; parameters ``:tenant``, ``:before`` (exclusive cursor), ``:limit``.

    By tenant, ``tenant_events`` (sorted runs appended behind a watermark,
    ``runs`` naming them, the tail above it read by rowid: ``_tenant_arms``)
    serves every status but three, which have cheaper paths: failed/unrouted
    are stored and indexed by status (``events_tenant_stored_status``), and
    pending events come from a merge
    of the tenant's open deliveries, one range of
    ``deliveries_undelivered`` per state, and of its events with a fresh
    delivery (``fanout``: a rowid range above the watermark, sorted: about a
    second of traffic); the merge stops at ``:limit`` rows. Listing
    delivered events walks past the tenant's
    pending ones, so it costs more the larger the backlog newer than the
    cursor. Without a tenant the primary key is walked newest-first,
    filtering on the status.
    """
    clauses = ["event_id < :before"] if paged else []
    if by_tenant and status is EventStatus.PENDING:
        arms = " UNION ".join(
            [
                "SELECT event_id FROM deliveries WHERE "
                + " AND ".join(
                    ["tenant_id = :tenant", f"state = '{s.value}'", UNDELIVERED, *clauses]
                )
                for s in OPEN_STATES
            ]
            # Events with a fresh delivery: above the watermark, about a second of
            # traffic, read by rowid and sorted. NOT INDEXED keeps the planner on
            # that range: by the tenant's index (or the primary key, for the
            # order) this arm read every event the tenant (or the store) has
            # whenever fewer than a page were pending.
            + [
                "SELECT event_id FROM events NOT INDEXED WHERE "
                + " AND ".join(
                    [f"rowid > {WATERMARK_SQL}", "tenant_id = :tenant", HAS_FRESH, *clauses]
                )
            ]
        )
        clauses = [f"event_id IN ({arms} ORDER BY 1 DESC LIMIT :limit)"]
    elif by_tenant and status in _BY_TENANT_INDEX:
        arms = _tenant_arms(status, paged, runs)
        clauses = [f"event_id IN ({arms} ORDER BY 1 DESC LIMIT :limit)"]
    else:
        clauses += ["tenant_id = :tenant"] if by_tenant else []
        clauses += [STATUS_FILTER[status]] if status is not None else []
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    return f"SELECT {_LISTED_COLUMNS} FROM events{where} ORDER BY event_id DESC LIMIT :limit"


# Statuses a tenant's listing finds through ``tenant_events`` (the others have
# indexes of their own, see ``list_events_sql``).
_BY_TENANT_INDEX: Final = (None, EventStatus.DELIVERED)


def _tenant_arms(status: EventStatus | None, paged: bool, runs: Sequence[int]) -> str:
    """A tenant's event ids, merged ones run by run, the rest by rowid.

    Each run is one arm that walks the tenant's range of that run in order;
    SQLite merges the arms and stops at ``:limit`` (a seek per run). Past
    ``MAX_ARMS`` runs one arm reads them all and sorts (compaction brings the
    count back). Events above the index's watermark may not be merged yet
    (``tenant_index``): that tail, at most a few thousand events, is read by
    rowid and sorted, as the pending listing reads fresh deliveries. ``UNION``
    lists an event found twice once. A status filter joins each merged id to
    its event (``CROSS JOIN`` keeps the tenant's range the outer loop, so the
    walk stops at ``:limit``).
    """
    wanted = [STATUS_FILTER[status]] if status is not None else []
    cursor = ["event_id < :before"] if paged else []
    joined = " CROSS JOIN events ON events.event_id = t.event_id" if wanted else ""
    by_run = (
        [f"t.run = {int(run)}" for run in runs]
        if len(runs) <= tenant_index.MAX_ARMS
        else ["t.run IN (SELECT run FROM tenant_runs)"]
    )
    arms = [
        f"SELECT t.event_id FROM tenant_events AS t{joined} WHERE "
        + " AND ".join([run, "t.tenant_id = :tenant", *(f"t.{c}" for c in cursor), *wanted])
        for run in by_run
    ]
    tail = "SELECT event_id FROM events NOT INDEXED WHERE " + " AND ".join(
        [f"rowid > {tenant_index.WATERMARK_SQL}", "tenant_id = :tenant", *cursor, *wanted]
    )
    return " UNION ".join([*arms, tail])


def list_entities(conn: sqlite3.Connection, kind: EntityKind) -> list[Entity]:
    """All entities of one kind, ordered by id."""
    rows = conn.execute(
        "SELECT kind, id, tenant_id, doc, updated_at FROM entities WHERE kind = ? ORDER BY id",
        (kind,),
    ).fetchall()
    return [Entity(r[0], r[1], r[2], orjson.loads(r[3]), r[4]) for r in rows]


def replace_entity_job(entity: Entity) -> Callable[[sqlite3.Connection], bool]:
    """A write job that replaces ``entity`` if it is stored; whether it was."""
    params = (
        entity.tenant_id,
        orjson.dumps(entity.doc).decode(),
        entity.updated_at,
        entity.kind,
        entity.id,
    )

    def job(conn: sqlite3.Connection) -> bool:
        cursor = conn.execute(
            "UPDATE entities SET tenant_id = ?, doc = ?, updated_at = ? WHERE kind = ? AND id = ?",
            params,
        )
        return cursor.rowcount > 0

    return job


def put_entity_job(entity: Entity) -> WriteJob:
    """A write job that inserts or replaces ``entity``."""
    # Serialise now, on the caller's thread, so a bad document fails the caller, not a batch.
    params = (
        entity.kind,
        entity.id,
        entity.tenant_id,
        orjson.dumps(entity.doc).decode(),
        entity.updated_at,
    )

    def job(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO entities (kind, id, tenant_id, doc, updated_at) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (kind, id) DO UPDATE SET tenant_id = excluded.tenant_id,"
            " doc = excluded.doc, updated_at = excluded.updated_at",
            params,
        )

    return job


def delete_entity_job(kind: EntityKind, entity_id: str) -> Callable[[sqlite3.Connection], bool]:
    """A write job that deletes one entity; returns True when a row was deleted."""

    def job(conn: sqlite3.Connection) -> bool:
        cursor = conn.execute("DELETE FROM entities WHERE kind = ? AND id = ?", (kind, entity_id))
        return cursor.rowcount > 0

    return job


def ping_job(now: float) -> WriteJob:
    """A write job that really writes a page, so a full disk shows up in ``ping``."""

    def job(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('last_ping', ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (now,),
        )

    return job
