"""Tenant keys and the read-only token on a real router.

Every operation of the served OpenAPI document is tried with a key of another
tenant (globex's key against acme's resources): each answers 404, as a
resource that does not exist would, and nothing changes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.e2e.conftest import standard_event, stripe_event
from tests.support.router import ENDPOINT_SECRET, STRIPE_SECRET, RouterProcess, base_config

READ_ONLY = "e2e-read-only-token"


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    tmp = tmp_path_factory.mktemp("scoping")
    config = base_config(tmp / "data", 0)
    config["admin"] = {**config["admin"], "read_only_token": READ_ONLY}
    with RouterProcess(tmp, config) as proc:
        yield proc


def mint(router: RouterProcess, tenant: str) -> dict[str, Any]:
    status, created = router.admin("POST", f"/tenants/{tenant}/keys", {"name": "test"})
    assert status == 201, created
    return dict(created)


def snapshot(router: RouterProcess) -> dict[str, Any]:
    """Everything a request could change, as the admin token sees it."""
    out: dict[str, Any] = {}
    for path in ("/tenants", "/sources", "/endpoints", "/events?limit=1000"):
        out[path] = router.admin("GET", path)[1]
    for tenant in ("acme", "globex"):
        keys = router.admin("GET", f"/tenants/{tenant}/keys")[1]["data"]
        out[tenant] = [{k: v for k, v in key.items() if k != "last_used_at"} for key in keys]
    for event in out["/events?limit=1000"]["data"]:
        out[event["id"]] = router.admin("GET", f"/events/{event['id']}")[1]
    return out


def test_another_tenants_key_gets_404_on_every_operation_and_changes_nothing(
    router: RouterProcess,
) -> None:
    acme_key = mint(router, "acme")
    other = mint(router, "globex")["key"]
    pid = "evt_" + uuid.uuid4().hex
    status, ack = router.post("acme-stripe", *stripe_event(pid))
    assert status == 200, ack
    event = ack["id"]
    assert router.post("globex-std", *standard_event("msg_" + uuid.uuid4().hex))[0] == 200
    src = {"provider": "stripe", "secrets": [STRIPE_SECRET]}
    endpoint = {"url": "http://127.0.0.1:9/x", "secret": ENDPOINT_SECRET}
    # (method, document path, request path, body): the request aims at acme's resources.
    cases: list[tuple[str, str, str, Any]] = [
        ("GET", "/tenants", "/tenants", None),
        ("POST", "/tenants", "/tenants", {"id": "evil"}),
        ("GET", "/tenants/{id}", "/tenants/acme", None),
        ("PUT", "/tenants/{id}", "/tenants/acme", {"queue_capacity": 1}),
        ("PATCH", "/tenants/{id}", "/tenants/acme", {"queue_capacity": 1}),
        ("DELETE", "/tenants/{id}", "/tenants/acme", None),
        ("GET", "/tenants/{id}/keys", "/tenants/acme/keys", None),
        ("GET", "/tenants/{id}/keys", "/tenants/globex/keys", None),  # not even its own
        ("POST", "/tenants/{id}/keys", "/tenants/acme/keys", {}),
        ("POST", "/tenants/{id}/portal-links", "/tenants/acme/portal-links", None),
        ("POST", "/tenants/{id}/portal-links", "/tenants/globex/portal-links", None),
        ("DELETE", "/tenants/{id}/keys/{key_id}", f"/tenants/acme/keys/{acme_key['id']}", None),
        ("GET", "/sources/{id}", "/sources/acme-stripe", None),
        ("PUT", "/sources/{id}", "/sources/acme-stripe", {"tenant": "globex", **src}),
        ("PATCH", "/sources/{id}", "/sources/acme-stripe", {"tenant": "globex"}),
        ("PATCH", "/sources/{id}", "/sources/acme-stripe", {"secrets": ["whsec_x"]}),
        ("DELETE", "/sources/{id}", "/sources/acme-stripe", None),
        ("GET", "/endpoints/{id}", "/endpoints/acme-invoices", None),
        ("PUT", "/endpoints/{id}", "/endpoints/acme-invoices", {"tenant": "globex", **endpoint}),
        ("PATCH", "/endpoints/{id}", "/endpoints/acme-invoices", {"url": "http://evil.test/"}),
        ("DELETE", "/endpoints/{id}", "/endpoints/acme-invoices", None),
        ("POST", "/endpoints/{id}/filter-test", "/endpoints/acme-invoices/filter-test", {}),
        ("GET", "/events", "/events?tenant=acme", None),
        ("GET", "/events/{id}", f"/events/{event}", None),
        ("GET", "/events/{id}", f"/events/{event}?body=true", None),
        ("GET", "/sources/{source}/events/{pid}", f"/sources/acme-stripe/events/{pid}", None),
        ("GET", "/retention", "/retention", None),
        ("POST", "/retention/run", "/retention/run", None),
        ("GET", "/delivery", "/delivery", None),
        ("GET", "/breakers", "/breakers", None),
        ("GET", "/endpoints/{id}/health", "/endpoints/acme-invoices/health", None),
        ("POST", "/breakers/{id}/reset", "/breakers/acme-invoices/reset", None),
        ("POST", "/replay", "/replay", {"tenant": "acme"}),
        ("POST", "/replay", "/replay", {"endpoint": "acme-invoices", "states": ["dead"]}),
        ("POST", "/replay", "/replay?dry_run=true", {"event": event}),
        ("POST", "/events", "/events", {"tenant": "acme", "type": "x", "payload": {}}),
        (
            "POST",
            "/events:batch",
            "/events:batch",
            {"tenant": "acme", "events": [{"type": "x", "payload": {}}]},
        ),
    ]
    # Lists answer 200 with the caller's own items only; a create naming another
    # tenant answers as one naming a tenant that does not exist (422, unknown tenant).
    scoped: list[tuple[str, str, str, Any]] = [
        ("GET", "/sources", "/sources", None),
        ("GET", "/endpoints", "/endpoints", None),
        ("GET", "/events", "/events", None),
        ("POST", "/sources", "/sources", {"id": "evil-src", "tenant": "acme", **src}),
        ("POST", "/endpoints", "/endpoints", {"id": "evil-ep", "tenant": "acme", **endpoint}),
    ]
    _, doc = router.admin("GET", "/openapi.json", token=None)
    documented = {
        (m.upper(), p.removeprefix("/admin/v1")) for p, i in doc["paths"].items() for m in i
    }
    tried = {(m, p) for m, p, _, _ in cases + scoped} | {("GET", "/openapi.json")}
    assert documented == tried, "a new route needs its line in this test"

    before = snapshot(router)
    for method, _, path, body in cases:
        status, answer = router.admin(method, path, body, token=other)
        assert (status, answer["error"]) == (404, "not_found"), (method, path, answer)
    for path in ("/sources", "/endpoints", "/events"):
        status, listed = router.admin("GET", path, token=other)
        assert status == 200 and all(item["tenant"] == "globex" for item in listed["data"])
        assert listed["data"], path
    for path, body in (("/sources", scoped[3][3]), ("/endpoints", scoped[4][3])):
        status, answer = router.admin("POST", path, body, token=other)
        assert status == 422 and answer["issues"] == [
            {"path": "tenant", "message": "unknown tenant 'acme'"}
        ]
        missing = router.admin("POST", path, {**body, "tenant": "nobody"}, token=other)
        assert missing == (status, {**answer, "issues": [
            {"path": "tenant", "message": "unknown tenant 'nobody'"}]} | {
            "message": answer["message"].replace("'acme'", "'nobody'")})  # fmt: skip
    assert snapshot(router) == before
    # ... and a missing resource looks the same to the admin token.
    assert router.admin("GET", "/sources/nope")[1]["message"] == "no source named 'nope'"
    assert router.admin("GET", "/sources/acme-stripe", token=other)[1]["message"] == (
        "no source named 'acme-stripe'"
    )


def test_a_tenant_key_manages_its_own_tenant(router: RouterProcess) -> None:
    key = mint(router, "acme")["key"]
    doc = {"id": "acme-own", "tenant": "acme", "url": "http://127.0.0.1:9/own",
           "secret": ENDPOINT_SECRET}  # fmt: skip
    assert router.admin("POST", "/endpoints", doc, token=key)[0] == 201
    status, changed = router.admin("PATCH", "/endpoints/acme-own", {"enabled": False}, token=key)
    assert (status, changed["enabled"]) == (200, False)
    assert router.admin("PUT", "/endpoints/acme-own", doc, token=key)[0] == 200
    _, listed = router.admin("GET", "/endpoints", token=key)
    assert {e["id"] for e in listed["data"]} == {"acme-invoices", "acme-own"}
    pid = "evt_" + uuid.uuid4().hex
    _, ack = router.post("acme-stripe", *stripe_event(pid))
    assert router.admin("GET", f"/events/{ack['id']}", token=key)[0] == 200
    assert router.admin("GET", f"/sources/acme-stripe/events/{pid}", token=key)[0] == 200
    _, events = router.admin("GET", "/events?tenant=acme", token=key)
    assert ack["id"] in {e["id"] for e in events["data"]}
    status, counted = router.admin("POST", "/replay?dry_run=true", {}, token=key)
    assert (status, counted) == (200, {"matched": 0})
    assert router.admin("DELETE", "/endpoints/acme-own", token=key)[0] == 204
    _, keys = router.admin("GET", "/tenants/acme/keys")
    assert all("key" not in k for k in keys["data"])
    assert any(k["last_used_at"] is not None for k in keys["data"])


def test_revocation_takes_effect_on_the_next_request(router: RouterProcess) -> None:
    created = mint(router, "acme")
    assert router.admin("GET", "/sources", token=created["key"])[0] == 200
    assert router.admin("DELETE", f"/tenants/acme/keys/{created['id']}")[0] == 204
    status, answer = router.admin("GET", "/sources", token=created["key"])
    assert (status, answer["error"]) == (401, "unauthorized")
    assert router.admin("DELETE", f"/tenants/acme/keys/{created['id']}")[0] == 404


def test_deleting_a_tenant_revokes_its_keys(router: RouterProcess) -> None:
    assert router.admin("PUT", "/tenants/brief", {})[0] == 201
    key = mint(router, "brief")["key"]
    assert router.admin("GET", "/endpoints", token=key) == (200, {"data": [], "next_after": None})
    assert router.admin("DELETE", "/tenants/brief")[0] == 204
    assert router.admin("GET", "/endpoints", token=key)[0] == 401
    assert router.admin("PUT", "/tenants/brief", {})[0] == 201  # same name, new tenant
    assert router.admin("GET", "/endpoints", token=key)[0] == 401
    assert router.admin("DELETE", "/tenants/brief")[0] == 204


def test_the_read_only_token_reads_everything_and_changes_nothing(router: RouterProcess) -> None:
    assert router.admin("GET", "/tenants", token=READ_ONLY)[0] == 200
    assert router.admin("GET", "/delivery", token=READ_ONLY)[0] == 200
    assert router.admin("GET", "/tenants/acme/keys", token=READ_ONLY)[0] == 200
    for method, path, body in [
        ("POST", "/tenants", {"id": "ro"}),
        ("DELETE", "/sources/acme-stripe", None),
        ("POST", "/tenants/acme/keys", {}),
        ("POST", "/replay", {}),
    ]:
        status, answer = router.admin(method, path, body, token=READ_ONLY)
        assert (status, answer["error"]) == (403, "read_only"), (method, path)
    assert router.admin("GET", "/tenants/ro")[0] == 404


def test_keys_and_the_document_need_the_right_credentials(router: RouterProcess) -> None:
    status, _, body = router.request("GET", "/admin/v1/openapi.json")
    assert status == 200 and orjson.loads(body)["openapi"] == "3.1.0"
    assert router.admin("POST", "/tenants/acme/keys", {}, token=None)[0] == 401
    assert router.admin("GET", "/sources", token="hrk_0123456789ab_" + "x" * 43)[0] == 401
    assert router.admin("POST", "/tenants/ghost/keys", {})[0] == 404


def test_keys_survive_a_restart(tmp_path: Path) -> None:
    with RouterProcess(tmp_path, base_config(tmp_path / "data", 0)) as first:
        key = mint(first, "acme")["key"]
        assert first.admin("GET", "/sources", token=key)[0] == 200
        config = first.config
    with RouterProcess(tmp_path, config) as again:
        assert again.admin("GET", "/sources", token=key)[0] == 200
        _, keys = again.admin("GET", "/tenants/acme/keys")
        assert keys["data"][0]["last_used_at"] is not None  # written at stop
