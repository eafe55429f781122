"""Scenario 2, end to end: signed ingest -> durable -> delivered to an nginx sink -> recorded.

Each system (the typical stack, hookrouter) gets its own nginx sink. A run
is: wrk (64 connections, closed loop) posts Stripe-signed events for D
seconds; deliveries run meanwhile; then the harness waits until the sink
has seen at least every acknowledged event and nothing more arrives. The
sink's access log gives the time of the last delivery, so

    end-to-end events/s = events delivered / (last delivery - start of ingest)

which is the ingest rate when delivery keeps up, and less when a backlog
builds and drains afterwards. Server CPU over the same window divided by
the deliveries is "CPU µs per delivered event" (ingest + delivery).
"""

from __future__ import annotations

import time
from typing import Any

from bench import stats
from bench.api import Context, Figure, Scenario, Section, Table, Target
from bench.plots import timelines
from bench.scenarios._common import (
    ROUTER_LEASE,
    SinkLog,
    TenantSpec,
    cpu_reading,
    recorded_outcome,
    router_delivers,
    router_with_redis,
    set_size,
    typical_endpoints,
    typical_sources,
    wait_quiet,
    with_range,
)
from bench.systems import System

LABELS = {"typical": "typical stack", "router": "hookrouter"}
CONNECTIONS = 64


def _tenant(sink_url: str) -> TenantSpec:
    # The tenant's endpoint is the sink; queue/in-flight sized for throughput.
    return TenantSpec(
        "bench", endpoint_url=f"{sink_url}/bench", queue_capacity=10_000, max_in_flight=128
    )


def _one_run(
    ctx: Context,
    system: System,
    sink: SinkLog,
    tenant: TenantSpec,
    rate_hint: float,
    duration: float,
    drain_timeout: float,
) -> dict[str, Any]:
    rs = ctx.request_set(set_size(rate_hint, duration), [tenant.stream()])
    base = sink.mark()
    cpu0, helper0, kernel0 = cpu_reading(system)
    t0 = time.time()
    load = ctx.wrk(
        system.url, rs, connections=CONNECTIONS, duration_s=duration, count_statuses=True
    )
    accepted = load.statuses.get("200", 0) + load.statuses.get("202", 0)
    delivered, drained = wait_quiet(
        lambda: sink.poll() - base,
        target=accepted,
        quiet_s=ctx.seconds(2.0, 1.0),
        timeout_s=drain_timeout,
    )
    cpu1, helper1, kernel1 = cpu_reading(system)
    cpu, helper, kernel = cpu1 - cpu0, helper1 - helper0, kernel1 - kernel0
    recorded = recorded_outcome(system, tenant)
    times = sink.times[base:]
    last = max(times) if times else t0
    span = max(1e-3, last - t0)
    return {
        "accepted": accepted,
        "delivered": delivered,
        "drained": drained,
        "ingest_rps": accepted / load.duration_s if load.duration_s else 0.0,
        "e2e_eps": delivered / span,
        "span_s": span,
        "cpu_us": cpu / delivered * 1e6 if delivered else None,
        "kernel_us": kernel / delivered * 1e6 if delivered else None,
        "helper_cpu_us": helper / delivered * 1e6 if delivered else None,
        "p99_ms": load.latency_ms.get("p99"),
        "timeline": [round(t - t0, 3) for t in times],
        "wraps": load.wraps,
        "recorded": recorded,
    }


def run(ctx: Context) -> Section:
    duration = ctx.seconds(15, 3)
    drain_timeout = ctx.seconds(240, 40)
    results: dict[str, list[dict[str, Any]]] = {}
    notes: list[str] = []
    systems: dict[str, tuple[System, SinkLog, TenantSpec]] = {}

    ctx.step("starting typical stack and its sink")
    sink = ctx.sink()
    tenant = _tenant(sink.url)
    typical = ctx.typical(
        sources=typical_sources([tenant]), endpoints=typical_endpoints([tenant]), deliver=True
    )
    systems["typical"] = (typical, SinkLog(sink.access_log), tenant)

    ok, reason = router_delivers(ctx)
    if ok:
        ctx.step("starting hookrouter and its sink")
        rsink = ctx.sink()
        rtenant = _tenant(rsink.url)
        router = router_with_redis(ctx, [rtenant])
        systems["router"] = (router, SinkLog(rsink.access_log), rtenant)
    if not ok:
        notes.append(f"**hookrouter was not measured:** {reason}.")

    rates = {"typical": 1_500.0, "router": 40_000.0}
    for rnd in range(ctx.runs):
        for name, (system, log, ten) in systems.items():
            ctx.step(f"round {rnd + 1}/{ctx.runs}: {name} ingest + delivery")
            prof = ctx.profiler(system, "e2e") if name == "router" and rnd == 0 else None
            if prof is not None:
                with prof:
                    res = _one_run(ctx, system, log, ten, rates[name], duration, drain_timeout)
            else:
                res = _one_run(ctx, system, log, ten, rates[name], duration, drain_timeout)
            results.setdefault(name, []).append(res)
    return _section(ctx, results, notes, duration)


