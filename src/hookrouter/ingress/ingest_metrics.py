"""Prometheus series of the ingest path.

A ``LoopCounter`` (``loop_metrics``: a float addition per ``inc``, not
prometheus_client's locked Python method), whose ``labels`` is one dict
lookup: the per-request metric cost is that lookup and one ``inc``.
Label values are bounded: results come from a fixed set of reason codes,
unknown source ids share one label, and sources get series of their own up to
``[telemetry] labelled_tenants`` (the first to see a request), later ones counting
under ``_other`` -- a platform with 100,000 sources would otherwise make a
metric no Prometheus server scrapes comfortably.
"""

from __future__ import annotations

from typing import Final

from hookrouter.config.telemetry import LABELLED_TENANTS
from hookrouter.loop_metrics import CounterCell, LoopCounter
from hookrouter.metrics import REGISTRY

OTHER_SOURCES: Final = "_other"

INGEST_REQUESTS: Final = LoopCounter(
    "hookrouter_ingest_requests",
    "Ingest requests by source and result (accepted, duplicate, or the error reason).",
    ["source", "result"],
    registry=REGISTRY,
)

# Refusals that say the router cannot take more now (429 backlog, 503 store):
# counted apart so operator events can tell saturation from a bad sender
# without walking every source's series.
SATURATION_REASONS: Final = frozenset(
    {"backlog_full", "store_slow", "store_saturated", "store_full", "store_unavailable",
     "store_unreachable", "store_readonly", "store_io_error", "store_error"}
)  # fmt: skip
SATURATION_REFUSALS: Final[dict[str, int]] = {}


class IngestMetrics:
    """Counts ingest outcomes into ``hookrouter_ingest_requests_total``."""

    __slots__ = ("labelled", "series_limit")

    def __init__(self, series_limit: int = LABELLED_TENANTS) -> None:
        self.labelled: set[str] = set()  # sources with series of their own (sticky)
        self.series_limit = series_limit

    def _inc(self, source: str, result: str) -> None:
        self.cell(source, result).inc()

    def cell(self, source: str, result: str) -> CounterCell:
        """The series a ``result`` of ``source`` counts in (labelling the source if room)."""
        labelled = self.labelled
        if source not in labelled:
            if len(labelled) < self.series_limit:
                labelled.add(source)
            else:
                source = OTHER_SOURCES
        return INGEST_REQUESTS.labels(source, result)

    def accepted(self, source: str, duplicate: bool) -> None:
        self._inc(source, "duplicate" if duplicate else "accepted")

    def rejected(self, source: str, reason: str) -> None:
        self._inc(source, reason)
        if reason in SATURATION_REASONS:
            SATURATION_REFUSALS[reason] = SATURATION_REFUSALS.get(reason, 0) + 1
