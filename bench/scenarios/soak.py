"""Soak (on demand, not in ``all``'s default budget): an hour of ingest and delivery at half load.

One router delivers to an nginx sink with retention set short
(``[store.retention]`` delivered/failed after ``RETENTION``, checked every
30 s), so within the hour the store reaches its steady size: what comes in
per minute is what retention removes. The load is open loop at 50 % of a
short end-to-end peak measured first, in one-minute runs (each with a
freshly signed request set, since signatures must stay inside the
providers' 300 s tolerance). The next minute's set is signed on a
low-priority thread during the current one and the per-second figures are
worked out after the hour, so the minutes follow one another with only the
client's start between them.

Per minute: p99 and p99.9 at the client, the router's RSS and the store's
size on disk (each the mean of samples every ``SAMPLE_S`` seconds within the
minute, so a retention pass at one instant does not decide the minute; the
store's largest sample too), the worst one-second p99 and how many seconds
passed 10 ms, the 2xx count and what the sink received. Each second's p99 and
the store's counters read once a second (dedup merges and flushes,
checkpoints, WAL rewinds, pruned events) are kept in the result's data, so a
bad minute can be laid beside what the store did in it. At the end: the sink has
a request for every acknowledged event (delivery is at least once: unique
webhook ids are counted), and the router's open backlog is zero. Flatness:
per-minute p99, RSS and store size over the last half within ±10 % of their
median there.

Length: ``HOOKROUTER_BENCH_SOAK_MINUTES`` (default 60; 3 with --quick);
retention ``HOOKROUTER_BENCH_SOAK_RETENTION`` (default 10m; 3m suits a
10-minute run); time partitions ``HOOKROUTER_BENCH_SOAK_BUCKET`` (default 1m,
so that retention unlinks whole partitions many times within the hour, as a
week's retention of one-hour buckets would; ``off``: one file, rows deleted).
Retention unlinks a partition once its whole bucket is past the cutoff, so
the store holds between the retention and the retention plus one bucket: a
sawtooth of one bucket in the retention (1m in 10m: ±5 %; a week of one-hour
buckets: ±0.3 %), where the flatness target is ±10 %. Rate:
``HOOKROUTER_BENCH_SOAK_RATE`` (events/s) pins the offered rate, for runs
compared across hosts or commits.

``HOOKROUTER_BENCH_SOAK_FAILING`` (a share such as 0.005; default 0) sends
that share of the events to a second tenant whose endpoint answers 500, with
no retries: those events end failed and are kept for ``FAILED_RETENTION``
while the delivered ones around them expire, so every partition past the
cutoff is compacted (its failed rows copied out, the file unlinked) under
load, as a store with many tenants sees it. The breaker is set never to
open (``[delivery.breaker] min_requests``): an open breaker would park those
deliveries instead of failing them.
"""

from __future__ import annotations

import os
import statistics
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import procs, stats
from bench.api import Context, Figure, Scenario, Section, Table, Target
from bench.plots import timelines
from bench.scenarios._common import (
    SinkLog,
    TenantSpec,
    closed_loop,
    open_loop,
    recorded_outcome,
    router_with_redis,
    set_size,
    sink_ids,
    wait_quiet,
)
from bench.scenarios.large_store import MetricsPoller, store_metrics, window_p99

MINUTES_ENV = "HOOKROUTER_BENCH_SOAK_MINUTES"
RETENTION_ENV = "HOOKROUTER_BENCH_SOAK_RETENTION"  # e.g. "3m" for a shortened run
RETENTION = "10m"
BUCKET_ENV = "HOOKROUTER_BENCH_SOAK_BUCKET"
# A fixed offered rate (events/s) instead of half the warm-up's: runs on
# hosts of different speed, or before and after a change, then compare.
RATE_ENV = "HOOKROUTER_BENCH_SOAK_RATE"
BUCKET = "1m"
FAILING_ENV = "HOOKROUTER_BENCH_SOAK_FAILING"
FAILED_RETENTION = "30d"  # the default: failed events outlive the delivered ones
BREAKER_NEVER_OPENS = 1_000_000_000  # min_requests: the failing endpoint stays closed
SAMPLE_S = 5.0
WARM_SET = 200_000  # events of the 5 s warm-up (40,000/s before it wraps)
COLUMNS = ["minute", "p99 ms", "p99.9 ms", "worst 1 s p99 ms", "seconds > 10 ms", "RSS MiB",
           "store MiB", "store max MiB", "2xx", "sink lines"]  # fmt: skip
SLOW_SECOND_MS = 10.0
FLAT = 0.10  # ±10 % of the median over the last half


def _tenant(sink_url: str) -> TenantSpec:
    return TenantSpec(
        "bench", endpoint_url=f"{sink_url}/bench", queue_capacity=10_000, max_in_flight=128
    )


def _failing_tenant(sink_url: str) -> TenantSpec:
    """A tenant whose one endpoint answers 500 and is never retried: its events end failed."""
    return TenantSpec(
        "failing",
        endpoint_url=f"{sink_url}/fail/failing",
        extra_endpoint={"retry_schedule": []},
    )


