"""Content filters on a real router: fan-out, the event view, 422 paths, filter-test, scoping.

Issue 36: an endpoint's ``filter`` is applied at fan-out with ``event_types``;
an event it does not pass is stored with no delivery for that endpoint;
``POST /admin/v1/endpoints/{id}/filter-test`` says whether a sample would
match and why not.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import standardwebhooks
from tests.admin.conftest import wait_for
from tests.support.delivery_servers import ThreadedReceiver
from tests.support.router import (
    ADMIN_TOKEN,
    ENDPOINT_SECRET,
    STANDARD_SECRET,
    RouterProcess,
    base_config,
)

from hookrouter.config.entities import parse_endpoint
from hookrouter.errors import ConfigIssue

BIG = {"data.amount": {"$gte": 1000}}
GOLD = {"$headers": {"X-Tier": "gold"}}


@pytest.fixture
def router(tmp_path: Path, receiver: ThreadedReceiver) -> Iterator[RouterProcess]:
    config = base_config(tmp_path / "data", 0)
    url = f"http://127.0.0.1:{receiver.port}"
    for item in config["endpoints"]:
        item["url"] = f"{url}/{item['id']}"
    # Declared in the config file: the same validation as the admin API's.
    config["endpoints"] += [
        {"id": "globex-big", "tenant": "globex", "url": f"{url}/globex-big",
         "secret": ENDPOINT_SECRET, "filter": BIG},
        {"id": "globex-gold", "tenant": "globex", "url": f"{url}/globex-gold",
         "secret": ENDPOINT_SECRET, "filter": GOLD},
    ]  # fmt: skip
    with RouterProcess(tmp_path, config) as proc:
        yield proc


def send(router: RouterProcess, amount: int, tier: str | None = None) -> str:
    """A Standard Webhooks event to globex's source, signed by the SDK; returns its id."""
    msg_id = "msg_" + uuid.uuid4().hex
    body = orjson.dumps({"type": "payment.made", "data": {"amount": amount}})
    now = datetime.now(tz=UTC)
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": standardwebhooks.Webhook(STANDARD_SECRET).sign(
            msg_id, now, body.decode()
        ),
        "Content-Type": "application/json",
    }
    if tier is not None:
        headers["X-Tier"] = tier
    status, answer = router.post("globex-std", body, headers)
    assert status == 200, answer
    return str(answer["id"])


def paths(receiver: ThreadedReceiver) -> list[str]:
    return sorted(r.path for r in list(receiver.receiver.requests))


def test_a_filtered_endpoint_gets_only_matching_events(
    router: RouterProcess, receiver: ThreadedReceiver
) -> None:
    small = send(router, 5)
    big = send(router, 5000)
    gold = send(router, 5, tier="gold")
    silver = send(router, 5, tier="silver")
    wait_for(lambda: len(receiver.receiver.requests) >= 6)
    time.sleep(0.3)  # nothing else arrives
    assert paths(receiver) == ["/globex-all"] * 4 + ["/globex-big", "/globex-gold"]
    deliveries = {}
    for event_id in (small, big, gold, silver):
        status, event = router.admin("GET", f"/events/{event_id}")
        assert status == 200
        deliveries[event_id] = sorted(d["endpoint"] for d in event["deliveries"])
    # The event view shows which endpoints got a delivery: filtered ones have none.
    assert deliveries == {
        small: ["globex-all"],
        big: ["globex-all", "globex-big"],
        gold: ["globex-all", "globex-gold"],
        silver: ["globex-all"],
    }


def test_an_event_no_filter_passes_is_stored_unrouted(
    router: RouterProcess, receiver: ThreadedReceiver
) -> None:
    # Made through the admin API, on the tenant's own events (the publish API).
    url = f"http://127.0.0.1:{receiver.port}/acme-eu"
    doc = {"id": "acme-eu", "tenant": "acme", "url": url, "secret": ENDPOINT_SECRET,
           "event_types": ["order.*"], "filter": {"region": {"$in": ["eu", "uk"]}}}  # fmt: skip
    status, saved = router.admin("POST", "/endpoints", doc)
    assert status == 201, saved
    assert saved["filter"] == doc["filter"]
    ids = {}
    for region in ("eu", "us"):
        event = {"tenant": "acme", "type": "order.created", "payload": {"region": region}}
        status, answer = router.admin("POST", "/events", event)
        assert status == 202, answer
        ids[region] = answer["id"]
    wait_for(lambda: len(receiver.receiver.requests) >= 1)
    time.sleep(0.3)
    assert paths(receiver) == ["/acme-eu"]
    assert orjson.loads(receiver.receiver.requests[0].body) == {"region": "eu"}
    _, eu = router.admin("GET", f"/events/{ids['eu']}")
    _, us = router.admin("GET", f"/events/{ids['us']}?body=true")
    assert [d["endpoint"] for d in eu["deliveries"]] == ["acme-eu"]
    assert (us["status"], us["deliveries"]) == ("unrouted", [])
    assert us["body_base64"]  # stored all the same
    # Removing the filter (PATCH null) lets the next such event through.
    status, saved = router.admin("PATCH", "/endpoints/acme-eu", {"filter": None})
    assert status == 200 and "filter" not in saved
    event = {"tenant": "acme", "type": "order.created", "payload": {"region": "us"}}
    router.admin("POST", "/events", event)
    wait_for(lambda: len(receiver.receiver.requests) >= 2)


