"""What a new owner's resume reads on a large store: plans, buffers and rows of each statement.

Run: ``python -m bench.pg_resume_plans [--tenants 5000] [--open 1000000] [--migrations N]
[--vacuum]``.

Starts a PostgreSQL of its own (``tests/support/postgres_servers.py``),
opens a ``PostgresStore`` on it (schema stopped at version ``--migrations``
when given, so the indexes are as they were then) and copies ``--open``
open deliveries of today straight into ``deliveries``: ``--tenants``
tenants of two endpoints each, 90 % pending, 5 % retry (due in an hour),
5 % parked. Then, in a session with the store's settings, EXPLAIN (ANALYZE,
BUFFERS) of the generic plans (those the store's sessions run) of what a
node runs when it takes a third of the partitions (86 of 256): the
partition scan (``PENDING_ENDPOINTS``), the scan from the newest
thousandth of ids that a notice without lanes asks (``PENDING_SINCE``), the
parked resume (``RESUME_PARTITIONS``, rolled back), the due retries
(``PROMOTE_DUE``, rolled back) and one lane's page (``PAGE``). Prints each
plan's scans, rows, shared buffers and time, and the size of each index of
``deliveries``. ``--vacuum`` runs VACUUM first (a store autovacuum has
visited: index-only scans skip the heap); ANALYZE runs either way. Prints;
writes nothing to docs/.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from typing import Any

import asyncpg
from tests.support.postgres_plans import generic_plan
from tests.support.postgres_servers import PostgresServer, postgres_server

from hookrouter.ids import new_event_id
from hookrouter.store.postgres import PostgresStore
from hookrouter.store.postgres import ledger_sql as sql
from hookrouter.store.postgres.partitioning import tenant_partition
from hookrouter.store.postgres.schema import DEFAULT_PARTITIONS, MIGRATIONS

SCHEMA = "resume"
SETTINGS = {"shared_buffers": "256MB", "max_wal_size": "4GB"}


def _rows(tenants: int, count: int, now: float) -> list[tuple[Any, ...]]:
    rng = random.Random(7)
    rows: list[tuple[Any, ...]] = []
    names = [f"ten_{n:05d}" for n in range(tenants)]
    parts = {t: tenant_partition(t, DEFAULT_PARTITIONS) for t in names}
    for _ in range(count):
        tenant = rng.choice(names)
        roll = rng.random()
        state = "pending" if roll < 0.9 else "retry" if roll < 0.95 else "parked"
        due = now + 3600 if state == "retry" else None
        endpoint = f"ep_{tenant}_{rng.randrange(2)}"
        rows.append((new_event_id(), endpoint, parts[tenant], tenant, state, 0, due, now))
    return rows


def _walk(node: dict[str, Any], out: list[str]) -> None:
    if "Relation Name" in node or "Index Name" in node:
        out.append(
            f"{node.get('Node Type')} {node.get('Index Name') or node.get('Relation Name')}"
            f" rows {node.get('Actual Rows', 0) * node.get('Actual Loops', 1):.0f}"
            + (f" heap fetches {node['Heap Fetches']}" if "Heap Fetches" in node else "")
        )
    for child in node.get("Plans", []):
        _walk(child, out)


async def _explain(conn: asyncpg.Connection, name: str, query: str, *args: Any, show: bool) -> None:
    """EXPLAIN ANALYZE the generic plan of ``query`` (rolled back: each sees the same store)."""
    plan = await generic_plan(conn, query, *args, analyze=True)
    if not show:
        return
    top = plan["Plan"]
    scans: list[str] = []
    _walk(top, scans)
    print(
        f"{name:>24}: {plan['Execution Time']:8.1f} ms, shared hit"
        f" {top.get('Shared Hit Blocks', 0)} read {top.get('Shared Read Blocks', 0)},"
        f" rows {top.get('Actual Rows', 0)}",
        flush=True,
    )
    for line in sorted(set(scans)):
        print(f"{'':>26}{line}")


async def run(pg: PostgresServer, args: argparse.Namespace) -> None:
    store = PostgresStore(
        pg.dsn, schema_name=SCHEMA, migrations=MIGRATIONS[: args.migrations or None]
    )
    await store.open()
    settings = {**store.server_settings(), "search_path": SCHEMA}
    await store.close()
    conn = await asyncpg.connect(pg.dsn, server_settings=settings)
    try:
        now = time.time()
        started = time.perf_counter()
        rows = _rows(args.tenants, args.open, now)
        await conn.copy_records_to_table(
            "deliveries",
            records=rows,
            columns=[
                "event_id", "endpoint_id", "partition", "tenant_id", "state", "attempts",
                "next_attempt_at", "updated_at",
            ],
        )  # fmt: skip
        # Autovacuum analyses a table this size long before a takeover; VACUUM
        # (--vacuum) also marks the pages all-visible, which it does later.
        await conn.execute("VACUUM ANALYZE deliveries" if args.vacuum else "ANALYZE deliveries")
        print(
            f"filled {len(rows)} open deliveries of {args.tenants} tenants"
            f" in {time.perf_counter() - started:.0f} s (schema version"
            f" {args.migrations or MIGRATIONS[-1].version}, vacuum {args.vacuum})",
            flush=True,
        )
        taken = list(range(0, DEFAULT_PARTITIONS, 3))
        newest = sorted(r[0] for r in rows)[-len(rows) // 1000]
        lane = next(r for r in rows if r[4] == "pending")
        for name, query, params in (
            ("partition scan", sql.PENDING_ENDPOINTS, (taken,)),
            ("scan from a watermark", sql.PENDING_SINCE, (taken, newest)),
            ("resume parked", sql.RESUME_PARTITIONS, (taken,)),
            ("promote due retries", sql.PROMOTE_DUE, (now + 7200, 1000, taken)),
            ("page of one lane", sql.PAGE, (lane[3], lane[1], "", 64, lane[2])),
        ):
            for show in (False, True):  # the second run is printed: buffers are warm
                await _explain(conn, name, query, *params, show=show)
        sizes = await conn.fetch(
            "SELECT i.relname, sum(pg_relation_size(c.oid))"
            " FROM pg_inherits AS h JOIN pg_class AS c ON c.oid = h.inhrelid"
            " JOIN pg_class AS i ON i.oid = h.inhparent"
            " WHERE i.relname LIKE 'deliveries%' AND i.relkind = 'I'"
            " GROUP BY i.relname ORDER BY 1"
        )
        for name, size in sizes:
            print(f"{name:>28}: {size / 2**20:7.1f} MiB")
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--tenants", type=int, default=5000)
    ap.add_argument("--open", type=int, default=1_000_000)
    ap.add_argument("--migrations", type=int, default=0, help="stop the schema at this version")
    ap.add_argument("--vacuum", action="store_true")
    args = ap.parse_args(argv)
    with postgres_server(SETTINGS) as pg:
        asyncio.run(run(pg, args))
    print(f"(pg_resume_plans.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