def _streams(tenant: TenantSpec, failing: TenantSpec | None, share: float) -> list[Any]:
    """One failing event in every ``1 / share`` (sets cycle over their streams)."""
    if failing is None:
        return [tenant.stream()]
    return [tenant.stream()] * (max(2, round(1 / share)) - 1) + [failing.stream()]


def _means(samples: list[tuple[float, int, float, int]]) -> tuple[float, float]:
    """Mean RSS and store size over a minute's samples."""
    return statistics.fmean(s[1] for s in samples), statistics.fmean(s[3] for s in samples)


def _ok(statuses: dict[str, int]) -> int:
    return sum(n for code, n in statuses.items() if str(code).startswith("2"))


def _flat(values: list[float]) -> tuple[float | None, bool | None]:
    """(largest deviation from the median over the last half, within ±FLAT)."""
    tail = [v for v in values[len(values) // 2 :] if v]
    mid = stats.median(tail)
    if not tail or not mid:
        return None, None
    worst = max(abs(v - mid) / mid for v in tail)
    return worst, worst <= FLAT


@dataclass
class _Minute:
    """What one minute of load left, summed up once the hour is over."""

    latency_ms: dict[str, float]
    ok: int
    samples: list[tuple[float, int, float, int]]
    poller: MetricsPoller
    records: Path
    sink_lines: int

    def row(self, number: int, per_second: list[float]) -> list[Any]:
        rss, disk = _means(self.samples)
        return [
            number,
            round(self.latency_ms.get("p99", 0.0), 1),
            round(self.latency_ms.get("p99.9", 0.0), 1),
            max(per_second, default=0.0),
            sum(1 for v in per_second if v > SLOW_SECOND_MS),
            round(rss / 2**20, 1),
            round(disk / 2**20, 1),
            round(max(s[3] for s in self.samples) / 2**20, 1),
            self.ok,
            self.sink_lines,
        ]


class _SetsAhead:
    """The next minute's request set, signed on a thread while the current minute runs.

    Made between the minutes, the sets and the per-second figures paused the
    load (docs/performance.md); the thread runs at the lowest priority, so it
    takes only CPU the router leaves.
    """

    def __init__(self, ctx: Context, size: int, streams: list[Any]) -> None:
        self._ctx, self._size, self._streams = ctx, size, streams
        self._ready: Any = self._make()
        self._thread: threading.Thread | None = None
        self._made: list[Any] = []  # the thread's set, or the exception it raised

    def take(self, *, make_next: bool) -> Any:
        """This minute's set; starts signing the next one when ``make_next``."""
        if self._thread is not None:
            self._thread.join()
            self._thread, made = None, self._made.pop()
            if isinstance(made, BaseException):
                raise made
            self._ready = made
        if make_next:
            self._thread = threading.Thread(target=self._make_niced, name="soak-next-set")
            self._thread.start()
        return self._ready

    def _make(self) -> Any:
        return self._ctx.request_set(self._size, self._streams, processes=1)

    def _make_niced(self) -> None:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        try:
            self._made.append(self._make())
        except BaseException as exc:  # raised again in take(), on the bench's thread
            self._made.append(exc)


def run(ctx: Context) -> Section:
    minutes = int(os.environ.get(MINUTES_ENV, "3" if ctx.quick else "60"))
    sink = ctx.sink()
    tenant = _tenant(sink.url)
    keep = os.environ.get(RETENTION_ENV, RETENTION)
    share = float(os.environ.get(FAILING_ENV, "0"))
    failing = _failing_tenant(sink.url) if share > 0 else None
    kept_failed = keep if failing is None else FAILED_RETENTION
    retention = {"delivered": keep, "failed": kept_failed, "interval": "30s"}
    store: dict[str, Any] = {"retention": retention}
    bucket = os.environ.get(BUCKET_ENV, BUCKET)
    if bucket != "off":
        store["sqlite"] = {"bucket": bucket}
    extra: dict[str, Any] = {"store": store}
    if failing is not None:
        extra["delivery"] = {"breaker": {"min_requests": BREAKER_NEVER_OPENS}}
    tenants = [tenant] if failing is None else [tenant, failing]
    router = router_with_redis(ctx, tenants, extra=extra)
    data_dir = router.root / "data"
    log = SinkLog(sink.access_log)
    ctx.step("end-to-end peak (warm-up)")
    # Large enough not to wrap in 5 s on a fast host: a replayed id is a cheap
    # duplicate, and a set of 40,000 once passed for a peak far above the real one.
    warm_set = ctx.request_set(WARM_SET, [tenant.stream()])
    warm = closed_loop(ctx, router, warm_set, connections=64, duration_s=5, count_statuses=True)
    pinned = os.environ.get(RATE_ENV)
    rate = float(pinned) if pinned else max(100.0, warm.load.rps * 0.5)
    rows: list[list[Any]] = []
    seconds: list[dict[str, Any]] = []  # per minute: each second's p99 and store counters
    # The warm-up's events are delivered too; a fast host replays the set
    # (closed loop), and a replayed id is a duplicate, acknowledged once more.
    acked = min(_ok(warm.load.statuses), warm_set.count)
    size = set_size(rate, 60, margin=1.05)
    ahead = _SetsAhead(ctx, size, _streams(tenant, failing, share))
    minutes_run: list[_Minute] = []
    for minute in range(minutes):
        ctx.step(f"minute {minute + 1}/{minutes} at {rate:,.0f} events/s")
        rs = ahead.take(make_next=minute + 1 < minutes)
        records = ctx.path(f"records-{minute + 1}") / "records.txt"
        with (
            procs.Sampler(router, interval=SAMPLE_S, disk=data_dir) as sampled,
            MetricsPoller(router) as poller,
        ):
            m = open_loop(ctx, router, rs, rate=rate, duration_s=60, records=records)
        ok = _ok(m.load.statuses)
        acked += ok
        minutes_run.append(_Minute(m.load.latency_ms, ok, sampled.samples, poller, records,
                                   log.poll()))  # fmt: skip
    ctx.step("per-second figures")
    for number, done in enumerate(minutes_run, start=1):
        per_second = [round(p99, 1) for _, p99 in window_p99(done.records, 0.0, 1.0)]
        seconds.append({"p99_ms": per_second, "store": _store_rates(done.poller)})
        done.records.unlink()  # about 400,000 lines a minute: the per-second figures are kept
        rows.append(done.row(number, per_second))
    ctx.step("waiting for the last deliveries")
    wait_quiet(lambda: len(sink_ids(sink.access_log)), target=acked, quiet_s=5, timeout_s=300)
    delivered = len(sink_ids(sink.access_log))
    backlog = recorded_outcome(router, tenant)
    kept = f"{keep}, bucket {bucket}"
    if failing is not None:
        kept += f"; {share:.2%} of events failing, kept {FAILED_RETENTION}"
    section = _section(ctx, minutes, rate, kept, rows, acked, delivered, backlog)
    section.data["seconds"] = seconds
    section.data["partitions"] = _partitions_removed(router)
    if failing is not None:
        section.text.append(
            "Partitions past the cutoff: {dropped:,} unlinked whole, {compacted:,}"
            " compacted (their failed events copied out first).".format(
                **section.data["partitions"]
            )
        )
    return section


def _partitions_removed(router: Any) -> dict[str, int]:
    """Partitions retention unlinked whole and compacted over the run (the router's counters)."""
    metrics = store_metrics(router)
    return {
        name: int(metrics.get(f"hookrouter_store_partitions_{name}_total", 0))
        for name in ("dropped", "compacted")
    }


def _rate_source() -> str:
    if os.environ.get(RATE_ENV):
        return f"pinned with {RATE_ENV}"
    return "50 % of the end-to-end peak"


def _store_rates(poller: MetricsPoller) -> dict[str, list[float]]:
    """Per second of a minute: how much each followed store counter rose."""
    rates = poller.rates()
    names = rates[0][1].keys() if rates else ()
    return {name: [round(r[name], 2) for _, r in rates] for name in names}


def _section(
    ctx: Context,
    minutes: int,
    rate: float,
    keep: str,
    rows: list[list[Any]],
    acked: int,
    delivered: int,
    backlog: str,
) -> Section:
    xs = [r[0] for r in rows]
    figures = []
    for col, name, unit in ((1, "p99", "ms"), (5, "rss", "MiB"), (6, "store", "MiB")):
        path = timelines(
            {name: (xs, [r[col] for r in rows])},
            ctx.figure_path(name),
            title=f"{name} per minute at {rate:,.0f} events/s",
            xlabel="minute",
            ylabel=unit,
        )
        figures.append(Figure(path, f"{name} per minute"))
    targets = []
    for col, name in ((1, "per-minute p99"), (5, "RSS"), (6, "store size")):
        worst, ok = _flat([float(r[col]) for r in rows])
        measured = "-" if worst is None else f"±{worst:.0%}"
        targets.append(Target(f"soak: {name} flat over the last half", "±10 %", measured, ok))
    targets.append(
        Target(
            "soak: every acknowledged event delivered",
            "sink = acknowledged",
            f"{delivered:,} of {acked:,}",
            delivered >= acked,
        )
    )
    targets.append(
        Target(
            "soak: no backlog at the end",
            "none pending or failed",
            backlog,
            backlog.startswith("all delivered"),
        )
    )
    return Section(
        text=[
            f"{minutes} minutes at {rate:,.0f} events/s ({_rate_source()}), "
            f"retention {keep}, delivered to an nginx sink."
        ],
        tables=[
            Table(
                "Per minute",
                COLUMNS,
                rows,
            )
        ],
        figures=figures,
        targets=targets,
        data={
            "rate": rate,
            "rows": rows,
            "acked": acked,
            "delivered": delivered,
            "backlog": backlog,
        },
    )


SCENARIO = Scenario(
    name="soak",
    title="10b. Soak",
    order=96,
    run=run,
    summary="an hour at half load with short retention: p99, RSS and store size flat, none lost",
    needs=("wrk", "nginx", "redis-server"),
    needs_router=True,
    budget_s=(300, 3900),
    in_all=False,
)
