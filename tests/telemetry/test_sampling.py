"""Sampling in ``telemetry.otel``: decided once per trace, unsampled traces cost no span."""

from __future__ import annotations

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hookrouter.config.telemetry import TelemetrySettings
from hookrouter.ids import new_event_id
from hookrouter.telemetry.otel import otel_tracing
from hookrouter.telemetry.tracing import (
    TRACE_HEADER,
    Tracing,
    UnsampledAttempt,
    UnsampledIngest,
    event_trace_id,
    parse_traceparent,
    untraced_traceparent,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def _tracing(ratio: float, rand: float = 0.5) -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    settings = TelemetrySettings(otlp_endpoint="http://127.0.0.1:1/v1/traces", sample_ratio=ratio)
    tracing = otel_tracing(settings, processor=SimpleSpanProcessor(exporter), rand=lambda: rand)
    return tracing, exporter


def test_parse_traceparent() -> None:
    assert parse_traceparent(f"00-{TRACE_ID}-00f067aa0ba902b7-01") == (TRACE_ID, True)
    assert parse_traceparent(f"00-{TRACE_ID}-00f067aa0ba902b7-00") == (TRACE_ID, False)
    bad_values = (
        "",
        "00-abc-def-01",
        f"00-{'0' * 32}-00f067aa0ba902b7-01",
        f"ff-{TRACE_ID}-00f067aa0ba902b7-01",
        f"00-{TRACE_ID}-zzzzzzzzzzzzzzzz-01",
    )
    for bad in bad_values:
        assert parse_traceparent(bad) is None, bad


def test_an_unsampled_root_stores_nothing_and_its_attempts_share_a_trace_id() -> None:
    tracing, exporter = _tracing(0.01, rand=0.5)  # 0.5 >= 1 %: not sampled
    assert tracing.ingest({}, "acme", "src") is None  # nothing stored, no headers copied
    event_id, other_id = new_event_id(), new_event_id()
    assert tracing.attempt(None, event_id, "acme", "ep", 1) is None  # no span, no object
    # Each attempt, maybe a retry after a restart, names the event's trace with a new span.
    sent, resent = untraced_traceparent(event_id), untraced_traceparent(event_id)
    parsed = parse_traceparent(sent)
    assert parsed == (event_trace_id(event_id), False) and sent.endswith("-00")
    assert bytes.fromhex(parsed[0]).decode() == event_id[-16:]  # readable back
    assert resent.split("-")[1] == parsed[0] and resent != sent  # same trace, another span
    assert untraced_traceparent(other_id).split("-")[1] != parsed[0]
    assert exporter.get_finished_spans() == ()


def test_an_inbound_unsampled_trace_is_stored_and_continued_without_spans() -> None:
    tracing, exporter = _tracing(1.0)
    ingest = tracing.ingest({"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-00"}, "a", "s")
    assert isinstance(ingest, UnsampledIngest)
    stored = ingest.stored_headers({"content-type": "application/json"})[TRACE_HEADER]
    ingest.committed("evt_1", False, 0.001)
    attempt = tracing.attempt(stored, "evt_1", "acme", "ep", 1)
    assert isinstance(attempt, UnsampledAttempt)
    sent = attempt.traceparent()
    assert sent.split("-")[1] == TRACE_ID and sent.endswith("-00")
    attempt.finished(200, None, "Delivered", "closed")
    assert exporter.get_finished_spans() == ()


def test_the_inbound_flag_decides_and_deliveries_follow_the_ingest_decision() -> None:
    tracing, exporter = _tracing(0.0)
    unsampled = tracing.ingest({"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-00"}, "a", "s")
    assert isinstance(unsampled, UnsampledIngest) and TRACE_ID in unsampled.value
    sampled = tracing.ingest({"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}, "a", "s")
    assert sampled is not None
    stored = sampled.stored_headers({})[TRACE_HEADER]
    sampled.committed("evt_2", False, 0.001)
    attempt = tracing.attempt(stored, "evt_2", "a", "ep", 1)
    assert attempt is not None
    attempt.finished(None, "timeout", "RetryAt", "closed")
    ingest_span, deliver_span = exporter.get_finished_spans()
    assert ingest_span.context.trace_id == int(TRACE_ID, 16)
    assert deliver_span.parent is not None
    assert deliver_span.parent.span_id == ingest_span.context.span_id
    assert deliver_span.attributes is not None
    assert deliver_span.attributes["error.type"] == "timeout"


def test_the_ratio_samples_roots() -> None:
    tracing, exporter = _tracing(0.25, rand=0.1)  # 0.1 < 25 %: sampled
    trace = tracing.ingest({}, "a", "s")
    assert trace is not None and not isinstance(trace, UnsampledIngest)
    trace.refused("bad_signature")
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None and span.attributes["hookrouter.result"] == "bad_signature"
