"""The [redis] section, rate_limit tables, build_limiter, and the metrics they feed."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.support.redis_servers import RedisServer

from hookrouter import metrics as hr_metrics
from hookrouter.clock import ManualClock
from hookrouter.errors import ConfigIssue
from hookrouter.ratelimit import (
    Limit,
    LocalBucketLimiter,
    RedisSettings,
    build_limiter,
    decide,
    parse_limit,
    parse_redis_config,
)
from hookrouter.ratelimit.redis_limiter import RedisBucketLimiter


def _redis(text: str) -> tuple[RedisSettings | None, list[ConfigIssue]]:
    return parse_redis_config(tomllib.loads(text).get("redis"))


def test_no_section_means_local_limiter() -> None:
    assert parse_redis_config(None) == (None, [])
    assert isinstance(build_limiter(None, ManualClock()), LocalBucketLimiter)


def test_a_router_without_redis_does_not_load_redis_py() -> None:
    # Start-up time: redis-py is among the largest imports, and most routers
    # have no [redis] section. Loading the runtime, the CLI and an in-process
    # limiter must not import it.
    probe = (
        "import sys, hookrouter.runtime, hookrouter.cli\n"
        "from hookrouter.ratelimit import build_limiter\n"
        "build_limiter(None)\n"
        "print(sorted(m for m in sys.modules if m == 'redis' or m.startswith('redis.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_full_section_parses() -> None:
    settings, issues = _redis(
        """
        [redis]
        cluster_nodes = ["10.0.0.1:7000", "10.0.0.2:7000"]
        mode = "function"
        lease = 100
        on_redis_error = "deny"
        timeout_ms = 20
        key_prefix = "prod:"
        """
    )
    assert issues == []
    assert settings == RedisSettings(
        url=None, cluster_nodes=("10.0.0.1:7000", "10.0.0.2:7000"), mode="function",
        lease=100, low_water=25, on_redis_error="deny", timeout_ms=20.0, key_prefix="prod:",
    )  # fmt: skip


def test_defaults() -> None:
    settings, issues = _redis('[redis]\nurl = "redis://127.0.0.1:6379/0"')
    assert issues == [] and settings is not None
    assert (settings.mode, settings.lease, settings.on_redis_error, settings.timeout_ms) == (
        "script", 0, "allow", 50.0
    )  # fmt: skip


def test_every_problem_is_reported_with_its_path() -> None:
    settings, issues = _redis(
        """
        [redis]
        url = "http://x"
        cluster_nodes = ["nohost", "h:99999"]
        mode = "lua"
        lease = true
        low_water = -1
        on_redis_error = "maybe"
        timeout_ms = 0
        key_prefix = "{x}"
        colour = "blue"
        """
    )
    assert settings is None
    paths = {i.path for i in issues}
    assert paths == {
        "redis", "redis.url", "redis.cluster_nodes[0]", "redis.cluster_nodes[1]", "redis.mode",
        "redis.lease", "redis.low_water", "redis.on_redis_error", "redis.timeout_ms",
        "redis.key_prefix", "redis.colour",
    }  # fmt: skip
    assert _redis("[redis]")[1] == [ConfigIssue("redis", "set exactly one of url or cluster_nodes")]
    assert (
        _redis('[redis]\nurl = "redis://h"\nlease = 4\nlow_water = 4')[1][0].path
        == "redis.low_water"
    )


def test_parse_limit() -> None:
    value = tomllib.loads("rate_limit = { capacity = 100, refill_per_second = 50 }")["rate_limit"]
    assert parse_limit(value, "tenants[0].rate_limit") == (Limit(100, 50), [])
    limit, issues = parse_limit(
        {"capacity": 0.5, "refill_per_second": 0, "burst": 3}, "t.rate_limit"
    )
    assert limit is None
    assert {i.path for i in issues} == {
        "t.rate_limit.capacity",
        "t.rate_limit.refill_per_second",
        "t.rate_limit.burst",
    }
    assert parse_limit({"capacity": 10}, "x")[1] == [
        ConfigIssue("x.refill_per_second", "is required")
    ]
    assert parse_limit(100, "x")[1][0].path == "x"
    assert parse_limit({"capacity": True, "refill_per_second": 1}, "x")[1][0].path == "x.capacity"


async def test_build_limiter_for_redis_decides_and_exports_metrics(
    standalone_server: RedisServer,
) -> None:
    settings, _ = parse_redis_config({"url": standalone_server.url, "lease": 10})
    limiter = build_limiter(settings)
    assert isinstance(limiter, RedisBucketLimiter)
    try:
        for _ in range(3):
            assert (await decide(limiter, "metrics-tenant", "ingest", Limit(2, 0.01))).allowed in (
                True,
                False,
            )
        text = hr_metrics.render().decode()
        assert (
            'hookrouter_ratelimit_decisions_total{result="allowed",tenant="metrics-tenant"} 2.0'
            in text
        )
        assert (
            'hookrouter_ratelimit_decisions_total{result="denied",tenant="metrics-tenant"} 1.0'
            in text
        )
        assert "hookrouter_ratelimit_redis_calls_total" in text
        assert "hookrouter_ratelimit_lease_refills_total" in text
        assert "hookrouter_ratelimit_redis_seconds_bucket" in text
        assert 'hookrouter_ratelimit_errors_total{reason="timeout"}' in text
    finally:
        await limiter.close()
    # Closing folds the counts into the retired totals: counters never go backwards.
    after = hr_metrics.render().decode()
    assert (
        'hookrouter_ratelimit_decisions_total{result="allowed",tenant="metrics-tenant"} 2.0'
        in after
    )
    assert "redis" in repr(limiter).lower()
