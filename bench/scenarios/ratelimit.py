"""Scenario: the rate limiter's Redis modes, measured from the router's own client.

Configurations (:mod:`bench.ratelimit_bench` measures them; see its docstring
for what a sample holds): script (EVALSHA) and function (FCALL), each exact
(one script call per decision, the calls of one loop turn sent as one
pipeline) and with leases of 100; script mode with leases of 0, 1, 10 and
100 for Redis calls per 1,000 decisions. They run against a private
redis-server, beside ``redis-benchmark`` EVALSHA of the same script in the
same run (the reference), and against a 3-master Redis Cluster started the
way the tests start theirs (``tests/support/redis_servers.py``).

Targets (issue 4): with leases of 100, >= 50x fewer Redis calls than exact
decisions, and <= 5 us amortised client CPU per decision.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from bench import procs, stats
from bench.api import Context, Scenario, Section, Table, Target
from bench.ratelimit_bench import (
    CONCURRENCY,
    DECISION_TIMEOUT_S,
    TENANTS,
    WARM_UP,
    Sample,
    measure_client,
    redis_benchmark,
)
from bench.scenarios._common import with_range
from hookrouter.ratelimit.redis_calls import Mode

LEASE_TARGET = 100  # the lease size the targets name


@dataclass(frozen=True)
class Config:
    """One client configuration; ``scale`` x the base count of decisions (leases are cheap)."""

    label: str
    mode: Mode
    lease: int
    scale: int = 1


SCRIPT = Config("script (EVALSHA)", "script", 0)
FUNCTION = Config("function (FCALL)", "function", 0)
# Leased decisions are cheap: 10x as many keeps a run near a second (CPU tick: 10 ms).
SCRIPT_LEASE = Config(f"script, lease {LEASE_TARGET}", "script", LEASE_TARGET, 10)
FUNCTION_LEASE = Config(f"function, lease {LEASE_TARGET}", "function", LEASE_TARGET, 10)
# Script mode by lease size (lease 0 is SCRIPT).
LEASE_LADDER = (
    SCRIPT,
    Config("script, lease 1", "script", 1),
    Config("script, lease 10", "script", 10, 3),
    SCRIPT_LEASE,
)
STANDALONE = (SCRIPT, FUNCTION, *LEASE_LADDER[1:], FUNCTION_LEASE)
CLUSTER = (SCRIPT, FUNCTION, SCRIPT_LEASE, FUNCTION_LEASE)
PIPELINES = (1, 16)  # redis-benchmark -P: one call per round trip, then the server's ceiling

CPU = "client CPU µs/decision"
MODES_COLUMNS = ["client", "decisions/s", "vs redis-benchmark -P1", CPU,
                 "Redis CPU µs/decision", "Redis calls /1k decisions"]  # fmt: skip
LEASE_COLUMNS = ["lease", "script calls /1k", "fewer calls than lease 0", "round trips /1k",
                 "fewer round trips than lease 0", "decisions/s", CPU]  # fmt: skip
CLUSTER_COLUMNS = ["client", "decisions/s", CPU, "Redis CPU µs/decision (3 masters)",
                   "Redis calls /1k", "round trips /1k"]  # fmt: skip


def benchmark_label(pipeline: int) -> str:
    return f"redis-benchmark EVALSHA -c{CONCURRENCY} -P{pipeline}"


class Samples:
    """Samples keyed by (deployment, configuration label); medians and ranges."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], list[Sample]] = defaultdict(list)

    def add(self, where: str, label: str, sample: Sample) -> None:
        self.items[(where, label)].append(sample)

    def median(self, where: str, label: str, metric: str) -> float | None:
        return stats.median(s.metric(metric) for s in self.items.get((where, label), []))

    def range(self, where: str, label: str, metric: str) -> tuple[float, float] | None:
        return stats.spread(s.metric(metric) for s in self.items.get((where, label), []))

    def degraded(self) -> int:
        return sum(s.degraded for ss in self.items.values() for s in ss)

    def to_json(self) -> dict[str, Any]:
        return {f"{w}|{c}": [asdict(s) for s in ss] for (w, c), ss in self.items.items()}


# -- the scenario ---------------------------------------------------------------------