def _med(rows: list[dict[str, Any]], key: str) -> float | None:
    return stats.median(r.get(key) for r in rows)


def _rng(rows: list[dict[str, Any]], key: str) -> tuple[float, float] | None:
    return stats.spread(r.get(key) for r in rows)


def _section(
    ctx: Context, results: dict[str, list[dict[str, Any]]], notes: list[str], duration: float
) -> Section:
    typical_eps = _med(results.get("typical", []), "e2e_eps")
    rows = []
    for name, runs in results.items():
        eps = _med(runs, "e2e_eps")
        rows.append(
            [
                LABELS[name],
                with_range(_med(runs, "ingest_rps"), _rng(runs, "ingest_rps")),
                with_range(eps, _rng(runs, "e2e_eps")),
                stats.fmt_ratio(stats.ratio(eps, typical_eps)),
                stats.fmt(_med(runs, "cpu_us"), 1),
                stats.fmt(_med(runs, "kernel_us"), 1),
                stats.fmt(_med(runs, "helper_cpu_us"), 1),
                stats.fmt(_med(runs, "delivered")),
                stats.fmt(_med(runs, "accepted")),
                "yes" if all(r["drained"] for r in runs) else "**no**",
                runs[-1].get("recorded", ""),
            ]
        )
    table = Table(
        f"End to end ({CONNECTIONS} connections, {duration:.0f} s of ingest, then drain)",
        [
            "system",
            "ingest 2xx/s",
            "end-to-end events/s",
            "vs typical",
            "server CPU µs/delivered event",
            "of which kernel",
            "redis CPU µs/event",
            "delivered",
            "acknowledged",
            "all delivered",
            "the system's own record (last run)",
        ],
        rows,
        "End-to-end events/s = deliveries seen by the sink / (last delivery - start of ingest). "
        "CPU covers ingest and delivery of each event (all the system's processes); 'of which "
        "kernel' is its system time: two loopback TCP exchanges per event (sender -> server, "
        "server -> sink), WAL writes and fsync, which no change to the server's code removes.",
    )
    figures = []
    series = {}
    for name, runs in results.items():
        if runs and runs[0]["timeline"]:
            series[LABELS[name]] = _per_second(runs[0]["timeline"])
    if series:
        path = timelines(
            series,
            ctx.figure_path("deliveries"),
            title="Deliveries per second",
            xlabel="seconds since ingest started",
            ylabel="deliveries/s",
        )
        figures.append(
            Figure(
                path,
                "Deliveries per second at the sink (first run of each "
                "system); ingest stops at the end of the load window.",
            )
        )
    return Section(
        text=[
            "Stripe-signed events, one tenant with one endpoint (an nginx sink per system "
            "that answers 200 and logs each delivery). The typical stack delivers with 64 "
            "aiohttp workers and records each attempt with its own SQLite commit. Both check "
            "the tenant's token bucket in Redis per event (typical: one EVALSHA each; router: "
            f"leases of {ROUTER_LEASE} tokens)."
        ],
        tables=[table, *ctx.profile_tables()],
        figures=figures,
        targets=_targets(results),
        notes=notes,
        data={
            name: [{k: v for k, v in r.items() if k != "timeline"} for r in runs]
            for name, runs in results.items()
        },
    )


def _per_second(times: list[float]) -> tuple[list[float], list[float]]:
    if not times:
        return [], []
    buckets = [0] * (int(max(times)) + 1)
    for t in times:
        if t >= 0:
            buckets[int(t)] += 1
    return [float(i) for i in range(len(buckets))], [float(b) for b in buckets]


def _targets(results: dict[str, list[dict[str, Any]]]) -> list[Target]:
    router = results.get("router")
    if not router:
        note = "hookrouter delivery not measurable yet"
        return [
            Target("end to end vs typical stack", "≥ 5x", "n/a", None, note),
            Target("router CPU per delivered event", "≤ 60 µs", "n/a", None, note),
        ]
    eps = _med(router, "e2e_eps")
    ratio = stats.ratio(eps, _med(results.get("typical", []), "e2e_eps"))
    cpu = _med(router, "cpu_us")
    return [
        Target(
            "end to end vs typical stack",
            "≥ 5x",
            stats.fmt_ratio(ratio),
            None if ratio is None else ratio >= 5.0,
        ),
        Target(
            "router CPU per delivered event",
            "≤ 60 µs",
            stats.fmt(cpu, 1, "µs"),
            None if cpu is None else cpu <= 60.0,
        ),
        Target(
            "end-to-end events/s (issue 3)",
            "≥ 15,000/s",
            stats.fmt(eps, 0, "/s"),
            None if eps is None else eps >= 15_000,
        ),
    ]


SCENARIO = Scenario(
    name="e2e",
    title="2. End to end",
    order=20,
    run=run,
    summary="signed ingest -> durable -> delivered to an nginx sink -> recorded; vs typical",
    needs=("wrk", "nginx", "redis-server"),
    budget_s=(60, 300),
)
