"""The ``[delivery]`` section: outbound limits, the default retry schedule, breaker settings.

Each default is stated once, on its dataclass; the parser reads its
fallbacks from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from hookrouter.config.durations import DEFAULT_RETRY_SCHEDULE, RetrySchedule, read_retry_schedule
from hookrouter.config.reader import TableReader

# Headers the transport or the signature owns: an endpoint's extra headers may
# not set them (config refuses them; delivery/signing.py drops them too).
RESERVED_HEADERS: Final = frozenset(
    {
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "content-type",
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "user-agent",
    }
)


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    """``[delivery.breaker]``: when an endpoint's circuit breaker opens, and for how long.

    The defaults (ratio 0.5 over 30 s, at least 10 requests, 30 s cooldown)
    are in the range resilience4j and Envoy's outlier detection use.
    """

    failure_ratio: float = 0.5
    window_seconds: float = 30.0
    min_requests: int = 10
    cooldown_seconds: float = 30.0
    # Attempts allowed in flight at once while HALF_OPEN; not a config key.
    half_open_probes: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.failure_ratio <= 1:
            raise ValueError("failure_ratio must be in (0, 1]")
        if self.window_seconds <= 0 or self.cooldown_seconds < 0:
            raise ValueError("window_seconds must be > 0 and cooldown_seconds >= 0")
        if self.min_requests < 1 or self.half_open_probes < 1:
            raise ValueError("min_requests and half_open_probes must be >= 1")


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    allow_private_networks: bool = False
    allowlist: tuple[str, ...] = ()
    timeout_seconds: float = 15.0
    connect_timeout_seconds: float = 5.0
    # Used for endpoints whose endpoint and tenant set no schedule of their own.
    retry_schedule: RetrySchedule = DEFAULT_RETRY_SCHEDULE
    breaker: BreakerSettings = field(default_factory=BreakerSettings)
    workers: int = 256  # shared outbound concurrency across all tenants
    # Event bodies kept in memory for queued deliveries, in all and per tenant
    # (delivery/body_budget.py); past them bodies are read back from the store.
    body_cache_bytes: int = 64 << 20
    body_cache_tenant_bytes: int = 16 << 20
    # Tenants whose delivery state (queue, endpoint runtimes, closed breakers)
    # stays in memory while idle; past it, a tenant idle for a minute releases
    # its state and rebuilds it on its next event: memory against CPU
    # (docs/configuration.md has the bytes per held tenant).
    idle_tenants_kept: int = 10_000


def parse_breaker(r: TableReader | None) -> BreakerSettings:
    default = BreakerSettings()
    if r is None:
        return default
    settings = BreakerSettings(
        failure_ratio=r.number("failure_ratio", default.failure_ratio, minimum=0.01, maximum=1.0),
        window_seconds=r.number("window_seconds", default.window_seconds, minimum=0.1),
        min_requests=r.integer("min_requests", default.min_requests, minimum=1),
        cooldown_seconds=r.number("cooldown_seconds", default.cooldown_seconds, minimum=0.0),
    )
    r.finish()
    return settings


def parse_delivery(r: TableReader) -> DeliverySettings:
    default = DeliverySettings()
    schedule = read_retry_schedule(r)
    settings = DeliverySettings(
        allow_private_networks=r.boolean("allow_private_networks", default.allow_private_networks),
        allowlist=tuple(r.string_list("allowlist") or default.allowlist),
        timeout_seconds=r.number("timeout_seconds", default.timeout_seconds, minimum=0.05),
        connect_timeout_seconds=r.number(
            "connect_timeout_seconds", default.connect_timeout_seconds, minimum=0.05
        ),
        retry_schedule=default.retry_schedule if schedule is None else schedule,
        breaker=parse_breaker(r.sub("breaker")),
        workers=r.integer("workers", default.workers, minimum=1, maximum=100_000),
        body_cache_bytes=r.integer("body_cache_bytes", default.body_cache_bytes, minimum=0),
        body_cache_tenant_bytes=r.integer(
            "body_cache_tenant_bytes", default.body_cache_tenant_bytes, minimum=0
        ),
        idle_tenants_kept=r.integer(
            "idle_tenants_kept", default.idle_tenants_kept, minimum=0, maximum=10_000_000
        ),
    )
    r.finish()
    return settings
