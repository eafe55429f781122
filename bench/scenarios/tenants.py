"""Scale in tenants (issue 38): per-event cost with 10 to 100,000 tenants.

For each tenant count N, one router starts with an empty config and N
tenants are created through the admin API as a platform would on sign-up
(a tenant, a Stripe source and an endpoint on an nginx sink each, one
request at a time on one keep-alive connection: the create latency is the
admin API's, not a queue's). Then:

* idle RSS of the router with N tenants (per tenant: the growth over the
  10-tenant router, divided by the extra tenants);
* events spread over all tenants, then over 1 % of them (at least one):
  wrk posts ``EVENTS`` signed events once (closed loop), the harness waits
  until the sink has seen every accepted event; events/s = delivered /
  (last delivery - start), CPU per event = router CPU over that window /
  delivered, both also as a ratio to the 10-tenant router of the same
  invocation (the machine is shared: ratios of the same run, medians);
* right after the run over all tenants, the same tenants again: a router's
  runs are minutes apart, longer than the 60 s after which an idle tenant's
  runtime state is released, so at 100,000 tenants every event of the runs
  above is its tenant's first; this one measures tenants that have state;
* admin updates: after the runs, a PATCH of a tenant's limit and of its
  endpoint's for 1,000 tenants spread over all, some holding runtime state
  (the issue's create/update target applies to both);
* start-up: the router is stopped and started again on the same store, so
  the N tenants come from the store; time from exec to /readyz.

A full run goes round seven times (``min_runs``), each round spread by
spread, every router in turn after the 10-tenant one, and a ratio is the
median of the rounds' ratios: one round's noise on this host is larger than
the differences the ratios are read for, and the host's speed drifts between
rounds. The first round over all tenants is every tenant's first event ever,
the later ones each tenant's first since its idle release (its verifier and
its endpoint's parsed URL and signer kept).

Request sets cycle over at most ``MAX_STREAMS`` sources (chosen evenly): a
run posts no more events than that, so every event still goes to a different
tenant, and wrk's template file stays bounded. ``BENCH_TENANT_COUNTS=10,1000``
runs other counts (the first is the base of the ratios).
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench import procs, signing, systems
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
from bench.machine import read_latency_ns
from bench.plots import versus_count
from bench.scenarios._common import ADMIN_TOKEN, SinkLog, cpu_reading, router_config, wait_quiet

COUNTS_FULL = (10, 1_000, 10_000, 100_000)
COUNTS_QUICK = (10, 1_000)
MAX_STREAMS = 30_000
CONNECTIONS = 16
EVENTS = 30_000  # per run: posted once, every one delivered before the next run
SPREADS = (("all", 1.0), ("1 %", 0.01))
# Runs of one router are minutes apart, longer than the engine's idle release
# (60 s): in the runs above, every event at 100,000 tenants is its tenant's
# first. This run sends the same events' tenants a new set right after the
# "all" run: the steady state of tenants with traffic (docs/performance.md).
WARM = "all, again at once"
CONFIG = router_config([], delivery={"workers": 64})


def _tenant_id(i: int) -> str:
    return f"t{i:06d}"


class Admin:
    """One keep-alive connection to the admin API."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {
            "authorization": f"Bearer {ADMIN_TOKEN}",
            "content-type": "application/json",
        }

    def _send(
        self, method: str, path: str, doc: dict[str, Any] | None, ok: tuple[int, ...]
    ) -> float:
        """One request on the connection; its latency in ms (raises on another status)."""
        body = None if doc is None else json.dumps(doc)
        t0 = time.perf_counter()
        self.conn.request(method, f"/admin/v1/{path}", body, self.headers)
        response = self.conn.getresponse()
        payload = response.read()
        elapsed = (time.perf_counter() - t0) * 1000
        if response.status not in ok:
            raise RuntimeError(f"{method} {path}: {response.status} {payload[:200]!r}")
        return elapsed

    def post(self, kind: str, doc: dict[str, Any]) -> float:
        """POST one entity; its latency in ms."""
        return self._send("POST", kind, doc, (200, 201))

    def patch(self, kind: str, entity_id: str, doc: dict[str, Any]) -> float:
        """PATCH some fields of one entity; its latency in ms."""
        return self._send("PATCH", f"{kind}/{entity_id}", doc, (200,))

    def delete(self, kind: str, entity_id: str) -> None:
        self._send("DELETE", f"{kind}/{entity_id}", None, (200, 204))

    def close(self) -> None:
        self.conn.close()


