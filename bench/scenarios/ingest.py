"""Scenario 1, durable ingest: peak req/s and p99 at 64 and 512 connections, p99 at 50 % of peak.

Every system gets the same stream of Stripe-signed 1 KB requests with unique
event ids. The router and the typical stack verify, deduplicate, commit
durably and answer; nginx answers ``return 200``. No endpoints are
configured, so this measures ingest alone (delivery is scenario 2).

Per round: one fresh request set, then each system in turn at 64 and at
512 connections (wrk, closed loop). After the rounds: open-loop runs at
50 % of each system's median peak (and, in full runs, a sweep at 25/75/90 %
for the throughput-latency figure), then one extra wrk run per system under
``perf stat`` for syscalls per request.
"""

from __future__ import annotations

from typing import Any

from bench import procs, stats
from bench.api import Context, Figure, Scenario, Section, Table, Target
from bench.plots import throughput_latency
from bench.scenarios._common import (
    ROUTER_LEASE,
    Runs,
    TenantSpec,
    closed_loop,
    open_loop,
    router_with_redis,
    set_size,
    typical_sources,
    with_range,
)
from bench.systems import System, router_available

CONNECTIONS = (64, 512)
TENANT = TenantSpec("bench")
LABELS = {"nginx": "nginx return 200", "typical": "typical stack", "router": "hookrouter"}


def _start(ctx: Context) -> tuple[dict[str, System], str]:
    ctx.step("starting nginx, typical stack")
    systems = {
        "nginx": ctx.nginx(),
        "typical": ctx.typical(sources=typical_sources([TENANT]), deliver=False),
    }
    ok, reason = router_available()
    if ok:
        ctx.step("starting hookrouter")
        systems["router"] = router_with_redis(ctx, [TENANT])
    return systems, "" if ok else reason


def _warm(ctx: Context, systems: dict[str, System]) -> dict[str, float]:
    """A short unrecorded run per system; its rate sizes the request sets."""
    rates = {}
    for name, system in systems.items():
        ctx.step(f"warm-up {name}")
        rs = ctx.request_set(20_000 if name != "nginx" else 5_000, [TENANT.stream()])
        res = closed_loop(ctx, system, rs, connections=64, duration_s=ctx.seconds(2, 1))
        rates[name] = res.load.rps
    return rates


def _peaks(
    ctx: Context, systems: dict[str, System], rates: dict[str, float], runs: Runs, duration: float
) -> None:
    need = max((r for n, r in rates.items() if n != "nginx"), default=10_000)
    for rnd in range(ctx.runs):
        for conns in CONNECTIONS:
            ctx.step(f"round {rnd + 1}/{ctx.runs}: signing requests")
            # One fresh set per (round, concurrency), replayed to each system: each has
            # its own store, so every id is new to it; nginx ignores ids, so it may wrap.
            rs = ctx.request_set(set_size(need, duration), [TENANT.stream()])
            for name, system in systems.items():
                ctx.step(f"round {rnd + 1}/{ctx.runs}: {name} at {conns} connections")
                runs.add(
                    name,
                    f"c{conns}",
                    closed_loop(ctx, system, rs, connections=conns, duration_s=duration),
                )


def _open(ctx: Context, systems: dict[str, System], runs: Runs, duration: float) -> None:
    fractions = [0.5] if ctx.quick else [0.25, 0.5, 0.75, 0.9]
    warmup = ctx.seconds(1, 0.3)
    for frac in fractions:
        repeats = ctx.runs if frac == 0.5 else 1
        for rnd in range(repeats):
            for name, system in systems.items():
                peak = runs.median(name, "c64", "rps") or 1000.0
                rate = max(50.0, peak * frac)
                ctx.step(f"open loop {name} at {frac:.0%} of peak ({rate:,.0f}/s) {rnd + 1}")
                rs = ctx.request_set(
                    set_size(rate, duration + warmup, margin=1.05), [TENANT.stream()]
                )
                runs.add(
                    name,
                    f"open{frac:g}",
                    open_loop(ctx, system, rs, rate=rate, duration_s=duration, warmup_s=warmup),
                )


def _syscalls(ctx: Context, systems: dict[str, System], rates: dict[str, float]) -> dict[str, Any]:
    """Median syscalls per request over ``ctx.runs`` short perf-stat runs per system."""
    samples: dict[str, list[float | None]] = {name: [] for name in systems}
    duration = ctx.seconds(4, 2)
    for rnd in range(ctx.runs):
        for name, system in systems.items():
            ctx.step(f"syscalls per request {rnd + 1}/{ctx.runs}: {name} (perf stat)")
            rs = ctx.request_set(set_size(rates.get(name, 10_000), duration), [TENANT.stream()])
            out = ctx.workdir / f"perf-{name}-{rnd}.txt"
            with procs.perf_syscalls(system.pids(), out) as perf:
                res = ctx.wrk(system.url, rs, connections=64, duration_s=duration)
            count = perf.get("syscalls")
            samples[name].append(count / res.requests if count and res.requests else None)
    return {name: stats.median(values) for name, values in samples.items()}


