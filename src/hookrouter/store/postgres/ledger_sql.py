"""The SQL of the PostgreSQL delivery ledger (``ledger``), with the index each statement uses.

The moves come from the lifecycle table (``store/lifecycle.py``), as on SQLite.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

from hookrouter.store.ledger import ReplayFilter
from hookrouter.store.lifecycle import TRANSITIONS, DeliveryEvent, DeliveryState, replayable, source
from hookrouter.store.postgres.partitioning import wall_floor
from hookrouter.store.postgres.queries import OPEN_SQL
from hookrouter.telemetry.tracing import TRACE_HEADER

_DUE_FROM: Final = source(DeliveryEvent.DUE).value
_DUE_TO: Final = TRANSITIONS[source(DeliveryEvent.DUE), DeliveryEvent.DUE].value
_PARK_FROM: Final = source(DeliveryEvent.PARK).value
_PARK_TO: Final = TRANSITIONS[source(DeliveryEvent.PARK), DeliveryEvent.PARK].value
_RESUME_FROM: Final = source(DeliveryEvent.RESUME).value
_RESUME_TO: Final = TRANSITIONS[source(DeliveryEvent.RESUME), DeliveryEvent.RESUME].value
_REPLAY_TO: Final = TRANSITIONS[DeliveryState.DEAD, DeliveryEvent.REPLAY].value

# The fence: every outcome write is one statement that share-locks the lease
# rows of the partitions it writes, at the epochs this node holds ($1, $2),
# and updates only deliveries of those partitions. A takeover (which bumps
# the epoch under a row lock) therefore either waits for this write or makes
# it update nothing. $3-$11 and $20-$22: the last outcome per delivery, its
# attempt kept in the delivery row; $12-$19: an attempt row per (delivery,
# attempt) that did not deliver (a delivered attempt lives only in its
# delivery row, which saves most deliveries an insert and its index entry).
# Its transaction commits without waiting for the WAL flush (or a synchronous
# standby): a crash that loses an outcome leaves its delivery open, and the
# delivery is attempted again, which at-least-once allows. The SQLite ledger
# makes the same trade (``synced=False``). Event commits keep waiting.
WRITE_OUTCOMES: Final = """
WITH held AS (
    SELECT p.partition FROM partitions AS p
    JOIN unnest($1::int2[], $2::int8[]) AS h(partition, epoch) USING (partition)
    WHERE p.epoch = h.epoch
    FOR SHARE OF p
), o AS (
    SELECT * FROM unnest($3::text[], $4::text[], $5::text[], $6::int4[], $7::float8[],
                         $8::int4[], $9::text[], $10::float8[], $11::bool[],
                         $20::int4[], $21::float8[], $22::float8[])
        AS o(event_id, endpoint_id, state, attempts, next_at, code, error, at, attempted,
             attempt, started_at, duration_ms)
), upd AS (
    UPDATE deliveries AS d SET
        state = o.state,
        attempts = CASE WHEN o.attempted THEN o.attempts ELSE d.attempts END,
        next_attempt_at = CASE WHEN o.attempted THEN o.next_at
                               ELSE coalesce(o.next_at, d.next_attempt_at) END,
        last_status_code = CASE WHEN o.attempted THEN o.code ELSE d.last_status_code END,
        last_error = CASE WHEN o.attempted THEN o.error ELSE d.last_error END,
        updated_at = o.at,
        last_attempt = CASE WHEN o.attempted THEN o.attempt ELSE d.last_attempt END,
        last_started_at = CASE WHEN o.attempted THEN o.started_at ELSE d.last_started_at END,
        last_duration_ms = CASE WHEN o.attempted THEN o.duration_ms ELSE d.last_duration_ms END
    FROM o
    WHERE d.event_id = o.event_id AND d.endpoint_id = o.endpoint_id
        AND d.partition = ANY ((SELECT array_agg(partition) FROM held)::int2[])
    RETURNING d.event_id, d.endpoint_id
), att AS (
    INSERT INTO attempts (event_id, endpoint_id, attempt, started_at, duration_ms,
                          status_code, error, response_excerpt)
    SELECT a.event_id, a.endpoint_id, a.attempt, a.started_at, a.duration_ms,
           a.status_code, a.error, a.excerpt
    FROM unnest($12::text[], $13::text[], $14::int4[], $15::float8[], $16::float8[],
                $17::int4[], $18::text[], $19::text[])
        AS a(event_id, endpoint_id, attempt, started_at, duration_ms, status_code, error, excerpt)
    JOIN upd USING (event_id, endpoint_id)
    ON CONFLICT (event_id, endpoint_id, attempt) DO UPDATE SET
        started_at = excluded.started_at, duration_ms = excluded.duration_ms,
        status_code = excluded.status_code, error = excluded.error,
        response_excerpt = excluded.response_excerpt
)
SELECT (SELECT coalesce(array_agg(partition), '{}') FROM held), (SELECT count(*) FROM upd),
       set_config('synchronous_commit', 'off', true)"""

# Events ($1) whose last open delivery just finished with one dead or disabled.
# The candidates come from their deliveries (a primary-key probe per id, driven
# by the array so the plan never scans); the events table is touched only for
# those, usually none.
MARK_FAILED: Final = f"""
UPDATE events AS e SET status = 'failed'
FROM (SELECT d.event_id FROM unnest($1::text[]) AS w(event_id)
      JOIN deliveries AS d ON d.event_id = w.event_id
      GROUP BY d.event_id
      HAVING bool_or(d.state IN ('dead', 'disabled'))
         AND NOT bool_or(d.state IN {OPEN_SQL})) AS f
