"""The OpenTelemetry implementation of ``telemetry.tracing`` (imported only when on).

Spans go through the SDK's batch processor to an OTLP/HTTP exporter (its
own thread: the event loop never waits for the collector).

Sampling is decided here, before the SDK is asked for anything: an inbound
``traceparent`` decides by its sampled flag, otherwise ``sample_ratio``
does, and every delivery attempt follows its ingest span's decision (the
flag is stored with the event), so a trace is kept or dropped whole. The
SDK's sampler is then ``ParentBased(ALWAYS_ON)``: it sees only what was chosen.

A trace that is not sampled costs next to nothing, since at 1 % that is
99 events in 100: no SDK span, no context object, and, for a root (no
inbound ``traceparent``), nothing stored with the event and no headers
copied. Its deliveries still send a ``traceparent`` (flag ``00``) whose
trace id is derived from the event id (``event_trace_id``), so every attempt
of an event, even after a restart, names the same trace for the receiver to join. An inbound
unsampled ``traceparent`` is stored, so deliveries continue the sender's trace id.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from hookrouter.config.telemetry import TelemetrySettings
from hookrouter.telemetry.tracing import (
    TRACE_HEADER,
    TRACEPARENT,
    AttemptTrace,
    IngestTrace,
    Tracing,
)

_PROPAGATOR = TraceContextTextMapPropagator()
_getrandbits = random.getrandbits


def traceparent_of(span: Span) -> str:
    """The W3C ``traceparent`` value naming ``span`` (sampled flag included)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
    return carrier.get(TRACEPARENT, "")


def _span_id() -> str:
    return f"{_getrandbits(64) or 1:016x}"


def parse_traceparent(value: str) -> tuple[str, bool] | None:
    """(trace id, sampled) of a W3C ``traceparent``, or None when it is malformed."""
    parts = value.strip().split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16 or len(parts[3]) != 2:
        return None
    trace_id = parts[1].lower()
    try:
        flags = int(parts[3], 16)
        valid = int(trace_id, 16) != 0 and int(parts[2], 16) != 0
    except ValueError:
        return None
    return (trace_id, bool(flags & 1)) if valid and parts[0] != "ff" else None


def event_trace_id(event_id: str) -> str:
    """The trace id of an event ingested untraced: the same for each of its attempts.

    The id's last 16 characters (its 80 random bits) as hex: unique per event,
    never zero, cheaper than a hash, and a receiver can read the event id's
    tail back from it.
    """
    return event_id[-16:].encode().hex().zfill(32)


class UnsampledAttempt(AttemptTrace):
    """An attempt of an event ingested untraced: a ``traceparent`` only if asked for."""

    __slots__ = ("event_id",)

    def __init__(self, event_id: str) -> None:
        self.event_id = event_id

    def traceparent(self) -> str:
        # event_trace_id and _span_id written out: this module is interpreted,
        # and this runs for 99 attempts in 100 at 1 %.
        trace_id = self.event_id[-16:].encode().hex().zfill(32)
        return f"00-{trace_id}-{_getrandbits(64) or 1:016x}-00"

    def finished(
        self, status: int | None, error: str | None, outcome: str, breaker_state: str
    ) -> None:
        return None

    def abandoned(self) -> None:
        return None


class Unsampled(IngestTrace, AttemptTrace):
    """A trace not sampled: ids to store and propagate, no span."""

    __slots__ = ("value",)

    def __init__(self, trace_id: str) -> None:
        self.value = f"00-{trace_id}-{_span_id()}-00"

    def stored_headers(self, headers: dict[str, str]) -> dict[str, str]:
        return {**headers, TRACE_HEADER: self.value}

    def refused(self, reason: str) -> None:
        return None

    def committed(self, event_id: str, duplicate: bool, commit_seconds: float) -> None:
        return None

    def traceparent(self) -> str:
        return self.value

    def finished(
        self, status: int | None, error: str | None, outcome: str, breaker_state: str
    ) -> None:
        return None

    def abandoned(self) -> None:
        return None


class OtelIngest(IngestTrace):
    __slots__ = ("span",)

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
        span.set_attribute("hookrouter.event_id", event_id)
        span.set_attribute("hookrouter.verified", True)
        span.set_attribute("hookrouter.duplicate", duplicate)
        span.set_attribute("hookrouter.commit_ms", commit_seconds * 1000.0)
        span.set_attribute("hookrouter.result", "duplicate" if duplicate else "accepted")
        span.end()


