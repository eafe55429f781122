"""``SqliteStore.stats()`` as the contract's typed ``StoreStats``, for metrics.

The shared counters map onto ``StoreStats``'s fields; what only this backend
has (WAL checkpoints, the dedup tiers' runs) travels as its own series.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from hookrouter.store.base import StatSeries, StoreStats

Kind = Literal["counter", "gauge"]

# stats() key -> (series name without prefix, kind, help, scale to the series' unit)
SERIES: Final[dict[str, tuple[str, Kind, str, float]]] = {
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
    "partitions_dropped": (
        "partitions_dropped",
        "counter",
        "Time partitions retention unlinked whole.",
        1.0,
    ),
    "partitions_compacted": (
        "partitions_compacted",
        "counter",
        "Time partitions retention rewrote with only the failed events they keep.",
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


def typed(stats: Mapping[str, Any]) -> StoreStats | None:
    """The typed counters of an open store's ``stats()``; None before it opened."""
    if "appends" not in stats:
        return None
    backend = tuple(
        StatSeries(name, kind, doc, float(stats[key]) * scale)
        for key, (name, kind, doc, scale) in SERIES.items()
        if stats.get(key) is not None
    )
    return StoreStats(
        appends=stats["appends"],
        pending_appends=stats["pending_appends"],
        commits=stats["commits"],
        events_per_commit_last=stats["events_per_commit_last"],
        commit_seconds_last=stats["commit_ms_last"] / 1000.0,
        commit_seconds_peak=stats["commit_ms_peak"] / 1000.0,
        duplicates=stats["duplicates"],
        failed_appends=stats["failed_appends"],
        failing=bool(stats["failing"]),
        pruned_events=stats["pruned_events"],
        backend=backend,
    )


__all__ = ["SERIES", "typed"]
