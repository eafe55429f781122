"""Ingest while migration 7 runs on a large table: ``python -m bench.pg_migration``.

A rolling upgrade: a node still on schema version 6 appends events one at a
time while another node opens the store and applies migration 7 (the
pending-work index led by the ownership partition) over a ``deliveries``
table of ``--rows`` rows. Both ways in one run, each on a schema of its own:

* ``in one transaction``: what migration 7 did before (DROP INDEX twice and
  CREATE INDEX in the migration's transaction);
* ``online``: this tree (``store/postgres/online_index.py``).

Per way: how long the migration took, and the old node's appends while it
ran: how many, the longest one, p99, and how many were refused.

    .venv/bin/python -m bench.pg_migration --rows 2000000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
from tests.support.postgres_servers import PostgresServer, postgres_server

from bench.pg_statement_cost import _event
from bench.stats import percentile
from hookrouter.errors import StoreError
from hookrouter.ids import new_event_id
from hookrouter.store.postgres import PostgresStore
from hookrouter.store.postgres.schema import MIGRATIONS

V6 = MIGRATIONS[:6]
# Migration 7 as it was before the online build (f6c739d).
OLD_STATEMENTS = (
    "DROP INDEX deliveries_partition_open",
    "DROP INDEX deliveries_pending",
    "CREATE INDEX deliveries_pending ON deliveries (partition, tenant_id, endpoint_id, event_id)"
    " WHERE state = 'pending'",
)
# Rows of one day's partition: one in a thousand pending, the rest delivered.
_FILL = """
INSERT INTO deliveries (event_id, endpoint_id, partition, tenant_id, state, updated_at)
SELECT $1 || lpad(g::text, 16, '0'), 'ep_' || (g % 5000), g % 256, 'ten_' || (g % 5000),
       CASE WHEN g % 1000 = 0 THEN 'pending' ELSE 'delivered' END, 0
FROM generate_series(1, $2) AS g"""


@dataclass
class Appends:
    """The old node's appends: (start, seconds) of each, and the refusals."""

    done: list[tuple[float, float]] = field(default_factory=list)
    refused: int = 0

    def during(self, start: float, end: float) -> list[float]:
        return [took for at, took in self.done if start <= at + took and at <= end]


async def _append_loop(store: PostgresStore, appends: Appends, stop: asyncio.Event) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        started = time.monotonic()
        try:
            await store.append(_event(n))
        except StoreError:
            appends.refused += 1
        appends.done.append((started, time.monotonic() - started))


async def _migrate_in_one_transaction(dsn: str, name: str) -> None:
    conn = await asyncpg.connect(dsn, server_settings={"search_path": name})
    try:
        async with conn.transaction():
            for statement in OLD_STATEMENTS:
                await conn.execute(statement, timeout=3600)
            await conn.execute(
                "INSERT INTO schema_versions (version, description, applied_by)"
                " VALUES (7, 'in one transaction', 'bench')"
            )
    finally:
        await conn.close()


async def _migrate_online(dsn: str, name: str) -> None:
    store = PostgresStore(dsn=dsn, schema_name=name, node_id="new", command_timeout=3600)
    await store.open()
    await store.close()


async def one_way(pg: PostgresServer, way: str, rows: int) -> str:
    name = "b_" + way.replace(" ", "_")
    old = PostgresStore(dsn=pg.dsn, schema_name=name, node_id="old", migrations=V6)
    await old.open()
    conn = await asyncpg.connect(pg.dsn, server_settings={"search_path": name})
    try:
        await conn.execute(_FILL, new_event_id()[:14], rows, timeout=3600)
        await conn.execute("ANALYZE deliveries")
    finally:
        await conn.close()
    appends, stop = Appends(), asyncio.Event()
    loop_task = asyncio.create_task(_append_loop(old, appends, stop))
    await asyncio.sleep(2.0)
    migrate = _migrate_online if way == "online" else _migrate_in_one_transaction
    start = time.monotonic()
    await migrate(pg.dsn, name)
    end = time.monotonic()
    await asyncio.sleep(1.0)
    stop.set()
    await loop_task
    await old.close()
    during = appends.during(start, end)
    p99 = percentile(during, 99) if during else 0.0
    median = statistics.median(during) if during else 0.0
    return (
        f"| {way} | {rows:,} | {end - start:.1f} | {len(during):,} | {median * 1000:.1f} |"
        f" {p99 * 1000:.1f} | {max(during, default=0.0) * 1000:.0f} | {appends.refused} |"
    )


async def run(pg: PostgresServer, rows: int) -> None:
    print("| migration 7 | deliveries rows | migration s | appends during it | median ms |"
          " p99 ms | longest ms | refused |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for way in ("in one transaction", "online"):
        print(await one_way(pg, way, rows), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    args = ap.parse_args(argv)
    with postgres_server({"max_connections": "100"}) as pg:
        asyncio.run(run(pg, args.rows))
    print(f"({Path(__file__).name}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
