"""Prometheus series of the event store, read from ``stats()`` at scrape time.

The store already keeps its counters for ``stats()``; a custom collector
turns them into series when Prometheus scrapes, so the commit path pays
nothing more. Keys a backend does not report are simply absent.

* ``hookrouter_store_appends_total``            events handed to the store
* ``hookrouter_store_pending_appends``          appends waiting for their commit
* ``hookrouter_store_commits_total``            commits (events and write jobs)
* ``hookrouter_store_events_per_commit_last``   events in the last event commit
* ``hookrouter_store_commit_seconds_last``      duration of the last commit
* ``hookrouter_store_commit_seconds_peak``      longest commit since start
* ``hookrouter_store_duplicates_total``         appends answered as duplicates
* ``hookrouter_store_failed_appends_total``     appends whose commit failed
* ``hookrouter_store_failing``                  1 while the last commit failed
* ``hookrouter_store_checkpoints_total``        WAL checkpoints run
* ``hookrouter_store_checkpoint_seconds_peak``  longest checkpoint since start
* ``hookrouter_store_checkpoint_errors_total``  checkpoints that failed
* ``hookrouter_store_wal_frames``               frames in the WAL now
* ``hookrouter_store_wal_rewinds_total``        WAL restarts from its beginning
* ``hookrouter_store_wal_rewind_seconds_peak``  longest rewind (the writer's own
  last copy: on the default design, the event loop waits for it)
* ``hookrouter_store_pruned_events_total``      finished events deleted by retention
* ``hookrouter_store_dedup_hot_keys``           dedup keys held in memory (not yet a run)
* ``hookrouter_store_dedup_runs``               sorted runs of dedup keys on disk
* ``hookrouter_store_dedup_run_keys``           keys in those runs
* ``hookrouter_store_dedup_flushes_total``      hot tiers written as runs
* ``hookrouter_store_dedup_merges_total``       runs merged into the next level
* ``hookrouter_store_dedup_failures_total``     flushes or merges that failed (retried)
* ``hookrouter_store_dedup_filter_hits_total``  probes a run's Bloom filter let through
* ``hookrouter_store_dedup_worker_cpu_seconds_total``  CPU the dedup worker spent
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from hookrouter.metrics import REGISTRY, LiveSet
from hookrouter.store.base import EventStore

Kind = Literal["counter", "gauge"]

# stats() key -> (series name without prefix, kind, help, scale to the series' unit)
SERIES: Final[dict[str, tuple[str, Kind, str, float]]] = {
    "appends": ("appends", "counter", "Events handed to the store.", 1.0),
    "pending_appends": ("pending_appends", "gauge", "Appends waiting for their commit.", 1.0),
    "commits": ("commits", "counter", "Commits (event batches and write jobs).", 1.0),
    "events_per_commit_last": (
        "events_per_commit_last",
        "gauge",
        "Events in the last event commit.",
        1.0,
    ),
    "commit_ms_last": ("commit_seconds_last", "gauge", "Duration of the last commit.", 1e-3),
    "commit_ms_peak": ("commit_seconds_peak", "gauge", "Longest commit since start.", 1e-3),
    "duplicates": ("duplicates", "counter", "Appends answered as duplicates.", 1.0),
    "failed_appends": ("failed_appends", "counter", "Appends whose commit failed.", 1.0),
    "failing": ("failing", "gauge", "1 while the last commit failed.", 1.0),
    "checkpoints": ("checkpoints", "counter", "WAL checkpoints run.", 1.0),
    "checkpoint_ms_peak": (
        "checkpoint_seconds_peak",
        "gauge",
        "Longest WAL checkpoint since start.",
        1e-3,
    ),
    "checkpoint_errors": ("checkpoint_errors", "counter", "WAL checkpoints that failed.", 1.0),
    "wal_frames": ("wal_frames", "gauge", "Frames in the write-ahead log now.", 1.0),
    "wal_rewinds": ("wal_rewinds", "counter", "WAL restarts from its beginning.", 1.0),
    "wal_rewind_ms_peak": (
        "wal_rewind_seconds_peak",
        "gauge",
        "Longest checkpoint the writer ran itself to rewind the WAL.",
        1e-3,
    ),
    "pruned_events": (
        "pruned_events",
        "counter",
        "Finished events deleted by the retention policy.",
        1.0,
    ),
    "dedup_hot_keys": ("dedup_hot_keys", "gauge", "Dedup keys held in memory.", 1.0),
    "dedup_runs": ("dedup_runs", "gauge", "Sorted runs of dedup keys on disk.", 1.0),
    "dedup_run_keys": ("dedup_run_keys", "gauge", "Dedup keys in the runs on disk.", 1.0),
    "dedup_flushes": ("dedup_flushes", "counter", "Hot dedup tiers written as runs.", 1.0),
    "dedup_merges": ("dedup_merges", "counter", "Dedup runs merged into the next level.", 1.0),
    "dedup_failures": ("dedup_failures", "counter", "Dedup flushes or merges that failed.", 1.0),
    "dedup_worker_cpu_seconds": (
        "dedup_worker_cpu_seconds",
        "counter",
        "CPU time the dedup worker thread spent flushing and merging.",
        1.0,
    ),
    "dedup_filter_hits": (
        "dedup_filter_hits",
        "counter",
        "Dedup probes a run's Bloom filter let through to disk.",
        1.0,
    ),
}

_stores: LiveSet[EventStore] = LiveSet()


def track(store: EventStore) -> None:
    """Export ``store``'s stats until :func:`untrack` (or until it is garbage)."""
    _stores.add(store)


def untrack(store: EventStore) -> None:
    _stores.discard(store)


def families(stats: dict[str, Any]) -> Iterator[Metric]:
    """The series for one store's ``stats()`` (keys it does not report are skipped)."""
    for key, (name, kind, doc, scale) in SERIES.items():
        value = stats.get(key)
        if value is None:
            continue
        family: Metric
        if kind == "counter":
            family = CounterMetricFamily(f"hookrouter_store_{name}", doc)
        else:
            family = GaugeMetricFamily(f"hookrouter_store_{name}", doc)
        family.add_metric([], float(value) * scale)
        yield family


class _Collector:
    def collect(self) -> Iterator[Metric]:
        stores = _stores.snapshot()
        # One store per router process; should there be several, the first one wins
        # (unlabelled series must not repeat).
        if stores:
            yield from families(stores[0].stats())


REGISTRY.register(_Collector())

__all__ = ["SERIES", "families", "track", "untrack"]
