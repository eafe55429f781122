"""The ``[store]`` section of the config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hookrouter.config.durations import parse_duration
from hookrouter.config.reader import TableReader
from hookrouter.config.retention import DAY, RetentionPolicy

KEEP_FOREVER = "forever"
# The [store] keys every backend shares; the rest belong to the chosen backend.
SHARED_STORE_KEYS = ("backend", "path", "max_commit_latency_ms", "retention")
# Ten years: longer is a typo, and "forever" says what it means.
MAX_RETENTION_SECONDS = 3650 * DAY


@dataclass(frozen=True, slots=True)
class StoreSettings:
    backend: str = ""  # "": the default backend (store.backends)
    path: Path = Path("hookrouter-data")
    # Above this smoothed commit latency, senders that retry get 503 + Retry-After.
    max_commit_latency_ms: float = 1000.0
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    # Every other key under [store], raw: the backend's own table [store.<name>]
    # and keys it once read directly under [store]. The backend validates them
    # (store.backends.choose): config sits below the store and knows no backend.
    backend_keys: Mapping[str, Any] = field(default_factory=dict)


def parse_store(r: TableReader, base_dir: Path) -> StoreSettings:
    backend = r.string("backend")
    path = Path(r.string("path", "./hookrouter-data"))
    max_commit_ms = r.number("max_commit_latency_ms", 1000.0, minimum=1.0)
    retention = parse_retention(r.sub("retention"))
    backend_keys = {key: r.raw(key) for key in r.table if key not in SHARED_STORE_KEYS}
    r.finish()
    # A relative path is relative to the config file, so that a config works
    # the same from whatever directory the router is started.
    resolved = path if path.is_absolute() else base_dir / path
    return StoreSettings(
        backend=backend,
        path=resolved,
        max_commit_latency_ms=max_commit_ms,
        retention=retention,
        backend_keys=backend_keys,
    )


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
