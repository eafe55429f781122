"""The publish API on a real router: fan-out, scoping, idempotency, batch durability.

Issue 36: ``POST /admin/v1/events`` and ``POST /admin/v1/events:batch`` go
through the same durable commit, dedup and fan-out as a received webhook;
the same Idempotency-Key answers the first event again, also under
concurrent retries and across kill -9.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.admin.conftest import wait_for
from tests.support.delivery_servers import ThreadedReceiver
from tests.support.router import ADMIN_TOKEN, RouterProcess, base_config


def config_for(tmp: Path, receiver_port: int) -> dict[str, Any]:
    config = base_config(tmp / "data", 0)
    config["server"]["max_body_bytes"] = 4 * 1024 * 1024
    for item in config["endpoints"]:
        item["url"] = f"http://127.0.0.1:{receiver_port}/hook"
    return config


def publish(
    router: RouterProcess,
    doc: dict[str, Any],
    key: str | None = None,
    token: str = ADMIN_TOKEN,
    path: str = "/admin/v1/events",
) -> tuple[int, dict[str, str], Any]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    status, got, body = router.request("POST", path, orjson.dumps(doc), headers)
    return status, got, orjson.loads(body) if body else None


@pytest.fixture
def router(tmp_path: Path, receiver: ThreadedReceiver) -> Iterator[RouterProcess]:
    with RouterProcess(tmp_path, config_for(tmp_path, receiver.port)) as proc:
        yield proc


def test_a_published_event_is_routed_and_delivered(
    router: RouterProcess, receiver: ThreadedReceiver
) -> None:
    doc = {"tenant": "acme", "type": "invoice.created", "payload": {"amount": 5},
           "labels": {"team": "billing"}}  # fmt: skip
    status, _, answer = publish(router, doc)
    assert status == 202, answer
    assert answer["tenant"] == "acme" and answer["type"] == "invoice.created"
    wait_for(lambda: len(receiver.receiver.requests) == 1)
    got = receiver.receiver.requests[0]
    assert orjson.loads(got.body) == {"amount": 5}
    assert got.headers["webhook-id"] == answer["id"]
    _, event = router.admin("GET", f"/events/{answer['id']}?body=true")
    assert event["source"] == "api:acme" and event["type"] == "invoice.created"
    assert event["headers"]["hookrouter-label-team"] == "billing"
    assert [d["endpoint"] for d in event["deliveries"]] == ["acme-invoices"]
    # Routed by type: acme's only endpoint takes invoice.* alone.
    status, _, other = publish(router, {**doc, "type": "user.created"})
    assert status == 202
    _, event = router.admin("GET", f"/events/{other['id']}")
    assert (event["status"], event["deliveries"]) == ("unrouted", [])


def test_who_may_publish_for_which_tenant(router: RouterProcess) -> None:
    doc = {"type": "invoice.created", "payload": {}}
    status, _, answer = publish(router, doc)
    assert status == 422 and answer["issues"][0]["path"] == "tenant"
    assert publish(router, {**doc, "tenant": "nobody"})[0] == 404
    _, key = router.admin("POST", "/tenants/acme/keys", {})
    assert publish(router, doc, token=key["key"])[0] == 202
    assert publish(router, {**doc, "tenant": "acme"}, token=key["key"])[0] == 202
    status, _, answer = publish(router, {**doc, "tenant": "globex"}, token=key["key"])
    assert (status, answer["message"]) == (404, "no tenant named 'globex'")
    assert publish(router, {"type": "x", "payload": []}, token=key["key"])[0] == 400
    assert publish(router, doc, key="bad key with spaces", token=key["key"])[0] == 400


def test_concurrent_retries_of_one_key_make_one_event(
    router: RouterProcess, receiver: ThreadedReceiver
) -> None:
    key = "order-" + uuid.uuid4().hex
    doc = {"tenant": "acme", "type": "invoice.paid", "payload": {"order": 7}}
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: publish(router, doc, key), range(10)))
    assert {a[0] for a in answers} == {202}
    ids = {a[2]["id"] for a in answers}
    assert len(ids) == 1, answers
    replayed = [a[1].get("idempotent-replayed") for a in answers]
    assert replayed.count(None) == 1 and replayed.count("true") == 9
    # Later retries too, and only one event exists, delivered once.
    status, headers, again = publish(router, doc, key)
    assert (status, again["id"], headers["idempotent-replayed"]) == (202, *ids, "true")
    _, events = router.admin("GET", "/events?tenant=acme&limit=1000")
    assert [e["id"] for e in events["data"] if e["source"] == "api:acme"] == list(ids)
    wait_for(lambda: len(receiver.receiver.requests) >= 1)
    time.sleep(0.3)
    assert receiver.webhook_ids() == list(ids)
    # The same key for another body is a client error; for another tenant, its own key.
    status, _, answer = publish(router, {**doc, "payload": {"order": 8}}, key)
    assert (status, answer["error"]) == (422, "idempotency_key_reused"), answer
    assert publish(router, {**doc, "labels": {"x": "y"}}, key)[0] == 422
    status, _, other = publish(router, {**doc, "tenant": "globex"}, key)
    assert status == 202 and other["id"] not in ids


def test_batch_answers_each_item_and_survives_kill_9(
    tmp_path: Path, receiver: ThreadedReceiver
) -> None:
    config = config_for(tmp_path, receiver.port)
    items = [
        {"type": "invoice.created", "payload": {"n": i}, "idempotency_key": f"b-{i}"}
        for i in range(1000)
    ]
    proc = RouterProcess(tmp_path, config).start()
    try:
        status, _, answer = publish(proc, {"tenant": "acme", "events": items},
                                    path="/admin/v1/events:batch")  # fmt: skip
        assert status == 200, answer
        assert [a["status"] for a in answer["data"]] == [202] * 1000
        ids = [a["id"] for a in answer["data"]]
        assert len(set(ids)) == 1000
        # Retried whole: the same ids, nothing new.
        _, _, again = publish(proc, {"tenant": "acme", "events": items[:10]},
                              path="/admin/v1/events:batch")  # fmt: skip
        assert [a["id"] for a in again["data"]] == ids[:10]
        assert all(a["replayed"] for a in again["data"])
    finally:
        proc.kill()  # right after the 2xx: most deliveries are still to do
    with proc:
        wait_for(lambda: len(set(receiver.webhook_ids())) >= 1000, timeout=60)
        assert set(receiver.webhook_ids()) == set(ids)
        bodies = {orjson.loads(r.body)["n"] for r in list(receiver.receiver.requests)}
        assert bodies == set(range(1000))


def test_too_big_a_batch_is_refused(router: RouterProcess) -> None:
    items = [{"type": "t", "payload": {}}] * 1001
    status, _, answer = publish(router, {"tenant": "acme", "events": items},
                                path="/admin/v1/events:batch")  # fmt: skip
    assert status == 400 and "events" in answer["message"], answer
