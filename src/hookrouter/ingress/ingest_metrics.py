"""Prometheus series of the ingest path, with label children cached.

A ``LoopCounter`` (``loop_metrics``: a float addition per ``inc``, not
prometheus_client's locked Python method); the cell per (source, result) is
cached, so the per-request metric cost is one dict lookup and one ``inc``.
Label values are bounded: sources come from configuration, results from a
fixed set of reason codes, and unknown source ids share one label.
"""

from __future__ import annotations

from hookrouter.loop_metrics import CounterCell, LoopCounter
from hookrouter.metrics import REGISTRY

INGEST_REQUESTS = LoopCounter(
    "hookrouter_ingest_requests",
    "Ingest requests by source and result (accepted, duplicate, or the error reason).",
    ["source", "result"],
    registry=REGISTRY,
)


class IngestMetrics:
    """Counts ingest outcomes into ``hookrouter_ingest_requests_total``."""

    __slots__ = ("_children",)

    def __init__(self) -> None:
        self._children: dict[tuple[str, str], CounterCell] = {}

    def _inc(self, source: str, result: str) -> None:
        key = (source, result)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = INGEST_REQUESTS.labels(source, result)
        child.inc()

    def accepted(self, source: str, duplicate: bool) -> None:
        self._inc(source, "duplicate" if duplicate else "accepted")

    def rejected(self, source: str, reason: str) -> None:
        self._inc(source, reason)
