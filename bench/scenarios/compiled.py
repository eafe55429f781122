"""Scenario: the mypyc-compiled hot paths against the same source interpreted, same run.

``setup.py`` compiles the modules on the request and delivery paths with
mypyc. This scenario copies the package's sources without the compiled
modules into the work directory (the C transport stays) and runs both
routers in alternating rounds: durable ingest at 64 connections (wrk, as in
scenario 1) and end to end into an nginx sink (as in scenario 2).
"""

from __future__ import annotations

import importlib.machinery
import subprocess
import sys
from typing import Any

from bench import stats
from bench.api import Context, Scenario, Section, Table
from bench.scenarios import e2e
from bench.scenarios._common import (
    Runs,
    SinkLog,
    TenantSpec,
    closed_loop,
    interpreted_tree,
    router_with_redis,
    set_size,
    with_range,
)

SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)
TENANT = TenantSpec("bench")
LABELS = {"compiled": "compiled (mypyc)", "interpreted": "interpreted (same source)"}


def _origin(pythonpath: str | None) -> str:
    """Where ``hookrouter.core.http1`` is loaded from under ``pythonpath`` (a guard)."""
    env = {"PYTHONPATH": pythonpath} if pythonpath else None
    code = "import hookrouter.core.http1 as m; print(m.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    return out.stdout.strip()


def run(ctx: Context) -> Section:
    tree = interpreted_tree(ctx)
    origins = {"compiled": _origin(None), "interpreted": _origin(tree)}
    if not origins["compiled"].endswith(SUFFIXES):
        return Section(
            notes=[f"**Not measured:** this checkout is not compiled ({origins['compiled']})."]
        )
    assert origins["interpreted"].endswith(".py"), origins
    paths = {"compiled": None, "interpreted": tree}
    ingest = {name: router_with_redis(ctx, [TENANT], pythonpath=pp) for name, pp in paths.items()}
    sink = ctx.sink()
    sink_log = SinkLog(sink.access_log)
    delivering = e2e._tenant(sink.url)
    deliver = {
        name: router_with_redis(ctx, [delivering], pythonpath=pp) for name, pp in paths.items()
    }

    runs = Runs()
    flows: dict[str, list[dict[str, Any]]] = {}
    for system in ingest.values():  # warm-up, unrecorded
        rs = ctx.request_set(20_000, [TENANT.stream()])
        closed_loop(ctx, system, rs, connections=64, duration_s=ctx.seconds(2, 1))
    # Ingest is the noisiest between single runs on this VM: twice the rounds, half as long.
    ingest_rounds = 2 * ctx.runs
    for rnd in range(ingest_rounds):
        for name, system in ingest.items():
            ctx.step(f"round {rnd + 1}/{ingest_rounds}: {name}, ingest")
            duration = ctx.seconds(5, 2)
            rs = ctx.request_set(set_size(30_000, duration), [TENANT.stream()])
            runs.add(
                name,
                "ingest",
                closed_loop(ctx, system, rs, connections=64, duration_s=duration),
            )
    for rnd in range(ctx.runs):
        for name, system in deliver.items():
            ctx.step(f"round {rnd + 1}/{ctx.runs}: {name}, end to end")
            res = e2e._one_run(
                ctx,
                system,
                sink_log,
                delivering,
                20_000,
                ctx.seconds(15, 2),
                ctx.seconds(240, 40),
            )
            res.pop("timeline", None)  # per-delivery times: megabytes, and not reported here
            flows.setdefault(name, []).append(res)
    return _section(runs, flows, origins)


def _section(
    runs: Runs, flows: dict[str, list[dict[str, Any]]], origins: dict[str, str]
) -> Section:
    rows = []
    for name, label in LABELS.items():
        eps = [r["e2e_eps"] for r in flows.get(name, [])]
        cpu = [r["cpu_us"] for r in flows.get(name, [])]
        rows.append(
            [
                label,
                with_range(runs.median(name, "ingest", "rps"), runs.range(name, "ingest", "rps")),
                stats.fmt(runs.median(name, "ingest", "cpu_us"), 1),
                stats.fmt(stats.median(eps), 0),
                stats.fmt(stats.median(cpu), 1),
            ]
        )
    ingest_ratio = stats.ratio(
        runs.median("compiled", "ingest", "rps"), runs.median("interpreted", "ingest", "rps")
    )
    table = Table(
        "Compiled vs interpreted hot paths (alternating rounds, medians)",
        ["router", "ingest req/s [range]", "ingest CPU µs/req", "e2e events/s", "e2e CPU µs/event"],
        rows,
        f"Compiled ingest throughput {stats.fmt_ratio(ingest_ratio)} the interpreted one. "
        "Same source, same configuration as scenarios 1 and 2; only the mypyc modules differ.",
    )
    return Section(
        text=[
            "The router as installed (hot paths compiled by mypyc, `setup.py`) against a copy of "
            "the same source with the compiled modules left out, in alternating rounds: durable "
            "ingest at 64 connections (wrk; twice as many rounds as the other figures, 5 s "
            "each) and end to end into an nginx sink (15 s of ingest, then drain)."
        ],
        tables=[table],
        data={"runs": runs.to_json(), "flows": flows, "origins": origins},
    )


SCENARIO = Scenario(
    name="compiled",
    title="8. Compiled hot paths",
    order=75,
    run=run,
    summary="the mypyc-compiled router vs the same source interpreted (ingest and e2e)",
    needs=("wrk", "nginx", "redis-server"),
    needs_router=True,
    budget_s=(90, 420),
)
