"""Config hands out typed values (seconds, schedules, breaker settings), defaults stated once."""

from __future__ import annotations

from typing import Any

import pytest

from hookrouter.config import parse_config
from hookrouter.config.catalog import Catalog
from hookrouter.config.delivery import BreakerSettings, DeliverySettings
from hookrouter.config.durations import (
    DEFAULT_RETRY_SCHEDULE,
    RetrySchedule,
    parse_retry_schedule,
    read_retry_schedule,
    retry_schedule,
)
from hookrouter.config.entities import EndpointConfig, TenantConfig, parse_endpoint, parse_tenant
from hookrouter.config.reader import TableReader
from hookrouter.config.server import AdminSettings, ServerSettings
from hookrouter.delivery.endpoints import EndpointTable, retry_policy
from hookrouter.delivery.policy import DEFAULT_POLICY
from hookrouter.errors import ConfigError, ConfigIssue

SECRET = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"


def config(**doc: Any) -> Any:
    base: dict[str, Any] = {
        "tenants": [{"id": "acme"}],
        "endpoints": [{"id": "orders", "tenant": "acme", "url": "http://x/", "secret": SECRET}],
    }
    return parse_config({**base, **doc})


def test_schedules_arrive_as_float_seconds() -> None:
    parsed = config(
        delivery={"retry_schedule": ["250ms", "5s", "2h"]},
        tenants=[{"id": "acme", "retry_schedule": ["1m"]}],
        endpoints=[
            {
                "id": "orders",
                "tenant": "acme",
                "url": "http://x/",
                "secret": SECRET,
                "retry_schedule": [],
            }
        ],
    )
    assert parsed.delivery.retry_schedule == (0.25, 5.0, 7200.0)
    assert parsed.tenants[0].retry_schedule == (60.0,)
    assert parsed.endpoints[0].retry_schedule == ()  # one attempt, no retries
    assert all(isinstance(d, float) for d in parsed.delivery.retry_schedule)


def test_unset_schedules_inherit_and_the_default_is_the_policys() -> None:
    parsed = config()
    assert parsed.tenants[0].retry_schedule is None
    assert parsed.endpoints[0].retry_schedule is None
    assert parsed.delivery.retry_schedule == DEFAULT_RETRY_SCHEDULE
    assert DEFAULT_POLICY.schedule == DEFAULT_RETRY_SCHEDULE
    assert DEFAULT_RETRY_SCHEDULE == (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)


def test_read_retry_schedule_records_issues_and_gives_none() -> None:
    issues: list[ConfigIssue] = []
    reader = TableReader({"retry_schedule": ["1s", "8d"]}, "endpoints[0]", issues)
    assert read_retry_schedule(reader) is None
    assert [i.path for i in issues] == ["endpoints[0].retry_schedule[1]"]
    reader = TableReader({}, "tenants[0]", issues)
    assert read_retry_schedule(reader) is None
    assert len(issues) == 1


def test_parse_retry_schedule_returns_a_schedule() -> None:
    schedule, issues = parse_retry_schedule(("1s", "10s"), "x")
    assert schedule == RetrySchedule((1.0, 10.0)) and issues == []


def test_retry_schedule_literal_refuses_a_bad_duration() -> None:
    assert retry_schedule("1s", "1m") == (1.0, 60.0)
    with pytest.raises(ValueError, match="invalid duration"):
        retry_schedule("soon")


@pytest.mark.parametrize(
    ("endpoint", "tenant", "expected"),
    [
        ((1.0,), (2.0,), (1.0,)),
        (None, (2.0,), (2.0,)),
        (None, None, (3.0,)),
        ((), (2.0,), ()),
    ],
)
def test_most_specific_schedule_wins(
    endpoint: tuple[float, ...] | None,
    tenant: tuple[float, ...] | None,
    expected: tuple[float, ...],
) -> None:
    ep = EndpointConfig(
        "orders",
        "acme",
        "http://x/",
        SECRET,
        retry_schedule=None if endpoint is None else RetrySchedule(endpoint),
    )
    owner = TenantConfig("acme", retry_schedule=None if tenant is None else RetrySchedule(tenant))
    settings = DeliverySettings(retry_schedule=RetrySchedule((3.0,)))
    assert retry_policy(ep, owner, settings).schedule == expected
    assert retry_policy(ep, None, settings).schedule == (
        endpoint if endpoint is not None else (3.0,)
    )


def test_breaker_settings_are_the_breakers_config() -> None:
    parsed = config(delivery={"breaker": {"failure_ratio": 0.25, "cooldown_seconds": 5}})
    assert parsed.delivery.breaker == BreakerSettings(failure_ratio=0.25, cooldown_seconds=5.0)
    table = EndpointTable(parsed.delivery)
    runtime = table.get(Catalog(parsed.tenants, parsed.sources, parsed.endpoints), "orders")
    assert runtime is not None
    assert runtime.breaker.config is parsed.delivery.breaker


def test_breaker_settings_refuse_impossible_values() -> None:
    with pytest.raises(ValueError):
        BreakerSettings(failure_ratio=0)
    with pytest.raises(ValueError):
        BreakerSettings(half_open_probes=0)


def test_the_idle_tenants_kept_reach_the_engine_and_bad_ones_are_named() -> None:
    parsed = config(delivery={"idle_tenants_kept": 50_000})
    assert parsed.delivery.idle_tenants_kept == 50_000
    assert config().delivery.idle_tenants_kept == DeliverySettings().idle_tenants_kept
    for bad in (-1, "many", 1.5, 10**9):
        with pytest.raises(ConfigError, match="idle_tenants_kept"):
            config(delivery={"idle_tenants_kept": bad})


def test_absent_sections_and_keys_take_the_dataclass_defaults() -> None:
    parsed = parse_config({"server": {}, "delivery": {"breaker": {}}, "admin": {}})
    assert parsed.server == ServerSettings()
    assert parsed.delivery == DeliverySettings()
    assert parsed.admin == AdminSettings()
    assert parse_config({}).delivery == DeliverySettings()


def test_absent_entity_keys_take_the_dataclass_defaults() -> None:
    issues: list[ConfigIssue] = []
    tenant = parse_tenant({"id": "acme"}, "tenants[0]", issues)
    endpoint = parse_endpoint(
        {"id": "orders", "tenant": "acme", "url": "http://x/", "secret": SECRET}, "e", issues
    )
    assert issues == []
    assert tenant == TenantConfig("acme")
    assert endpoint == EndpointConfig("orders", "acme", "http://x/", SECRET)
