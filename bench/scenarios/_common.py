"""Helpers shared by scenarios: router configs, measured runs, medians, table cells.

Importable by any scenario plug-in (``from bench.scenarios._common import ...``);
modules whose name starts with ``_`` are not scenarios themselves.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import procs, signing, stats
from bench.api import STANDARD_SECRET, STRIPE_SECRET, Context
from bench.systems import Inline, System
from bench.wrk import LoadResult

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

    @property
    def cpu_us_per_req(self) -> float | None:
        ok = self.ok_requests
        return self.cpu_s / ok * 1e6 if ok else None

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
        return {"load": self.load.to_json(), "cpu_s": self.cpu_s, "helper_cpu_s": self.helper_cpu_s}


def _cpu(system: System) -> tuple[float, float]:
    return procs.cpu_seconds(system.pids()), procs.cpu_seconds(system.helper_pids())


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
    cpu0, helper0 = _cpu(system)
    load = ctx.wrk(
        system.url, request_set, connections=connections, duration_s=duration_s, **kwargs
    )
    cpu1, helper1 = _cpu(system)
    return Measured(load, cpu1 - cpu0, helper1 - helper0)


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
    cpu0, helper0 = _cpu(system)
    load = ctx.open_loop(system.url, request_set, rate=rate, duration_s=duration_s, **kwargs)
    cpu1, helper1 = _cpu(system)
    return Measured(load, cpu1 - cpu0, helper1 - helper0)


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
