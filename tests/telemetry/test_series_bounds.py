"""``[telemetry]`` bounds on per-tenant series, as a running router's /metrics shows them."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.e2e.conftest import stripe_event
from tests.support.delivery_servers import Reply, ThreadedReceiver
from tests.support.router import ENDPOINT_SECRET, STRIPE_SECRET, RouterProcess, base_config

TENANTS = ("t0", "t1", "t2", "t3")


def _labels(metrics: str, series: str, label: str) -> set[str]:
    return set(re.findall(rf'^{series}\{{[^}}]*\b{label}="([^"]+)"', metrics, re.M))


def test_tenants_past_the_bounds_share_the_other_label(tmp_path: Path) -> None:
    with ThreadedReceiver(lambda _r: Reply()) as receiver:
        config = base_config(tmp_path / "data", 0)
        config["telemetry"] = {"labelled_tenants": 2, "labelled_latency_tenants": 1}
        config["tenants"] = [{"id": t} for t in TENANTS]
        config["sources"] = [
            {"id": f"{t}-stripe", "tenant": t, "provider": "stripe", "secrets": [STRIPE_SECRET]}
            for t in TENANTS
        ]
        config["endpoints"] = [
            {"id": f"{t}-all", "tenant": t, "url": f"http://127.0.0.1:{receiver.port}/",
             "secret": ENDPOINT_SECRET}
            for t in TENANTS
        ]  # fmt: skip
        with RouterProcess(tmp_path, config) as router:
            for n, tenant in enumerate(TENANTS):
                body, headers = stripe_event(f"evt_bound_{n}")
                assert router.post(f"{tenant}-stripe", body, headers)[0] == 200
            metrics = _metrics_once_delivered(router, len(TENANTS))
    sources = _labels(metrics, "hookrouter_ingest_requests_total", "source")
    assert len(sources) == 3 and "_other" in sources, sources  # two of their own, one shared
    delivered = _labels(metrics, "hookrouter_delivery_outcomes_total", "tenant")
    assert len(delivered) == 3 and "_other" in delivered, delivered
    latency = _labels(metrics, "hookrouter_delivery_latency_seconds_count", "tenant")
    assert len(latency) == 2 and "_other" in latency, latency  # one of its own, one shared
    assert _delivered(metrics, "_other") == 2  # nothing lost, only pooled


def _delivered(metrics: str, tenant: str) -> float:
    found = re.search(
        rf'^hookrouter_delivery_outcomes_total\{{outcome="delivered",tenant="{tenant}"\}} (\S+)$',
        metrics,
        re.M,
    )
    return float(found.group(1)) if found else 0.0


def _metrics_once_delivered(router: RouterProcess, events: int) -> str:
    """/metrics once every event's delivery outcome is counted."""
    deadline = time.monotonic() + 15
    while True:
        status, _, data = router.request("GET", "/metrics")
        assert status == 200
        metrics = data.decode()
        counted = re.findall(
            r'^hookrouter_delivery_outcomes_total\{[^}]*outcome="delivered"\} (\S+)$',
            metrics,
            re.M,
        )
        if sum(map(float, counted)) >= events or time.monotonic() > deadline:
            return metrics
        time.sleep(0.1)
