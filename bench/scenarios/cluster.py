"""Cluster mode end to end: 1, 2 and 3 routers on one PostgreSQL beside one router on SQLite.

Every mode gets the same load: wrk (64 connections in all, split evenly over
the mode's routers, one wrk per router at once) posts Stripe-signed events of
8 tenants for D seconds; the routers deliver them to one nginx sink; the
harness waits until the sink has seen every acknowledged event. Then

    events/s        = deliveries / (last delivery - start of ingest)
    router µs/event = CPU of every router process over the run / deliveries
    PG µs/event     = CPU of the PostgreSQL server (postmaster and backends,
                      live and exited) over the run / deliveries

Then 2 and 3 routers again with 64 connections each (``EACH_MODES``): every
router under the load the SQLite router carries, so the cost per event of a
node is compared at the same pressure, not three light loads with one heavy
one.

Each mode starts on a schema of its own. This machine has 2 cores shared by
wrk, nginx, the routers and PostgreSQL, so events/s here says little about N
machines; the CPU per event does, and the projection in the notes is made
from it.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final

from bench import procs
from bench.api import Context, Scenario, Section, Table, Target
from bench.scenarios._common import SinkLog, TenantSpec, router_config, set_size, wait_quiet
from bench.systems import REPO, System

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support.postgres_servers import postgres_server

TENANTS = 8
CONNECTIONS = 64
MODES = ("sqlite", "pg-1", "pg-2", "pg-3")
# The same routers again, each under the load the SQLite router carries
# (CONNECTIONS per router, not split): a router's cost per event falls as
# its commits grow, so splitting one load over three compares three lightly
# loaded routers with one busy one (docs/performance.md, "CPU per event
# against the offered rate").
EACH_MODES = ("pg-2", "pg-3")
EACH: Final = f", {CONNECTIONS} each"
# A server sized like a small production one, not the tests' defaults: with
# 16 MB of shared buffers backends wrote buffers out themselves, and a small
# max_wal_size forces checkpoints within a run
# (docs/performance.md, "the per-statement cost model checked"). The WAL is
# still new, so its first segments are zero-filled as it grows.
SERVER_SETTINGS = {
    "max_connections": "100",
    "shared_buffers": "256MB",
    "min_wal_size": "2GB",
    "max_wal_size": "4GB",
}
# Events/s no mode reaches here, all routers together: sizes the request sets.
# A 40,000-event set wrapped at the SQLite router's quiet-host rate and the
# run then waited out its timeout for deliveries dedup had (rightly) skipped.
RATE_CEILING = 20_000
_TICKS = 100.0  # clock ticks per second in /proc/<pid>/stat (Linux's USER_HZ)


def _stat_seconds(pid: int, *, children: bool) -> float:
    """utime + stime (and, with ``children``, cutime + cstime) of ``pid``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    own = int(fields[11]) + int(fields[12])
    reaped = int(fields[13]) + int(fields[14]) if children else 0
    return (own + reaped) / _TICKS


def postgres_cpu(postmaster: int) -> float:
    """CPU seconds of a PostgreSQL server: postmaster, live backends, and exited ones."""
    total = _stat_seconds(postmaster, children=True)
    with contextlib.suppress(OSError):
        for child in Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split():
            total += _stat_seconds(int(child), children=True)
    return total


def tenant_specs(sink_url: str) -> list[TenantSpec]:
    return [
        TenantSpec(f"c{i}", endpoint_url=f"{sink_url}/c{i}", queue_capacity=10_000,
                   max_in_flight=64)
        for i in range(TENANTS)
    ]  # fmt: skip


