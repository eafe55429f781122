"""``[log]`` and ``[telemetry]``: defaults, validation, and the ``OTEL_*`` variables."""

from __future__ import annotations

import pytest

from hookrouter.config.reader import TableReader
from hookrouter.config.telemetry import TelemetrySettings, parse_log, parse_telemetry
from hookrouter.errors import ConfigError, ConfigIssue


def _telemetry(table: dict[str, object], env: dict[str, str]) -> TelemetrySettings:
    issues: list[ConfigIssue] = []
    settings = parse_telemetry(TableReader(table, "telemetry", issues), env)
    assert not issues, issues
    return settings


def test_tracing_is_off_by_default() -> None:
    settings = _telemetry({}, {})
    assert not settings.enabled and settings.service_name == "hookrouter"


def test_otel_variables_fill_what_the_file_leaves_out() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/",
        "OTEL_SERVICE_NAME": "router-eu",
        "OTEL_TRACES_SAMPLER_ARG": "0.01",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod, region = eu",
    }
    settings = _telemetry({"resource_attributes": {"region": "eu-west-1"}}, env)
    assert settings.otlp_endpoint == "http://127.0.0.1:4318/v1/traces"
    assert settings.service_name == "router-eu" and settings.sample_ratio == 0.01
    assert settings.resource_attributes == {
        "deployment.environment": "prod",
        "region": "eu-west-1",  # the file wins
    }
    file = _telemetry(
        {"otlp_endpoint": "http://collector:4318/v1/traces", "sample_ratio": 0.5}, env
    )
    assert file.otlp_endpoint == "http://collector:4318/v1/traces" and file.sample_ratio == 0.5


def test_bad_values_are_reported_with_their_key_path() -> None:
    from hookrouter.config import parse_config

    doc = {
        "log": {"format": "xml", "level": "LOUD", "levels": {"delivery": "CHATTY"}},
        "telemetry": {"sample_ratio": 2, "colour": "red"},
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(doc)
    paths = {issue.path for issue in caught.value.issues}
    assert {"log.format", "log.level", "log.levels.delivery", "telemetry.sample_ratio",
            "telemetry.colour"} <= paths  # fmt: skip


def test_series_bounds_are_read_and_bad_ones_named() -> None:
    settings = _telemetry({"labelled_tenants": 5_000, "labelled_latency_tenants": 0}, {})
    assert (settings.labelled_tenants, settings.labelled_latency_tenants) == (5_000, 0)
    defaults = _telemetry({}, {})
    assert defaults.labelled_tenants == TelemetrySettings().labelled_tenants == 2_000
    assert defaults.labelled_latency_tenants == 500
    for key in ("labelled_tenants", "labelled_latency_tenants"):
        for bad in (-1, "all", 1.5, 10**6, True):
            issues: list[ConfigIssue] = []
            parse_telemetry(TableReader({key: bad}, "telemetry", issues), {})
            assert [i.path for i in issues] == [f"telemetry.{key}"], (key, bad)


def test_log_levels_per_component() -> None:
    issues: list[ConfigIssue] = []
    settings = parse_log(
        TableReader({"format": "json", "levels": {"delivery": "debug"}}, "log", issues)
    )
    assert not issues
    assert settings.format == "json" and settings.components == {"delivery": "DEBUG"}
