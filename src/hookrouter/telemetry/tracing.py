"""Tracing as the ingest and delivery paths see it: three small interfaces, no SDK.

``Tracing`` is None on the router's objects unless ``[telemetry]`` names an
OTLP endpoint; the hot paths then pay one ``is not None`` check per request
and per attempt, create no span object and import nothing of OpenTelemetry
(``telemetry.build.build_tracing`` imports ``telemetry.otel`` only when on).

One trace per event: the ingest span continues an inbound ``traceparent``
and its own context is stored with the event, as the header
``TRACE_HEADER`` among the event's stored headers, so every delivery
attempt, however late and after however many restarts, starts a child span
of it and sends the receiver a ``traceparent`` in the same trace. A root
trace that is not sampled stores nothing (``ingest`` returns None).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

# The ingest span's W3C traceparent, kept with the event's received headers.
TRACE_HEADER: Final = "x-hookrouter-traceparent"
# The header a delivery carries to the receiver (W3C Trace Context).
TRACEPARENT: Final = "traceparent"


class IngestTrace:
    """The span of one ingest request; ended by exactly one of the three calls."""

    __slots__ = ()

    def stored_headers(self, headers: dict[str, str]) -> dict[str, str]:
        """``headers`` plus ``TRACE_HEADER``: what the store keeps with the event."""
        raise NotImplementedError

    def refused(self, reason: str) -> None:
        raise NotImplementedError

    def committed(self, event_id: str, duplicate: bool, commit_seconds: float) -> None:
        raise NotImplementedError


class AttemptTrace:
    """The span of one delivery attempt."""

    __slots__ = ()

    def traceparent(self) -> str:
        """The W3C header value naming this span, for the receiver."""
        raise NotImplementedError

    def finished(
        self, status: int | None, error: str | None, outcome: str, breaker_state: str
    ) -> None:
        raise NotImplementedError

    def abandoned(self) -> None:
        raise NotImplementedError


class Tracing:
    """Starts the spans; the OpenTelemetry implementation is ``telemetry.otel.OtelTracing``."""

    __slots__ = ()

    def ingest(self, headers: Mapping[str, str], tenant: str, source: str) -> IngestTrace | None:
        """The request's span; None when the trace is not sampled (nothing to store or end)."""
        raise NotImplementedError

    def attempt(
        self, stored: str | None, event_id: str, tenant: str, endpoint_id: str, number: int
    ) -> AttemptTrace:
        """``stored``: the event's ``TRACE_HEADER`` value (None: ingested untraced)."""
        raise NotImplementedError

    def propagates_to(self, endpoint_id: str) -> bool:
        """Whether deliveries to this endpoint carry a ``traceparent``."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Export what is buffered and stop (the router's stop)."""
        raise NotImplementedError


__all__ = [
    "TRACEPARENT",
    "TRACE_HEADER",
    "AttemptTrace",
    "IngestTrace",
    "Tracing",
]