def run(ctx: Context) -> Section:
    systems, router_missing = _start(ctx)
    rates = _warm(ctx, systems)
    runs = Runs()
    duration = ctx.seconds(10, 2)
    profile = ctx.profiler(systems["router"], "ingest") if "router" in systems else None
    if profile is not None:
        with profile:
            _peaks(ctx, systems, rates, runs, duration)
    else:
        _peaks(ctx, systems, rates, runs, duration)
    _open(ctx, systems, runs, ctx.seconds(10, 2))
    syscalls = _syscalls(ctx, systems, rates)
    rss = {name: procs.peak_rss_bytes(s.pids()) for name, s in systems.items()}
    return _section(ctx, systems, runs, syscalls, rss, router_missing)


def _peak_table(names: list[str], runs: Runs) -> Table:
    rows = []
    for conns in CONNECTIONS:
        cond = f"c{conns}"
        nginx = runs.median("nginx", cond, "rps")
        typical = runs.median("typical", cond, "rps")
        for name in names:
            rps = runs.median(name, cond, "rps")
            rows.append(
                [
                    LABELS[name],
                    conns,
                    with_range(rps, runs.range(name, cond, "rps")),
                    stats.fmt(runs.median(name, cond, "p50"), 2),
                    stats.fmt(runs.median(name, cond, "p99"), 2),
                    stats.fmt_ratio(stats.ratio(rps, nginx)),
                    stats.fmt_ratio(stats.ratio(rps, typical)),
                    stats.fmt(runs.median(name, cond, "cpu_us"), 1),
                    stats.fmt(runs.median(name, cond, "errors")),
                ]
            )
    return Table(
        "Peak durable ingest (wrk closed loop, 2 threads)",
        [
            "system",
            "connections",
            "req/s [range]",
            "p50 ms",
            "p99 ms",
            "vs nginx",
            "vs typical",
            "server CPU µs/req",
            "errors",
        ],
        rows,
        "Closed-loop latencies: each connection waits for its answer before sending again, so "
        "these p99s describe a saturated server at that concurrency, not latency at a given rate.",
    )


def _open_table(names: list[str], runs: Runs) -> Table:
    rows = []
    for name in names:
        cond = "open0.5"
        rows.append(
            [
                LABELS[name],
                stats.fmt(runs.median(name, cond, "offered_rps")),
                stats.fmt(runs.median(name, cond, "ok_rps")),
                stats.fmt(runs.median(name, cond, "p50"), 2),
                with_range(runs.median(name, cond, "p99"), runs.range(name, cond, "p99"), 2),
                stats.fmt(runs.median(name, cond, "p99.9"), 2),
                stats.fmt(runs.median(name, cond, "send_lag_p99_ms"), 2),
            ]
        )
    return Table(
        "Latency at 50 % of each system's own peak (open loop, 64 connections)",
        [
            "system",
            "offered req/s",
            "answered 2xx/s",
            "p50 ms",
            "p99 ms [range]",
            "p99.9 ms",
            "client lag p99 ms",
        ],
        rows,
        "Latency from each request's due time (coordinated omission corrected). 'client lag' is "
        "the load generator's own scheduling delay when a connection was free: the floor under "
        "these figures on this machine.",
    )


def _resource_table(
    names: list[str], runs: Runs, syscalls: dict[str, Any], rss: dict[str, int]
) -> Table:
    rows = []
    for name in names:
        helper = runs.median(name, "c64", "helper_cpu_us")
        rows.append(
            [
                LABELS[name],
                stats.fmt(runs.median(name, "c64", "cpu_us"), 1),
                stats.fmt(runs.median(name, "c64", "kernel_us"), 1),
                stats.fmt(helper, 1) if helper else "—",
                stats.fmt(syscalls.get(name), 2),
                stats.fmt(rss.get(name, 0) / 2**20, 1),
            ]
        )
    return Table(
        "Resources per request (64 connections)",
        [
            "system",
            "server CPU µs/req",
            "of which kernel",
            "redis CPU µs/req",
            "syscalls/req",
            "peak RSS MiB",
        ],
        rows,
        "Server CPU from /proc (all the system's processes, e.g. nginx master + worker); "
        "'of which kernel' is its system time (TCP on loopback, fsync, WAL writes), a floor "
        "the server's own code cannot lower. "
        "Each system's redis-server is counted apart. Syscalls from perf stat in separate "
        "64-connection runs (median of the runs).",
    )


