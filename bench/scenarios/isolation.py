"""Scenario 3, isolation: tenant A's endpoint hangs while B, C and D are healthy.

Four tenants, each with one Stripe source and one endpoint. B, C and D post
to a recording sink (bench/reference/endpoints.py, which logs the arrival
time of each provider event id); A posts to the same sink in the *no-fault*
run and to a server that accepts and never answers in the *fault* run.
The open-loop client offers a fixed total rate, round-robin over the four
tenants, and records each request's due time; joining the two logs gives,
for every event of B-D, ingest-to-delivery latency = arrival at the sink -
due time at the client (so queueing anywhere, in the client included, is
charged to the system).

The figure of merit is p99 of B-D latency with the fault / without it
(target ≤ 1.25). Each (system, condition, run) starts a fresh system, so a
fault run's parked backlog never leaks into the next run.

A third condition, *sibling* (hookrouter only), moves the fault inside a
tenant: every tenant posts to the sink as in the no-fault run, and tenant A
has a second endpoint, the hanging server, which receives all of A's events
too. Its figure is p99 of A's deliveries to the sink with the hanging
sibling / without it: the endpoints of one tenant must not wait for each
other either (``flow/credits.py``, lanes).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import procs, stats, systems
from bench.api import (
    STANDARD_SECRET,
    STRIPE_SECRET,
    Context,
    Figure,
    Scenario,
    Section,
    Table,
    Target,
)
from bench.plots import timelines
from bench.reference.endpoints import read_log
from bench.scenarios._common import (
    TenantSpec,
    router_config,
    router_delivers,
    typical_endpoints,
    typical_sources,
    wait_quiet,
)
from bench.signing import event_id
from bench.systems import System
from hookrouter.store.base import Entity, EntityKind
from hookrouter.store.sqlite import SqliteStore

TENANTS = ("a", "b", "c", "d")
# The isolation runs repeated beside this many idle tenants (issue 38), each
# with a source and an endpoint, stored before the router starts.
IDLE_TENANTS = int(os.environ.get("BENCH_IDLE_TENANTS", "100000"))
IDLE = "router-idle"
LABELS = {
    "typical": "typical stack",
    "router": "hookrouter",
    IDLE: f"hookrouter + {IDLE_TENANTS:,} idle tenants",
}
CONDITIONS = ("nofault", "fault", "sibling")
CONDITION_LABELS = {"nofault": "no fault", "fault": "A hangs", "sibling": "A's 2nd endpoint hangs"}


def _endpoint(ctx: Context, mode: str, log: Path | None = None) -> tuple[procs.Service, str]:
    port = procs.free_port()
    argv = [sys.executable, "-m", "bench.reference.endpoints", "--port", str(port), "--mode", mode]
    if log is not None:
        argv += ["--log", str(log)]
    service = ctx.start(f"endpoint-{mode}", argv, port=port)
    service.wait_ready(15)
    return service, f"http://127.0.0.1:{port}"


def _tenants(sink_url: str, hang_url: str | None) -> list[TenantSpec]:
    out = []
    for t in TENANTS:
        url = hang_url if (t == "a" and hang_url) else sink_url
        out.append(TenantSpec(t, endpoint_url=f"{url}/{t}"))
    return out


def _start(
    ctx: Context, name: str, tenants: list[TenantSpec], sibling_url: str | None = None
) -> System:
    if name == "typical":
        return ctx.typical(
            sources=typical_sources(tenants), endpoints=typical_endpoints(tenants), deliver=True
        )
    config = router_config(tenants)
    if name == IDLE:
        root = ctx.path(f"router-idle-{time.monotonic_ns()}")
        shutil.copytree(_idle_store(ctx), root / "data")
        router = systems.start_router(root, config, ready_timeout=300)
        ctx.cleanup.callback(router.stop)
        return router
    if sibling_url is not None:  # tenant A's second endpoint: every A event goes there too
        sibling = {"id": "a-sibling", "tenant": "a", "url": f"{sibling_url}/a"}
        config["endpoints"].append({**sibling, "secret": STANDARD_SECRET})
    return ctx.router(config)


_IDLE_STORES: dict[Path, Path] = {}


def _idle_store(ctx: Context) -> Path:
    """A store holding ``IDLE_TENANTS`` tenants, made once per invocation and copied per run."""
    where = ctx.path("idle-store")
    if where not in _IDLE_STORES:
        ctx.step(f"storing {IDLE_TENANTS:,} idle tenants")
        asyncio.run(_store_idle_tenants(where / "data", IDLE_TENANTS))
        _IDLE_STORES[where] = where / "data"
    return _IDLE_STORES[where]


def _idle_name(i: int) -> str:
    return f"idle{i:06d}"


async def _store_idle_tenants(
    path: Path,
    count: int,
    *,
    name: Callable[[int], str] = _idle_name,
    base_url: str = "http://127.0.0.1:9",
) -> None:
    """Tenant, Stripe source and endpoint per idle tenant, written as the admin API stores them.

    Endpoint ``i`` posts to ``base_url/<its tenant>`` (bench.tenant_cost points them at a sink).
    """
    store = SqliteStore(path)
    await store.open()
    now = time.time()
    try:
        for first in range(0, count, 1_000):
            writes = []
            for i in range(first, min(count, first + 1_000)):
                tenant = name(i)
                docs: list[tuple[EntityKind, str, str | None, dict[str, Any]]] = [
                    ("tenant", tenant, None, {"id": tenant}),
                    (
                        "source",
                        f"{tenant}-stripe",
                        tenant,
                        {"tenant": tenant, "provider": "stripe", "secrets": [STRIPE_SECRET]},
                    ),
                    (
                        "endpoint",
                        f"{tenant}-ep",
                        tenant,
                        {"tenant": tenant, "url": f"{base_url}/{tenant}",
                         "secret": STANDARD_SECRET},
                    ),
                ]  # fmt: skip
                for kind, entity_id, owner, doc in docs:
                    entity = Entity(kind, entity_id, owner, {"id": entity_id, **doc}, now)
                    writes.append(store.put_entity(entity))
            await asyncio.gather(*writes)
    finally:
        await store.close()


def _one(
    ctx: Context, name: str, condition: str, rate: float, duration: float, tag: str
) -> dict[str, Any]:
    work = ctx.path(f"{name}-{condition}-{tag}")
    sink_log = work / "sink.log"
    sink, sink_url = _endpoint(ctx, "sink", sink_log)
    hang_url = _endpoint(ctx, "hang")[1] if condition != "nofault" else None
    tenants = _tenants(sink_url, hang_url if condition == "fault" else None)
    system = _start(ctx, name, tenants, hang_url if condition == "sibling" else None)
    warmup = ctx.seconds(1.0, 0.5)
    rs = ctx.request_set(int(rate * (duration + warmup)) + 10, [t.stream() for t in tenants])
    records = work / "records.txt"
    first_fault = name == "router" and condition == "fault" and tag == "0"
    with ctx.profiler(system, "isolation-fault") if first_fault else contextlib.nullcontext():
        ctx.open_loop(
            system.url,
            rs,
            rate=rate,
            duration_s=duration,
            warmup_s=warmup,
            connections=64,
            records=records,
        )
    due = _read_records(records)
    healthy = [i for i, (_, st) in due.items() if st == 200 and i % 4 != 0]
    # A's events reach the sink unless A's only endpoint is the hanging one.
    a_sink = [i for i, (_, st) in due.items() if st == 200 and i % 4 == 0]
    if condition == "fault":
        a_sink = []
    waited = healthy + a_sink

    def delivered_healthy() -> int:
        arr = read_log(sink_log)
        return sum(1 for i in waited if rs.event_id(i) in arr)

    wait_quiet(delivered_healthy, target=len(waited), quiet_s=1.0, timeout_s=ctx.seconds(60, 20))
    arrivals = read_log(sink_log)
    system.stop()
    sink.stop()
    result = _latencies(rs.run_id, due, healthy, arrivals, warmup)
    result["a"] = _latencies(rs.run_id, due, a_sink, arrivals, warmup) if a_sink else None
    return result


def _read_records(path: Path) -> dict[int, tuple[float, int]]:
    out = {}
    for line in path.read_text().splitlines():
        idx, due, _done, status = line.split()
        out[int(idx)] = (float(due), int(status))
    return out


def _latencies(
    run_id: str,
    due: dict[int, tuple[float, int]],
    healthy: list[int],
    arrivals: dict[str, float],
    warmup: float,
) -> dict[str, Any]:
    t0 = min((d for d, _ in due.values()), default=0.0)
    lat, timeline, missing = [], [], 0
    for i in healthy:
        at = arrivals.get(event_id(run_id, i))
        if at is None:
            missing += 1
            continue
        ms = (at - due[i][0]) * 1000.0
        timeline.append((due[i][0] - t0, ms))
        if due[i][0] - t0 >= warmup:
            lat.append(ms)
    pct = stats.percentiles(lat, (50, 99, 99.9))
    return {
        "p50": pct.get("p50"),
        "p99": pct.get("p99"),
        "p99.9": pct.get("p99.9"),
        "max": max(lat, default=None),
        "healthy_sent": len(healthy),
        "missing": missing,
        "timeline": _per_second_p99(timeline),
    }


def _per_second_p99(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    buckets: dict[int, list[float]] = {}
    for t, ms in points:
        buckets.setdefault(int(t), []).append(ms)
    return [(float(s), stats.percentile(v, 99)) for s, v in sorted(buckets.items())]


def run(ctx: Context) -> Section:
    duration = ctx.seconds(15, 4)
    # The typical stack's fault run waits out 10 s delivery timeouts: full runs only.
    plan = {} if ctx.quick else {"typical": 200.0}
    notes = []
    ok, reason = router_delivers(ctx)
    if ok:
        plan["router"] = ctx.seconds(1500, 1000)
        plan[IDLE] = plan["router"]
    else:
        notes.append(f"**hookrouter was not measured:** {reason}.")
    if not plan:
        notes.append("Nothing to measure in a quick run without hookrouter.")
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for rnd in range(ctx.runs):
        for name, rate in plan.items():
            for cond in CONDITIONS:
                if cond == "sibling" and name != "router":
                    continue  # the typical stack has no per-endpoint queues to show
                ctx.step(f"round {rnd + 1}/{ctx.runs}: {name} {cond} at {rate:.0f}/s")
                try:
                    res = _one(ctx, name, cond, rate, duration, f"{rnd}")
                except Exception as exc:
                    if name != "router":
                        raise
                    notes.append(f"hookrouter run failed: `{exc}`")
                    plan = {k: v for k, v in plan.items() if k != "router"}
                    break
                results.setdefault(name, {}).setdefault(cond, []).append(res)
                time.sleep(0.5)
    return _section(ctx, results, plan, notes, duration)


def _section(
    ctx: Context,
    results: dict[str, dict[str, list[dict[str, Any]]]],
    plan: dict[str, float],
    notes: list[str],
    duration: float,
) -> Section:
    rows = []
    ratios: dict[str, float | None] = {}
    for name, conds in results.items():
        base = stats.median(r["p99"] for r in conds.get("nofault", []))
        for cond in CONDITIONS:
            runs = conds.get(cond, [])
            if not runs:
                continue
            p99 = stats.median(r["p99"] for r in runs)
            ratio = stats.ratio(p99, base) if cond != "nofault" else None
            if cond == "fault":
                ratios[name] = ratio
            rows.append(
                [
                    LABELS[name],
                    CONDITION_LABELS[cond],
                    stats.fmt(plan.get(name)),
                    stats.fmt(stats.median(r["p50"] for r in runs), 1),
                    stats.fmt(p99, 1),
                    stats.fmt(stats.median(r["p99.9"] for r in runs), 1),
                    stats.fmt(stats.median(r["max"] for r in runs), 1),
                    stats.fmt(sum(r["missing"] for r in runs)),
                    stats.fmt_ratio(ratio) if cond != "nofault" else "",
                ]
            )
    sibling_table = _sibling_table(results.get("router", {}))
    table = Table(
        f"Tenants B-D ingest-to-delivery latency, ms ({duration:.0f} s open loop, 4 tenants)",
        [
            "system",
            "condition",
            "offered events/s",
            "p50",
            "p99",
            "p99.9",
            "max",
            "B-D not delivered",
            "p99 fault / no fault",
        ],
        rows,
        "Latency from each event's due time at the client to its arrival at the endpoint. "
        "'not delivered' counts acknowledged B-D events that had not arrived when the wait "
        "ended (summed over runs).",
    )
    figures = []
    for name, conds in results.items():
        series = {}
        for cond in ("nofault", "fault"):
            runs = conds.get(cond, [])
            if runs and runs[0]["timeline"]:
                xs, ys = zip(*runs[0]["timeline"], strict=True)
                series[f"{name} {CONDITION_LABELS[cond]}"] = (xs, ys)
        if series:
            path = timelines(
                series,
                ctx.figure_path(f"timeline-{name}"),
                title=f"{LABELS[name]}: B-D p99 latency per second",
                xlabel="seconds since load started",
                ylabel="p99 latency (ms)",
                logy=True,
            )
            figures.append(
                Figure(
                    path,
                    f"{LABELS[name]}: p99 ingest-to-delivery latency of "
                    "tenants B-D per second, with and without A's fault "
                    "(first run).",
                )
            )
    ratio = ratios.get("router")
    if "router" in results:
        target = Target(
            "isolation p99 ratio (B-D, A hangs / no fault)",
            "≤ 1.25",
            stats.fmt_ratio(ratio),
            None if ratio is None else ratio <= 1.25,
        )
    else:
        target = Target(
            "isolation p99 ratio (B-D, A hangs / no fault)",
            "≤ 1.25",
            "n/a",
            None,
            "hookrouter not measurable yet",
        )
    targets = [target]
    if IDLE in results:
        idle_ratio = ratios.get(IDLE)
        targets.append(
            Target(
                f"isolation p99 ratio beside {IDLE_TENANTS:,} idle tenants",
                "≤ 1.25",
                stats.fmt_ratio(idle_ratio),
                None if idle_ratio is None else idle_ratio <= 1.25,
            )
        )
    return Section(
        text=[
            "Tenant A's endpoint accepts connections and never answers; B, C and D answer "
            "at once. The typical stack is shown at a rate it can sustain (its ingest "
            "commits one event at a time), hookrouter at a higher one; each is compared "
            "with its own no-fault run. hookrouter runs its defaults (per tenant "
            "`queue_capacity` 1000 and `max_in_flight` 16, default delivery timeout, retries "
            "and breaker, no rate limit); the typical stack has 64 shared delivery workers "
            "and a 10 s timeout per attempt. In the sibling runs (hookrouter only) the fault "
            "is inside tenant A: a second endpoint of A hangs, the first is the sink. "
            f"The '{LABELS[IDLE]}' runs repeat the hookrouter runs with that many more "
            "tenants (a Stripe source and an endpoint each) in its store, none of them "
            "sent anything (issue 38: isolation must not depend on the tenant count)."
        ],
        tables=[table, *([sibling_table] if sibling_table else []), *ctx.profile_tables()],
        figures=figures,
        targets=targets,
        notes=notes,
        data={
            n: {
                c: [{k: v for k, v in r.items() if k != "timeline"} for r in rs]
                for c, rs in conds.items()
            }
            for n, conds in results.items()
        },
    )


def _sibling_table(conds: dict[str, list[dict[str, Any]]]) -> Table | None:
    """Tenant A's deliveries to its healthy endpoint, with and without a hanging sibling."""
    runs = {c: [r["a"] for r in conds.get(c, []) if r.get("a")] for c in ("nofault", "sibling")}
    if not runs["nofault"] or not runs["sibling"]:
        return None
    base = stats.median(r["p99"] for r in runs["nofault"])
    rows = []
    for cond, rs in runs.items():
        p99 = stats.median(r["p99"] for r in rs)
        rows.append(
            [
                CONDITION_LABELS[cond],
                stats.fmt(stats.median(r["p50"] for r in rs), 1),
                stats.fmt(p99, 1),
                stats.fmt(stats.median(r["max"] for r in rs), 1),
                stats.fmt(sum(r["missing"] for r in rs)),
                stats.fmt_ratio(stats.ratio(p99, base)) if cond == "sibling" else "",
            ]
        )
    return Table(
        "hookrouter: tenant A's deliveries to its healthy endpoint, ms (same runs)",
        ["condition", "p50", "p99", "max", "not delivered", "p99 vs no fault"],
        rows,
        "In the sibling runs every event of A also goes to a second endpoint that accepts "
        "connections and never answers; the endpoints of one tenant have separate credit "
        "lanes and slot shares, so the healthy one should not notice.",
    )


SCENARIO = Scenario(
    name="isolation",
    title="3. Isolation",
    order=30,
    run=run,
    summary="tenant A's endpoint hangs; B-D latency vs the no-fault run",
    needs=("redis-server",),
    budget_s=(120, 420),
)
