"""Content filters (issue 36): one evaluation's cost; end to end with every endpoint filtered.

Part 1 runs compiled filters in this process (``hookrouter.core.filters``,
compiled or interpreted as installed) on a Stripe-shaped invoice event:
µs per evaluation, each the mean of a timed loop of calls, median of runs.
It also times what fan-out adds per event when an endpoint has a filter:
parsing the body once plus the evaluation (``filter_endpoints``), with
the body parsed whole and projected (only the paths the filters read, as
routing parses it).

Part 2 is scenario 2's end-to-end run twice over, on two routers started
side by side: one whose tenant's endpoint has a two-clause filter that every
event passes (so both deliver the same events), one with no filter. Same
wrk load (64 connections, Stripe-signed events), same nginx sink kind; the
rounds alternate between the two. The ratio is filtered / unfiltered
end-to-end events/s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import msgspec

from bench import stats
from bench.api import Context, Scenario, Section, Table, Target
from bench.scenarios._common import SinkLog, TenantSpec, router_config, router_delivers
from bench.scenarios.e2e import CONNECTIONS, _one_run
from bench.systems import System
from hookrouter.core import filters
from hookrouter.core.filters import Projection, filter_endpoints, parse_body, parse_filter

SIMPLE_TARGET_US = 1.0
E2E_TARGET = 0.90
# Every generated event passes it (the e2e comparison delivers the same events).
E2E_FILTER = {"type": {"$prefix": "invoice."}, "data.object.customer": "cus_bench"}

EVENT: dict[str, Any] = {
    "id": "evt_1PbenchAAAAAAAAAAAAAAAAA",
    "object": "event",
    "type": "invoice.paid",
    "livemode": False,
    "data": {
        "object": {
            "object": "invoice",
            "customer": "cus_bench",
            "amount_due": 4200,
            "currency": "eur",
            "metadata": {"plan": "pro", "region": "eu-west"},
            "lines": [
                {"object": "line_item", "amount": 1999, "currency": "eur", "description": "Pro"}
            ]
            * 12,
        }
    },
}
HEADERS = {"content-type": "application/json", "x-tier": "gold", "stripe-signature": "t=1,v1=x"}
SHAPES: list[tuple[str, dict[str, Any]]] = [
    ("simple: one field, $eq", {"type": "invoice.paid"}),
    ("simple: nested path, $gte", {"data.object.amount_due": {"$gte": 1000}}),
    ("simple: header, $eq", {"$headers": {"x-tier": "gold"}}),
    (
        "$in of 50 strings",
        {"data.object.currency": {"$in": [f"c{i}" for i in range(49)] + ["eur"]}},
    ),
    (
        "3 clauses: $prefix, range, $in",
        {
            "type": {"$prefix": "invoice."},
            "data.object.amount_due": {"$gte": 1000, "$lt": 100_000},
            "data.object.metadata.region": {"$in": ["eu-west", "eu-central"]},
        },
    ),
    (
        "$or of 2 $and, $not",
        {
            "$or": [
                {"$and": [{"livemode": True}, {"data.object.currency": "usd"}]},
                {"$not": {"data.object.metadata.plan": "free"}},
            ]
        },
    ),
    (
        "largest allowed: 128 fields",
        {f"data.object.metadata.k{i}": {"$exists": False} for i in range(128)},
    ),
]


def _per_call_us(call: Callable[[], object], count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        call()
    return (time.perf_counter() - started) / count * 1e6


def _evaluation_costs(ctx: Context) -> tuple[Table, dict[str, float]]:
    count = int(ctx.seconds(200_000, 20_000))
    body = msgspec.json.encode(EVENT)
    rows, medians = [], {}
    for name, doc in SHAPES:
        flt = parse_filter(doc)
        ctx.step(f"evaluating: {name}")
        runs = [_per_call_us(partial(flt.matches, EVENT, HEADERS), count) for _ in range(ctx.runs)]
        medians[name] = stats.median(runs) or 0.0
        rows.append([name, flt.nodes, f"{medians[name]:.3f}"])
    for label, doc in (("simple filter", SHAPES[0][1]), ("the e2e filter", E2E_FILTER)):
        flt = parse_filter(doc)
        parsers = (("whole body", parse_body), ("projected", Projection([flt]).parse))
        for how, parse in parsers:
            name = f"fan-out: {how} ({len(body):,} bytes) + {label}"
            ctx.step(name)
            call = partial(filter_endpoints, {"ep": flt}, ("ep",), body, HEADERS, parse=parse)
            fanout = [_per_call_us(call, count // 10) for _ in range(ctx.runs)]
            medians[name] = stats.median(fanout) or 0.0
            rows.append([name, flt.nodes, f"{medians[name]:.3f}"])
    compiled = not (filters.__file__ or "").endswith(".py")
    table = Table(
        f"One evaluation, µs (filters module {'compiled' if compiled else 'interpreted'})",
        ["filter", "nodes", "µs per evaluation"],
        rows,
        "Each figure includes the Python call into Filter.matches. The fan-out rows are what "
        "routing adds to an event whose tenant has a filtered endpoint: parsing the body, "
        "whole or (as routing does) projected on the paths the tenant's filters read, then "
        "the evaluation.",
    )
    return table, medians


def _filtered_tenant(sink_url: str, filtered: bool) -> TenantSpec:
    return TenantSpec(
        "bench",
        endpoint_url=f"{sink_url}/bench",
        queue_capacity=10_000,
        max_in_flight=128,
        extra_endpoint={"filter": E2E_FILTER} if filtered else {},
    )


def _end_to_end(ctx: Context) -> tuple[Table | None, dict[str, list[dict[str, Any]]], str]:
    ok, reason = router_delivers(ctx)
    if not ok:
        return None, {}, reason
    duration = ctx.seconds(15, 3)
    drain_timeout = ctx.seconds(240, 40)
    systems: dict[str, tuple[System, SinkLog, TenantSpec]] = {}
    for label, filtered in (("unfiltered", False), ("filtered", True)):
        ctx.step(f"starting hookrouter ({label}) and its sink")
        sink = ctx.sink()
        tenant = _filtered_tenant(sink.url, filtered)
        systems[label] = (ctx.router(router_config([tenant])), SinkLog(sink.access_log), tenant)
    results: dict[str, list[dict[str, Any]]] = {}
    for rnd in range(ctx.runs):
        for label, (system, sink, tenant) in systems.items():
            ctx.step(f"round {rnd + 1}/{ctx.runs}: {label}")
            res = _one_run(ctx, system, sink, tenant, 40_000.0, duration, drain_timeout)
            results.setdefault(label, []).append(res)
    rows = []
    for label, runs in results.items():
        rows.append(
            [
                label,
                stats.fmt(stats.median(r["ingest_rps"] for r in runs)),
                stats.fmt(stats.median(r["e2e_eps"] for r in runs)),
                stats.fmt(stats.median(r["cpu_us"] for r in runs), 1),
                "yes" if all(r["drained"] for r in runs) else "**no**",
            ]
        )
    table = Table(
        f"End to end, every endpoint filtered vs none ({CONNECTIONS} connections, "
        f"{duration:.0f} s of ingest, then drain; medians of {ctx.runs} alternating rounds)",
        ["endpoint", "ingest 2xx/s", "end-to-end events/s", "server CPU µs/event", "drained"],
        rows,
    )
    return table, results, "ok"


def run(ctx: Context) -> Section:
    evaluation, medians = _evaluation_costs(ctx)
    e2e_table, results, reason = _end_to_end(ctx)
    simple = max(v for k, v in medians.items() if k.startswith("simple"))
    targets = [
        Target(
            "simple filter evaluation",
            f"≤ {SIMPLE_TARGET_US:.0f} µs",
            f"{simple:.2f} µs (slowest simple shape)",
            simple <= SIMPLE_TARGET_US,
        )
    ]
    ratio = None
    if results:
        ratio = stats.ratio(
            stats.median(r["e2e_eps"] for r in results["filtered"]),
            stats.median(r["e2e_eps"] for r in results["unfiltered"]),
        )
    targets.append(
        Target(
            "end to end, filtered vs unfiltered",
            f"≥ {E2E_TARGET:.2f}x",
            stats.fmt_ratio(ratio),
            None if ratio is None else ratio >= E2E_TARGET,
            "" if results else reason,
        )
    )
    return Section(
        text=[__doc__.split("\n\n", 1)[1].strip()] if __doc__ else [],
        tables=[evaluation] + ([e2e_table] if e2e_table is not None else []),
        targets=targets,
        data={
            "evaluation_us": medians,
            "e2e": {k: [dict(r, timeline=None) for r in v] for k, v in results.items()},
        },
    )


SCENARIO = Scenario(
    name="filters",
    title="Content filters: evaluation cost, end to end filtered vs not",
    order=79,
    run=run,
    summary="µs per filter evaluation; e2e events/s with every endpoint filtered vs none",
    needs=("wrk", "nginx"),
    needs_router=True,
    budget_s=(60, 300),
)
