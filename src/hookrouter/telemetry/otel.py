"""The OpenTelemetry implementation of ``telemetry.tracing`` (imported only when on).

Spans go through the SDK's batch processor to an OTLP/HTTP exporter (its
own thread: the event loop never waits for the collector). Sampling is
decided in ``telemetry.tracing.Tracing`` before this module is asked for a
span, so the SDK's sampler is ``ALWAYS_ON``: it sees only what was chosen.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from hookrouter.config.telemetry import TelemetrySettings
from hookrouter.telemetry.tracing import (
    TRACE_HEADER,
    AttemptTrace,
    IngestTrace,
    SpanSource,
    Tracing,
)

_PROPAGATOR = TraceContextTextMapPropagator()


def traceparent_of(span: Span) -> str:
    """The W3C ``traceparent`` value naming ``span`` (sampled flag included).

    Written out rather than through the propagator's ``inject``, which builds
    a context and a carrier for each call.
    """
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _stored_parent(stored: str) -> Context:
    """The context of the ingest span whose traceparent was stored with the event.

    ``stored`` was written by ``traceparent_of`` and checked by
    ``parse_traceparent``, so it is split directly instead of by the
    propagator's regular expression.
    """
    _, trace_id, span_id, flags = stored.split("-", 3)
    parent = SpanContext(
        int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(int(flags, 16))
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


class OtelIngest(IngestTrace):
    def __init__(self, span: Span) -> None:
        self.span = span

    def stored_headers(self, headers: dict[str, str]) -> dict[str, str]:
        return {**headers, TRACE_HEADER: traceparent_of(self.span)}

    def refused(self, reason: str) -> None:
        span = self.span
        span.set_attribute("hookrouter.result", reason)
        span.set_status(Status(StatusCode.ERROR, reason))
        span.end()

    def committed(self, event_id: str, duplicate: bool, commit_seconds: float) -> None:
        span = self.span
        span.set_attributes(
            {
                "hookrouter.event_id": event_id,
                "hookrouter.verified": True,
                "hookrouter.duplicate": duplicate,
                "hookrouter.commit_ms": commit_seconds * 1000.0,
                "hookrouter.result": "duplicate" if duplicate else "accepted",
            }
        )
        span.end()


class OtelAttempt(AttemptTrace):
    def __init__(self, span: Span) -> None:
        self.span = span

    def traceparent(self) -> str:
        return traceparent_of(self.span)

    def finished(
        self, status: int | None, error: str | None, outcome: str, breaker_state: str
    ) -> None:
        span = self.span
        attributes: dict[str, str | int] = {
            "hookrouter.outcome": outcome,
            "hookrouter.breaker_state": breaker_state,
        }
        if status is not None:
            attributes["http.response.status_code"] = status
        if error is not None:
            attributes["error.type"] = error
        span.set_attributes(attributes)
        if error is not None or status is None or not 200 <= status < 300:
            span.set_status(Status(StatusCode.ERROR, error or f"HTTP {status}"))
        span.end()

    def abandoned(self) -> None:
        self.span.set_attribute("hookrouter.outcome", "abandoned")
        self.span.end()


class OtelSpans(SpanSource):
    """A tracer provider of its own (not the process-global one), exporting over OTLP/HTTP."""

    def __init__(self, settings: TelemetrySettings, processor: SpanProcessor | None = None) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # Resource.create merges OTEL_RESOURCE_ATTRIBUTES; the settings already did, and win.
        resource = Resource.create(
            {**settings.resource_attributes, SERVICE_NAME: settings.service_name}
        )
        # Tracing chose to sample before asking for a span, so the SDK samples everything.
        self._provider = TracerProvider(resource=resource, sampler=ALWAYS_ON)
        self._provider.add_span_processor(
            processor or BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_endpoint))
        )
        self._tracer = self._provider.get_tracer("hookrouter")

    def ingest(self, inbound: Mapping[str, str] | None, tenant: str, source: str) -> IngestTrace:
        span = self._tracer.start_span(
            "hookrouter.ingest",
            context=None if inbound is None else _PROPAGATOR.extract(inbound),
            kind=SpanKind.SERVER,
            attributes={"hookrouter.tenant": tenant, "hookrouter.source": source},
        )
        return OtelIngest(span)

    def attempt(
        self, stored: str, event_id: str, tenant: str, endpoint_id: str, number: int
    ) -> AttemptTrace:
        span = self._tracer.start_span(
            "hookrouter.deliver",
            context=_stored_parent(stored),
            kind=SpanKind.CLIENT,
            attributes={
                "hookrouter.event_id": event_id,
                "hookrouter.tenant": tenant,
                "hookrouter.endpoint": endpoint_id,
                "hookrouter.attempt": number,
            },
        )
        return OtelAttempt(span)

    def shutdown(self) -> None:
        self._provider.shutdown()  # flushes the batch processor


def otel_tracing(
    settings: TelemetrySettings,
    *,
    processor: SpanProcessor | None = None,
    rand: Callable[[], float] = random.random,
) -> Tracing:
    """The router's tracer for ``settings``: sampling by ``Tracing``, spans by the SDK."""
    quiet = settings.no_propagation_endpoints if settings.propagate else None
    return Tracing(OtelSpans(settings, processor), settings.sample_ratio, quiet, rand)


__all__ = ["OtelSpans", "otel_tracing", "traceparent_of"]
