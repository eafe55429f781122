"""Scenario: what OpenTelemetry tracing costs per event, off, at 0 %, 1 % and 100 % sampling.

The same-run comparison of ``bench/tracing_overhead.py``: one router process
per round, the modes in alternating rounds, Stripe-signed events from 8
keep-alive clients, delivered to a local sink, spans exported to a local
OTLP/HTTP sink. The figure is the router's CPU time (all threads, the span
exporter's included) per event, ingest and delivery; then, when Valgrind is
installed, the same modes counted in user-space instructions per event
(callgrind), which repeat where timings on a shared host do not.
"""

from __future__ import annotations

import os
import shutil
import statistics

from bench import stats
from bench.api import Context, Scenario, Section, Table, Target
from bench.tracing_overhead import MODES, count_round, measure, paired_ratio, steady_ratio

EVENTS = 60_000  # longer than the span processor's 5 s flush interval
CLIENTS = 8
COUNTED_EVENTS = 1000  # under callgrind, ~50 times slower
BUDGET = 1.05  # issue 37: e2e CPU per event at 1 % within +5 % of tracing off
LABELS = {
    "off": "off",
    "0%": "`sample_ratio = 0.0` (on, nothing sampled)",
    "1%": "`sample_ratio = 0.01`",
    "100%": "`sample_ratio = 1.0`",
}


def run(ctx: Context) -> Section:
    rounds = max(ctx.runs, 2 if ctx.quick else 5)
    events = 500 if ctx.quick else EVENTS
    results = measure(rounds, events, CLIENTS, list(MODES), progress=ctx.step)
    tables = [_table(results, f"Router CPU µs per event by tracing mode ({rounds} rounds, {{}})")]
    counted: dict[str, list[float]] = {}
    if shutil.which("valgrind") and shutil.which("callgrind_control") and not ctx.quick:
        counted = measure(2, COUNTED_EVENTS, 1, list(MODES), progress=ctx.step, counter=count_round)
        tables.append(
            _table(counted, "User-space instructions per event by tracing mode (2 rounds, {})")
        )
    # Judged on the count when there is one: timed rounds on a shared host
    # spread wider than the budget itself. Under callgrind only full batches
    # are exported (see tracing_overhead), so the count at 1 % is judged at
    # steady state: the unsampled path plus 1 % of a sampled event's cost.
    if counted:
        at_one = steady_ratio(counted)
        judged_on = "instructions at steady state: 0 % + 1 % of (100 % - 0 %)"
    else:
        at_one = paired_ratio(results, "1%")
        judged_on = "CPU time, median of per-round ratios"
    return Section(
        text=[
            f"{events} Stripe-signed events per round from {CLIENTS} keep-alive clients, "
            "delivered to a local sink; spans exported over OTLP/HTTP to a local sink that "
            "discards them. The router's CPU time (user + system, all threads) from the first "
            "request to the last delivery, divided by the events. `0 %` is tracing on with "
            "nothing sampled: the unsampled path alone. The instruction counts (callgrind, "
            f"{COUNTED_EVENTS} events over one connection after a warm-up) leave out the "
            "kernel. Timed rounds keep the span processor's 5 s flush interval and last "
            "longer than it, so their exports are inside the window. Under Valgrind the window "
            "lasts ~50 times longer, so timed flushes would export batches of a few spans; "
            "there spans are exported only in full batches of 512, as at production rates, "
            "which the 1 % round (40 spans) never fills. The 1 % target is therefore judged on "
            "the count at steady state: per round, the `0 %` cost (the unsampled path every "
            "event pays) plus 1 % of what sampling adds per event at `100 %` (its two spans, "
            "their export included), over `off`."
        ],
        tables=tables,
        targets=[
            Target(
                "router CPU per event, tracing at 1 % vs off",
                "≤ +5 %",
                f"{(at_one - 1) * 100:+.1f} %",
                at_one <= BUDGET,
                judged_on,
            )
        ],
        data={"rounds": results, "events": events, "instructions": counted, "build": BUILD},
    )


BUILD = (
    "compiled router"
    if os.environ.get("HOOKROUTER_COMPILE", "1") != "0"
    else "interpreted router (`HOOKROUTER_COMPILE=0`)"
)


def _table(results: dict[str, list[float]], title: str) -> Table:
    rows = [
        [
            LABELS[mode],
            stats.fmt(statistics.median(figures), 1),
            f"{min(figures):.1f}-{max(figures):.1f}",
            f"{(paired_ratio(results, mode) - 1) * 100:+.1f} %",
        ]
        for mode, figures in results.items()
    ]
    return Table(
        title.format(BUILD),
        ["tracing", "per event (median)", "range", "vs off (median of per-round ratios)"],
        rows,
        "Each round runs every mode once, one after the other, so a round's ratio compares "
        "figures taken seconds apart.",
    )


SCENARIO = Scenario(
    name="tracing",
    title="12. Tracing overhead",
    order=98,
    run=run,
    summary="router CPU per event with OpenTelemetry tracing off, at 1 % and at 100 %",
    needs=(),
    needs_router=True,
    budget_s=(60, 1200),
)
