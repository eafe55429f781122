"""Per-tenant rate limits at ingest, end to end, in process and on a real Redis."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import tomli_w
from tests.e2e.conftest import standard_event, stripe_event
from tests.support.redis_servers import redis_server
from tests.support.router import RouterProcess, base_config


def limited_config(tmp_path: Path, redis_url: str | None, engine: str) -> dict[str, Any]:
    config = base_config(tmp_path / "data", 0, engine)
    # acme floods: a bucket of 5 refilled at 1/s; globex has a generous limit.
    config["tenants"][0]["rate_limit"] = {"capacity": 5, "refill_per_second": 1}
    config["tenants"][1]["rate_limit"] = {"capacity": 1000, "refill_per_second": 1000}
    if redis_url is not None:
        config["redis"] = {"url": redis_url, "mode": "script", "timeout_ms": 500}
    return config


def flood_and_check(router: RouterProcess) -> None:
    statuses: list[int] = []
    retry_after: list[int] = []
    for _ in range(30):
        body, headers = stripe_event("evt_" + uuid.uuid4().hex)
        status, reply_headers, data = router.request("POST", "/in/acme-stripe", body, headers)
        statuses.append(status)
        if status == 429:
            assert orjson.loads(data)["error"] == "rate_limited"
            retry_after.append(int(reply_headers["retry-after"]))
        # The quiet tenant is never refused while acme floods.
        status, ack = router.post("globex-std", *standard_event("msg_" + uuid.uuid4().hex))
        assert status == 200, ack
    assert statuses.count(200) in (5, 6)  # the burst, plus at most one refilled token
    assert statuses.count(429) >= 24
    assert all(1 <= value <= 2 for value in retry_after)
    _, acme = router.admin("GET", "/events?tenant=acme&limit=1000")
    assert len(acme["data"]) == statuses.count(200)  # refused events were not stored
    status, _, metrics = router.request("GET", "/metrics")
    series = b'hookrouter_ingest_requests_total{result="rate_limited",source="acme-stripe"} '
    counted = [line for line in metrics.splitlines() if line.startswith(series)]
    # Every refusal is counted once, under the reason the admission gave.
    assert counted and float(counted[0][len(series) :]) == statuses.count(429)


def test_flooding_tenant_gets_429_quiet_tenant_is_served_in_process(
    tmp_path: Path, engine: str
) -> None:
    with RouterProcess(tmp_path, limited_config(tmp_path, None, engine)) as router:
        flood_and_check(router)


def test_flooding_tenant_gets_429_quiet_tenant_is_served_on_redis(
    tmp_path: Path, engine: str
) -> None:
    with (
        redis_server(tmp_path / "redis") as redis,
        RouterProcess(tmp_path, limited_config(tmp_path, redis.url, engine)) as router,
    ):
        flood_and_check(router)
        keys = {k.decode() for k in redis.client().keys("*")}
        assert "{acme}:rl:b:ingest" in keys  # the bucket lives in Redis, hash-tagged


def test_ingest_keeps_answering_when_redis_dies(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis") as redis:
        config = limited_config(tmp_path, redis.url, "asyncio")
        with RouterProcess(tmp_path, config) as router:
            assert router.post("globex-std", *standard_event("msg_" + uuid.uuid4().hex))[0] == 200
            redis.stop()
            # on_redis_error = "allow" (the default): still served, and fast.
            for _ in range(5):
                status, _ = router.post("globex-std", *standard_event("msg_" + uuid.uuid4().hex))
                assert status == 200


def test_check_config_warns_about_limits_on_senders_that_never_retry(tmp_path: Path) -> None:
    config = base_config(tmp_path / "data", 8080)
    config["tenants"][0]["rate_limit"] = {"capacity": 5, "refill_per_second": 1}
    config["sources"].append(
        {
            "id": "acme-gh",
            "tenant": "acme",
            "provider": "github",
            "secrets": ["s3cret-0123456789abcdef"],
        }
    )
    path = tmp_path / "c.toml"
    path.write_bytes(tomli_w.dumps(config).encode())
    result = subprocess.run(
        [sys.executable, "-m", "hookrouter", "check-config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "warning: sources[2]: tenant 'acme''s rate_limit answers 429 to a github sender" in (
        result.stdout
    )
    assert "sources[0]" not in result.stdout  # stripe retries: no warning
