"""Profile: where hookrouter's CPU goes under ingest-only and end-to-end load (py-spy).

Not a measurement of speed: a sampling profiler costs CPU on a 2-core
machine, so it runs in its own scenario, after the timed ones, and its
numbers are shares of samples, never rates. Each phase loads the router as
the timed scenario does (wrk, 64 connections, Stripe-signed unique events;
the same Redis-leased limiter) while py-spy records a flame graph (SVG in
docs/img/) and collapsed stacks, summarised here by area of the code and by
the functions with the most self time: this is where a missed target's
bottleneck is named.
"""

from __future__ import annotations

from bench import procs
from bench.api import Context, Scenario, Section, Table
from bench.profile import summarise
from bench.scenarios._common import TenantSpec, interpreted_tree, router_with_redis, set_size
from bench.systems import System, router_available


def _profile(
    ctx: Context,
    router: System,
    tenant: TenantSpec,
    label: str,
    duration: float,
    found: list[str],
) -> list[Table]:
    rs = ctx.request_set(set_size(40_000, duration), [tenant.stream()])
    svg = ctx.figure_path(f"{label}-flame").with_suffix(".svg")
    exe = ctx.tools.optional("py-spy", install=True)
    if exe is None:
        return []
    ctx.step(f"{label}: load under py-spy")
    raw = ctx.workdir / f"{label}.raw.txt"  # intermediate: summarised below, not kept
    with procs.py_spy(exe, router.service.pid, svg, raw):
        res = ctx.wrk(router.url, rs, connections=64, duration_s=duration)
    areas, leaves, total = summarise(raw)
    if not total:
        return []
    found.append(
        f"{label}: {areas[0][0]} takes {areas[0][1]} of the router's CPU samples; the "
        f"function with the most self time is {leaves[0][0]} ({leaves[0][1]})"
    )
    return [
        Table(
            f"{label}: CPU by area of the code ({total:,} samples at "
            f"{res.rps:,.0f} req/s under the profiler)",
            ["area (innermost frame)", "share of samples"],
            areas,
            f"Flame graph: [{svg.name}](img/{svg.name}).",
        ),
        Table(f"{label}: functions with the most self time", ["function", "share"], leaves),
    ]


def run(ctx: Context) -> Section:
    ok, reason = router_available()
    if not ok:
        return Section(text=[f"**hookrouter was not profiled:** {reason}."])
    duration = ctx.seconds(15, 4)
    tree = interpreted_tree(ctx)  # py-spy sees no Python frames in compiled modules
    tables: list[Table] = []
    found: list[str] = []
    ctx.step("ingest only: starting hookrouter")
    ingest_tenant = TenantSpec("bench")
    tables += _profile(
        ctx,
        router_with_redis(ctx, [ingest_tenant], pythonpath=tree),
        ingest_tenant,
        "ingest",
        duration,
        found,
    )
    ctx.step("end to end: starting hookrouter and a sink")
    sink = ctx.sink()
    e2e_tenant = TenantSpec(
        "bench", endpoint_url=f"{sink.url}/bench", queue_capacity=10_000, max_in_flight=128
    )
    tables += _profile(
        ctx,
        router_with_redis(ctx, [e2e_tenant], pythonpath=tree),
        e2e_tenant,
        "e2e",
        duration,
        found,
    )
    return Section(
        text=[
            "py-spy (200 Hz, non-blocking) on the router process while wrk loads it: first "
            "ingest alone, then ingest with delivery to an nginx sink. Shares are of "
            "CPU-active samples over all the router's threads (idle threads are not sampled). "
            "The router runs interpreted here (its source without the mypyc modules, as in "
            "section 8): py-spy cannot see inside compiled functions, so the shares are those "
            "of the interpreted code paths."
        ],
        tables=tables,
        data={"bottlenecks": found},
        notes=[]
        if tables
        else [
            "py-spy produced no samples (is it installed and allowed "
            "to read the process's memory?)."
        ],
    )


SCENARIO = Scenario(
    name="profile",
    title="7. Profile: where the router's CPU goes",
    order=70,
    run=run,
    summary="py-spy flame graphs of the router under ingest and end-to-end load (not timed)",
    needs=("wrk", "nginx", "redis-server"),
    budget_s=(30, 60),
)