WHERE e.event_id = f.event_id AND e.status <> 'failed'"""
REOPEN: Final = (
    "UPDATE events SET status = 'pending' WHERE event_id = ANY($1::text[]) AND status = 'failed'"
)

# deliveries_pending: one endpoint's pending work in event id order ($3: inclusive cursor),
# with what ``LOAD`` would read for each (``prefetch``; NULLs when the event is missing).
# $5: the tenant's partition, the index's first column.
_PAGE_COLUMNS: Final = f"""d.event_id, d.endpoint_id, d.attempts, e.event_type, e.body,
       e.headers->>'content-type', e.headers->>'{TRACE_HEADER}', e.fanout"""
PAGE: Final = f"""
SELECT {_PAGE_COLUMNS}
FROM deliveries AS d LEFT JOIN events AS e ON e.event_id = d.event_id
WHERE d.partition = $5 AND d.tenant_id = $1 AND d.endpoint_id = $2 AND d.state = 'pending'
    AND d.event_id >= $3
ORDER BY d.event_id LIMIT $4"""
# ``PAGE`` for several lanes at once (``page_batch``): the arrays hold each
# lane's arguments, the last column says which lane (from 1) a row is for.
PAGE_LANES: Final = f"""
SELECT p.*, l.i
FROM unnest($1::text[], $2::text[], $3::text[], $4::int4[], $5::int2[])
    WITH ORDINALITY AS l(tenant_id, endpoint_id, start, n, partition, i)
CROSS JOIN LATERAL (
    SELECT {_PAGE_COLUMNS}
    FROM deliveries AS d LEFT JOIN events AS e ON e.event_id = d.event_id
    WHERE d.partition = l.partition AND d.tenant_id = l.tenant_id
        AND d.endpoint_id = l.endpoint_id AND d.state = 'pending' AND d.event_id >= l.start
    ORDER BY d.event_id LIMIT l.n) AS p
ORDER BY l.i, p.event_id"""
# deliveries_retry_due, in the partitions this node holds ($3).
PROMOTE_DUE: Final = f"""
UPDATE deliveries AS d SET state = '{_DUE_TO}'
FROM (SELECT event_id, endpoint_id FROM deliveries
      WHERE state = '{_DUE_FROM}' AND next_attempt_at <= $1 AND partition = ANY($3::int2[])
      ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED) AS due
WHERE d.event_id = due.event_id AND d.endpoint_id = due.endpoint_id
RETURNING d.tenant_id, d.event_id, d.endpoint_id, d.next_attempt_at"""
# deliveries_pending ($5: the tenant's partition).
PARK_PENDING: Final = f"""
UPDATE deliveries AS d SET state = '{_PARK_TO}', updated_at = $1
FROM (SELECT event_id, endpoint_id FROM deliveries
      WHERE partition = $5 AND tenant_id = $2 AND endpoint_id = $3 AND state = '{_PARK_FROM}'
      ORDER BY event_id LIMIT $4 FOR UPDATE) AS p
WHERE d.event_id = p.event_id AND d.endpoint_id = p.endpoint_id"""
# A takeover: the new owner's breakers start closed, so the parked work of the
# partitions it took ($1) is pending again (deliveries_waiting: every parked
# delivery is read, whichever its partition; parked work is open work whose
# endpoint's breaker opened, so this reads fewer rows than the partitions'
# open work, which the dropped deliveries_partition_open index gave).
RESUME_PARTITIONS: Final = f"""
UPDATE deliveries SET state = '{_RESUME_TO}'
WHERE partition = ANY($1::int2[]) AND state = '{_RESUME_FROM}'"""
# deliveries_waiting; LIMIT NULL is no limit.
RESUME_PARKED: Final = f"""
UPDATE deliveries AS d SET state = '{_RESUME_TO}'
FROM (SELECT event_id, endpoint_id FROM deliveries
      WHERE state = '{_RESUME_FROM}' AND tenant_id = $1 AND endpoint_id = $2
      ORDER BY event_id LIMIT $3 FOR UPDATE) AS p
