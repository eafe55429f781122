"""The admin API on a real router: auth, entity CRUD that takes effect live, event listing."""

from __future__ import annotations

import base64
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.e2e.conftest import standard_event, stripe_event
from tests.support.router import ENDPOINT_SECRET, STANDARD_SECRET, RouterProcess, base_config


def test_admin_requires_the_bearer_token(router: RouterProcess) -> None:
    assert router.admin("GET", "/tenants", token=None)[0] == 401
    status, body = router.admin("GET", "/tenants", token="wrong-token")
    assert (status, body["error"]) == (401, "unauthorized")
    assert router.admin("GET", "/tenants")[0] == 200


def test_config_file_seeds_entities_and_secrets_are_redacted(router: RouterProcess) -> None:
    _, tenants = router.admin("GET", "/tenants")
    assert [t["id"] for t in tenants["data"]] == ["acme", "globex"]
    _, source = router.admin("GET", "/sources/acme-stripe")
    assert source["provider"] == "stripe"
    assert source["secrets"] == ["…cret"]  # last four characters only


def test_source_created_through_admin_serves_ingest_at_once(router: RouterProcess) -> None:
    doc = {"id": "acme-std", "tenant": "acme", "provider": "standard", "secrets": [STANDARD_SECRET]}
    status, created = router.admin("POST", "/sources", doc)
    assert status == 201, created
    assert router.admin("POST", "/sources", doc)[0] == 409

    status, ack = router.post("acme-std", *standard_event("msg_" + uuid.uuid4().hex))
    assert status == 200, ack

    assert router.admin("DELETE", "/sources/acme-std")[0] == 204
    status, body = router.post("acme-std", *standard_event("msg_" + uuid.uuid4().hex))
    assert (status, body["error"]) == (404, "unknown_source")


def test_invalid_documents_get_422_with_key_paths(router: RouterProcess) -> None:
    doc = {"id": "bad", "tenant": "ghost", "provider": "strip", "secrets": "x"}
    status, body = router.admin("POST", "/sources", doc)
    assert status == 422
    paths = {issue["path"] for issue in body["issues"]}
    assert {"provider", "secrets"} <= paths
    status, body = router.admin("POST", "/endpoints", {"id": "e", "tenant": "ghost",
                                                        "url": "https://x.test/h",
                                                        "secret": ENDPOINT_SECRET})  # fmt: skip
    assert status == 422
    assert body["issues"][0]["message"] == "unknown tenant 'ghost'"
    assert router.request("POST", "/admin/v1/tenants", b"{not json", {
        "Authorization": "Bearer e2e-admin-token"})[0] == 400  # fmt: skip


def test_patch_changes_routing_live(router: RouterProcess) -> None:
    status, endpoint = router.admin("PATCH", "/endpoints/acme-invoices",
                                    {"event_types": ["customer.*"]})  # fmt: skip
    assert status == 200, endpoint
    assert endpoint["event_types"] == ["customer.*"]
    _, ack = router.post("acme-stripe", *stripe_event("evt_" + uuid.uuid4().hex, "customer.new"))
    _, event = router.admin("GET", f"/events/{ack['id']}")
    assert [d["endpoint"] for d in event["deliveries"]] == ["acme-invoices"]


def test_tenant_in_use_cannot_be_deleted(router: RouterProcess) -> None:
    status, body = router.admin("DELETE", "/tenants/acme")
    assert (status, body["error"]) == (409, "conflict")
    assert router.admin("PUT", "/tenants/lonely", {"queue_capacity": 5})[0] == 201
    assert router.admin("PUT", "/tenants/lonely", {"queue_capacity": 6})[0] == 200
    assert router.admin("DELETE", "/tenants/lonely")[0] == 204
    assert router.admin("GET", "/tenants/lonely")[0] == 404


def test_events_listing_filters_by_tenant_and_status_with_cursor(router: RouterProcess) -> None:
    acme = [router.post("acme-stripe", *stripe_event("evt_" + uuid.uuid4().hex))[1]["id"]
            for _ in range(3)]  # fmt: skip
    globex = router.post("globex-std", *standard_event("msg_" + uuid.uuid4().hex))[1]["id"]
    _, page1 = router.admin("GET", "/events?tenant=acme&limit=2")
    assert [e["id"] for e in page1["data"]] == acme[::-1][:2]  # newest first
    _, page2 = router.admin("GET", f"/events?tenant=acme&limit=2&before={page1['next_before']}")
    assert [e["id"] for e in page2["data"]] == acme[:1]
    _, pending = router.admin("GET", "/events?status=pending")
    assert {e["id"] for e in pending["data"]} == {*acme, globex}
    _, delivered = router.admin("GET", "/events?status=delivered")
    assert delivered["data"] == []
    assert router.admin("GET", "/events?status=bogus")[0] == 400
    assert router.admin("GET", "/events/evt_nope")[0] == 404


def test_admin_changes_persist_across_restart(tmp_path: Path, engine: str) -> None:
    router = RouterProcess(tmp_path, base_config(tmp_path / "data", 0, engine)).start()
    router.admin("PUT", "/tenants/later", {"max_in_flight": 3})
    router.stop()
    with RouterProcess(tmp_path, router.config) as again:
        status, tenant = again.admin("GET", "/tenants/later")
        assert (status, tenant["max_in_flight"]) == (200, 3)


