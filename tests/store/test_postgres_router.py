"""A real router process on ``[store] backend = "postgres"``: ingest, delivery, dedup, restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.e2e.conftest import stripe_event
from tests.support.delivery_servers import Received, Reply, ThreadedReceiver
from tests.support.postgres_store import postgres_available, schema_for, shared_server
from tests.support.router import ENDPOINT_SECRET, RouterProcess, base_config
from tests.support.waiting import poll_until

pytestmark = pytest.mark.skipif(not postgres_available(), reason="PostgreSQL is not installed")


def _reply(req: Received) -> Reply:
    return Reply(status=500 if req.path == "/fail" else 200)


def test_a_router_on_postgres_delivers_deduplicates_and_keeps_state(tmp_path: Path) -> None:
    with ThreadedReceiver(_reply) as sink:
        cfg = base_config(tmp_path / "data", 0)
        cfg["store"] = {
            "path": str(tmp_path / "data"),
            "backend": "postgres",
            "postgres": {
                "dsn": shared_server().dsn,
                "schema": schema_for(tmp_path),
                "pool_size": 4,
            },
        }
        url = f"http://127.0.0.1:{sink.port}"
        cfg["endpoints"] = [
            {"id": "invoices", "tenant": "acme", "url": f"{url}/ok",
             "event_types": ["invoice.*"], "secret": ENDPOINT_SECRET},
            {"id": "charges", "tenant": "acme", "url": f"{url}/fail",
             "event_types": ["charge.*"], "secret": ENDPOINT_SECRET, "retry_schedule": ["1h"]},
        ]  # fmt: skip
        with RouterProcess(tmp_path, cfg) as router:
            ids = []
            for i in range(5):
                status, doc = router.post("acme-stripe", *stripe_event(f"evt_pg_{i}"))
                assert status == 200, doc
                assert doc["duplicate"] is False
                ids.append(doc["id"])
            status, again = router.post("acme-stripe", *stripe_event("evt_pg_3"))
            assert (status, again) == (200, {"id": ids[3], "duplicate": True})
            status, doc = router.post("acme-stripe", *stripe_event("evt_pg_chg", "charge.failed"))
            assert status == 200, doc
            failing = doc["id"]

            def delivered() -> bool:
                return all(
                    router.admin("GET", f"/events/{e}")[1]["status"] == "delivered" for e in ids
                )

            poll_until(delivered, 20, "five events delivered")
            poll_until(
                lambda: (
                    router.admin("GET", f"/events/{failing}")[1]["deliveries"][0]["state"]
                    == "retry"
                ),
                20,
                "the failing delivery waiting for its retry",
            )
            assert sorted(sink.webhook_ids()).count(sink.webhook_ids()[0]) == 1
            assert router.request("GET", "/readyz")[0] == 200

        # A second process (a restart, or another node) sees the same state.
        with RouterProcess(tmp_path, cfg) as router:
            status, record = router.admin("GET", f"/events/{failing}")
            assert status == 200 and record["status"] == "pending"
            assert record["deliveries"][0]["attempts"] == 1
            assert router.post("acme-stripe", *stripe_event("evt_pg_0"))[1] == {
                "id": ids[0],
                "duplicate": True,
            }
            _, listing = router.admin("GET", "/events?tenant=acme")
            assert len(listing["data"]) == 6
