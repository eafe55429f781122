"""Operator events for conditions: each fires once when induced and clears once.

store.saturated (ingest answering 429/503), ratelimit.redis_unavailable and
source.quiet, each against a real router process, a real receiver (every
event verified with the standardwebhooks library) and, for Redis, a real
redis-server stopped and started again.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

from tests.e2e.conftest import stripe_event
from tests.support.delivery_servers import Received, Reply, ThreadedReceiver
from tests.support.redis_servers import redis_server
from tests.support.router import RouterProcess, base_config
from tests.support.waiting import poll_until
from tests.telemetry.operator_hooks import hook, types_of, verified_events


def _post(router: RouterProcess, source: str = "acme-stripe") -> int:
    body, headers = stripe_event("evt_" + uuid.uuid4().hex)
    return router.post(source, body, headers)[0]


def _post_for(router: RouterProcess, seconds: float) -> list[int]:
    statuses = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        statuses.append(_post(router))
        time.sleep(0.05)
    return statuses


def test_store_saturated_fires_once_while_refusing_and_recovers_once(tmp_path: Path) -> None:
    healthy = threading.Event()

    def customer(_request: Received) -> Reply:
        return Reply() if healthy.is_set() else Reply(hang=True)

    with ThreadedReceiver(customer) as acme, ThreadedReceiver() as operator:
        config = base_config(tmp_path / "data", 0)
        config["delivery"] = {"allow_private_networks": True, "timeout_seconds": 1,
                              "retry_schedule": ["1s"] * 10}  # fmt: skip
        config["tenants"][0]["max_backlog"] = 3
        config["endpoints"][0]["url"] = f"http://127.0.0.1:{acme.port}/hook"
        config["operator_hooks"] = [hook(operator.port, ["store.*"])]
        config["operator"] = {"recovery": "1s"}
        with RouterProcess(tmp_path, config) as router:
            statuses = _post_for(router, 1.0)
            assert 429 in statuses  # Stripe retries: a full backlog is shed
            poll_until(lambda: "store.saturated" in types_of(operator))
            assert 429 in _post_for(router, 2.5)  # still refusing: no second event
            assert types_of(operator) == ["store.saturated"]
            healthy.set()  # the endpoint recovers, the backlog drains
            poll_until(lambda: _post(router) == 200, interval=0.1)  # posts each try
            poll_until(lambda: "store.recovered" in types_of(operator))
            time.sleep(1.5)
            events = verified_events(operator)
    assert [e["type"] for e in events] == ["store.saturated", "store.recovered"]
    assert events[0]["data"]["refused"]["backlog_full"] > 0
    assert (
        events[1]["data"]["refused"]["backlog_full"] >= events[0]["data"]["refused"]["backlog_full"]
    )


def test_redis_unavailable_fires_once_and_recovers_once(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis") as redis, ThreadedReceiver() as operator:
        config = base_config(tmp_path / "data", 0)
        config["redis"] = {"url": redis.url, "timeout_ms": 200}
        config["tenants"][0]["rate_limit"] = {"capacity": 10_000, "refill_per_second": 10_000}
        config["operator_hooks"] = [hook(operator.port, ["ratelimit.*"])]
        config["operator"] = {"recovery": "1s"}
        with RouterProcess(tmp_path, config) as router:
            assert _post(router) == 200
            redis.stop()
            deadline = time.monotonic() + 20
            while "ratelimit.redis_unavailable" not in types_of(operator):
                assert time.monotonic() < deadline
                _post(router)  # decisions find Redis gone (on_redis_error applies)
                time.sleep(0.05)
            _post_for(router, 2.5)  # still down, probes keep failing: no second event
            assert types_of(operator) == ["ratelimit.redis_unavailable"]
            redis.start()
            deadline = time.monotonic() + 20
            while "ratelimit.redis_recovered" not in types_of(operator):
                assert time.monotonic() < deadline
                _post(router)  # a decision after the probe backoff finds Redis back
                time.sleep(0.05)
            _post_for(router, 1.5)
            types = types_of(operator)
    assert types == ["ratelimit.redis_unavailable", "ratelimit.redis_recovered"]


def test_a_source_that_goes_quiet_is_reported_once_and_resumes(tmp_path: Path) -> None:
    with ThreadedReceiver() as operator:
        config = base_config(tmp_path / "data", 0)
        config["operator_hooks"] = [hook(operator.port, ["source.*"])]
        config["operator"] = {"source_quiet": "2s", "source_quiet_min_events": 3}
        with RouterProcess(tmp_path, config) as router:
            for _ in range(3):
                assert _post(router) == 200
            poll_until(lambda: "source.quiet" in types_of(operator))
            time.sleep(3)  # still quiet: no second event
            assert types_of(operator) == ["source.quiet"]
            assert _post(router) == 200
            poll_until(lambda: "source.resumed" in types_of(operator))
            time.sleep(3)  # one event since: not yet usual, so not quiet again
            events = verified_events(operator)
    assert [e["type"] for e in events] == ["source.quiet", "source.resumed"]
    quiet, resumed = (e["data"] for e in events)
    assert quiet["source"] == "acme-stripe" and quiet["tenant"] == "acme"
    assert quiet["quiet_seconds"] >= 2
    assert resumed["source"] == "acme-stripe"
    # globex-std never received anything: it is not "usually busy", so never quiet.
