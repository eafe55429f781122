"""Cluster cost per event at a fixed offered rate: ``python -m bench.cluster_rate``.

``bench cluster`` floods with wrk (closed loop), so every mode runs at its
saturation point and three routers, PostgreSQL, wrk and nginx share two
cores. This offers the same fixed rate (open loop, ``bench.openloop``,
split evenly over the mode's routers) to each mode in turn and prints, per
round, router CPU and PostgreSQL CPU per delivered event, the ingest p99 and
how many acknowledged events the sink saw more than once (a delivery
attempted twice with no fault injected).

    .venv/bin/python -m bench.cluster_rate --rate 3000 --rounds 3
    .venv/bin/python -m bench.cluster_rate --rate 1500 --modes pg-3
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.support.postgres_servers import postgres_server

from bench import procs
from bench.ab import no_section
from bench.api import Context, Scenario
from bench.scenarios import cluster
from bench.scenarios._common import SinkLog, TenantSpec, set_size, sink_ids, wait_quiet
from bench.systems import System
from bench.tools import Tools
from bench.wrk import LoadResult


def _round(
    ctx: Context,
    routers: list[System],
    sink: SinkLog,
    tenants: list[TenantSpec],
    postmaster: int | None,
    rate: float,
    seconds: float,
) -> dict[str, Any]:
    n = len(routers)
    count = set_size(rate / n, seconds, margin=1.3)
    sets = [ctx.request_set(count, [t.stream() for t in tenants]) for _ in range(n)]
    base = sink.mark()
    pids = [pid for r in routers for pid in r.pids()]
    cpu0 = procs.cpu_seconds(pids)
    pg0 = cluster.postgres_cpu(postmaster) if postmaster else 0.0
    loads: list[LoadResult | None] = [None] * n

    def load(i: int) -> None:
        loads[i] = ctx.open_loop(
            routers[i].url, sets[i], rate=rate / n, duration_s=seconds, connections=16
        )

    threads = [threading.Thread(target=load, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = [x for x in loads if x is not None]
    accepted = sum(x.statuses.get("200", 0) for x in done)
    delivered, _ = wait_quiet(
        lambda: sink.poll() - base, target=accepted, quiet_s=1.5, timeout_s=120
    )
    cpu = procs.cpu_seconds(pids) - cpu0
    pg = (cluster.postgres_cpu(postmaster) - pg0) if postmaster else 0.0
    return {
        "accepted": accepted,
        "delivered": delivered,
        "router_us": round(cpu / max(1, delivered) * 1e6, 1),
        "pg_us": round(pg / max(1, delivered) * 1e6, 1),
        "ingest_p99_ms": round(max(x.latency_ms["p99"] for x in done), 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rate", type=float, default=3000.0, help="events/s over all routers")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="sqlite,pg-1,pg-3")
    args = ap.parse_args(argv)
    tools = Tools()
    tools.require("nginx")
    with tempfile.TemporaryDirectory(prefix="hookbench-cluster-rate-") as tmp:
        workdir = Path(tmp)
        scenario = Scenario("cluster-rate", "fixed rate", 0, no_section)
        ctx = Context(
            scenario, quick=False, runs=args.rounds, workdir=workdir, img_dir=workdir, tools=tools
        )
        with ctx.cleanup:
            pg = ctx.cleanup.enter_context(postgres_server(cluster.SERVER_SETTINGS))
            nginx = ctx.sink()
            sink = SinkLog(nginx.access_log)
            tenants = cluster._tenants(nginx.url)
            for mode in args.modes.split(","):
                routers = cluster._routers(ctx, mode, tenants, pg.dsn)
                postmaster = pg.pid if mode != "sqlite" else None
                _round(ctx, routers, sink, tenants, postmaster, args.rate, 2.0)  # warm-up
                for rnd in range(args.rounds):
                    before = sink_ids(nginx.access_log)
                    row = _round(ctx, routers, sink, tenants, postmaster, args.rate, args.seconds)
                    seen = sink_ids(nginx.access_log) - before
                    row["delivered_twice"] = sum(1 for n in seen.values() if n > 1)
                    print(json.dumps({"mode": mode, "rate": args.rate, "round": rnd, **row}))
                for router in routers:
                    router.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
