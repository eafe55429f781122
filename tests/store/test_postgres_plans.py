"""The hot statements of the PostgreSQL backend probe indexes, whatever the statistics say.

A day partition fills long before autovacuum first analyses it, and a
prepared statement's plan made while it was empty is kept. Planned from
those statistics, the fenced outcome write hashed or scanned the whole
partition for every batch, so its cost grew with the day's events. The
store's sessions rule that out (``PostgresStore.server_settings``); these
tests plan the statements on a filled, never analysed partition through a
session with those settings and look for a scan of a whole partition.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from tests.support.postgres_plans import generic_plan
from tests.support.postgres_store import postgres_available, shared_server, store_options
from tests.support.store_backends import make_event

from hookrouter.store.lifecycle import OPEN_STATES
from hookrouter.store.postgres import PostgresStore, leases
from hookrouter.store.postgres import ledger_sql as sql
from hookrouter.store.postgres.partitioning import tenant_partition
from hookrouter.store.postgres.schema import DEFAULT_PARTITIONS

pytestmark = pytest.mark.skipif(not postgres_available(), reason="PostgreSQL is not installed")

EVENTS = 3000
BIG_TABLES = ("events", "deliveries", "attempts")
PROBES = ("Index Scan", "Index Only Scan", "Bitmap Heap Scan", "ModifyTable")


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[tuple[asyncpg.Connection, list[str]]]:
    """A session as the store opens them, on a store with a filled, never analysed day."""
    store = PostgresStore(**store_options(tmp_path))  # type: ignore[arg-type]
    await store.open()
    try:
        events = [make_event(endpoints=("ep_a", "ep_b")) for _ in range(EVENTS)]
        for start in range(0, EVENTS, 500):
            await asyncio.gather(*(store.append(e) for e in events[start : start + 500]))
        conn = await asyncpg.connect(shared_server().dsn, server_settings=store.server_settings())
        try:
            yield conn, [e.event_id for e in events[-20:]]
        finally:
            await conn.close()
    finally:
        await store.close()


def _scans(plan: Any) -> Iterator[tuple[str, str]]:
    """(node type, relation) of every node of an EXPLAIN (FORMAT JSON) plan.

    A modified table listed under its ModifyTable node has no node type of its own.
    """
    if isinstance(plan, dict):
        if "Relation Name" in plan:
            yield plan.get("Node Type", "ModifyTable"), plan["Relation Name"]
        for value in plan.values():
            yield from _scans(value)
    elif isinstance(plan, list):
        for item in plan:
            yield from _scans(item)


async def _whole_partition_scans(conn: asyncpg.Connection, query: str, *args: Any) -> list[str]:
    plan = json.loads(await conn.fetchval(f"EXPLAIN (FORMAT JSON) {query}", *args))
    return [
        f"{node} on {relation}"
        for node, relation in _scans(plan)
        if relation.startswith(BIG_TABLES) and node not in PROBES
    ]


async def test_the_fenced_outcome_write_probes_the_deliveries_it_names(
    session: tuple[asyncpg.Connection, list[str]],
) -> None:
    conn, ids = session
    n = len(ids)
    args = [
        [0], [1],  # the partitions written and the epochs held
        ids, ["ep_a"] * n, ["delivered"] * n, [1] * n, [None] * n, [200] * n, [None] * n,
        [1.0] * n, [True] * n,
        [], [], [], [], [], [], [], [],  # no failed attempt rows
        [1] * n, [1.0] * n, [2.0] * n,
    ]  # fmt: skip
    assert await _whole_partition_scans(conn, sql.WRITE_OUTCOMES, *args) == []


async def test_marking_failed_events_and_loading_bodies_probe_by_id(
    session: tuple[asyncpg.Connection, list[str]],
) -> None:
    conn, ids = session
    assert await _whole_partition_scans(conn, sql.MARK_FAILED, ids) == []
    assert await _whole_partition_scans(conn, sql.LOAD, ids, ["ep_a"] * len(ids)) == []


async def test_the_lease_turns_reads_are_not_compiled_to_machine_code(
    session: tuple[asyncpg.Connection, list[str]],
) -> None:
    # A disabled scan makes a plan look expensive enough for PostgreSQL's JIT;
    # the lease turn's reads of its small tables must still run as planned.
    conn, _ = session
    for query in (leases.LIVE_NODES, leases.HOLDERS):
        plan = json.loads(await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}"))
        assert "JIT" not in plan[0], query


async def _generic_scans(conn: asyncpg.Connection, query: str, *args: Any) -> set[str]:
    """(node type) using (index) of every index scan in the plan the store's sessions run."""
    plan = await generic_plan(conn, query, *args)
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "Index Name" in node:
                found.add(f"{node['Node Type']} using {node['Index Name']}")
            elif "Relation Name" in node and node["Relation Name"].startswith(BIG_TABLES):
                found.add(f"{node.get('Node Type', 'ModifyTable')} on {node['Relation Name']}")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(plan)
    return found


PENDING_INDEX = "partition_tenant_id_endpoint_id"  # deliveries_pending's children
OPEN_COUNTS = sql.state_counts(OPEN_STATES, [0])[0]


async def test_a_partitions_open_work_is_found_through_the_indexes_every_owner_uses(
    session: tuple[asyncpg.Connection, list[str]],
) -> None:
    # With deliveries_partition_open gone (migration 7): a start, a takeover and
    # the catch-up read pending work by partition from deliveries_pending, its
    # first column, without the table's rows; the page-in and the parking of one
    # lane probe the same index; parked work comes from deliveries_waiting.
    conn, ids = session
    part = tenant_partition("ten_a", DEFAULT_PARTITIONS)
    # name: (statement, arguments, a scan it must have, what no scan may use)
    expected = {
        "partition scan": (
            sql.PENDING_ENDPOINTS, ([part],), "Index Only Scan using deliveries_p", "pkey"
        ),
        "page": (sql.PAGE, ("ten_a", "ep_a", "", 12, part), "Index Scan using", "Seq Scan"),
        "pages": (sql.PAGE_LANES, (["ten_a", "ten_b"], ["ep_a", "ep_b"], ["", ""], [12, 12],
                                   [part, part]), "Index Scan using", "Seq Scan"),
        "park": (sql.PARK_PENDING, (1.0, "ten_a", "ep_a", 12, part), "Index Scan using", "Seq"),
        "resume parked": (sql.RESUME_PARTITIONS, ([part],), "state_tenant_id_event_id", "Seq"),
        # A notice without lanes: the ids from its watermark on, not the partitions' backlog.
        "since": (sql.PENDING_SINCE, ([part], ids[-1]), "pkey", PENDING_INDEX),
        # The engine's count of open work every few seconds: its partitions only.
        "open counts": (OPEN_COUNTS, ([part],), "Index Only Scan using deliveries_p", "Seq"),
    }  # fmt: skip
    for name, (query, args, must, never) in expected.items():
        scans = await _generic_scans(conn, query, *args)
        assert not any(s.startswith("Seq Scan") or never in s for s in scans), (name, scans)
        assert any(must in s for s in scans), (name, scans)
        if name in ("partition scan", "page", "pages", "park"):
            assert any(PENDING_INDEX in s for s in scans), (name, scans)
