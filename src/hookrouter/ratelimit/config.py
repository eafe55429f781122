"""The ``[redis]`` config section, ``rate_limit = {...}`` tables, and building a limiter.

``[redis]`` keys (all optional except one of ``url`` / ``cluster_nodes``)::

    [redis]
    url = "redis://127.0.0.1:6379/0"      # standalone; or:
    cluster_nodes = ["10.0.0.1:7000", "10.0.0.2:7000"]   # any reachable nodes of a cluster
    mode = "script"            # "script" (EVALSHA) | "function" (FCALL, Redis >= 7)
    lease = 0                  # tokens per lease; 0 = one exact Redis decision per request
                               # (use 0 or >= 10: a tiny lease serves one waiting decision
                               # per round trip, slower than exact mode's batches)
    low_water = 25             # ask for the next lease at this local supply (default lease // 4)
    on_redis_error = "allow"   # "allow" | "deny" when Redis cannot answer in time
    timeout_ms = 50            # longest a decision may wait for Redis
    key_prefix = ""            # namespace before the {tenant} hash tag (no braces)

Without a ``[redis]`` section the limiter is in-process (:class:`LocalBucketLimiter`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.errors import ConfigIssue, redact_url
from hookrouter.ratelimit.base import RateLimiter
from hookrouter.ratelimit.bucket import Limit
from hookrouter.ratelimit.local import LocalBucketLimiter
from hookrouter.ratelimit.slots import LeasePlan

# 50 ms: many local round trips plus a GC pause or a busy Redis, yet far
# inside the ~10 s providers allow for an answer.
DEFAULT_TIMEOUT_MS = 50.0
MAX_TIMEOUT_MS = 10_000.0

_REDIS_KEYS = frozenset(
    {"url", "cluster_nodes", "mode", "lease", "low_water", "on_redis_error", "timeout_ms",
     "key_prefix"}
)  # fmt: skip
_LIMIT_KEYS = frozenset({"capacity", "refill_per_second"})


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """A validated ``[redis]`` section."""

    url: str | None = None
    cluster_nodes: tuple[str, ...] = ()
    mode: Literal["script", "function"] = "script"
    lease: int = 0
    low_water: int = 0
    on_redis_error: Literal["allow", "deny"] = "allow"
    timeout_ms: float = DEFAULT_TIMEOUT_MS
    key_prefix: str = ""


def _is_number(value: object) -> bool:
    # TOML booleans are ints in Python; "lease = true" is a mistake, not 1.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_nodes(value: object, path: str, issues: list[ConfigIssue]) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        issues.append(ConfigIssue(path, 'must be a non-empty list of "host:port" strings'))
        return ()
    for i, item in enumerate(value):
        host, sep, port = item.rpartition(":") if isinstance(item, str) else ("", "", "")
        if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
            issues.append(ConfigIssue(f"{path}[{i}]", f'expected "host:port", got {item!r}'))
    return tuple(str(v) for v in value)


def _check_choice(table: Mapping[str, Any], key: str, choices: tuple[str, ...], path: str,
                  issues: list[ConfigIssue]) -> str:  # fmt: skip
    value = table.get(key, choices[0])
    if value not in choices:
        issues.append(
            ConfigIssue(f"{path}.{key}", f"must be one of {list(choices)}, got {value!r}")
        )
        return choices[0]
    return str(value)


def parse_redis_config(
    table: Mapping[str, Any] | None, path: str = "redis"
) -> tuple[RedisSettings | None, list[ConfigIssue]]:
    """Validate a ``[redis]`` table.

    ``None`` (no section) gives ``(None, [])``: use the in-process limiter.
    """
    if table is None:
        return None, []
    issues = [ConfigIssue(f"{path}.{k}", "unknown key") for k in table if k not in _REDIS_KEYS]
    url = table.get("url")
    nodes: tuple[str, ...] = ()
    if url is not None and not (
        isinstance(url, str) and url.startswith(("redis://", "rediss://", "unix://"))
    ):
        issues.append(
            ConfigIssue(f"{path}.url", f"expected a redis:// URL, got {redact_url(repr(url))}")
        )
    if "cluster_nodes" in table:
        nodes = _check_nodes(table["cluster_nodes"], f"{path}.cluster_nodes", issues)
    if (url is None) == ("cluster_nodes" not in table):
        issues.append(ConfigIssue(path, "set exactly one of url or cluster_nodes"))
    mode = _check_choice(table, "mode", ("script", "function"), path, issues)
    policy = _check_choice(table, "on_redis_error", ("allow", "deny"), path, issues)
    lease = table.get("lease", 0)
    if not (_is_int(lease) and lease >= 0):
        issues.append(ConfigIssue(f"{path}.lease", f"must be an integer >= 0, got {lease!r}"))
        lease = 0
    low_water = table.get("low_water", lease // 4)
    if not (_is_int(low_water) and 0 <= low_water < max(lease, 1)):
        issues.append(
            ConfigIssue(f"{path}.low_water", f"must be an integer in [0, lease), got {low_water!r}")
        )
        low_water = 0
    timeout_ms = table.get("timeout_ms", DEFAULT_TIMEOUT_MS)
    if not (_is_number(timeout_ms) and 0 < timeout_ms <= MAX_TIMEOUT_MS):
        issues.append(
            ConfigIssue(
                f"{path}.timeout_ms", f"must be in (0, {MAX_TIMEOUT_MS:g}], got {timeout_ms!r}"
            )
        )
        timeout_ms = DEFAULT_TIMEOUT_MS
    prefix = table.get("key_prefix", "")
    if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
        issues.append(ConfigIssue(f"{path}.key_prefix", "must be a string without braces"))
        prefix = ""
    if issues:
        return None, issues
    settings = RedisSettings(
        url=url, cluster_nodes=nodes, mode=mode,  # type: ignore[arg-type]
        lease=lease, low_water=low_water, on_redis_error=policy,  # type: ignore[arg-type]
        timeout_ms=float(timeout_ms), key_prefix=prefix,
    )  # fmt: skip
    return settings, []


def parse_limit(value: object, path: str) -> tuple[Limit | None, list[ConfigIssue]]:
    """Validate ``rate_limit = { capacity = 100, refill_per_second = 50 }`` found at ``path``."""
    if not isinstance(value, Mapping):
        return None, [
            ConfigIssue(path, "must be a table { capacity = ..., refill_per_second = ... }")
        ]
    issues = [ConfigIssue(f"{path}.{k}", "unknown key") for k in value if k not in _LIMIT_KEYS]
    numbers: dict[str, float] = {}
    for key in ("capacity", "refill_per_second"):
        raw = value.get(key)
        # capacity >= 1: a request costs one token, so a smaller bucket never grants.
        is_capacity = key == "capacity"
        if raw is None:
            issues.append(ConfigIssue(f"{path}.{key}", "is required"))
        elif _is_number(raw) and math.isfinite(raw) and (raw >= 1 if is_capacity else raw > 0):
            numbers[key] = float(raw)
        else:
            bound = ">= 1" if is_capacity else "> 0"
            issues.append(ConfigIssue(f"{path}.{key}", f"must be a number {bound}, got {raw!r}"))
    if issues:
        return None, issues
    return Limit(numbers["capacity"], numbers["refill_per_second"]), []


def socket_timeout_for(timeout_s: float) -> float:
    """How long redis-py may wait on a socket: 10x the decision timeout, at least 0.5 s.

    Decisions never wait for this (their own deadline answers them); it bounds
    how long a black-holed connection keeps a batch slot busy, while a slow
    but alive Redis is not disconnected during a latency spike.
    """
    return max(0.5, 10 * timeout_s)


def build_limiter(settings: RedisSettings | None, clock: Clock = SYSTEM_CLOCK) -> RateLimiter:
    """The limiter for a config: in-process without ``[redis]``, else Redis-backed.

    The Redis client connects lazily, so this may run before the event loop starts.
    """
    if settings is None:
        return LocalBucketLimiter(clock)
    # Imported here: redis-py is a large import, and a router (or a CLI call)
    # without [redis] should not pay for it at every start.
    from hookrouter.ratelimit.redis_calls import BucketCaller, make_client
    from hookrouter.ratelimit.redis_limiter import RedisBucketLimiter

    timeout = settings.timeout_ms / 1000
    client = make_client(settings.url, settings.cluster_nodes, socket_timeout_for(timeout))
    return RedisBucketLimiter(
        BucketCaller(client, settings.mode),
        clock=clock,
        lease=LeasePlan(settings.lease, settings.low_water),
        on_redis_error=settings.on_redis_error,
        timeout=timeout,
        key_prefix=settings.key_prefix,
    )
