"""Scenario: ingest on a large store against a fresh one, with where the loop thread waits.

Per round: a router on a fresh store (peak at 64 connections, then open
loop at 50 % of that peak), then a router on a store filled to
``HOOKROUTER_BENCH_STORE_EVENTS`` events (default 10 M; 300 k with
--quick) by ``bench.store_fill`` (the store's own append path, no HTTP;
arrival times spread over the past week, so the store is the week of
one-hour partitions a router at that rate leaves), the same peak and
open-loop runs at the *same* offered rate. Both routers keep delivered
events longer than the fill's week (``RETENTION``), so that retention does
not unlink the oldest filled partition during a run. During each
open-loop run an :class:`bench.offcpu.OffCpuSampler` records where the
router's threads wait and the kernel's dirty/writeback page counts. The
filled store is made once and reused across rounds (each round adds the
events it ingests).

Per 10 s window p99s come from the open-loop client's per-request records,
so a tail that grows over the run (rather than across the whole run) shows.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench import offcpu, stats, systems
from bench.api import Context, Figure, Scenario, Section, Table, Target
from bench.plots import timelines
from bench.scenarios._common import (
    Measured,
    TenantSpec,
    closed_loop,
    open_loop,
    router_config,
    set_size,
)

TENANT = TenantSpec("bench")
EVENTS_ENV = "HOOKROUTER_BENCH_STORE_EVENTS"
SECONDS_ENV = "HOOKROUTER_BENCH_STORE_SECONDS"
RATE_ENV = "HOOKROUTER_BENCH_STORE_RATE"  # events/s offered; unset: half the first peak
WINDOW_S = 10.0
WARM_CEILING = 60_000  # req/s no router here reaches: sizes the first peak's request set
# Longer than the fill's span (bench.store_fill.WEEK, the default retention):
# the oldest filled bucket would otherwise pass the cutoff within the hour
# and be unlinked while a run measures ingest (retention has its own bench).
RETENTION = {"delivered": "30d"}
# The store's series followed once a second during a run: what the dedup worker
# and the checkpointer were doing when a window's p99 rose.
_FOLLOWED = (
    "hookrouter_store_dedup_worker_cpu_seconds_total",
    "hookrouter_store_dedup_merges_total",
    "hookrouter_store_dedup_flushes_total",
    "hookrouter_store_dedup_summaries_total",
    "hookrouter_store_checkpoints_total",
    "hookrouter_store_wal_rewinds_total",
    "hookrouter_store_appends_total",
    "hookrouter_store_partitions_dropped_total",
    "hookrouter_store_partitions_compacted_total",
)


class MetricsPoller:
    """Reads the router's store series every ``interval`` s in a thread (a timeline)."""

    def __init__(self, router: systems.System, interval: float = 1.0) -> None:
        self.router = router
        self.interval = interval
        self.rows: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-metrics")

    def _run(self) -> None:
        while not self._stop.is_set():  # wall-clock times, as in the open-loop records
            metrics = store_metrics(self.router)
            self.rows.append((time.time(), {k: metrics.get(k, 0.0) for k in _FOLLOWED}))
            self._stop.wait(self.interval)

    def __enter__(self) -> MetricsPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def rates(self) -> list[tuple[float, dict[str, float]]]:
        """Per interval: the increase of each followed series, per second."""
        out = []
        for (t0, a), (t1, b) in itertools.pairwise(self.rows):
            span = max(1e-9, t1 - t0)
            out.append((t0, {k.removeprefix("hookrouter_store_"): (b[k] - a[k]) / span for k in a}))
        return out


def store_events(ctx: Context) -> int:
    default = 300_000 if ctx.quick else 10_000_000
    return int(os.environ.get(EVENTS_ENV, default))


def fill_store(ctx: Context, data: Path, events: int) -> dict[str, Any]:
    """Run ``bench.store_fill`` into ``data``; its JSON result."""
    ctx.step(f"filling a store with {events:,} events")
    done = subprocess.run(
        [sys.executable, "-m", "bench.store_fill", "--path", str(data), "--events", str(events)],
        capture_output=True,
        text=True,
        check=True,
        cwd=systems.REPO,
    )
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("BENCH-JSON "))
    result: dict[str, Any] = json.loads(line[len("BENCH-JSON ") :])
    return result