WHERE d.event_id = p.event_id AND d.endpoint_id = p.endpoint_id
RETURNING d.event_id, d.endpoint_id"""
# $1/$2: event and endpoint ids; a missing event has no row. Results in the order asked,
# with the event's fan-out (``fanout``: 1 means this delivery settles the event).
LOAD: Final = f"""
SELECT w.i, e.tenant_id, coalesce(d.attempts, 0), e.event_type, e.body,
       e.headers->>'content-type', e.headers->>'{TRACE_HEADER}', e.fanout
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS w(event_id, endpoint_id, i)
JOIN events AS e ON e.event_id = w.event_id
LEFT JOIN deliveries AS d ON d.event_id = w.event_id AND d.endpoint_id = w.endpoint_id
ORDER BY w.i"""
# deliveries_pending (its partition column first): the pending work of the
# partitions ($1) this node holds or took: a start, a takeover, a catch-up.
PENDING_ENDPOINTS: Final = (
    "SELECT tenant_id, endpoint_id, count(*), min(event_id) FROM deliveries"
    " WHERE partition = ANY($1::int2[]) AND state = 'pending'"
    " GROUP BY tenant_id, endpoint_id"
)
# The same from event id $2 on (a notice too long to name its lanes): the rows
# from the watermark on, every partition's and state's, by the primary key's
# range of ids, then filtered. Materialized, so that no plan (generic plans
# cannot see how recent $2 is) reads deliveries_pending instead, where the id
# is no range and the scan would read every pending delivery of the partitions.
PENDING_SINCE: Final = """
WITH recent AS MATERIALIZED (
    SELECT tenant_id, endpoint_id, event_id, partition, state FROM deliveries
    WHERE event_id >= $2)
SELECT tenant_id, endpoint_id, count(*), min(event_id) FROM recent
WHERE state = 'pending' AND partition = ANY($1::int2[])
GROUP BY tenant_id, endpoint_id"""
STATE_COUNTS_ALL: Final = (
    "SELECT tenant_id, state, count(*) FROM deliveries GROUP BY tenant_id, state"
)
# One state of the partitions in $1, by tenant. The state is a literal so that
# the planner matches the partial index holding it (deliveries_pending, whose
# leading column is the partition; deliveries_waiting): with ``= ANY($n)`` it
# cannot prove the predicate and read the whole table.
_STATE_COUNT_OF: Final = (
    "SELECT tenant_id, '{state}', count(*) FROM deliveries"
    " WHERE state = '{state}' AND partition = ANY($1::int2[]) GROUP BY tenant_id"
)
EPOCHS: Final = "SELECT partition, epoch FROM partitions"


def state_counts(
    states: Collection[DeliveryState] | None, partitions: Collection[int]
) -> tuple[str, list[Any]]:
    """The query counting ``states`` (None: all, every partition) in ``partitions``."""
    if states is None:
        return STATE_COUNTS_ALL, []
    branches = [_STATE_COUNT_OF.format(state=s.value) for s in sorted(states)]
    if not branches:
        return "SELECT '', '', 0 WHERE false", []
    return " UNION ALL ".join(branches), [sorted(partitions)]


def replay_where(f: ReplayFilter) -> tuple[str, list[Any]]:
    """The WHERE (over ``deliveries d``) and its parameters ($1...) that select ``f``'s deliveries.

    Raises ``ValueError`` for a state the lifecycle does not let ``replay`` leave.
    """
    for state in f.states:
        if not replayable(state):
            raise ValueError(f"deliveries in state {state.value!r} cannot be replayed")
    params: list[Any] = [[s.value for s in f.states]]
    clauses = ["d.state = ANY($1::text[])"]
    for clause, value in (
        ("d.tenant_id = ${}", f.tenant_id),
        ("d.endpoint_id = ${}", f.endpoint_id),
        ("d.event_id = ${}", f.event_id),
        # Event ids begin with their arrival time: a time window is an id range.
        ("d.event_id >= ${}", None if f.since is None else wall_floor(f.since)),
        ("d.event_id < ${}", None if f.until is None else wall_floor(f.until)),
    ):
        if value is not None:
            params.append(value)
            clauses.append(clause.format(len(params)))
    return " AND ".join(clauses), params


def replay_sql(where: str, limit_param: int) -> str:
    """Reopen up to ``$limit_param`` deliveries matching ``where``, oldest first."""
    return (
        f"UPDATE deliveries AS t SET state = '{_REPLAY_TO}', attempts = 0, next_attempt_at = NULL"
        f" FROM (SELECT d.event_id, d.endpoint_id FROM deliveries AS d WHERE {where}"
        f" ORDER BY d.event_id LIMIT ${limit_param} FOR UPDATE) AS r"
        " WHERE t.event_id = r.event_id AND t.endpoint_id = r.endpoint_id"
        " RETURNING t.tenant_id, t.event_id, t.endpoint_id"
    )


__all__ = [
    "EPOCHS",
    "LOAD",
    "MARK_FAILED",
    "PAGE",
    "PAGE_LANES",
    "PARK_PENDING",
    "PENDING_ENDPOINTS",
    "PENDING_SINCE",
    "PROMOTE_DUE",
    "REOPEN",
    "RESUME_PARKED",
    "RESUME_PARTITIONS",
    "WRITE_OUTCOMES",
    "replay_sql",
    "replay_where",
    "state_counts",
]
