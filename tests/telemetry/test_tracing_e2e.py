"""OpenTelemetry traces of a real router, received by an OTLP/HTTP receiver on 127.0.0.1.

One trace per event: the ingest span continues the sender's ``traceparent``,
each delivery attempt is a child of the ingest span (also after a kill -9
and restart between ingest and delivery: the context is stored with the
event) and the receiver gets a ``traceparent`` in the same trace, unless its
endpoint is switched off.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import standard_event, stripe_event
from tests.support.delivery_servers import Received, Reply, ThreadedReceiver
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.router import ENDPOINT_SECRET, RouterProcess, base_config

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
SPAN_KIND_SERVER, SPAN_KIND_CLIENT = 2, 3


@pytest.fixture(autouse=True)
def _fast_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """The router process inherits this: batches leave after 50 ms, not 5 s."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


def _config(tmp_path: Path, otlp: OtlpReceiver, ports: dict[str, int]) -> dict[str, Any]:
    config = base_config(tmp_path / "data", 0)
    config["telemetry"] = {
        "otlp_endpoint": otlp.url,
        "sample_ratio": 1.0,
        "service_name": "hookrouter-test",
        "resource_attributes": {"deployment.environment": "test"},
        "no_propagation_endpoints": ["globex-all"],
    }
    config["delivery"] = {"allow_private_networks": True, "timeout_seconds": 30}
    config["server"]["shutdown_grace_seconds"] = 0.5
    config["endpoints"] = [
        {"id": endpoint, "tenant": tenant, "url": f"http://127.0.0.1:{ports[endpoint]}/hook",
         "secret": ENDPOINT_SECRET}
        for endpoint, tenant in (("acme-invoices", "acme"), ("globex-all", "globex"))
    ]  # fmt: skip
    return config


def _named(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name]


def _wait_requests(receiver: ThreadedReceiver, count: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while len(receiver.receiver.requests) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(receiver.receiver.requests) >= count


def test_one_trace_per_event_from_the_sender_to_the_receiver(tmp_path: Path) -> None:
    with (
        OtlpReceiver() as otlp,
        ThreadedReceiver() as acme,
        ThreadedReceiver() as globex,
        RouterProcess(
            tmp_path,
            _config(tmp_path, otlp, {"acme-invoices": acme.port, "globex-all": globex.port}),
        ) as router,
    ):
        body, headers = stripe_event("evt_traced")
        headers["traceparent"] = f"00-{TRACE_ID}-{PARENT_ID}-01"
        status, answer = router.post("acme-stripe", body, headers)
        assert status == 200
        event_id = answer["id"]
        body, headers = standard_event("msg_untraced_receiver")
        assert router.post("globex-std", body, headers)[0] == 200
        _wait_requests(acme, 1)
        _wait_requests(globex, 1)
        spans = otlp.wait_for(lambda s: len(_named(s, "hookrouter.deliver")) >= 2)

    ingest = next(s for s in _named(spans, "hookrouter.ingest") if s.trace_id == TRACE_ID)
    assert ingest.parent_span_id == PARENT_ID and ingest.kind == SPAN_KIND_SERVER
    assert ingest.attributes["hookrouter.event_id"] == event_id
    assert ingest.attributes["hookrouter.tenant"] == "acme"
    assert ingest.attributes["hookrouter.source"] == "acme-stripe"
    assert ingest.attributes["hookrouter.duplicate"] is False
    assert ingest.attributes["hookrouter.verified"] is True
    assert ingest.attributes["hookrouter.commit_ms"] >= 0
    assert ingest.resource["service.name"] == "hookrouter-test"
    assert ingest.resource["deployment.environment"] == "test"

    deliver = next(s for s in _named(spans, "hookrouter.deliver") if s.trace_id == TRACE_ID)
    assert deliver.parent_span_id == ingest.span_id and deliver.kind == SPAN_KIND_CLIENT
    assert deliver.attributes["hookrouter.endpoint"] == "acme-invoices"
    assert deliver.attributes["hookrouter.attempt"] == 1
    assert deliver.attributes["http.response.status_code"] == 200
    assert deliver.attributes["hookrouter.outcome"] == "Delivered"
    assert deliver.attributes["hookrouter.breaker_state"] == "closed"

    # The receiver joins the sender's trace, as a child of the attempt's span.
    sent = acme.receiver.requests[0].headers["traceparent"]
    assert sent == f"00-{TRACE_ID}-{deliver.span_id}-01"
    # Switched off for this endpoint: its deliveries are traced but carry no header.
    assert "traceparent" not in globex.receiver.requests[0].headers
    other = [s for s in _named(spans, "hookrouter.deliver") if s.trace_id != TRACE_ID]
    assert other and other[0].attributes["hookrouter.endpoint"] == "globex-all"


def test_an_attempt_after_kill_and_restart_is_a_child_of_the_ingest_span(tmp_path: Path) -> None:
    healthy = threading.Event()

    def answer(_request: Received) -> Reply:
        return Reply() if healthy.is_set() else Reply(hang=True)

    with OtlpReceiver() as otlp, ThreadedReceiver(answer) as acme:
        config = _config(tmp_path, otlp, {"acme-invoices": acme.port, "globex-all": 9})
        router = RouterProcess(tmp_path, config).start()
        try:
            body, headers = stripe_event("evt_restart")
            status, answer_doc = router.post("acme-stripe", body, headers)
            assert status == 200
            _wait_requests(acme, 1)  # the first attempt hangs
            spans = otlp.wait_for(lambda s: bool(_named(s, "hookrouter.ingest")))
        finally:
            router.kill()
        ingest = _named(spans, "hookrouter.ingest")[0]
        assert ingest.parent_span_id == ""  # no inbound traceparent: the trace starts here
        healthy.set()
        with RouterProcess(tmp_path, config):
            _wait_requests(acme, 2)
            spans = otlp.wait_for(lambda s: bool(_named(s, "hookrouter.deliver")))
    deliver = _named(spans, "hookrouter.deliver")[0]
    assert deliver.attributes["hookrouter.event_id"] == answer_doc["id"]
    assert deliver.trace_id == ingest.trace_id
    assert deliver.parent_span_id == ingest.span_id
    assert acme.receiver.requests[1].headers["traceparent"].split("-")[1] == ingest.trace_id


def test_tracing_off_loads_no_tracer() -> None:
    """Nothing of the tracing SDK is loaded (redis-py 8 imports the OpenTelemetry API itself)."""
    code = (
        "import sys, hookrouter.runtime, hookrouter.cli\n"
        "from hookrouter.config.telemetry import TelemetrySettings\n"
        "from hookrouter.telemetry.build import build_tracing\n"
        "assert build_tracing(TelemetrySettings()) is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('hookrouter.telemetry.otel')"
        " or m.startswith('opentelemetry.sdk.trace')))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOOKROUTER_COMPILE": "0"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "[]"
