"""The ratelimit scenario's measurements against a real redis-server, and its verdicts."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from bench.ratelimit_bench import Sample, measure_client, parse_rps, redis_benchmark
from bench.scenarios.ratelimit import Samples, verdicts
from tests.support.redis_servers import RedisServer, redis_server

from hookrouter.ratelimit.redis_calls import Mode

REDIS_BENCHMARK = shutil.which("redis-benchmark")


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with redis_server() as s:
        yield s


def _pids(server: RedisServer) -> list[int]:
    assert server.proc is not None
    return [server.proc.pid]


@pytest.mark.parametrize("mode", ["script", "function"])
def test_leases_of_100_save_at_least_50x_the_redis_calls(server: RedisServer, mode: Mode) -> None:
    exact = measure_client(mode, 0, 2_000, _pids(server), url=server.url)
    leased = measure_client(mode, 100, 10_000, _pids(server), url=server.url)

    assert exact.decisions == 2_000 and leased.decisions == 10_000
    assert exact.degraded == 0 and leased.degraded == 0  # Redis answered every one
    assert exact.metric("calls_k") == 1000.0  # exact: one script call per decision
    # ...batched: far fewer round trips than calls.
    assert (exact.metric("trips_k") or 0) < 200
    leased_calls = leased.metric("calls_k")
    assert leased_calls is not None and 0 < leased_calls <= 1000 / 50
    assert exact.client_cpu_s > 0 and exact.server_cpu_s >= 0


@pytest.mark.skipif(REDIS_BENCHMARK is None, reason="redis-benchmark is not installed")
def test_redis_benchmark_runs_the_bucket_script(server: RedisServer) -> None:
    assert REDIS_BENCHMARK is not None
    sample = redis_benchmark(
        REDIS_BENCHMARK, server.port, pipeline=16, requests=2_000, server_pids=_pids(server)
    )

    assert sample.calls == 2_000 and sample.round_trips == 125
    assert (sample.metric("rate") or 0) > 0 and sample.client_cpu_s > 0
    # The script really ran: error replies (NOSCRIPT...) would count as requests too.
    client = server.client()
    try:
        evalsha = client.info("commandstats")["cmdstat_evalsha"]
    finally:
        client.close()
    assert evalsha["calls"] >= 2_000 and evalsha["failed_calls"] == 0


def test_parse_rps_reads_the_csv_row_and_rejects_junk() -> None:
    out = '"test","rps","avg_latency_ms"\n"EVALSHA ...","52631.58","0.123"\n'
    assert parse_rps(out) == pytest.approx(52631.58)
    with pytest.raises(ValueError):
        parse_rps("ERR unknown command\n")


def test_medians_over_runs_and_per_thousand_metrics() -> None:
    samples = Samples()
    for seconds in (1.0, 2.0, 4.0):
        samples.add("standalone", "x", Sample(1000, seconds, 0.01, 0.002, 20, 1000))
    assert samples.median("standalone", "x", "rate") == 500.0
    assert samples.range("standalone", "x", "rate") == (250.0, 1000.0)
    assert samples.median("standalone", "x", "client_us") == pytest.approx(10.0)
    assert samples.median("standalone", "x", "trips_k") == 20.0
    assert samples.median("standalone", "missing", "rate") is None


def test_verdicts_judge_calls_and_the_slower_modes_cpu() -> None:
    calls, cpu = verdicts(1000.0, 12.8, {"script": 3.9, "function": 4.8})
    assert calls.met is True and calls.measured == "78x fewer"
    assert cpu.met is True
    calls, cpu = verdicts(1000.0, 25.0, {"script": 3.9, "function": 5.2})
    assert calls.met is False and cpu.met is False  # 40x; one mode over 5 µs
    calls, cpu = verdicts(None, 12.8, {"script": 3.9, "function": None})
    assert calls.met is None and cpu.met is None  # not measured is not "met"
