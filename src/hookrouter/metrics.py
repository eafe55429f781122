"""Prometheus metrics, all registered on one registry.

Every module that exports metrics declares them against ``REGISTRY`` (not the
prometheus-client global default), so a test can build several routers in one
process and ``/metrics`` shows exactly hookrouter's series. Metric names start
with ``hookrouter_``; per-tenant series carry a ``tenant`` label (tenant ids
are bounded by configuration, so cardinality is bounded too).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

REGISTRY = CollectorRegistry(auto_describe=True)

CONTENT_TYPE = CONTENT_TYPE_LATEST


def render() -> bytes:
    """The whole registry in Prometheus text format."""
    return generate_latest(REGISTRY)
