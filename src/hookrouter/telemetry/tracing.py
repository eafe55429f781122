"""Tracing as the ingest and delivery paths see it: the sampling decision, no SDK.

``Tracing`` is None on the router's objects unless ``[telemetry]`` names an
OTLP endpoint; the hot paths then pay one ``is not None`` check per request
and per attempt, create no span object and import nothing of OpenTelemetry
(``telemetry.build.build_tracing`` imports ``telemetry.otel`` only when on).

One trace per event: the ingest span continues an inbound ``traceparent``
and its own context is stored with the event, as the header
``TRACE_HEADER`` among the event's stored headers, so every delivery
attempt, however late and after however many restarts, starts a child span
of it and sends the receiver a ``traceparent`` in the same trace.

Sampling is decided here, before a ``SpanSource`` (the SDK) is asked for
anything: an inbound ``traceparent`` decides by its sampled flag, otherwise
``sample_ratio`` does, and every attempt follows its ingest span's decision
(the flag is stored with the event), so a trace is kept or dropped whole.
This module is compiled because at 1 % it runs for 99 events in 100: a root
that is not sampled stores nothing and makes no object at all, and its
attempts send a ``traceparent`` (flag ``00``) whose trace id is derived from
the event id (``event_trace_id``), so every attempt of an event, even after
a restart, names the same trace for the receiver to join. An inbound
unsampled ``traceparent`` is stored, so deliveries continue the sender's trace.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Final

from mypy_extensions import mypyc_attr

# The ingest span's W3C traceparent, kept with the event's received headers.
TRACE_HEADER: Final = "x-hookrouter-traceparent"
# The header a delivery carries to the receiver (W3C Trace Context).
TRACEPARENT: Final = "traceparent"

_getrandbits: Final = random.getrandbits


@mypyc_attr(allow_interpreted_subclasses=True)
class IngestTrace:
    """The span of one ingest request; ended by exactly one of the two calls."""

    def stored_headers(self, headers: dict[str, str]) -> dict[str, str]:
        """``headers`` plus ``TRACE_HEADER``: what the store keeps with the event."""
        raise NotImplementedError

    def refused(self, reason: str) -> None:
        raise NotImplementedError

    def committed(self, event_id: str, duplicate: bool, commit_seconds: float) -> None:
        raise NotImplementedError


@mypyc_attr(allow_interpreted_subclasses=True)
class AttemptTrace:
    """The span of one delivery attempt."""

    def traceparent(self) -> str:
        """The W3C header value naming this span, for the receiver."""
        raise NotImplementedError

    def finished(
        self, status: int | None, error: str | None, outcome: str, breaker_state: str
    ) -> None:
        raise NotImplementedError

    def abandoned(self) -> None:
        raise NotImplementedError


@mypyc_attr(allow_interpreted_subclasses=True)
class SpanSource:
    """Where sampled spans come from: ``telemetry.otel.OtelSpans`` (the SDK)."""

    def ingest(self, inbound: Mapping[str, str] | None, tenant: str, source: str) -> IngestTrace:
        """A span continuing ``inbound``'s sampled trace, or a new root when None."""
        raise NotImplementedError

    def attempt(
        self, stored: str, event_id: str, tenant: str, endpoint_id: str, number: int
    ) -> AttemptTrace:
        """A child span of the sampled ingest span whose traceparent is ``stored``."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Export what is buffered and stop."""
        raise NotImplementedError


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


def _span_id() -> str:
    return (_getrandbits(64) or 1).to_bytes(8, "big").hex()


def _unsampled_traceparent(trace_id: str) -> str:
    """A ``traceparent`` in ``trace_id``, flag ``00``, naming a new span id."""
    return f"00-{trace_id}-{_span_id()}-00"


def untraced_traceparent(event_id: str) -> str:
    """The ``traceparent`` an attempt of an event ingested untraced sends (a new span id)."""
    return _unsampled_traceparent(event_trace_id(event_id))


class UnsampledIngest(IngestTrace):
    """An inbound trace its sender did not sample: its ids are stored, no span is made."""

    def __init__(self, trace_id: str) -> None:
        self.value = _unsampled_traceparent(trace_id)

    def stored_headers(self, headers: dict[str, str]) -> dict[str, str]:
        return {**headers, TRACE_HEADER: self.value}

    def refused(self, reason: str) -> None:
        return None

    def committed(self, event_id: str, duplicate: bool, commit_seconds: float) -> None:
        return None


class UnsampledAttempt(AttemptTrace):
    """An attempt continuing a sender's unsampled trace: a ``traceparent``, no span."""

    def __init__(self, trace_id: str) -> None:
        self.value = _unsampled_traceparent(trace_id)

    def traceparent(self) -> str:
        return self.value

    def finished(
        self, status: int | None, error: str | None, outcome: str, breaker_state: str
    ) -> None:
        return None

    def abandoned(self) -> None:
        return None


class Tracing:
    """Decides sampling and propagation; asks ``spans`` only for sampled traces."""

    def __init__(
        self,
        spans: SpanSource,
        sample_ratio: float,
        quiet_endpoints: frozenset[str] | None,
        rand: Callable[[], float] = random.random,
    ) -> None:
        """``quiet_endpoints``: endpoints that get no ``traceparent``; None: none gets one."""
        self.spans = spans
        self._ratio = sample_ratio
        self._quiet = quiet_endpoints
        self._rand = rand

    def _root_sampled(self) -> bool:
        ratio = self._ratio
        return ratio >= 1.0 or (ratio > 0.0 and self._rand() < ratio)

    def ingest(self, headers: Mapping[str, str], tenant: str, source: str) -> IngestTrace | None:
        """The request's span; None when the trace is not sampled (nothing to store or end)."""
        inbound = headers.get(TRACEPARENT)
        if inbound is not None:
            parsed = parse_traceparent(inbound)
            if parsed is not None:
                if not parsed[1]:
                    return UnsampledIngest(parsed[0])
                return self.spans.ingest(headers, tenant, source)
        # The usual webhook (or a malformed traceparent): the ratio decides.
        if not self._root_sampled():
            return None
        return self.spans.ingest(None, tenant, source)

    def attempt(
        self, stored: str | None, event_id: str, tenant: str, endpoint_id: str, number: int
    ) -> AttemptTrace | None:
        """The attempt's span; None for an event ingested untraced (``untraced_traceparent``).

        ``stored``: the event's ``TRACE_HEADER`` value (None: not sampled, published,
        or ingested while tracing was off).
        """
        if not stored:
            return None
        parsed = parse_traceparent(stored)
        if parsed is None:
            return None
        if not parsed[1]:
            return UnsampledAttempt(parsed[0])
        return self.spans.attempt(stored, event_id, tenant, endpoint_id, number)

    def propagates_to(self, endpoint_id: str) -> bool:
        """Whether deliveries to this endpoint carry a ``traceparent``."""
        quiet = self._quiet
        return quiet is not None and endpoint_id not in quiet

    def shutdown(self) -> None:
        """Export what is buffered and stop (the router's stop)."""
        self.spans.shutdown()


__all__ = [
    "TRACEPARENT",
    "TRACE_HEADER",
    "AttemptTrace",
    "IngestTrace",
    "SpanSource",
    "Tracing",
    "UnsampledAttempt",
    "UnsampledIngest",
    "event_trace_id",
    "parse_traceparent",
    "untraced_traceparent",
]
