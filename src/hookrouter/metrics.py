"""Prometheus metrics, all registered on one registry.

Every module that exports metrics declares them against ``REGISTRY`` (not the
prometheus-client global default), so a test can build several routers in one
process and ``/metrics`` shows exactly hookrouter's series. Metric names start
with ``hookrouter_``; per-tenant series carry a ``tenant`` label (tenant ids
are bounded by configuration, so cardinality is bounded too).
"""

from __future__ import annotations

import threading
import weakref
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

REGISTRY = CollectorRegistry(auto_describe=True)

T = TypeVar("T")


class LiveSet(Generic[T]):
    """The live objects a scrape-time collector reads (engines, stores).

    Held weakly, so a forgotten ``discard`` leaks nothing; locked, because
    the exposition may scrape from another thread than the one adding.
    """

    def __init__(self) -> None:
        self._items: weakref.WeakSet[T] = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, item: T) -> None:
        with self._lock:
            self._items.add(item)

    def discard(self, item: T) -> None:
        with self._lock:
            self._items.discard(item)

    def snapshot(self) -> list[T]:
        with self._lock:
            return list(self._items)


CONTENT_TYPE = CONTENT_TYPE_LATEST


def render() -> bytes:
    """The whole registry in Prometheus text format."""
    return generate_latest(REGISTRY)