def window_p99(
    records: Path, warmup_s: float, window: float = WINDOW_S
) -> list[tuple[float, float]]:
    """(window start s, p99 ms) per ``window`` of an open-loop records file."""
    rows = [ln.split() for ln in records.read_text().splitlines()]
    timed = [(float(r[1]), float(r[2])) for r in rows if float(r[2]) > 0]
    if not timed:
        return []
    t0 = timed[0][0] + warmup_s
    windows: dict[int, list[float]] = {}
    for due, done in timed:
        if due >= t0:
            windows.setdefault(int((due - t0) // window), []).append((done - due) * 1000)
    return [(k * window, stats.percentile(v, 99)) for k, v in sorted(windows.items())]


def _measure(
    ctx: Context, router: systems.System, label: str, rate: float, duration: float
) -> dict[str, Any]:
    ctx.step(f"{label}: peak at 64 connections")
    peak_set = ctx.request_set(set_size(rate * 2, ctx.seconds(8, 3)), [TENANT.stream()])
    peak: Measured = closed_loop(
        ctx, router, peak_set, connections=64, duration_s=ctx.seconds(8, 3)
    )
    warmup = ctx.seconds(2, 0.5)
    ctx.step(f"{label}: open loop at {rate:,.0f}/s for {duration:.0f} s")
    rs = ctx.request_set(set_size(rate, duration + warmup, margin=1.05), [TENANT.stream()])
    records = ctx.path(f"records-{label}") / "records.txt"
    with offcpu.OffCpuSampler(router.service.pid) as sampler, MetricsPoller(router) as poller:
        measured = open_loop(
            ctx, router, rs, rate=rate, duration_s=duration, warmup_s=warmup, records=records
        )
    return {
        "store_metrics": store_metrics(router),
        "peak_rps": peak.load.rps,
        "peak": peak.to_json(),  # statuses and errors: what a peak of 0 was
        "open": measured.to_json(),
        "p99": measured.load.latency_ms.get("p99"),
        "p999": measured.load.latency_ms.get("p99.9"),
        "windows": window_p99(records, warmup),
        "seconds": window_p99(records, warmup, 1.0),
        "offcpu": sampler.summary(),
        "loop_timeline": sampler.loop_timeline(),
        "sampler_t0_wall": sampler.t0_wall,
        "records": str(records),
        "store_timeline": poller.rates(),
    }


def store_metrics(router: systems.System) -> dict[str, float]:
    """The store's own series (commit and checkpoint peaks, WAL) after a run."""
    status, body = router.get("/metrics")
    if status != 200:
        return {}
    return {k: v for k, v in systems.parse_metrics(body.decode()).items() if "_store_" in k}


def _store_bytes(data: Path) -> int:
    return sum(p.stat().st_size for p in data.glob("*") if p.is_file())


def run(ctx: Context) -> Section:
    events = store_events(ctx)
    duration = float(os.environ.get(SECONDS_ENV, ctx.seconds(60, 10)))
    fixed_rate = float(os.environ.get(RATE_ENV, "0"))
    config = router_config([TENANT], extra={"store": {"retention": RETENTION}})
    large_root = ctx.path("router-large")
    fill = fill_store(ctx, large_root / "data", events)
    filled_bytes = _store_bytes(large_root / "data")
    rounds: list[dict[str, Any]] = []
    for rnd in range(ctx.runs):
        ctx.step(f"round {rnd + 1}/{ctx.runs}: fresh store")
        fresh = ctx.router(config)
        if fixed_rate:  # an A/B of two trees needs the same offered rate on both
            rate = fixed_rate
        elif not rounds:  # the offered rate: 50 % of the first fresh peak, then fixed
            # Sized so the set never wraps: repeated events are answered by dedup,
            # cheaper than new ones, and would overstate the peak.
            seconds = ctx.seconds(4, 2)
            rs = ctx.request_set(set_size(WARM_CEILING, seconds), [TENANT.stream()])
            warm = closed_loop(ctx, fresh, rs, connections=64, duration_s=seconds)
            rate = max(100.0, warm.load.rps * 0.5)
        fresh_m = _measure(ctx, fresh, f"fresh{rnd}", rate, duration)
        fresh.stop()
        ctx.step(f"round {rnd + 1}/{ctx.runs}: large store")
        large = systems.start_router(large_root, config, ready_timeout=600)
        ctx.cleanup.callback(large.stop)
        large_m = _measure(ctx, large, f"large{rnd}", rate, duration)
        large.stop()
        rounds.append({"fresh": fresh_m, "large": large_m})
    return _section(ctx, events, fill, filled_bytes, rate, rounds)


def _section(
    ctx: Context,
    events: int,
    fill: dict[str, Any],
    filled_bytes: int,
    rate: float,
    rounds: list[dict[str, Any]],
) -> Section:
    def med(kind: str, key: str) -> float | None:
        return stats.median(r[kind][key] for r in rounds)

    rows = []
    waits = []
    for i, r in enumerate(rounds):
        for kind in ("fresh", "large"):
            m = r[kind]
            worst = max((p for _, p in m["windows"]), default=None)
            wait = m["offcpu"].get("sched", {}).get("loop", {}).get("runqueue_wait")
            waits.append(wait or 0.0)
            rows.append(
                [
                    i + 1,
                    kind,
                    round(m["peak_rps"]),
                    stats.fmt(m["p99"], 1),
                    stats.fmt(m["p999"], 1),
                    stats.fmt(worst, 1),
                    "-" if wait is None else f"{wait:.0%}",
                ]
            )
    p99_ratio = stats.ratio(med("large", "p99"), med("fresh", "p99"))
    p999_ratio = stats.ratio(med("large", "p999"), med("fresh", "p999"))
    peak_ratio = stats.ratio(med("large", "peak_rps"), med("fresh", "peak_rps"))
    large_p99 = med("large", "p99")
    series = {}
    for kind in ("fresh", "large"):
        w = rounds[-1][kind]["windows"]
        series[f"{kind} store"] = ([t for t, _ in w], [p for _, p in w])
    path = timelines(
        series,
        ctx.figure_path("windows"),
        title=f"p99 per {WINDOW_S:.0f} s window at {rate:,.0f} events/s",
        xlabel="seconds into the open-loop run",
        ylabel="p99 ms",
    )
    size = f"{events:,} events filled ({filled_bytes / 2**30:.1f} GiB)"
    spread = (
        f", arrival times spread over {fill['span_s'] / 86400:g} days: "
        f"{fill['partitions']} partitions of {fill['bucket_s'] / 3600:g} h"
        if fill.get("span_s") and fill.get("bucket_s")
        else ""
    )
    return Section(
        text=[
            f"{size} in {fill['seconds']} s by `bench.store_fill` (the store's own append "
            f"path{spread}); open loop at {rate:,.0f} events/s (50 % of the first fresh "
            "peak) on each."
        ],
        tables=[
            Table(
                "Fresh against large store, same offered rate",
                [
                    "round",
                    "store",
                    "peak req/s (c64)",
                    "p99 ms",
                    "p99.9 ms",
                    "worst 10 s p99",
                    "loop waiting for a CPU",
                ],
                rows,
            )
        ],
        figures=[Figure(path, "p99 per window, last round")],
        notes=[_contention_note(max(waits, default=0.0))],
        targets=[
            Target(
                "large-store p99 vs fresh",
                "≤ 1.5x and ≤ 10 ms",
                f"{stats.fmt_ratio(p99_ratio)} ({stats.fmt(large_p99, 1)} ms)",
                None
                if p99_ratio is None or large_p99 is None
                else p99_ratio <= 1.5 and large_p99 <= 10,
            ),
            Target(
                "large-store p99.9 vs fresh",
                "≤ 3x",
                stats.fmt_ratio(p999_ratio),
                None if p999_ratio is None else p999_ratio <= 3,
            ),
            Target(
                "large-store peak vs fresh",
                "≥ 0.9x",
                stats.fmt_ratio(peak_ratio),
                None if peak_ratio is None else peak_ratio >= 0.9,
            ),
        ],
        data={
            "events": events,
            "fill": fill,
            "filled_bytes": filled_bytes,
            "rate": rate,
            "rounds": rounds,
        },
    )


# Above this share of the run spent runnable but not running, the loop thread's
# latency is the host's other load, not the store (see bench.offcpu).
CONTENDED = 0.10


def _contention_note(worst_wait: float) -> str:
    if worst_wait <= CONTENDED:
        return (
            "The router's loop thread waited for a CPU at most "
            f"{worst_wait:.0%} of the time (schedstat): the latencies are the router's."
        )
    return (
        f"**Contended host**: the router's loop thread was runnable but waiting for a CPU up "
        f"to {worst_wait:.0%} of the time (schedstat; other processes held the cores). "
        "Latencies of such a run measure the host, not the store; compare the store's own "
        "per-event cost (`bench.store_fill --profile-every`) instead."
    )


SCENARIO = Scenario(
    name="large-store",
    title="10. Ingest on a large store",
    order=95,
    run=run,
    summary="open-loop ingest p99 on a store filled to millions of events vs a fresh one",
    needs=("wrk",),
    budget_s=(120, 1200),
    in_all=False,
)
