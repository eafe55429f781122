"""Cluster mode at a fixed offered rate: the ``cluster`` scenario's routers below saturation.

``cluster`` floods every mode with wrk (closed loop), so each runs at its own
saturation point, with three routers, PostgreSQL, wrk and nginx on two cores.
A platform sizes its nodes for its own rate, well below that. Here every
mode gets the same rate (``RATE`` events/s in open loop, split evenly over
the mode's routers; ``BENCH_CLUSTER_RATE`` sets another) for D seconds after
a short warm-up, and per round:

    router µs/event = CPU of every router process over the round / deliveries
    PG µs/event     = CPU of the PostgreSQL server over the round / deliveries
    delivered twice = acknowledged events the sink saw more than once

No fault is injected, so an event delivered twice is a bug (an attempt made
by two owners, or twice by one).
"""

from __future__ import annotations

import os
import statistics
import threading
from typing import Any

from tests.support.postgres_servers import postgres_server

from bench import procs
from bench.api import Context, Scenario, Section, Table, Target
from bench.scenarios import cluster
from bench.scenarios._common import SinkLog, TenantSpec, set_size, sink_ids, wait_quiet
from bench.systems import System
from bench.wrk import LoadResult

RATE = 3000.0
MODES = ("sqlite", "pg-1", "pg-3")
WARM_UP_S = 2.0
CONNECTIONS = 16  # per router: the open loop's pool, not a concurrency limit


def offered_rate() -> float:
    return float(os.environ.get("BENCH_CLUSTER_RATE", RATE))


def one_round(
    ctx: Context,
    routers: list[System],
    sink: SinkLog,
    tenants: list[TenantSpec],
    postmaster: int | None,
    rate: float,
    seconds: float,
) -> dict[str, Any]:
    """``rate`` events/s over ``routers`` for ``seconds``, then wait for every delivery."""
    n = len(routers)
    count = set_size(rate / n, seconds, margin=1.3)
    sets = [ctx.request_set(count, [t.stream() for t in tenants]) for _ in range(n)]
    base = sink.mark()
    before = sink_ids(sink.path)
    pids = [pid for r in routers for pid in r.pids()]
    cpu0 = procs.cpu_seconds(pids)
    pg0 = cluster.postgres_cpu(postmaster) if postmaster else 0.0
    loads: list[LoadResult | None] = [None] * n

    def load(i: int) -> None:
        loads[i] = ctx.open_loop(
            routers[i].url, sets[i], rate=rate / n, duration_s=seconds, connections=CONNECTIONS
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
    seen = sink_ids(sink.path) - before
    return {
        "accepted": accepted,
        "delivered": delivered,
        "router_us": round(cpu / max(1, delivered) * 1e6, 1),
        "pg_us": round(pg / max(1, delivered) * 1e6, 1),
        "ingest_p99_ms": round(max(x.latency_ms["p99"] for x in done), 1),
        "delivered_twice": sum(1 for times in seen.values() if times > 1),
    }


def measure(
    ctx: Context, modes: tuple[str, ...], rate: float, seconds: float
) -> dict[str, list[dict[str, Any]]]:
    """Rounds of every mode on one PostgreSQL and one sink, a mode at a time."""
    pg = ctx.cleanup.enter_context(postgres_server(cluster.SERVER_SETTINGS))
    nginx = ctx.sink()
    sink = SinkLog(nginx.access_log)
    tenants = cluster.tenant_specs(nginx.url)
    results: dict[str, list[dict[str, Any]]] = {}
    for mode in modes:
        ctx.step(f"{mode}: starting routers")
        routers = cluster.start_routers(ctx, mode, tenants, pg.dsn)
        postmaster = pg.pid if mode != "sqlite" else None
        one_round(ctx, routers, sink, tenants, postmaster, rate, WARM_UP_S)
        for rnd in range(ctx.runs):
            ctx.step(f"{mode}: round {rnd + 1}/{ctx.runs} at {rate:,.0f} events/s")
            row = one_round(ctx, routers, sink, tenants, postmaster, rate, seconds)
            results.setdefault(mode, []).append(row)
        for router in routers:
            router.stop()
    return results


def run(ctx: Context) -> Section:
    seconds = ctx.seconds(10, 3)
    rate = offered_rate()
    return section(measure(ctx, MODES, rate, seconds), rate, seconds)


def _med(rows: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in rows))


def section(results: dict[str, list[dict[str, Any]]], rate: float, seconds: float) -> Section:
    base = _med(results["sqlite"], "router_us")
    rows = [
        [
            mode,
            len(runs),
            round(_med(runs, "router_us")),
            f"{_med(runs, 'router_us') / base:.2f}x",
            "—" if mode == "sqlite" else round(_med(runs, "pg_us")),
            f"{_med(runs, 'ingest_p99_ms'):.1f}",
            f"{sum(r['delivered_twice'] for r in runs)} of {sum(r['delivered'] for r in runs):,}",
        ]
        for mode, runs in results.items()
    ]
    three = results.get("pg-3", results[list(results)[-1]])
    ratio = _med(three, "router_us") / base
    twice = sum(r["delivered_twice"] for runs in results.values() for r in runs)
    table = Table(
        f"Cluster mode at {rate:,.0f} events/s offered (median of rounds)",
        [
            "mode",
            "rounds",
            "router CPU µs/event",
            "vs SQLite",
            "PostgreSQL CPU µs/event",
            "ingest p99 ms",
            "delivered twice",
        ],
        rows,
        note=(
            f"{cluster.TENANTS} tenants, {rate:,.0f} events/s in open loop split evenly over the "
            f"mode's routers, {seconds:g} s per round after a {WARM_UP_S:g} s warm-up, one nginx "
            "sink. Ingest p99 is the open loop's, from each request's scheduled send time, the "
            "highest of the routers'."
        ),
    )
    return Section(
        text=[
            "The routers of section 11 at one fixed rate instead of each mode's saturation: "
            "the cost per event a node pays at a rate it is sized for, and whether any "
            "acknowledged event reaches its endpoint twice with no fault injected."
        ],
        tables=[table],
        targets=[
            Target(
                f"cluster at {rate:,.0f}/s: router CPU per event vs SQLite (3 routers)",
                "≤ 1.5x",
                f"{ratio:.2f}x",
                ratio <= 1.5,
            ),
            Target("cluster: events delivered twice with no fault", "0", str(twice), twice == 0),
        ],
        data={"results": results, "rate": rate},
    )


SCENARIO = Scenario(
    name="cluster-rate",
    title="11b. Cluster mode at a fixed offered rate",
    order=97,
    run=run,
    summary="SQLite, 1 and 3 routers on PostgreSQL at one open-loop rate: CPU/event, duplicates",
    needs=("nginx",),
    needs_router=True,
    budget_s=(90, 240),
)