@pytest.mark.parametrize(
    ("bad", "path", "message"),
    [
        ({"data.amount": {"$gtx": 1}}, 'filter["data.amount"].$gtx', "unknown operator $gtx"),
        ({"$or": [{"a": 1}, {"b": {"$in": 3}}]}, "filter.$or[1].b.$in", "must be a list"),
        ({"a": {"$regex": ".*"}}, "filter.a.$regex", "no regular expressions"),
        ([1], "filter", "must be an object"),
    ],
)
def test_an_invalid_filter_is_refused_with_its_path(
    router: RouterProcess, bad: Any, path: str, message: str
) -> None:
    doc = {"id": "bad", "tenant": "acme", "url": "http://127.0.0.1:9/x",
           "secret": ENDPOINT_SECRET, "filter": bad}  # fmt: skip
    status, answer = router.admin("POST", "/endpoints", doc)
    assert status == 422, answer
    assert [i["path"] for i in answer["issues"]] == [path]
    assert message in answer["issues"][0]["message"]
    status, answer = router.admin("PATCH", "/endpoints/globex-big", {"filter": bad})
    assert status == 422 and answer["issues"][0]["path"] == path
    assert router.admin("GET", "/endpoints/bad")[0] == 404


def test_the_config_file_reports_a_bad_filter_by_its_key_path() -> None:
    issues: list[ConfigIssue] = []
    doc = {"id": "e", "tenant": "t", "url": "http://x/", "secret": ENDPOINT_SECRET,
           "filter": {"$and": [{"n": {"$lt": None}}]}}  # fmt: skip
    assert parse_endpoint(doc, "endpoints[3]", issues) is None
    assert [str(i) for i in issues] == [
        "endpoints[3].filter.$and[0].n.$lt: must be a number or a string, not null"
    ]


def filter_test(
    router: RouterProcess, endpoint: str, sample: dict[str, Any], token: str | None = None
) -> tuple[int, Any]:
    if token is None:
        return router.admin("POST", f"/endpoints/{endpoint}/filter-test", sample)
    return router.admin("POST", f"/endpoints/{endpoint}/filter-test", sample, token=token)


def test_filter_test_says_whether_and_why(router: RouterProcess) -> None:
    assert filter_test(router, "globex-big", {"payload": {"data": {"amount": 1000}}}) == (
        200,
        {"matched": True, "reason": None},
    )
    assert filter_test(router, "globex-big", {"payload": {"data": {"amount": 999}}}) == (
        200,
        {"matched": False, "reason": '["data.amount"]: 999 does not satisfy $gte 1000'},
    )
    assert filter_test(router, "globex-big", {"payload": {"data": {}}})[1]["reason"] == (
        '["data.amount"]: missing does not satisfy $gte 1000'
    )
    assert filter_test(router, "globex-gold", {"headers": {"x-tier": "gold"}})[1]["matched"]
    # event_types are checked when a type is given; an endpoint without a filter matches.
    status, answer = filter_test(router, "acme-invoices", {"type": "user.created"})
    assert answer == {
        "matched": False,
        "reason": "event_types: 'user.created' matches none of ['invoice.*']",
    }
    assert filter_test(router, "acme-invoices", {"type": "invoice.paid"})[1]["matched"]
    # A draft filter is tried instead of the saved one, and validated like one.
    draft = {"payload": {"n": 3}, "filter": {"n": {"$in": [1, 2]}}}
    assert filter_test(router, "globex-big", draft)[1] == {
        "matched": False,
        "reason": "n: 3 does not satisfy $in [1,2]",
    }
    status, answer = filter_test(router, "globex-big", {"filter": {"n": {"$in": 1}}})
    assert status == 422 and answer["issues"][0]["path"] == "filter.n.$in"
    assert filter_test(router, "nowhere", {})[0] == 404


def test_filter_test_is_scoped_to_the_tenant_key(router: RouterProcess) -> None:
    _, key = router.admin("POST", "/tenants/acme/keys", {})
    sample = {"payload": {}, "type": "invoice.paid"}
    status, answer = filter_test(router, "acme-invoices", sample, token=key["key"])
    assert (status, answer["matched"]) == (200, True)
    # Another tenant's endpoint answers exactly as a missing one.
    status, answer = filter_test(router, "globex-big", sample, token=key["key"])
    missing = filter_test(router, "no-such-endpoint", sample, token=key["key"])
    assert status == 404 and missing[0] == 404
    assert answer["message"] == "no endpoint named 'globex-big'"


def test_a_sample_nested_too_deep_is_a_bad_request(router: RouterProcess) -> None:
    depth = 5000
    body = b'{"payload": ' + b"[" * depth + b"]" * depth + b"}"
    status, _, answer = router.request(
        "POST", "/admin/v1/endpoints/globex-big/filter-test", body,
        {"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )  # fmt: skip
    assert (status, orjson.loads(answer)["message"]) == (400, "request body nests too deeply")
    assert filter_test(router, "globex-big", {"payload": {"data": {"amount": 1}}})[0] == 200
