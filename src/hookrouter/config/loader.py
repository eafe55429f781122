"""hookrouter configuration: TOML file → validated, typed settings.

The file's shape is a contract (see docs/configuration.md): ``[server]``,
``[store]``, ``[admin]``, ``[delivery]``, optional ``[redis]`` and
``[cluster]`` (PostgreSQL store only), and arrays of
``[[tenants]]``, ``[[sources]]`` and ``[[endpoints]]``. Everything is
validated at start; problems are reported all at once with key paths
(``sources[2].provider: unknown provider 'strip'``). Secrets may be written
as ``"env:NAME"`` to read them from the environment.

Tenants, sources and endpoints are also managed through the admin API; the
same ``parse_tenant`` / ``parse_source`` / ``parse_endpoint`` functions
validate those documents, so both paths accept exactly the same shapes.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hookrouter.config.cluster import ClusterSettings, parse_cluster
from hookrouter.config.delivery import DeliverySettings, parse_delivery
from hookrouter.config.entities import (
    EndpointConfig,
    SourceConfig,
    TenantConfig,
    check_references,
    endpoint_parser,
    parse_source,
    parse_tenant,
)
from hookrouter.config.operator import OperatorSettings, parse_operator
from hookrouter.config.reader import TableReader
from hookrouter.config.retention import DAY, dedup_conflicts
from hookrouter.config.server import AdminSettings, ServerSettings, parse_admin, parse_server
from hookrouter.config.store import StoreSettings, parse_store
from hookrouter.config.telemetry import LogSettings, TelemetrySettings, parse_log, parse_telemetry
from hookrouter.errors import ConfigError, ConfigIssue
from hookrouter.ratelimit.config import RedisSettings, parse_redis_config


@dataclass(frozen=True, slots=True)
class Config:
    """A whole, validated configuration."""

    server: ServerSettings
    store: StoreSettings
    admin: AdminSettings
    delivery: DeliverySettings
    redis: RedisSettings | None = None
    tenants: tuple[TenantConfig, ...] = ()
    sources: tuple[SourceConfig, ...] = ()
    endpoints: tuple[EndpointConfig, ...] = ()
    log: LogSettings = field(default_factory=LogSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    operator: OperatorSettings = field(default_factory=OperatorSettings)
    cluster: ClusterSettings | None = None  # [cluster]: set when the store is PostgreSQL
    warnings: tuple[ConfigIssue, ...] = field(default=(), compare=False)
    base_dir: Path = field(default=Path("."), compare=False)


def load_config(path: str | Path) -> Config:
    """Read and validate a TOML config file; raise ``ConfigError`` listing every issue."""
    file = Path(path)
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError([ConfigIssue("", f"config file not found: {file}")]) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([ConfigIssue("", f"{file}: invalid TOML: {exc}")]) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([ConfigIssue("", f"cannot read {file}: {exc}")]) from exc
    return parse_config(raw, base_dir=file.resolve().parent)


def parse_config(raw: Mapping[str, Any], *, base_dir: Path = Path(".")) -> Config:
    """Validate an already-parsed document (a dict shaped like the TOML file)."""
    issues: list[ConfigIssue] = []
    warnings: list[ConfigIssue] = []
    root = TableReader(raw, "", issues)
    server = parse_server(root.sub("server") or TableReader({}, "server", issues))
    store = parse_store(root.sub("store") or TableReader({}, "store", issues), base_dir)
    admin = parse_admin(root.sub("admin") or TableReader({}, "admin", issues))
    delivery_table = root.sub("delivery") or TableReader({}, "delivery", issues)
    delivery = parse_delivery(delivery_table)
    cluster, delivery = parse_cluster(
        root.sub("cluster"),
        issues,
        store.backend,
        delivery,
        timeout_set=delivery_table.has("timeout_seconds"),
    )
    redis, redis_issues = parse_redis_config(root.raw("redis"))
    log = parse_log(root.sub("log") or TableReader({}, "log", issues))
    telemetry = parse_telemetry(root.sub("telemetry") or TableReader({}, "telemetry", issues))
    operator = parse_operator(root.raw("operator_hooks"), root.sub("operator"), issues)
    issues.extend(redis_issues)
    tenants = tuple(t for t in _each(root, "tenants", issues, parse_tenant) if t is not None)
    sources = tuple(s for s in _each(root, "sources", issues, parse_source) if s is not None)
    parse_endpoint = endpoint_parser(delivery, issues)
    endpoints = tuple(e for e in _each(root, "endpoints", issues, parse_endpoint) if e is not None)
    check_references(tenants, sources, endpoints, issues, warnings)
    warnings.extend(_retention_warnings(store, sources))
    root.finish()
    if issues:
        raise ConfigError(issues)
    return Config(
        server=server,
        store=store,
        admin=admin,
        delivery=delivery,
        redis=redis,
        tenants=tenants,
        sources=sources,
        endpoints=endpoints,
        log=log,
        telemetry=telemetry,
        operator=operator,
        cluster=cluster,
        warnings=tuple(warnings),
        base_dir=base_dir,
    )


def _retention_warnings(
    store: StoreSettings, sources: tuple[SourceConfig, ...]
) -> list[ConfigIssue]:
    """Sources whose sender may redeliver after retention has forgotten the event."""
    pairs = [(s.id, s.provider) for s in sources]
    return [
        ConfigIssue(
            "store.retention.delivered",
            f"keeps delivered events {_days(store.retention.delivered_seconds)} but source "
            f"{c.source_id!r} ({c.provider}) may redeliver for up to {_days(c.window_seconds)}: "
            "a redelivery after its event is deleted is accepted again as a new event",
        )
        for c in dedup_conflicts(store.retention, pairs)
    ]


def _days(seconds: float | None) -> str:
    if seconds is None:
        return "forever"
    value, unit = (seconds / DAY, "day") if seconds >= DAY else (seconds / 3600, "hour")
    return f"{value:g} {unit}{'' if value == 1 else 's'}"


def _each(root: TableReader, key: str, issues: list[ConfigIssue], parse: Any) -> list[Any]:
    value = root.raw(key)
    if value is None:
        return []
    if not isinstance(value, list):
        issues.append(ConfigIssue(key, f"must be an array of tables ([[{key}]])"))
        return []
    return [parse(item, f"{key}[{index}]", issues) for index, item in enumerate(value)]
