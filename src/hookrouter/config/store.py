"""The ``[store]`` section of the config."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hookrouter.config.durations import parse_duration
from hookrouter.config.reader import TableReader
from hookrouter.store.dedup_tiers import TierPolicy
from hookrouter.store.retention import DAY, RetentionPolicy

STORE_BACKENDS = ("sqlite",)
KEEP_FOREVER = "forever"
# Ten years: longer is a typo, and "forever" says what it means.
MAX_RETENTION_SECONDS = 3650 * DAY


@dataclass(frozen=True, slots=True)
class StoreSettings:
    backend: str = "sqlite"
    path: Path = Path("hookrouter-data")
    # "loop": commit once per event-loop turn (measured fastest on 2 cores);
    # "thread": a writer thread (less loop CPU per event, steadier loop latency).
    grouping: str = "loop"
    # Above this smoothed commit latency, senders that retry get 503 + Retry-After.
    max_commit_latency_ms: float = 1000.0
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    dedup: TierPolicy = field(default_factory=TierPolicy)


def parse_store(r: TableReader, base_dir: Path) -> StoreSettings:
    backend = r.choice("backend", STORE_BACKENDS, "sqlite")
    path = Path(r.string("path", "./hookrouter-data"))
    grouping = r.choice("grouping", ("loop", "thread"), "loop")
    max_commit_ms = r.number("max_commit_latency_ms", 1000.0, minimum=1.0)
    retention = parse_retention(r.sub("retention"))
    dedup = parse_dedup(r.sub("dedup"))
    r.finish()
    # A relative path is relative to the config file, so that a config works
    # the same from whatever directory the router is started.
    resolved = path if path.is_absolute() else base_dir / path
    return StoreSettings(
        backend=backend,
        path=resolved,
        grouping=grouping,
        max_commit_latency_ms=max_commit_ms,
        retention=retention,
        dedup=dedup,
    )


def parse_dedup(r: TableReader | None) -> TierPolicy:
    """``[store.dedup]``: ``hot_keys`` (keys kept in memory before a flush), ``fanout``."""
    default = TierPolicy()
    if r is None:
        return default
    policy = TierPolicy(
        # 1k..16M: below, runs are tiny and merges constant; above, GBs of memory.
        hot_limit=r.integer("hot_keys", default.hot_limit, minimum=1024, maximum=1 << 24),
        fanout=r.integer("fanout", default.fanout, minimum=2, maximum=64),
    )
    r.finish()
    return policy


def parse_retention(r: TableReader | None) -> RetentionPolicy:
    """``[store.retention]``: ``delivered``, ``failed`` (durations or "forever"), ``interval``."""
    default = RetentionPolicy()
    if r is None:
        return default
    policy = RetentionPolicy(
        delivered_seconds=_keep_for(r, "delivered", default.delivered_seconds),
        failed_seconds=_keep_for(r, "failed", default.failed_seconds),
        interval_seconds=_duration(r, "interval", default.interval_seconds, DAY)
        or default.interval_seconds,
    )
    r.finish()
    return policy


def _keep_for(r: TableReader, key: str, default: float | None) -> float | None:
    if r.raw(key) == KEEP_FOREVER:
        return None
    return _duration(r, key, default, MAX_RETENTION_SECONDS, hint=f' (or "{KEEP_FOREVER}")')


def _duration(
    r: TableReader, key: str, default: float | None, maximum: float, *, hint: str = ""
) -> float | None:
    text = r.string(key)
    if not text:
        return default
    try:
        return parse_duration(text, maximum=maximum)
    except ValueError as exc:
        r.problem(key, f"{exc}{hint}")
        return default