class OtelAttempt(AttemptTrace):
    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def traceparent(self) -> str:
        return traceparent_of(self.span)

    def finished(
        self, status: int | None, error: str | None, outcome: str, breaker_state: str
    ) -> None:
        span = self.span
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        if error is not None:
            span.set_attribute("error.type", error)
        span.set_attribute("hookrouter.outcome", outcome)
        span.set_attribute("hookrouter.breaker_state", breaker_state)
        if error is not None or status is None or not 200 <= status < 300:
            span.set_status(Status(StatusCode.ERROR, error or f"HTTP {status}"))
        span.end()

    def abandoned(self) -> None:
        self.span.set_attribute("hookrouter.outcome", "abandoned")
        self.span.end()


class OtelTracing(Tracing):
    """A tracer provider of its own (not the process-global one), exporting over OTLP/HTTP."""

    __slots__ = ("_provider", "_quiet", "_rand", "_ratio", "_tracer", "settings")

    def __init__(
        self,
        settings: TelemetrySettings,
        *,
        processor: SpanProcessor | None = None,
        rand: Callable[[], float] = random.random,
    ) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self.settings = settings
        # Resource.create merges OTEL_RESOURCE_ATTRIBUTES; the settings already did, and win.
        resource = Resource.create(
            {**settings.resource_attributes, SERVICE_NAME: settings.service_name}
        )
        self._provider = TracerProvider(resource=resource, sampler=ParentBased(ALWAYS_ON))
        self._provider.add_span_processor(
            processor or BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_endpoint))
        )
        self._tracer = self._provider.get_tracer("hookrouter")
        self._quiet = settings.no_propagation_endpoints if settings.propagate else None
        self._ratio = settings.sample_ratio
        self._rand = rand

    def _root_sampled(self) -> bool:
        ratio = self._ratio
        return ratio >= 1.0 or (ratio > 0.0 and self._rand() < ratio)

    def ingest(self, headers: Mapping[str, str], tenant: str, source: str) -> IngestTrace | None:
        parent: Context | None = None
        inbound = headers.get(TRACEPARENT)
        if inbound is None:  # the usual webhook: the ratio decides (inline, once per request)
            ratio = self._ratio
            if ratio < 1.0 and (ratio <= 0.0 or self._rand() >= ratio):
                return None
            parsed = None
        else:
            parsed = parse_traceparent(inbound)
        if parsed is not None:
            trace_id, sampled = parsed
            if not sampled:
                return Unsampled(trace_id)
            parent = _PROPAGATOR.extract(headers)
        elif inbound is not None and not self._root_sampled():  # a malformed one
            return None
        span = self._tracer.start_span(
            "hookrouter.ingest",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"hookrouter.tenant": tenant, "hookrouter.source": source},
        )
        return OtelIngest(span)

    def attempt(
        self, stored: str | None, event_id: str, tenant: str, endpoint_id: str, number: int
    ) -> AttemptTrace:
        if not stored:  # ingested untraced (not sampled, published, or tracing was off)
            return UnsampledAttempt(event_id)
        parsed = parse_traceparent(stored)
        if parsed is None:
            return UnsampledAttempt(event_id)
        trace_id, sampled = parsed
        if not sampled:
            return Unsampled(trace_id)
        parent = _PROPAGATOR.extract({TRACEPARENT: stored})
        span = self._tracer.start_span(
            "hookrouter.deliver",
            context=parent,
            kind=SpanKind.CLIENT,
            attributes={
                "hookrouter.event_id": event_id,
                "hookrouter.tenant": tenant,
                "hookrouter.endpoint": endpoint_id,
                "hookrouter.attempt": number,
            },
        )
        return OtelAttempt(span)

    def propagates_to(self, endpoint_id: str) -> bool:
        quiet = self._quiet
        return quiet is not None and endpoint_id not in quiet

    def shutdown(self) -> None:
        self._provider.shutdown()  # flushes the batch processor


__all__ = [
    "OtelTracing",
    "Unsampled",
    "UnsampledAttempt",
    "event_trace_id",
    "parse_traceparent",
    "traceparent_of",
]
