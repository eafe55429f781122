"""Helpers shared by scenarios: router configs, measured runs, medians, table cells.

Importable by any scenario plug-in (``from bench.scenarios._common import ...``);
modules whose name starts with ``_`` are not scenarios themselves.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import procs, signing, stats
from bench.api import STANDARD_SECRET, STRIPE_SECRET, Context
from bench.systems import Inline, System
from bench.wrk import LoadResult
from hookrouter.buildinfo import interpreted_copy

ADMIN_TOKEN = "bench-admin-token"


@dataclass
class TenantSpec:
    """One tenant of a generated router config: its source and (optional) endpoint."""

    id: str
    endpoint_url: str | None = None
    provider: str = "stripe"
    queue_capacity: int = 1000
    max_in_flight: int = 16
    rate_limit: dict[str, float] | None = None  # {"capacity": ..., "refill_per_second": ...}
    max_backlog: int | None = None
    tolerance_seconds: int = 300
    extra_tenant: dict[str, Any] = field(default_factory=dict)
    extra_endpoint: dict[str, Any] = field(default_factory=dict)

    @property
    def source_id(self) -> str:
        return f"{self.id}-{self.provider}"

    @property
    def secret(self) -> str:
        return STRIPE_SECRET if self.provider == "stripe" else STANDARD_SECRET

    def stream(self, event_type: str = "invoice.paid") -> signing.Stream:
        return signing.Stream(self.source_id, self.provider, self.secret, event_type)


def router_config(
    tenants: Sequence[TenantSpec],
    *,
    delivery: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A router config (issue 2/3 shape) for ``tenants``; listen/store are filled at start."""
    config: dict[str, Any] = {
        "server": {"engine": "asyncio", "max_body_bytes": 1_048_576},
        "admin": {"token": ADMIN_TOKEN},
        "delivery": {"allow_private_networks": True, **(delivery or {})},
        "tenants": [],
        "sources": [],
    }
    endpoints = []
    for t in tenants:
        tenant: dict[str, Any] = {
            "id": t.id,
            "queue_capacity": t.queue_capacity,
            "max_in_flight": t.max_in_flight,
            **t.extra_tenant,
        }
        if t.rate_limit:
            tenant["rate_limit"] = Inline(t.rate_limit)
        if t.max_backlog is not None:
            tenant["max_backlog"] = t.max_backlog
        config["tenants"].append(tenant)
        config["sources"].append(
            {
                "id": t.source_id,
                "tenant": t.id,
                "provider": t.provider,
                "secrets": [t.secret],
                "tolerance_seconds": t.tolerance_seconds,
            }
        )
        if t.endpoint_url:
            endpoints.append(
                {
                    "id": f"{t.id}-ep",
                    "tenant": t.id,
                    "url": t.endpoint_url,
                    "secret": STANDARD_SECRET,
                    **t.extra_endpoint,
                }
            )
    if endpoints:
        config["endpoints"] = endpoints
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key].update(value)
        else:
            config[key] = value
    return config


def typical_sources(tenants: Sequence[TenantSpec]) -> dict[str, dict[str, str]]:
    return {t.source_id: {"tenant": t.id, "secret": t.secret} for t in tenants}


def typical_endpoints(tenants: Sequence[TenantSpec]) -> dict[str, list[dict[str, str]]]:
    return {
        t.id: [{"url": t.endpoint_url, "secret": STANDARD_SECRET}]
        for t in tenants
        if t.endpoint_url
    }


# -- measured runs ----------------------------------------------------------------


@dataclass
class Measured:
    """One load run against one system, with the server's resource use."""

    load: LoadResult
    cpu_s: float  # the system's own processes
    helper_cpu_s: float  # its helpers (e.g. the typical stack's redis-server)
    kernel_s: float = 0.0  # the part of cpu_s spent in the kernel (system time)

    @property
    def cpu_us_per_req(self) -> float | None:
        ok = self.ok_requests
        return self.cpu_s / ok * 1e6 if ok else None

    @property
    def kernel_us_per_req(self) -> float | None:
        ok = self.ok_requests
        return self.kernel_s / ok * 1e6 if ok else None

    @property
    def helper_cpu_us_per_req(self) -> float | None:
        ok = self.ok_requests
        return self.helper_cpu_s / ok * 1e6 if ok else None

    @property
    def ok_requests(self) -> int:
        st = self.load.statuses
        if st:
            return sum(n for code, n in st.items() if code.startswith("2"))
        return max(0, self.load.requests - self.load.errors.get("status", 0))

    def to_json(self) -> dict[str, Any]:
        return {
            "load": self.load.to_json(),
            "cpu_s": self.cpu_s,
            "helper_cpu_s": self.helper_cpu_s,
            "kernel_s": self.kernel_s,
        }


def cpu_reading(system: System) -> tuple[float, float, float]:
    """(the system's CPU, its helpers' CPU, the kernel's part of the first) in seconds."""
    user, kernel = procs.cpu_split(system.pids())
    return user + kernel, procs.cpu_seconds(system.helper_pids()), kernel


