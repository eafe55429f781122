"""Where PostgreSQL's time goes per delivered event in cluster mode, statement by statement.

Run: ``python -m bench.cluster_statements [--routers 3] [--events 3000]``.

Starts a PostgreSQL of its own with ``pg_stat_statements``, N router
processes (the cluster tests' harness: real routers, the attempt-logging
sink), posts a bounded flood of Stripe-signed events over 8 tenants through
all of them, waits until every acknowledged event was delivered, then prints
for each statement its calls and execution time per delivered event, and the
server's CPU per delivered event (postmaster and backends). Nothing is written
to docs/ (copy the figures into docs/performance.md with the date).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from tests.cluster import harness  # noqa: E402
from tests.cluster.harness import Flood, balanced, cluster, cluster_config, wait_delivered, wait_for  # noqa: E402
from tests.cluster.sink import AttemptSink  # noqa: E402
from tests.support.postgres_servers import PostgresServer, postgres_server  # noqa: E402

from bench.scenarios.cluster import postgres_cpu  # noqa: E402

SETTINGS = {
    "shared_preload_libraries": "'pg_stat_statements'",
    "pg_stat_statements.track": "all",
    "max_connections": "100",
}
TOP = 14


def _report(pg: PostgresServer, delivered: int, cpu: float) -> None:
    rows = pg.psql(
        "SELECT calls, total_exec_time, regexp_replace(left(query, 90), '\\s+', ' ', 'g')"
        " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
        " WHERE datname = current_database()) ORDER BY total_exec_time DESC",
        user="postgres",
    )
    total = 0.0
    lines = []
    for row in rows.splitlines():
        calls, ms, query = row.split("|", 2)
        us = float(ms) * 1000 / delivered
        total += us
        lines.append(f"{us:8.1f} µs/event {int(calls) / delivered:6.2f} calls/event  {query}")
    print(f"{delivered} events delivered; PostgreSQL CPU {cpu * 1e6 / delivered:.0f} µs/event;")
    print(f"statement execution {total:.0f} µs/event in all, the largest:")
    for line in lines[:TOP]:
        print("  " + line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--routers", type=int, default=3)
    ap.add_argument("--events", type=int, default=3000)
    args = ap.parse_args()
    tenants = harness.tenant_names(8)
    names = [f"router-{n + 1}" for n in range(args.routers)]
    with (
        tempfile.TemporaryDirectory(prefix="cluster-statements-") as tmp,
        postgres_server(SETTINGS) as pg,
    ):
        workdir = Path(tmp)
        pg.psql("CREATE EXTENSION pg_stat_statements", user="postgres")

        def config(node: str) -> dict[str, object]:
            return cluster_config(workdir, node, sink, tenants, dsn=pg.dsn)

        with AttemptSink() as sink, cluster(workdir, sink, names, config) as routers:
            wait_for(balanced(workdir, names, pg.dsn), 30, "leases spread")
            pg.psql("SELECT pg_stat_statements_reset()", user="postgres")
            cpu0 = postgres_cpu(pg.pid or 0)
            with Flood(list(routers.values()), tenants, total=args.events, threads=4) as flood:
                wait_for(flood.done, 300, "the flood posted")
            wanted = set(flood.acked.values())
            wait_delivered(workdir, sink, wanted, 120, pg.dsn)
            cpu = postgres_cpu(pg.pid or 0) - cpu0
            _report(pg, len(wanted), cpu)


if __name__ == "__main__":
    main()