def _start_cluster(ctx: Context) -> tuple[tuple[str, ...], list[int], str]:
    """(startup nodes, server pids, "") or ((), [], why the cluster is not measured)."""
    ctx.step("starting a 3-master Redis Cluster")
    try:
        # The tests' own startup (free ports with their bus twins, cluster create, wait ok).
        from tests.support.redis_servers import redis_cluster

        cluster = ctx.cleanup.enter_context(redis_cluster(ctx.path("cluster")))
    except (ImportError, RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return (), [], f"{type(exc).__name__}: {exc}"
    pids = [node.proc.pid for node in cluster.nodes if node.proc is not None]
    return tuple(cluster.startup_nodes), pids, ""


def _base(ctx: Context) -> int:
    """Decisions per run of an exact configuration (sized for a run of a second or two)."""
    return int(ctx.seconds(40_000, 4_000))


def _one_run(
    ctx: Context,
    samples: Samples,
    server: procs.Service,
    cluster: tuple[tuple[str, ...], list[int]],
) -> None:
    """One round: every configuration in turn, so each ratio compares neighbouring runs."""
    base = _base(ctx)
    assert server.port is not None
    url = f"redis://127.0.0.1:{server.port}/0"
    for config in STANDALONE:
        ctx.step(f"standalone, {config.label}")
        sample = measure_client(
            config.mode, config.lease, base * config.scale, server.pids(), url=url
        )
        samples.add("standalone", config.label, sample)
    for pipeline in PIPELINES:
        ctx.step(f"redis-benchmark EVALSHA -P{pipeline}")
        sample = redis_benchmark(
            ctx.tools.require("redis-benchmark"),
            server.port,
            pipeline=pipeline,
            requests=int(ctx.seconds(100_000, 20_000)),
            server_pids=server.pids(),
        )
        samples.add("standalone", benchmark_label(pipeline), sample)
    nodes, pids = cluster
    for config in CLUSTER if nodes else ():
        ctx.step(f"cluster, {config.label}")
        sample = measure_client(
            config.mode, config.lease, base * config.scale, pids, cluster_nodes=nodes
        )
        samples.add("cluster", config.label, sample)


def _cell(samples: Samples, where: str, label: str, metric: str, digits: int = 1) -> str:
    return stats.fmt(samples.median(where, label, metric), digits)


def _modes_table(samples: Samples) -> Table:
    reference = samples.median("standalone", benchmark_label(1), "rate")
    rows = []
    labels = [f"router: {c.label}" for c in CLUSTER] + [benchmark_label(p) for p in PIPELINES]
    keys = [c.label for c in CLUSTER] + [benchmark_label(p) for p in PIPELINES]
    for shown, key in zip(labels, keys, strict=True):
        rate = samples.median("standalone", key, "rate")
        rows.append(
            [
                shown,
                with_range(rate, samples.range("standalone", key, "rate")),
                stats.fmt_ratio(stats.ratio(rate, reference)),
                _cell(samples, "standalone", key, "client_us"),
                _cell(samples, "standalone", key, "server_us"),
                _cell(samples, "standalone", key, "calls_k"),
            ]
        )
    return Table(
        f"Standalone Redis: decisions/s and CPU per decision ({CONCURRENCY} concurrent "
        f"decisions, {len(TENANTS)} tenants)",
        MODES_COLUMNS,
        rows,
        "Client CPU: the router's event-loop thread; for redis-benchmark, its own process.",
    )


def _lease_table(samples: Samples) -> Table:
    exact_calls = samples.median("standalone", SCRIPT.label, "calls_k")
    exact_trips = samples.median("standalone", SCRIPT.label, "trips_k")
    rows = []
    for config in LEASE_LADDER:
        calls = samples.median("standalone", config.label, "calls_k")
        trips = samples.median("standalone", config.label, "trips_k")
        rows.append(
            [
                config.lease,
                stats.fmt(calls, 1),
                stats.fmt_ratio(stats.ratio(exact_calls, calls), 1),
                stats.fmt(trips, 1),
                stats.fmt_ratio(stats.ratio(exact_trips, trips), 1),
                stats.fmt(samples.median("standalone", config.label, "rate")),
                _cell(samples, "standalone", config.label, "client_us"),
            ]
        )
    return Table(
        "Redis calls per 1,000 decisions by lease size (standalone, script mode)",
        LEASE_COLUMNS,
        rows,
        "Lease 0 is exact: one script call per decision, the calls of one loop turn in one "
        "pipeline (one round trip). With leases, every tenant is equally busy here, so their "
        "refills fall due together and share pipelines: uneven traffic needs more round "
        "trips for the same script calls.",
    )


def _cluster_table(samples: Samples, why: str) -> Table:
    rows: list[list[Any]] = []
    for config in CLUSTER:
        if why:
            rows.append([config.label, f"not measured: {why}", "", "", "", ""])
            continue
        rows.append(
            [
                config.label,
                with_range(
                    samples.median("cluster", config.label, "rate"),
                    samples.range("cluster", config.label, "rate"),
                ),
                _cell(samples, "cluster", config.label, "client_us"),
                _cell(samples, "cluster", config.label, "server_us"),
                _cell(samples, "cluster", config.label, "calls_k"),
                _cell(samples, "cluster", config.label, "trips_k"),
            ]
        )
    return Table(
        "3-master Redis Cluster: the router's client",
        CLUSTER_COLUMNS,
        rows,
        "Round trips count pipelines: redis-py splits each one per master and sends the "
        "parts concurrently. Redis CPU is summed over the three masters.",
    )


def verdicts(
    exact_calls_k: float | None,
    leased_calls_k: float | None,
    leased_cpu_us: dict[str, float | None],
) -> list[Target]:
    """The issue's two targets from the medians (calls per 1,000; client µs per mode)."""
    factor = stats.ratio(exact_calls_k, leased_calls_k)
    calls = Target(
        f"Redis calls with lease {LEASE_TARGET} vs exact (script mode)",
        "≥ 50x fewer",
        "n/a" if factor is None else f"{factor:.0f}x fewer",
        None if factor is None else factor >= 50,
    )
    known = {mode: us for mode, us in leased_cpu_us.items() if us is not None}
    worst = max(known.values()) if known else None
    cpu = Target(
        f"client CPU per decision with lease {LEASE_TARGET}",
        "≤ 5 µs",
        ", ".join(f"{us:.1f} µs ({mode})" for mode, us in known.items()) or "n/a",
        None if worst is None or len(known) < len(leased_cpu_us) else worst <= 5.0,
        "judged on the slower mode; standalone Redis, the router's client on uvloop",
    )
    return [calls, cpu]


def _notes(samples: Samples, base: int) -> list[str]:
    degraded = samples.degraded()
    return [
        f"Each run makes N = {base:,} decisions per exact configuration ({CONCURRENCY} "
        f"tasks over {len(TENANTS)} tenants; {LEASE_LADDER[2].scale}x N for lease 10 and "
        f"{SCRIPT_LEASE.scale}x N for lease {LEASE_TARGET}, where a decision costs little), "
        f"after {WARM_UP} sequential warm-up decisions that are not counted (connections, "
        "program load, every tenant's first lease).",
        f"A lease call after the first tops the local supply up from the low-water mark "
        f"({LEASE_TARGET // 4}, the default lease // 4) to {LEASE_TARGET}, so it carries about "
        f"{LEASE_TARGET - LEASE_TARGET // 4} tokens: about "
        f"{1000 / (LEASE_TARGET - LEASE_TARGET // 4):.0f} calls per 1,000 decisions, not "
        f"{1000 // LEASE_TARGET}.",
        "redis-benchmark sends EVALSHA of the same script with the same arguments on one key "
        "(the router's client spreads over one key per tenant); its client is C, so its CPU "
        "per call is the floor a Python client is compared with.",
        f"{degraded:,} decisions were answered by the failure policy instead of Redis "
        f"(deadline {DECISION_TIMEOUT_S:g} s); they are included in the figures."
        if degraded
        else "Every decision was answered by Redis (none fell back to the failure policy).",
    ]


def run(ctx: Context) -> Section:
    ctx.step("starting redis-server")
    server = ctx.redis()
    nodes, pids, why = _start_cluster(ctx)
    samples = Samples()
    for i in range(ctx.runs):
        ctx.step(f"run {i + 1}/{ctx.runs}")
        _one_run(ctx, samples, server, (nodes, pids))
    targets = verdicts(
        samples.median("standalone", SCRIPT.label, "calls_k"),
        samples.median("standalone", SCRIPT_LEASE.label, "calls_k"),
        {
            c.mode: samples.median("standalone", c.label, "client_us")
            for c in (SCRIPT_LEASE, FUNCTION_LEASE)
        },
    )
    exact_us = samples.median("standalone", SCRIPT.label, "client_us")
    text = [
        f"The router's own limiter client against Redis, {ctx.runs} run(s) per figure "
        f"(medians; run-to-run range in brackets). Exact decisions cost "
        f"{stats.fmt(exact_us, 1)} µs of client CPU each; leases of {LEASE_TARGET} cost "
        f"{targets[1].measured} with {targets[0].measured} Redis calls."
    ]
    return Section(
        text=text,
        tables=[_modes_table(samples), _lease_table(samples), _cluster_table(samples, why)],
        targets=targets,
        notes=_notes(samples, _base(ctx)),
        data={"samples": samples.to_json(), "cluster": why or "measured"},
    )


SCENARIO = Scenario(
    name="ratelimit",
    title="5. Rate limiter modes",
    order=50,
    run=run,
    summary="limiter decisions/s, client CPU and Redis calls: script, function, leases, cluster",
    needs=("redis-server", "redis-cli", "redis-benchmark"),
    budget_s=(10, 120),
)
