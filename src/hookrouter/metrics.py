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
from collections.abc import Iterator
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector


@runtime_checkable
class TextCollector(Protocol):
    """A collector that writes its families' text itself (``loop_metrics``): many series."""

    def expose(self, out: list[str]) -> None: ...


class Registry(CollectorRegistry):
    """prometheus_client's registry, keeping its collectors in order for ``render``."""

    def __init__(self) -> None:
        super().__init__(auto_describe=True)
        self._ordered: list[Collector] = []

    def register(self, collector: Collector) -> None:
        super().register(collector)
        self._ordered.append(collector)

    def unregister(self, collector: Collector) -> None:
        super().unregister(collector)
        self._ordered.remove(collector)

    def collectors(self) -> list[Collector]:
        with self._lock:
            return list(self._ordered)


class _Only(Collector):
    """The registry's other collectors, as ``generate_latest`` reads a registry."""

    def __init__(self, collectors: list[Collector]) -> None:
        self._collectors = collectors

    def collect(self) -> Iterator[Any]:
        for collector in self._collectors:
            yield from collector.collect()


REGISTRY = Registry()

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
    """The whole registry in Prometheus text format.

    Families with many series write their own lines (``TextCollector``); the
    rest go through ``generate_latest``. Same format, same samples.
    """
    collectors = REGISTRY.collectors()
    text: list[str] = []
    others: list[Collector] = []
    for collector in collectors:
        if isinstance(collector, TextCollector):
            collector.expose(text)
        else:
            others.append(collector)
    return generate_latest(_Only(others)) + "".join(text).encode()