def _figure(ctx: Context, names: list[str], runs: Runs) -> Figure:
    series: dict[str, list[tuple[float, float]]] = {}
    points: dict[str, list[tuple[float, float, str]]] = {}
    for name in names:
        series[name] = []
        for frac in ("0.25", "0.5", "0.75", "0.9"):
            rps, p99 = (
                runs.median(name, f"open{frac}", "ok_rps"),
                runs.median(name, f"open{frac}", "p99"),
            )
            if rps and p99:
                series[name].append((rps, p99))
        points[name] = []
        for conns in CONNECTIONS:
            rps, p99 = (
                runs.median(name, f"c{conns}", "ok_rps"),
                runs.median(name, f"c{conns}", "p99"),
            )
            if rps and p99:
                points[name].append((rps, p99, f"wrk c={conns}"))
    path = throughput_latency(
        series,
        ctx.figure_path("throughput-latency"),
        title="Durable ingest: throughput vs p99",
        labels=LABELS,
        points=points,
    )
    return Figure(
        path,
        "Throughput vs p99 latency. Lines: open loop at 25/50/75/90 % of each "
        "system's peak (latency from due time). Squares: wrk closed loop at "
        "64 and 512 connections.",
    )


def _targets(runs: Runs, names: list[str], reason: str) -> list[Target]:
    if "router" not in names:
        note = f"router not runnable yet: {reason}"
        return [
            Target("durable ingest vs nginx (64 conns)", "≥ 0.30x", "n/a", None, note),
            Target("ingest p99 at 64 connections", "≤ 10 ms", "n/a", None, note),
        ]
    r = stats.ratio(runs.median("router", "c64", "rps"), runs.median("nginx", "c64", "rps"))
    p99 = runs.median("router", "c64", "p99")
    return [
        Target(
            "durable ingest vs nginx (64 conns)",
            "≥ 0.30x",
            stats.fmt_ratio(r),
            None if r is None else r >= 0.30,
        ),
        Target(
            "ingest p99 at 64 connections",
            "≤ 10 ms",
            stats.fmt(p99, 2, "ms"),
            None if p99 is None else p99 <= 10.0,
        ),
    ]


def _section(
    ctx: Context,
    systems: dict[str, System],
    runs: Runs,
    syscalls: dict[str, Any],
    rss: dict[str, int],
    router_missing: str,
) -> Section:
    names = list(systems)
    text = [
        "Same Stripe-signed 1 KB requests (unique event ids, valid signatures) to every system. "
        "The provider event ids are scattered (they begin with a hash), as the random "
        "delivery ids of real senders are; before 2026-12-01 they were sequential, so a store's "
        "dedup index only ever saw appends and these figures were higher for it. "
        "hookrouter and the typical stack both check a per-tenant token bucket in Redis for "
        "every request (a limit never reached; the typical stack with one redis-py EVALSHA per "
        f"request, the router with its leases of {ROUTER_LEASE} tokens per Redis call), verify the "
        "signature, deduplicate and commit to SQLite (WAL, "
        "`synchronous=FULL`) before answering; nginx answers `return 200`. No endpoints: this "
        "is ingest alone.",
    ]
    if router_missing:
        text.append(
            f"**hookrouter was not measured:** {router_missing}. The references below "
            "were measured so the harness is validated; the router's rows appear as "
            "soon as `hookrouter serve` runs."
        )
    section = Section(
        text=text,
        tables=[
            _peak_table(names, runs),
            _open_table(names, runs),
            _resource_table(names, runs, syscalls, rss),
        ],
        figures=[_figure(ctx, names, runs)],
        targets=_targets(runs, names, router_missing),
        data={"runs": runs.to_json(), "syscalls_per_req": syscalls, "peak_rss": rss},
    )
    wraps = sum(
        runs.median(n, f"c{c}", "wraps") or 0 for n in names if n != "nginx" for c in CONNECTIONS
    )
    if wraps:
        section.notes.append(
            f"Warning: request sets wrapped {wraps:.0f} times for a "
            "deduplicating system (it saw duplicates); sets were undersized."
        )
    section.tables += ctx.profile_tables()
    if ctx.profiles:
        section.notes.append(
            "Flame graph of the router during the peak runs: "
            + ", ".join(f"`{p.name}`" for p in ctx.profiles)
        )
    return section


SCENARIO = Scenario(
    name="ingest",
    title="1. Durable ingest",
    order=10,
    run=run,
    summary="peak req/s and p99 at 64/512 connections, p99 at 50 % of peak, vs nginx and typical",
    needs=("wrk", "nginx", "redis-server"),
    budget_s=(60, 420),
)
