"""The process-wide sections of the config: server, store, admin, delivery."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hookrouter.config_reader import TableReader
from hookrouter.core.http1 import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_HEADER_BYTES
from hookrouter.delivery.policy import parse_duration, parse_retry_schedule
from hookrouter.store.retention import DAY, RetentionPolicy

ENGINES = ("asyncio", "epoll", "io_uring", "auto")
KEEP_FOREVER = "forever"
# The [store] keys every backend shares; the rest belong to the chosen backend.
SHARED_STORE_KEYS = ("backend", "path", "max_commit_latency_ms", "retention")
# Ten years: longer is a typo, and "forever" says what it means.
MAX_RETENTION_SECONDS = 3650 * DAY


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    engine: str = "asyncio"
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    keepalive_timeout_seconds: float = 75.0
    shutdown_grace_seconds: float = 10.0
    backlog: int = 1024


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


@dataclass(frozen=True, slots=True)
class AdminSettings:
    token: str = ""


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    failure_ratio: float = 0.5
    window_seconds: float = 30.0
    min_requests: int = 10
    cooldown_seconds: float = 30.0


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    allow_private_networks: bool = False
    allowlist: tuple[str, ...] = ()
    timeout_seconds: float = 15.0
    connect_timeout_seconds: float = 5.0
    retry_schedule: tuple[str, ...] | None = None  # None = the delivery engine's default
    breaker: BreakerSettings = field(default_factory=BreakerSettings)
    workers: int = 256  # shared outbound concurrency across all tenants


def parse_listen(reader: TableReader, key: str) -> tuple[str, int]:
    text = reader.string(key, "127.0.0.1:8080")
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        reader.problem(key, f"must look like HOST:PORT (e.g. 127.0.0.1:8080), got {text!r}")
        return "127.0.0.1", 8080
    return host, int(port_text)


def parse_server(r: TableReader) -> ServerSettings:
    host, port = parse_listen(r, "listen")
    settings = ServerSettings(
        host=host,
        port=port,
        engine=r.choice("engine", ENGINES, "asyncio"),
        max_body_bytes=r.integer("max_body_bytes", DEFAULT_MAX_BODY_BYTES, minimum=1),
        max_header_bytes=r.integer("max_header_bytes", DEFAULT_MAX_HEADER_BYTES, minimum=1024),
        header_timeout_seconds=r.number("header_timeout_seconds", 10.0, minimum=0.1),
        body_timeout_seconds=r.number("body_timeout_seconds", 30.0, minimum=0.1),
        keepalive_timeout_seconds=r.number("keepalive_timeout_seconds", 75.0, minimum=0.1),
        shutdown_grace_seconds=r.number("shutdown_grace_seconds", 10.0, minimum=0.0),
        backlog=r.integer("backlog", 1024, minimum=1),
    )
    r.finish()
    return settings


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


def parse_admin(r: TableReader) -> AdminSettings:
    token = r.secret("token")
    if r.has("token") and token and len(token) < 8:
        r.problem("token", "is too short (use at least 8 characters)")
    r.finish()
    return AdminSettings(token=token)


def parse_breaker(r: TableReader | None) -> BreakerSettings:
    if r is None:
        return BreakerSettings()
    settings = BreakerSettings(
        failure_ratio=r.number("failure_ratio", 0.5, minimum=0.01, maximum=1.0),
        window_seconds=r.number("window_seconds", 30.0, minimum=0.1),
        min_requests=r.integer("min_requests", 10, minimum=1),
        cooldown_seconds=r.number("cooldown_seconds", 30.0, minimum=0.0),
    )
    r.finish()
    return settings


def parse_delivery(r: TableReader) -> DeliverySettings:
    schedule_raw = r.raw("retry_schedule")
    schedule: tuple[str, ...] | None = None
    if schedule_raw is not None:
        _, schedule_issues = parse_retry_schedule(schedule_raw, r.key_path("retry_schedule"))
        r.issues.extend(schedule_issues)
        schedule = tuple(str(item) for item in schedule_raw) if not schedule_issues else None
    settings = DeliverySettings(
        allow_private_networks=r.boolean("allow_private_networks", False),
        allowlist=tuple(r.string_list("allowlist") or ()),
        timeout_seconds=r.number("timeout_seconds", 15.0, minimum=0.05),
        connect_timeout_seconds=r.number("connect_timeout_seconds", 5.0, minimum=0.05),
        retry_schedule=schedule,
        breaker=parse_breaker(r.sub("breaker")),
        workers=r.integer("workers", 256, minimum=1, maximum=100_000),
    )
    r.finish()
    return settings