def _create(ctx: Context, port: int, first: int, count: int, sink_url: str) -> list[float]:
    """Create tenants ``first .. first+count-1`` (tenant, source, endpoint); latencies in ms."""
    admin = Admin(port)
    latencies: list[float] = []
    try:
        for i in range(first, first + count):
            tenant = _tenant_id(i)
            latencies.append(admin.post("tenants", {"id": tenant}))
            latencies.append(
                admin.post(
                    "sources",
                    {
                        "id": f"{tenant}-stripe",
                        "tenant": tenant,
                        "provider": "stripe",
                        "secrets": [STRIPE_SECRET],
                    },
                )
            )
            latencies.append(
                admin.post(
                    "endpoints",
                    {
                        "id": f"{tenant}-ep",
                        "tenant": tenant,
                        "url": f"{sink_url}/{tenant}",
                        "secret": STANDARD_SECRET,
                    },
                )
            )
            if i % 5_000 == 0 and i:
                ctx.step(f"created {i:,} tenants")
    finally:
        admin.close()
    return latencies


EXTRA_ENDPOINTS = 10_000  # added to the largest router: the memory of an idle endpoint
UPDATED = 1_000  # tenants whose tenant and endpoint are changed after the runs


def _update(port: int, count: int) -> list[float]:
    """Change a tenant's limit and its endpoint's, for tenants spread over all; ms each.

    Run after the event runs, so that some of the changed tenants hold runtime
    state (a queue to re-limit, an endpoint runtime to rebuild) and the rest do not.
    """
    admin = Admin(port)
    latencies: list[float] = []
    step = max(1, count // UPDATED)
    try:
        for i in range(0, count, step):
            tenant = _tenant_id(i)
            latencies.append(admin.patch("tenants", tenant, {"max_in_flight": 32}))
            latencies.append(admin.patch("endpoints", f"{tenant}-ep", {"max_in_flight": 8}))
    finally:
        admin.close()
    return latencies


def _endpoint_bytes(ctx: Context, router: systems.System, count: int, sink_url: str) -> float:
    """RSS growth per endpoint when a second, idle endpoint is added to existing tenants.

    Taken right after the tenants are created, while the heap only grows: after
    the runs, freed memory absorbs new endpoints and RSS does not move. The
    endpoints are deleted again, so the runs see one endpoint per tenant.
    """
    extra = min(count, EXTRA_ENDPOINTS)
    ctx.step(f"{count:,} tenants: adding {extra:,} idle endpoints")
    before = procs.rss_bytes(router.pids())
    admin = Admin(router.port)
    try:
        for i in range(extra):
            tenant = _tenant_id(i)
            admin.post(
                "endpoints",
                {
                    "id": f"{tenant}-ep2",
                    "tenant": tenant,
                    "url": f"{sink_url}/{tenant}/2",
                    "secret": STANDARD_SECRET,
                },
            )
        time.sleep(1.0)
        grown = (procs.rss_bytes(router.pids()) - before) / extra
        for i in range(extra):
            admin.delete("endpoints", f"{_tenant_id(i)}-ep2")
    finally:
        admin.close()
    return grown


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0


def _streams(count: int, share: float) -> list[signing.Stream]:
    busy = max(1, round(count * share))
    picked = min(busy, MAX_STREAMS)
    step = busy / picked
    return [
        signing.Stream(f"{_tenant_id(int(k * step))}-stripe", "stripe", STRIPE_SECRET)
        for k in range(picked)
    ]


def _written(router: systems.System) -> int:
    """Bytes the router's processes have had written to storage (``/proc/<pid>/io``)."""
    total = 0
    for pid in router.pids():
        try:
            with open(f"/proc/{pid}/io") as fh:
                for line in fh:
                    if line.startswith("write_bytes:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


def _one_run(
    ctx: Context,
    router: systems.System,
    sink: SinkLog,
    streams: list[signing.Stream],
    label: str,
) -> dict[str, Any]:
    """Post a fixed set of events once (closed loop), wait until all are delivered."""
    events = int(ctx.seconds(EVENTS, EVENTS // 4))
    rs = ctx.request_set(events, streams)
    base = sink.mark()
    cpu0, _, _ = cpu_reading(router)
    loop0 = procs.main_thread_cpu(router.pids())
    written0 = _written(router)
    made0 = _states_made(router)
    t0 = time.time()
    with ctx.profiler(router, label):
        load = ctx.wrk(
            router.url, rs, connections=CONNECTIONS, duration_s=120, count_statuses=True, once=True
        )
        accepted = load.statuses.get("200", 0) + load.statuses.get("202", 0)
        delivered, drained = wait_quiet(
            lambda: sink.poll() - base,
            target=accepted,
            quiet_s=1.0,
            timeout_s=ctx.seconds(180, 60),
        )
    cpu1, _, _ = cpu_reading(router)
    loop_cpu = procs.main_thread_cpu(router.pids()) - loop0
    written = _written(router) - written0
    made1 = _states_made(router)
    times = sink.times[base:]
    span = max(1e-3, (max(times) if times else t0) - t0)
    return {
        "accepted": accepted,
        "delivered": delivered,
        "drained": drained,
        "eps": delivered / span,
        "cpu_us": (cpu1 - cpu0) / delivered * 1e6 if delivered else None,
        "written_kb": written / delivered / 1024 if delivered else None,
        # Is the event loop the bottleneck? Its thread's share of the run, and
        # how long wrk took to have every event accepted against the drain.
        "loop_busy": loop_cpu / span,
        # Tenant delivery states built per event: its tenant's first work, or its
        # first since an idle release (None from a router that does not count them).
        "states_made": (made1 - made0) / delivered
        if delivered and made0 is not None and made1 is not None
        else None,
        "loop_us": loop_cpu / delivered * 1e6 if delivered else None,
        "ingest_s": load.duration_s,
        "ingest_p50_ms": load.latency_ms.get("p50"),
        "span_s": span,
    }


def _states_made(router: systems.System) -> int | None:
    """The router's count of tenant delivery states built so far (``GET /delivery``)."""
    made = router.get_json("/admin/v1/delivery?limit=1", 60).get("tenant_states_made")
    return None if made is None else int(made)


def _populate(ctx: Context, count: int, sink: Any) -> tuple[systems.System, dict[str, Any]]:
    """A router with ``count`` tenants created through its admin API, and what that cost."""
    root = ctx.path(f"router-{count}-{os.getpid()}")
    ctx.step(f"{count:,} tenants: starting an empty router")
    router = systems.start_router(root, CONFIG)
    ctx.cleanup.callback(router.stop)
    ctx.step(f"{count:,} tenants: creating them through the admin API")
    t0 = time.monotonic()
    latencies = _create(ctx, router.port, 0, count, sink.url)
    create_s = time.monotonic() - t0
    time.sleep(1.0)
    last = latencies[-min(len(latencies), 3_000) :]  # the last 1,000 tenants: at full size
    return router, {
        "count": count,
        "root": str(root),
        "create_s": create_s,
        "create_p99_ms": _p99(latencies),
        "create_p99_ms_at_size": _p99(last),
        "create_median_ms": statistics.median(latencies) if latencies else 0.0,
        "rss": procs.rss_bytes(router.pids()),
        "runs": {label: [] for label, _ in SPREADS},
    }


def _startup(ctx: Context, result: dict[str, Any]) -> float:
    """Seconds from exec to /readyz of a router reading every tenant from the store."""
    ctx.step(f"{result['count']:,} tenants: start-up from the store")
    t0 = time.monotonic()
    again = systems.start_router(Path(result["root"]), CONFIG, ready_timeout=600)
    elapsed = time.monotonic() - t0
    again.stop()
    return elapsed


def _per_tenant(results: list[dict[str, Any]]) -> float | None:
    """Idle RSS growth per tenant from the smallest router to the largest."""
    extra = results[-1]["count"] - results[0]["count"]
    return (results[-1]["rss"] - results[0]["rss"]) / extra if extra > 0 else None


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def _paired(res: dict[str, Any], base: dict[str, Any], label: str, key: str) -> float | None:
    """Median over rounds of one round's ratio of ``res`` to ``base``.

    The host's speed drifts between rounds by more than the differences read
    here; a ratio inside one round cancels what both runs of it shared.
    """
    ratios = [
        run[key] / ref[key]
        for run, ref in zip(res["runs"].get(label, []), base["runs"].get(label, []), strict=False)
        if run.get(key) and ref.get(key)
    ]
    return statistics.median(ratios) if ratios else None


def _time_row(res: dict[str, Any]) -> list[str]:
    """The loop thread's share and the ingest/drain split, medians of the runs."""
    runs, again = res["runs"]["all"], res["runs"].get(WARM, [])
    ingest, span = _median(runs, "ingest_s"), _median(runs, "span_s")
    return [
        f"{res['count']:,}",
        _pct(_median(runs, "loop_busy")),
        _fmt(_median(runs, "loop_us")),
        _fmt(ingest, 2),
        _fmt(span - ingest if span is not None and ingest is not None else None, 2),
        _fmt(_median(runs, "ingest_p50_ms"), 2),
        _fmt(_median(runs, "states_made"), 2),
        _pct(_median(again, "loop_busy")),
        _fmt(_median(again, "loop_us")),
        _fmt(_median(again, "states_made"), 2),
    ]


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.0f} %"


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


# Larger than any cache and than the TLB's reach, as a 100,000-tenant router's heap is.
COLD_MIB = 256


def run(ctx: Context) -> Section:
    override = os.environ.get("BENCH_TENANT_COUNTS")  # e.g. "10,1000,10000"
    if override:
        counts: tuple[int, ...] = tuple(int(n) for n in override.split(","))
    else:
        counts = COUNTS_QUICK if ctx.quick else COUNTS_FULL
    ctx.step("timing random reads from memory")
    hot_ns, cold_ns = read_latency_ns(1), read_latency_ns(COLD_MIB)
    sink = ctx.sink()
    sink_log = SinkLog(sink.access_log)
    # Every router is populated first and kept running; then the runs go round
    # the routers in turn, so each ratio compares runs minutes apart, not a
    # host state at the start of the invocation with another at its end.
    populated = [_populate(ctx, n, sink) for n in counts]
    largest_router, largest_result = populated[-1]
    largest_result["endpoint_bytes"] = _endpoint_bytes(
        ctx, largest_router, largest_result["count"], sink.url
    )
    # Spread-major: a spread's runs on the routers follow one another, so each
    # router's run is paired with the 10-tenant one of the same round, seconds
    # before it (see _paired).
    for r in range(ctx.runs):
        for label, share in SPREADS:
            for router, result in populated:
                streams = _streams(result["count"], share)
                count = result["count"]
                ctx.step(f"run {r + 1}: {count:,} tenants, events over {label}")
                tag = f"{count}-{'all' if share == 1.0 else 'one-percent'}-{r}"
                result["runs"][label].append(_one_run(ctx, router, sink_log, streams, tag))
                if share == 1.0:  # the same tenants again, before their state is released
                    ctx.step(f"run {r + 1}: {count:,} tenants, {WARM}")
                    warm = _one_run(ctx, router, sink_log, streams, f"{tag}-warm")
                    result["runs"].setdefault(WARM, []).append(warm)
    for router, result in populated:
        ctx.step(f"{result['count']:,} tenants: changing tenants and endpoints")
        updates = _update(router.port, result["count"])
        result["update_p99_ms"] = _p99(updates)
        result["update_median_ms"] = statistics.median(updates)
    results = []
    for router, result in populated:
        router.stop()
        result["startup_s"] = _startup(ctx, result)
        results.append(result)
    base = results[0]
    rows = []
    # Keyed by the plot's legend name: the rates and their labels must match.
    eps_series: dict[str, list[float]] = {f"events over {label}": [] for label, _ in SPREADS}
    ratio_series: dict[str, list[float]] = {name: [] for name in eps_series}
    for res in results:
        row: list[Any] = [f"{res['count']:,}"]
        for label, _ in SPREADS:
            eps = _median(res["runs"][label], "eps")
            cpu = _median(res["runs"][label], "cpu_us")
            kb = _median(res["runs"][label], "written_kb")
            eps_ratio = _paired(res, base, label, "eps")
            cpu_ratio = _paired(res, base, label, "cpu_us")
            row += [_fmt(eps), _times(eps_ratio), _fmt(cpu), _times(cpu_ratio), _fmt(kb, 1)]
            name = f"events over {label}"
            eps_series[name].append(eps or 0.0)
            ratio_series[name].append(eps_ratio or 0.0)
        rows.append(row)
    warm_rows = [
        [
            f"{res['count']:,}",
            _fmt(_median(res["runs"].get(WARM, []), "eps")),
            _times(_paired(res, base, WARM, "eps")),
            _fmt(_median(res["runs"].get(WARM, []), "cpu_us")),
            _times(_paired(res, base, WARM, "cpu_us")),
        ]
        for res in results
    ]
    time_rows = [_time_row(res) for res in results]
    columns = ["tenants"]
    for label, _ in SPREADS:
        columns += [
            f"events/s ({label})",
            "ratio",
            f"CPU µs/event ({label})",
            "ratio",
            "KB written/event",
        ]
    admin_rows = []
    for res in results:
        extra = res["count"] - base["count"]
        per_tenant = (res["rss"] - base["rss"]) / extra if extra > 0 else None
        admin_rows.append(
            [
                f"{res['count']:,}",
                _fmt(res["create_median_ms"], 2),
                _fmt(res["create_p99_ms"], 2),
                _fmt(res["create_p99_ms_at_size"], 2),
                f"{res['create_s']:.1f}",
                _fmt(res["update_median_ms"], 2),
                _fmt(res["update_p99_ms"], 2),
                f"{res['rss'] / 2**20:.0f}",
                _fmt(per_tenant),
                f"{res['startup_s']:.2f}",
            ]
        )
    largest = results[-1]
    memory_rows = [
        [
            "tenant (with a Stripe source and an endpoint)",
            _fmt(_per_tenant(results)),
            f"{base['count']:,} -> {largest['count']:,} tenants",
        ],
        [
            "endpoint (a second one on an existing tenant)",
            _fmt(largest.get("endpoint_bytes")),
            f"{min(largest['count'], EXTRA_ENDPOINTS):,} added to the "
            f"{largest['count']:,}-tenant router",
        ],
    ]
    worst = min((_paired(largest, base, label, "eps") or 0.0 for label, _ in SPREADS), default=0.0)
    undrained = [
        f"{res['count']:,} ({label})"
        for res in results
        for label, _ in SPREADS
        if not all(r["drained"] for r in res["runs"][label])
    ]
    figure = versus_count(
        [res["count"] for res in results],
        eps_series,
        ctx.figure_path("events"),
        title="Events/s delivered end to end against tenant count",
        xlabel="tenants (one source and one endpoint each)",
        ylabel="events/s (median of runs)",
        floor=0.9,
        ratios=ratio_series,
    )
    n_largest = f"{largest['count']:,}"
    return Section(
        text=[
            "Each tenant has one Stripe source and one endpoint (an nginx sink), created "
            "through the admin API one request at a time. Per run, "
            f"{EVENTS:,} signed events are posted once by wrk ({CONNECTIONS} connections, "
            "closed loop) and delivered; events/s counts "
            "deliveries seen by the sink. The host is shared (2 cores, other engineers' "
            "jobs running) and its speed drifts from one minute to the next: each round "
            "runs a spread on every router in turn, the 10-tenant router first, and a "
            "ratio is the median over rounds of that round's ratio to the 10-tenant run "
            "(rates are medians of the runs; compare the ratios rather than the rates).",
            "At 100,000 tenants events spread over all of them find their tenant's state "
            "cold in the CPU caches, so that ratio moves with the host's memory latency as "
            f"well as with the code: here a chain of dependent random reads from Python took "
            f"{cold_ns:.0f} ns a step over {COLD_MIB} MiB against {hot_ns:.0f} ns over 1 MiB "
            "(bench.machine.read_latency_ns, at the start of the invocation).",
        ],
        tables=[
            Table("Delivered events/s and router CPU per event", columns, rows),
            Table(
                "The same tenants again at once (their runtime state kept)",
                ["tenants", "events/s", "ratio", "CPU µs/event", "ratio"],
                warm_rows,
                "Right after each run over all tenants, a new set of events to the same "
                "tenants: in the table above every event at 100,000 tenants is its tenant's "
                "first (the runs are further apart than the 60 s idle release), here none is.",
            ),
            Table(
                "Where a run's time goes (events over all tenants, then the same again)",
                [
                    "tenants",
                    "loop thread busy (all)",
                    "loop µs/event (all)",
                    "ingest s (all)",
                    "drain s (all)",
                    "ingest p50 ms (all)",
                    "states built/event (all)",
                    "loop thread busy (again)",
                    "loop µs/event (again)",
                    "states built/event (again)",
                ],
                time_rows,
                "Busy: the router's main thread (its event loop) CPU over the run's span, "
                "from wrk's start to the last delivery; below 100 % the loop waited on "
                "something else (the WAL's fsync, the sink, the other threads). Ingest: "
                "wrk's time to have all events answered; drain: from then to the last "
                "delivery. States built: tenant delivery states the router built per "
                "delivered event (a tenant's first work, or its first since its state was "
                "released idle; GET /admin/v1/delivery's tenant_states_made).",
            ),
            Table(
                "Admin API create latency, idle memory and start-up",
                [
                    "tenants",
                    "create median ms",
                    "create p99 ms",
                    "p99 ms, last 1,000 tenants",
                    "create all, s",
                    "update median ms",
                    "update p99 ms",
                    "idle RSS MB",
                    "RSS bytes/tenant",
                    "start-up s",
                ],
                admin_rows,
                "A tenant here is three entities (tenant, source, endpoint): bytes per "
                "tenant include its source's verifier and its endpoint. Update: after the "
                f"runs, a PATCH of the tenant's and of its endpoint's limit for {UPDATED:,} "
                "tenants spread over all (some holding runtime state). Start-up is from "
                "exec to /readyz with every tenant read from the store.",
            ),
            Table(
                "Idle memory (RSS growth of the router process)",
                ["per idle", "bytes", "measured over"],
                memory_rows,
                "Idle: created through the admin API and never sent an event. Runtime "
                "state (verifier, credit queue, breaker, metric series) is built on a "
                "tenant's first event, so these bytes are its stored documents, parsed "
                "configuration, indexes and routing entry.",
            ),
            *ctx.profile_tables(),
        ],
        figures=[
            Figure(
                figure,
                "Delivered events/s against tenant count, events spread over all tenants "
                "and over 1 % of them; labels: the table's paired ratio to the 10-tenant router, "
                "dotted: 0.9x of the 10-tenant rate",
            )
        ],
        targets=[
            Target(
                f"events/s at {n_largest} tenants vs 10",
                "≥ 0.9x",
                f"{worst:.2f}x",
                worst >= 0.9,
            ),
            Target(
                f"admin create p99 at {n_largest} tenants",
                "≤ 5 ms",
                f"{largest['create_p99_ms_at_size']:.1f} ms",
                largest["create_p99_ms_at_size"] <= 5.0,
            ),
            Target(
                f"admin update p99 at {n_largest} tenants",
                "≤ 5 ms",
                f"{largest['update_p99_ms']:.1f} ms",
                largest["update_p99_ms"] <= 5.0,
            ),
            Target(
                f"start-up with {n_largest} stored tenants",
                "≤ 5 s",
                f"{largest['startup_s']:.1f} s",
                largest["startup_s"] <= 5.0,
            ),
        ],
        notes=[f"Not drained within the timeout: {', '.join(undrained)}."] if undrained else [],
        data={"results": results},
    )


SCENARIO = Scenario(
    name="tenants",
    title="9. Scale in tenants",
    order=90,
    run=run,
    summary="10 to 100,000 tenants created through the admin API: events/s, CPU, RSS, start-up",
    needs=("wrk", "nginx"),
    budget_s=(240, 2400),
    # One round's spread at 100,000 tenants outgrows what three rounds settle
    # (benchmarks.md section 9, docs/performance.md): a median of seven.
    min_runs=7,
)
