"""Prometheus series of the event store, read from its typed counters at scrape time.

The store already keeps its counters; a custom collector turns them into
series when Prometheus scrapes, so the commit path pays nothing more. Every
backend reports ``StoreStats``'s fields; what only one backend measures comes
with it as ready-made series (``StoreStats.backend``), named by that backend.

* ``hookrouter_store_appends_total``            events handed to the store
* ``hookrouter_store_pending_appends``          appends waiting for their commit
* ``hookrouter_store_commits_total``            commits (events and write jobs)
* ``hookrouter_store_events_per_commit_last``   events in the last event commit
* ``hookrouter_store_commit_seconds_last``      duration of the last commit
* ``hookrouter_store_commit_seconds_peak``      longest commit since start
* ``hookrouter_store_duplicates_total``         appends answered as duplicates
* ``hookrouter_store_failed_appends_total``     appends whose commit failed
* ``hookrouter_store_failing``                  1 while the last commit failed
* ``hookrouter_store_pruned_events_total``      finished events deleted by retention
* ``hookrouter_store_<backend series>``         e.g. write-ahead log and dedup index
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from hookrouter.metrics import REGISTRY, LiveSet
from hookrouter.store.base import EventStore, StoreStats

Kind = Literal["counter", "gauge"]

# StoreStats field -> (series name without prefix, kind, help)
SERIES: Final[dict[str, tuple[str, Kind, str]]] = {
    "appends": ("appends", "counter", "Events handed to the store."),
    "pending_appends": ("pending_appends", "gauge", "Appends waiting for their commit."),
    "commits": ("commits", "counter", "Commits (event batches and write jobs)."),
    "events_per_commit_last": (
        "events_per_commit_last",
        "gauge",
        "Events in the last event commit.",
    ),
    "commit_seconds_last": ("commit_seconds_last", "gauge", "Duration of the last commit."),
    "commit_seconds_peak": ("commit_seconds_peak", "gauge", "Longest commit since start."),
    "duplicates": ("duplicates", "counter", "Appends answered as duplicates."),
    "failed_appends": ("failed_appends", "counter", "Appends whose commit failed."),
    "failing": ("failing", "gauge", "1 while the last commit failed."),
    "pruned_events": (
        "pruned_events",
        "counter",
        "Finished events deleted by the retention policy.",
    ),
}

_stores: LiveSet[EventStore] = LiveSet()


def track(store: EventStore) -> None:
    """Export ``store``'s stats until :func:`untrack` (or until it is garbage)."""
    _stores.add(store)


def untrack(store: EventStore) -> None:
    _stores.discard(store)


def families(stats: StoreStats) -> Iterator[Metric]:
    """The series for one store's typed counters, the backend's own ones last."""
    for field, (name, kind, doc) in SERIES.items():
        yield _family(name, kind, doc, float(getattr(stats, field)))
    for series in stats.backend:
        yield _family(series.name, series.kind, series.help, series.value)


def _family(name: str, kind: Kind, doc: str, value: float) -> Metric:
    family: Metric
    if kind == "counter":
        family = CounterMetricFamily(f"hookrouter_store_{name}", doc)
    else:
        family = GaugeMetricFamily(f"hookrouter_store_{name}", doc)
    family.add_metric([], value)
    return family


class _Collector:
    def collect(self) -> Iterator[Metric]:
        stores = _stores.snapshot()
        # One store per router process; should there be several, the first one wins
        # (unlabelled series must not repeat).
        counters = stores[0].counters() if stores else None
        if counters is not None:
            yield from families(counters)


REGISTRY.register(_Collector())

__all__ = ["SERIES", "families", "track", "untrack"]
