"""Retention in a real router process: delivered events are deleted, open ones never are."""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.conftest import stripe_event
from tests.support.delivery_servers import Received, Reply, ThreadedReceiver
from tests.support.router import ENDPOINT_SECRET, RouterProcess, base_config
from tests.support.waiting import poll_until


def _reply(req: Received) -> Reply:
    return Reply(status=500 if req.path == "/fail" else 200)


def _pruned(router: RouterProcess) -> float:
    _, _, text = router.request("GET", "/metrics")
    match = re.search(rb"^hookrouter_store_pruned_events_total (\S+)$", text, re.M)
    return float(match.group(1)) if match else -1.0


def test_delivered_events_expire_and_failing_ones_stay(tmp_path: Path) -> None:
    with ThreadedReceiver(_reply) as sink:
        cfg = base_config(tmp_path / "data", 0)
        cfg["store"]["retention"] = {"delivered": "1s", "failed": "1s", "interval": "200ms"}
        url = f"http://127.0.0.1:{sink.port}"
        cfg["endpoints"] = [
            {"id": "invoices", "tenant": "acme", "url": f"{url}/ok",
             "event_types": ["invoice.*"], "secret": ENDPOINT_SECRET},
            {"id": "charges", "tenant": "acme", "url": f"{url}/fail",
             "event_types": ["charge.*"], "secret": ENDPOINT_SECRET, "retry_schedule": ["1h"]},
        ]  # fmt: skip
        with RouterProcess(tmp_path, cfg) as router:
            delivered = []
            for i in range(5):
                status, doc = router.post("acme-stripe", *stripe_event(f"evt_inv_{i}"))
                assert status == 200, doc
                delivered.append(doc["id"])
            status, doc = router.post("acme-stripe", *stripe_event("evt_chg", "charge.failed"))
            assert status == 200, doc
            failing = doc["id"]

            def expired() -> bool:
                return all(router.admin("GET", f"/events/{e}")[0] == 404 for e in delivered)

            poll_until(expired, 20, "delivered events deleted by retention")
            assert _pruned(router) == len(delivered)
            assert len(sink.webhook_ids()) >= len(delivered) + 1
            status, record = router.admin("GET", f"/events/{failing}")
            assert status == 200 and record["status"] == "pending"
            assert record["deliveries"][0]["state"] == "retry"
            # A redelivery of a deleted event is a new event now (docs/operations.md, Retention).
            status, doc = router.post("acme-stripe", *stripe_event("evt_inv_0"))
            assert status == 200 and doc["id"] not in delivered


def test_an_operator_runs_a_retention_pass_through_the_admin_api(tmp_path: Path) -> None:
    with ThreadedReceiver(_reply) as sink:
        cfg = base_config(tmp_path / "data", 0)
        # Passes an hour apart: only the one asked for runs during the test.
        cfg["store"]["retention"] = {"delivered": "1s", "failed": "forever", "interval": "1h"}
        cfg["endpoints"] = [
            {"id": "invoices", "tenant": "acme", "url": f"http://127.0.0.1:{sink.port}/ok",
             "secret": ENDPOINT_SECRET},
        ]  # fmt: skip
        with RouterProcess(tmp_path, cfg) as router:
            status, before = router.admin("GET", "/retention")
            assert status == 200
            assert before["policy"] == {
                "delivered_seconds": 1.0,
                "failed_seconds": None,
                "interval_seconds": 3600.0,
            }
            ids = [
                router.post("acme-stripe", *stripe_event(f"evt_run_{i}"))[1]["id"] for i in range(4)
            ]
            poll_until(lambda: len(sink.webhook_ids()) >= 4, 20, "four deliveries")
            poll_until(
                lambda: router.admin("GET", f"/events/{ids[-1]}")[1]["status"] == "delivered",
                10,
                "deliveries recorded",
            )
            # Ask until the events are past their 1 s (the router's wall clock).
            deleted: list[int] = []

            def run_pass() -> bool:
                status, result = router.admin("POST", "/retention/run")
                assert status == 200, result
                deleted.append(result["deleted"])
                return sum(deleted) >= 3

            poll_until(run_pass, 10, "a pass deleting the delivered events")
            assert sum(deleted) == 3  # the newest row always stays
            assert [router.admin("GET", f"/events/{e}")[0] for e in ids] == [404, 404, 404, 200]
            status, after = router.admin("GET", "/retention")
            assert after["deleted"] == 3 and after["passes"] >= 2