def test_runtime_changes_survive_restart_until_the_file_changes(tmp_path: Path) -> None:
    config = base_config(tmp_path / "data", 0)
    with RouterProcess(tmp_path, config) as router:
        router.admin("PATCH", "/tenants/acme", {"max_in_flight": 3})
    with RouterProcess(tmp_path, config) as router:  # same file: the admin change stays
        assert router.admin("GET", "/tenants/acme")[1]["max_in_flight"] == 3
    config["tenants"][0]["max_in_flight"] = 7  # the operator edits this tenant in the file
    with RouterProcess(tmp_path, config) as router:
        _, tenant = router.admin("GET", "/tenants/acme")
        assert tenant["max_in_flight"] == 7
        assert "_seed" not in tenant  # bookkeeping never leaks into the API


def _start_refused_over_stored_endpoint(
    tmp_path: Path, config: dict[str, Any], doc: dict[str, str]
) -> str:
    """Write ``doc`` as an endpoint an older build stored; the next start must fail: its message."""
    with RouterProcess(tmp_path, config):
        pass  # creates the store
    with sqlite3.connect(tmp_path / "data" / "events.db") as conn:
        conn.execute(
            "INSERT INTO entities (kind, id, tenant_id, doc, updated_at) VALUES (?, ?, ?, ?, 0)",
            ("endpoint", doc["id"], doc["tenant"], orjson.dumps(doc).decode()),
        )
    with pytest.raises(RuntimeError) as failed:
        RouterProcess(tmp_path, config).start()
    return str(failed.value)


def test_a_stored_entity_that_no_longer_validates_stops_start_with_its_name(
    tmp_path: Path,
) -> None:
    """An older version stored an endpoint this one refuses (its secret is not base64)."""
    config = base_config(tmp_path / "data", 0)
    legacy = {"id": "legacy", "tenant": "acme", "url": "http://127.0.0.1:9/x", "secret": "bad!"}
    message = _start_refused_over_stored_endpoint(tmp_path, config, legacy)
    assert "stored endpoint 'legacy'.secret: secret is not valid base64" in message

    config["endpoints"].append({**legacy, "secret": ENDPOINT_SECRET})
    with RouterProcess(tmp_path, config) as router:
        assert router.admin("GET", "/endpoints/legacy")[0] == 200


def test_a_stored_entity_whose_id_no_file_can_declare_gets_advice_that_works(
    tmp_path: Path,
) -> None:
    """An older build stored an endpoint with an empty id: the advice removes it."""
    config = base_config(tmp_path / "data", 0)
    orphan = {"id": "", "tenant": "acme", "url": "http://127.0.0.1:9/x", "secret": ENDPOINT_SECRET}
    message = _start_refused_over_stored_endpoint(tmp_path, config, orphan)
    assert "stored endpoint ''.id: must not be empty" in message
    assert "declare it in the config file" not in message  # advice that cannot apply
    statement = message.split('events.db "', 1)[1].split('"', 1)[0]
    with sqlite3.connect(tmp_path / "data" / "events.db") as conn:  # what the operator runs
        assert conn.execute(statement).rowcount == 1
    with RouterProcess(tmp_path, config) as router:
        assert router.admin("GET", "/endpoints/acme-invoices")[0] == 200


def test_an_event_is_found_by_its_provider_id(router: RouterProcess) -> None:
    provider_id = "evt_lookup_" + uuid.uuid4().hex
    status, ack = router.post("acme-stripe", *stripe_event(provider_id))
    assert status == 200, ack

    status, found = router.admin("GET", f"/sources/acme-stripe/events/{provider_id}?body=true")
    assert status == 200, found
    assert (found["id"], found["provider_event_id"]) == (ack["id"], provider_id)
    assert provider_id.encode() in base64.b64decode(found["body_base64"])

    status, missing = router.admin("GET", "/sources/acme-stripe/events/evt_never_sent")
    assert status == 404 and "never received" in missing["message"]
    # The same provider id under another source is another key.
    assert router.admin("GET", f"/sources/globex-std/events/{provider_id}")[0] == 404
    status, unknown = router.admin("GET", f"/sources/nope/events/{provider_id}")
    assert status == 404 and "nope" in unknown["message"]


def test_delivery_stats_show_each_tenant_and_its_endpoint_lanes(router: RouterProcess) -> None:
    provider_id = "evt_" + uuid.uuid4().hex
    status, ack = router.post("acme-stripe", *stripe_event(provider_id))
    assert status == 200, ack
    status, again = router.post("acme-stripe", *stripe_event(provider_id))
    assert status == 200 and again["duplicate"] is True, again
    status, stats = router.admin("GET", "/delivery")
    assert status == 200, stats
    acme = stats["tenants"]["acme"]
    assert acme["capacity"] >= 1 and acme["admitted_total"] >= 1 and acme["lanes"] == 1
    lane = acme["endpoints"]["acme-invoices"]
    assert set(lane) == {
        "endpoint_id",
        "credits_used",
        "queued",
        "in_flight",
        "spilled",
        "spilling",
    }
    assert lane["credits_used"] == lane["queued"] + lane["in_flight"]
    assert {"delivered", "retried", "dead", "in_flight"} <= set(stats)
    # Each append announced to the engine was settled: committed or a duplicate.
    assert stats["offers_due"] == 0