def closed_loop(
    ctx: Context,
    system: System,
    request_set: signing.RequestSet,
    *,
    connections: int,
    duration_s: float,
    **kwargs: Any,
) -> Measured:
    """wrk against ``system`` with CPU accounting."""
    cpu0, helper0, kernel0 = cpu_reading(system)
    load = ctx.wrk(
        system.url, request_set, connections=connections, duration_s=duration_s, **kwargs
    )
    cpu1, helper1, kernel1 = cpu_reading(system)
    return Measured(load, cpu1 - cpu0, helper1 - helper0, kernel1 - kernel0)


def open_loop(
    ctx: Context,
    system: System,
    request_set: signing.RequestSet,
    *,
    rate: float,
    duration_s: float,
    **kwargs: Any,
) -> Measured:
    """The fixed-rate client against ``system`` with CPU accounting."""
    cpu0, helper0, kernel0 = cpu_reading(system)
    load = ctx.open_loop(system.url, request_set, rate=rate, duration_s=duration_s, **kwargs)
    cpu1, helper1, kernel1 = cpu_reading(system)
    return Measured(load, cpu1 - cpu0, helper1 - helper0, kernel1 - kernel0)


class Runs:
    """Measurements keyed by (system, condition); medians and ranges for the tables."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], list[Measured]] = defaultdict(list)

    def add(self, system: str, condition: str, measured: Measured) -> None:
        self.items[(system, condition)].append(measured)

    def get(self, system: str, condition: str) -> list[Measured]:
        return self.items.get((system, condition), [])

    def median(self, system: str, condition: str, metric: str) -> float | None:
        return stats.median(_metric(m, metric) for m in self.get(system, condition))

    def range(self, system: str, condition: str, metric: str) -> tuple[float, float] | None:
        return stats.spread(_metric(m, metric) for m in self.get(system, condition))

    def to_json(self) -> dict[str, Any]:
        return {f"{s}|{c}": [m.to_json() for m in ms] for (s, c), ms in self.items.items()}


def _metric(m: Measured, metric: str) -> float | None:
    if metric == "rps":
        return m.load.rps
    if metric == "ok_rps":
        return m.ok_requests / m.load.duration_s if m.load.duration_s else None
    if metric == "cpu_us":
        return m.cpu_us_per_req
    if metric == "helper_cpu_us":
        return m.helper_cpu_us_per_req
    if metric == "kernel_us":
        return m.kernel_us_per_req
    if metric == "errors":
        return float(m.load.error_count)
    if metric == "wraps":
        return float(m.load.wraps)
    if metric in m.load.extra:
        return float(m.load.extra[metric])
    return m.load.latency_ms.get(metric)


def with_range(value: float | None, rng: tuple[float, float] | None, digits: int = 0) -> str:
    """``12,345 [11,900-12,800]``: the median and the run-to-run range."""
    text = stats.fmt(value, digits)
    if rng is None or value is None or rng[0] == rng[1]:
        return text
    return f"{text} [{stats.fmt(rng[0], digits)}-{stats.fmt(rng[1], digits)}]"


def set_size(rate: float, duration_s: float, *, margin: float = 1.5, floor: int = 5_000) -> int:
    """Records needed so that ``rate`` req/s for ``duration_s`` never wraps."""
    return max(floor, int(rate * duration_s * margin))


# -- delivery helpers ------------------------------------------------------------


def post_raw(port: int, raw: bytes, timeout: float = 10.0) -> int:
    """Send one pre-built request on a fresh connection; the response status (0 on error)."""
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(raw)
            head = b""
            while b"\r\n" not in head:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                head += chunk
    except OSError:
        return 0
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def sink_ids(access_log: Any) -> Counter[bytes]:
    """How often an nginx sink saw each webhook id (its log line's last field)."""
    try:
        with open(access_log, "rb") as fh:
            return Counter(line.rsplit(b" ", 1)[-1] for line in fh if line.strip())
    except FileNotFoundError:
        return Counter()


class SinkLog:
    """Reads an nginx sink's access log (``$msec $uri $webhook_id``) incrementally."""

    def __init__(self, path: Any) -> None:
        self.path = path
        self.offset = 0
        self.lines = 0
        self.times: list[float] = []
        self._partial = b""

    def poll(self) -> int:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return self.lines
        self.offset += len(data)
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        for line in complete:
            stamp = line.split(b" ", 1)[0]
            try:
                self.times.append(float(stamp))
            except ValueError:
                continue
            self.lines += 1
        return self.lines

    def mark(self) -> int:
        """Start counting from here (returns the index to slice ``times`` with)."""
        self.poll()
        return len(self.times)


def wait_quiet(poll: Any, *, target: int, quiet_s: float, timeout_s: float) -> tuple[int, bool]:
    """Poll a growing count until it reaches ``target`` and stops moving for ``quiet_s``.

    Returns (final count, drained) where drained is False if ``timeout_s`` ran out first.
    """
    import time

    deadline = time.monotonic() + timeout_s
    last, last_change = poll(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now_count = poll()
        if now_count != last:
            last, last_change = now_count, time.monotonic()
        elif now_count >= target and time.monotonic() - last_change >= quiet_s:
            return now_count, True
    return last, last >= target


_DELIVERY_PROBE: dict[str, tuple[bool, str]] = {}


def router_delivers(ctx: Context) -> tuple[bool, str]:
    """Whether ``hookrouter serve`` delivers events yet (probed once per harness process).

    Starts a router with one tenant whose endpoint is an nginx sink, posts five
    signed events and waits up to 15 s for the sink to see one. Scenarios 2-4 use
    it to report "not measurable yet" quickly instead of waiting out long drains.
    """
    from bench import signing
    from bench.systems import router_available

    if "result" in _DELIVERY_PROBE:
        return _DELIVERY_PROBE["result"]
    ok, reason = router_available()
    if ok:
        ctx.step("probing hookrouter delivery")
        sink = ctx.sink()
        tenant = TenantSpec("probe", endpoint_url=f"{sink.url}/probe")
        router = ctx.router(router_config([tenant]))
        log = SinkLog(sink.access_log)
        rs = ctx.request_set(5, [tenant.stream()])
        statuses = [post_raw(router.port, raw) for raw in signing.iter_requests(rs)]
        count, _ = wait_quiet(log.poll, target=5, quiet_s=0.5, timeout_s=15)
        router.stop()
        sink.stop()
        if count == 0:
            ok = False
            reason = (
                f"hookrouter answered {statuses} but delivered nothing within 15 s "
                "(delivery not wired into `hookrouter serve` yet?)"
            )
    _DELIVERY_PROBE["result"] = (ok, reason if not ok else "ok")
    return _DELIVERY_PROBE["result"]


# A limit no benchmark reaches: the limiter decides every request, and grants it.
ROOMY_LIMIT = {"capacity": 1e9, "refill_per_second": 1e9}


# Tokens a router process leases from Redis at once, sized by docs/operations.md's rule
# for a hot tenant (lease >= 4x its concurrent sender connections; 512 here):
# a smaller lease runs dry within one loop turn of 64 connections and makes
# decisions wait (docs/performance.md, "Rate-limit leases").
ROUTER_LEASE = 1000


def router_with_redis(
    ctx: Context,
    tenants: Sequence[TenantSpec],
    *,
    lease: int = ROUTER_LEASE,
    pythonpath: str | None = None,
    prefix: Sequence[str] = (),
    ready_timeout: float = 60.0,
    **kwargs: Any,
) -> System:
    """hookrouter limiting every tenant through its own redis-server.

    Same guarantee as the typical stack (a per-tenant token bucket in Redis,
    checked for every event, with a limit the benchmark never reaches), each
    system in its own way: the typical stack makes one EVALSHA per event, the
    router leases ``lease`` tokens per Redis call (``lease = 0``: one exact
    decision per event). The redis-server is the system's helper: its CPU is
    reported apart, as for the typical stack. ``pythonpath`` runs the router
    from another copy of the package (see :func:`interpreted_tree`); ``prefix`` and
    ``ready_timeout`` go to :func:`bench.systems.start_router` (a wrapper such as
    callgrind, and the longer start-up it needs).
    """
    redis = ctx.redis()
    limited = [t if t.rate_limit else _with_limit(t) for t in tenants]
    extra = dict(kwargs.pop("extra", {}) or {})
    extra["redis"] = {"url": f"redis://127.0.0.1:{redis.port}/0", "mode": "script", "lease": lease}
    env = {"PYTHONPATH": pythonpath} if pythonpath else None
    config = router_config(limited, extra=extra, **kwargs)
    system = ctx.router(config, env=env, prefix=prefix, ready_timeout=ready_timeout)
    system.helpers.append(redis)
    return system


def interpreted_tree(ctx: Context) -> str:
    """A copy of the package without its mypyc modules (see ``hookrouter.buildinfo``).

    Put on ``PYTHONPATH`` it runs the same source interpreted: for the
    compiled-vs-interpreted comparison, and for py-spy, which sees no Python
    frames inside compiled modules.
    """
    return str(interpreted_copy(ctx.path("interpreted-src")))


def _with_limit(tenant: TenantSpec) -> TenantSpec:
    import dataclasses

    return dataclasses.replace(tenant, rate_limit=dict(ROOMY_LIMIT))


def recorded_outcome(system: System, tenant: TenantSpec) -> str:
    """How the system itself says its deliveries went (its records, not the sink's log)."""
    try:
        if system.name == "typical":
            st = system.get_json("/stats")
            return f"{st['delivered']:,} delivered of {st['events']:,} events"
        base = f"/admin/v1/events?tenant={tenant.id}&limit=1&status="
        pending = system.get_json(base + "pending")["data"]
        failed = system.get_json(base + "failed")["data"]
        if not pending and not failed:
            return "all delivered (none pending or failed)"
        return f"pending left: {bool(pending)}, failed: {bool(failed)}"
    except (OSError, RuntimeError, KeyError) as exc:
        return f"could not read: {exc}"