def start_routers(
    ctx: Context,
    mode: str,
    tenants: list[TenantSpec],
    dsn: str,
    *,
    schema: str | None = None,
    env: dict[str, str] | None = None,
) -> list[System]:
    if mode == "sqlite":
        return [ctx.router(router_config(tenants))]
    count = int(mode.split("-")[1])
    schema = schema or f"bench_{mode.replace('-', '_')}"
    store = {"backend": "postgres", "postgres": {"dsn": dsn, "schema": schema, "pool_size": 8}}
    configs = [
        router_config(
            tenants,
            extra={"store": store, "cluster": {"node_id": f"{schema}-{n}"}},
        )
        for n in range(count)
    ]
    started: list[System] = []
    threads = [
        threading.Thread(target=lambda c=c: started.append(ctx.router(c, env=env))) for c in configs
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(started) != count:
        raise RuntimeError(f"{mode}: {len(started)} of {count} routers started")
    time.sleep(3.0)  # leases settle (a joining node waits for others to give back)
    return started


def request_sets(
    ctx: Context, routers: int, tenants: list[TenantSpec], duration: float
) -> list[Any]:
    """One request set per router, large enough not to wrap in ``duration`` s."""
    count = set_size(RATE_CEILING / routers, duration, margin=1.2)
    return [ctx.request_set(count, [t.stream() for t in tenants]) for _ in range(routers)]


def flood_routers(
    ctx: Context, urls: list[str], sets: list[Any], per: int, duration: float
) -> tuple[int, float]:
    """Run wrk against every router at once (``per`` connections each).

    Returns the 200s answered and the highest of the routers' ingest p99 (ms,
    closed loop): a change that trades latency for cost per event shows there.
    """
    loads: list[Any] = [None] * len(urls)

    def load(i: int) -> None:
        loads[i] = ctx.wrk(
            urls[i], sets[i], connections=per, duration_s=duration, count_statuses=True
        )

    threads = [threading.Thread(target=load, args=(i,)) for i in range(len(urls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wrapped = [i for i, x in enumerate(loads) if x.wraps]
    if wrapped:
        # A wrapped set sends events again: dedup answers them (cheaper, no
        # delivery), so the rate is inflated and the sink never sees that many.
        raise RuntimeError(f"request sets of routers {wrapped} wrapped: make them larger")
    return sum(x.statuses.get("200", 0) for x in loads), max(x.latency_ms["p99"] for x in loads)


def _one_run(
    ctx: Context,
    routers: list[System],
    sink: SinkLog,
    tenants: list[TenantSpec],
    postmaster: int | None,
    duration: float,
    *,
    split: bool = True,
) -> dict[str, float]:
    per = max(1, CONNECTIONS // len(routers)) if split else CONNECTIONS
    sets = request_sets(ctx, len(routers), tenants, duration)
    base = sink.mark()
    pids = [pid for r in routers for pid in r.pids()]
    cpu0 = procs.cpu_seconds(pids)
    pg0 = postgres_cpu(postmaster) if postmaster else 0.0
    t0 = time.time()
    accepted, p99 = flood_routers(ctx, [r.url for r in routers], sets, per, duration)
    delivered, _ = wait_quiet(
        lambda: sink.poll() - base, target=accepted, quiet_s=1.5, timeout_s=ctx.seconds(180, 40)
    )
    cpu = procs.cpu_seconds(pids) - cpu0
    pg = (postgres_cpu(postmaster) - pg0) if postmaster else 0.0
    times = sink.times[base:]
    span = max(1e-3, (max(times) if times else t0) - t0)
    return {
        "accepted": accepted,
        "delivered": delivered,
        "events_per_s": delivered / span,
        "router_us": cpu / max(1, delivered) * 1e6,
        "pg_us": pg / max(1, delivered) * 1e6,
        "ingest_p99_ms": p99,
    }


def run(ctx: Context) -> Section:
    duration = ctx.seconds(10, 3)
    ctx.step("starting PostgreSQL and the sink")
    pg = ctx.cleanup.enter_context(postgres_server(SERVER_SETTINGS))
    nginx = ctx.sink()
    sink = SinkLog(nginx.access_log)
    tenants = tenant_specs(nginx.url)
    results: dict[str, list[dict[str, float]]] = {}
    for mode in MODES:
        ctx.step(f"{mode}: starting routers")
        routers = start_routers(ctx, mode, tenants, pg.dsn)
        for rnd in range(ctx.runs):
            ctx.step(f"{mode}: round {rnd + 1}/{ctx.runs}")
            postmaster = pg.pid if mode != "sqlite" else None
            results.setdefault(mode, []).append(
                _one_run(ctx, routers, sink, tenants, postmaster, duration)
            )
        for router in routers:
            router.stop()
    for mode in EACH_MODES:
        ctx.step(f"{mode}, {CONNECTIONS} connections each: starting routers")
        schema = f"bench_{mode.replace('-', '_')}_each"
        routers = start_routers(ctx, mode, tenants, pg.dsn, schema=schema)
        for rnd in range(ctx.runs):
            ctx.step(f"{mode}, {CONNECTIONS} each: round {rnd + 1}/{ctx.runs}")
            results.setdefault(mode + EACH, []).append(
                _one_run(ctx, routers, sink, tenants, pg.pid, duration, split=False)
            )
        for router in routers:
            router.stop()
    return _section(results, duration)


def _med(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def _section(results: dict[str, list[dict[str, float]]], duration: float) -> Section:
    base = _med(results["sqlite"], "router_us")
    rows = []
    for mode, runs in results.items():
        rows.append(
            [
                mode,
                len(runs),
                round(_med(runs, "events_per_s")),
                round(_med(runs, "router_us")),
                f"{_med(runs, 'router_us') / base:.2f}x",
                "—" if mode == "sqlite" else round(_med(runs, "pg_us")),
                f"{_med(runs, 'ingest_p99_ms'):.1f}",
            ]
        )
    pg_modes = [m for m in results if m != "sqlite" and not m.endswith(EACH)]
    worst_ratio = max(_med(results[m], "router_us") / base for m in pg_modes)
    worst_pg = max(_med(results[m], "pg_us") for m in pg_modes)
    each_modes = [m for m in results if m.endswith(EACH)]
    worst_each = max((_med(results[m], "router_us") / base for m in each_modes), default=0.0)
    three = results.get("pg-3", results[pg_modes[-1]])
    router_us, pg_us = _med(three, "router_us"), _med(three, "pg_us")
    # 3 nodes x 8 cores and one 16-core database, each core at 70 % busy.
    node_cap = 3 * 8 * 0.7 / (router_us / 1e6)
    db_cap = 16 * 0.7 / (pg_us / 1e6) if pg_us else float("inf")
    table = Table(
        "Cluster mode, end to end (median of runs)",
        [
            "mode",
            "runs",
            "events/s",
            "router CPU µs/event",
            "vs SQLite",
            "PostgreSQL CPU µs/event",
            "ingest p99 ms",
        ],
        rows,
        note=(
            f"{TENANTS} tenants, {CONNECTIONS} wrk connections split over the routers "
            f"('{EACH.lstrip(', ')}': {CONNECTIONS} per router, the SQLite router's load on "
            f"each), {duration:g} s of ingest per run, deliveries to one nginx sink. The "
            "events/s of all modes share 2 cores with wrk, nginx and PostgreSQL. Ingest p99 is "
            "wrk's, closed loop, the highest of the routers'."
        ),
    )
    projection = (
        f"Projection for 3 routers on 8-core machines against one 16-core PostgreSQL, each "
        f"core 70 % busy, from the 3-router costs: routers 3 x 8 x 0.7 / {router_us:.0f} µs = "
        f"{node_cap:,.0f} events/s; database 16 x 0.7 / {pg_us:.0f} µs = {db_cap:,.0f} "
        f"events/s; the smaller, {min(node_cap, db_cap):,.0f} events/s, is the estimate "
        "(before disk and network limits, which this machine cannot show)."
    )
    return Section(
        text=[
            "Several routers on one PostgreSQL (docs/cluster.md) beside one router on SQLite, "
            "same run, same load. Router CPU includes ingest, delivery and the cluster's "
            "lease and notification work."
        ],
        tables=[table],
        targets=[
            Target(
                "cluster: router CPU per event vs SQLite",
                "≤ 1.5x",
                f"{worst_ratio:.2f}x",
                worst_ratio <= 1.5,
            ),
            Target(
                "cluster: PostgreSQL CPU per event", "≤ 40 µs", f"{worst_pg:.0f} µs", worst_pg <= 40
            ),
            Target(
                f"cluster: router CPU per event vs SQLite, {CONNECTIONS} connections per router",
                "≤ 1.5x",
                f"{worst_each:.2f}x",
                0 < worst_each <= 1.5,
            ),
        ],
        notes=[projection],
        data={"results": results},
    )


SCENARIO = Scenario(
    name="cluster",
    title="11. Cluster mode on PostgreSQL",
    order=97,
    run=run,
    summary="1, 2, 3 routers on one PostgreSQL vs one on SQLite: events/s, router and PG CPU/event",
    needs=("wrk", "nginx"),
    needs_router=True,
    budget_s=(180, 900),
)
