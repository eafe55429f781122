"""Prometheus series of the ingest path.

A ``LoopCounter`` (``loop_metrics``: a float addition per ``inc``, not
prometheus_client's locked Python method), whose ``labels`` is one dict
lookup: the per-request metric cost is that lookup and one ``inc``.
Label values are bounded: sources come from configuration, results from a
fixed set of reason codes, and unknown source ids share one label.
"""

from __future__ import annotations

from typing import Final

from hookrouter.loop_metrics import LoopCounter
from hookrouter.metrics import REGISTRY

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
    {"backlog_full", "store_slow", "store_full", "store_unavailable", "store_unreachable",
     "store_readonly"}
)  # fmt: skip
SATURATION_REFUSALS: Final[dict[str, int]] = {}


class IngestMetrics:
    """Counts ingest outcomes into ``hookrouter_ingest_requests_total``."""

    __slots__ = ()

    def _inc(self, source: str, result: str) -> None:
        INGEST_REQUESTS.labels(source, result).inc()

    def accepted(self, source: str, duplicate: bool) -> None:
        self._inc(source, "duplicate" if duplicate else "accepted")

    def rejected(self, source: str, reason: str) -> None:
        self._inc(source, reason)
        if reason in SATURATION_REASONS:
            SATURATION_REFUSALS[reason] = SATURATION_REFUSALS.get(reason, 0) + 1
