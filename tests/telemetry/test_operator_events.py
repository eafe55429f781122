"""Operator events: signed, delivered durably under the reserved tenant, once per condition."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import orjson
from tests.e2e.conftest import stripe_event
from tests.support.delivery_servers import Received, Reply, ThreadedReceiver
from tests.support.router import ENDPOINT_SECRET, STRIPE_SECRET, RouterProcess, base_config
from tests.support.waiting import poll_until
from tests.telemetry.operator_hooks import OPERATOR_SECRET, verified_events


def test_disabled_endpoint_and_backlog_high_arrive_signed_once_then_clear(
    tmp_path: Path,
) -> None:
    healthy = threading.Event()

    def customer(request: Received) -> Reply:
        if request.path == "/gone":
            return Reply(status=410)
        return Reply() if healthy.is_set() else Reply(hang=True)

    with ThreadedReceiver(customer) as acme, ThreadedReceiver() as operator:
        config = base_config(tmp_path / "data", 0)
        config["delivery"] = {
            "allow_private_networks": True,
            "timeout_seconds": 2,
            "retry_schedule": ["1s", "1s", "1s", "1s", "1s"],
        }
        config["server"]["shutdown_grace_seconds"] = 0.5
        config["tenants"] = [{"id": "acme", "max_in_flight": 1}, {"id": "globex"}]
        config["endpoints"] = [
            {"id": "acme-slow", "tenant": "acme", "url": f"http://127.0.0.1:{acme.port}/slow",
             "secret": ENDPOINT_SECRET, "event_types": ["invoice.*"]},
            {"id": "acme-gone", "tenant": "acme", "url": f"http://127.0.0.1:{acme.port}/gone",
             "secret": ENDPOINT_SECRET, "event_types": ["customer.*"]},
        ]  # fmt: skip
        config["operator_hooks"] = [
            {"url": f"http://127.0.0.1:{operator.port}/ops", "secret": OPERATOR_SECRET,
             "events": ["endpoint.*", "tenant.*"]},
        ]  # fmt: skip
        config["operator"] = {"backlog_high": 3, "backlog_window": "1s"}
        with RouterProcess(tmp_path, config) as router:
            body, headers = stripe_event("evt_gone", "customer.created")
            assert router.post("acme-stripe", body, headers)[0] == 200
            for n in range(6):  # the slow endpoint holds one; the rest wait
                body, headers = stripe_event(f"evt_backlog_{n}")
                assert router.post("acme-stripe", body, headers)[0] == 200
            poll_until(lambda: {"endpoint.disabled", "tenant.backlog_high"}
                  <= {e["type"] for e in verified_events(operator)})  # fmt: skip
            time.sleep(2.5)  # the backlog stays high: no second backlog_high
            assert [e["type"] for e in verified_events(operator)].count("tenant.backlog_high") == 1
            healthy.set()  # the endpoint recovers: the backlog drains and the alert clears
            poll_until(
                lambda: "tenant.backlog_cleared" in {e["type"] for e in verified_events(operator)}
            )
            events = verified_events(operator)
    types = [e["type"] for e in events]
    assert types.count("tenant.backlog_high") == 1, types
    assert types.count("tenant.backlog_cleared") == 1, types
    assert types.index("tenant.backlog_high") < types.index("tenant.backlog_cleared")
    assert types.count("endpoint.disabled") == 1, types
    disabled = next(e for e in events if e["type"] == "endpoint.disabled")
    assert disabled["data"] == {"tenant": "acme", "endpoint": "acme-gone", "reason": "gone"}
    high = next(e for e in events if e["type"] == "tenant.backlog_high")
    assert high["data"]["tenant"] == "acme" and high["data"]["backlog"] > 3
    # The operator's own deliveries are the reserved tenant's, not acme's.
    assert all(r.headers["webhook-id"].startswith("evt_") for r in operator.receiver.requests)


def _failing_router(
    tmp_path: Path, acme: ThreadedReceiver, operator: ThreadedReceiver, breaker: dict[str, Any]
) -> RouterProcess:
    config = base_config(tmp_path / "data", 0)
    config["delivery"] = {
        "allow_private_networks": True,
        "retry_schedule": ["1s"],
        "breaker": breaker,
    }
    config["endpoints"][0]["url"] = f"http://127.0.0.1:{acme.port}/hook"
    config["operator_hooks"] = [
        {"url": f"http://127.0.0.1:{operator.port}/ops", "secret": OPERATOR_SECRET},
    ]
    config["operator"] = {"dead_letter_summary": "1s"}
    return RouterProcess(tmp_path, config)


def _post_invoices(router: RouterProcess, count: int) -> None:
    for n in range(count):
        body, headers = stripe_event(f"evt_fail_{n}")
        assert router.post("acme-stripe", body, headers)[0] == 200


def test_breaker_opened_then_closed(tmp_path: Path) -> None:
    healthy = threading.Event()

    def customer(_request: Received) -> Reply:
        return Reply() if healthy.is_set() else Reply(status=500)

    with ThreadedReceiver(customer) as acme, ThreadedReceiver() as operator:
        breaker = {"min_requests": 3, "failure_ratio": 0.5, "cooldown_seconds": 1}
        with _failing_router(tmp_path, acme, operator, breaker) as router:
            _post_invoices(router, 4)
            poll_until(
                lambda: "endpoint.breaker_opened" in {e["type"] for e in verified_events(operator)}
            )
            healthy.set()
            poll_until(
                lambda: "endpoint.breaker_closed" in {e["type"] for e in verified_events(operator)}
            )
            events = verified_events(operator)
    opened = next(e for e in events if e["type"] == "endpoint.breaker_opened")
    assert opened["data"] == {"tenant": "acme", "endpoint": "acme-invoices"}


def test_dead_letters_are_summarised_per_endpoint_per_period(tmp_path: Path) -> None:
    with ThreadedReceiver(lambda _r: Reply(status=500)) as acme, ThreadedReceiver() as operator:
        router = _failing_router(tmp_path, acme, operator, {"min_requests": 1000})
        router.config["endpoints"].append(
            {"id": "acme-ledger", "tenant": "acme", "url": f"http://127.0.0.1:{acme.port}/l",
             "event_types": ["invoice.*"], "secret": ENDPOINT_SECRET}
        )  # fmt: skip
        with router:
            _post_invoices(router, 5)
            poll_until(lambda: len(acme.receiver.requests) >= 20)  # 2 endpoints x 5, tried twice
            time.sleep(2.5)  # the last summary period closes
            events = verified_events(operator)
    dead = [e["data"] for e in events if e["type"] == "delivery.dead_lettered"]
    for endpoint in ("acme-invoices", "acme-ledger"):
        mine = [d for d in dead if d["endpoint"] == endpoint]
        assert all(d["tenant"] == "acme" for d in mine)
        assert sum(d["count"] for d in mine) == 5
        assert len(mine) < 5  # summarised, not one per delivery


def test_a_tenant_created_at_run_time_is_delivered_beside_the_hooks(tmp_path: Path) -> None:
    """The hooks live in the catalog the admin API changes in place: new tenants still route."""
    with ThreadedReceiver() as customer, ThreadedReceiver() as operator:
        config = base_config(tmp_path / "data", 0)
        config["operator_hooks"] = [
            {"url": f"http://127.0.0.1:{operator.port}/ops", "secret": OPERATOR_SECRET,
             "events": ["endpoint.*"]},
        ]  # fmt: skip
        with RouterProcess(tmp_path, config) as router:
            assert router.admin("POST", "/tenants", {"id": "initech"})[0] == 201
            source = {"id": "initech-stripe", "tenant": "initech", "provider": "stripe",
                      "secrets": [STRIPE_SECRET]}  # fmt: skip
            assert router.admin("POST", "/sources", source)[0] == 201
            endpoint = {"id": "initech-all", "tenant": "initech", "secret": ENDPOINT_SECRET,
                        "url": f"http://127.0.0.1:{customer.port}/hook"}  # fmt: skip
            assert router.admin("POST", "/endpoints", endpoint)[0] == 201
            body, headers = stripe_event("evt_new_tenant")
            assert router.post("initech-stripe", body, headers)[0] == 200
            poll_until(lambda: len(customer.receiver.requests) == 1)
            assert orjson.loads(customer.receiver.requests[0].body)["id"] == "evt_new_tenant"
