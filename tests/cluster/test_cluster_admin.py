"""Admin changes made on one node reach every node by notification, without a restart.

Each check waits at most ``NOTICE_BOUND`` for the other node to show the
change: well under the catch-up scan's period (``CATCH_UP_SECONDS``), so a
change that arrived by the scan alone (no notice) misses it most of the time.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.cluster.harness import (
    cluster,
    cluster_config,
    owner_of,
    sql,
    tenant_names,
    wait_balanced,
    wait_for,
)
from tests.cluster.sink import AttemptSink
from tests.console.conftest import http_session
from tests.e2e.conftest import stripe_event
from tests.support.router import ENDPOINT_SECRET, RouterProcess

from hookrouter.store.postgres.cluster import CATCH_UP_SECONDS

NODES = ["router-a", "router-b"]
NOTICE_BOUND = 1.5
assert NOTICE_BOUND < CATCH_UP_SECONDS / 3


def _shows(router: RouterProcess, path: str, key: str, value: object) -> Any:
    def check() -> bool:
        status, doc = router.admin("GET", path)
        return status == 200 and doc.get(key) == value

    return check


def _owned_by(tmp_path: Path, tenants: list[str], node: str) -> str:
    for tenant in tenants:
        if owner_of(tmp_path, tenant) == node:
            return tenant
    raise AssertionError(f"{node} owns none of {tenants}")


def _post(router: RouterProcess, tenant: str) -> str:
    status, ack = router.post(f"s-{tenant}", *stripe_event(f"evt_{uuid.uuid4().hex}"))
    assert status == 200, ack
    return str(ack["id"])


class Recovering:
    """Sink answers: ``status`` until ``recover()``, then 200."""

    def __init__(self, status: int) -> None:
        self.status = status
        self._failing = threading.Event()
        self._failing.set()

    def __call__(self, _node: str, _path: str) -> tuple[int, float]:
        return (self.status if self._failing.is_set() else 200), 0.0

    def recover(self) -> None:
        self._failing.clear()


def _all_in_state(tmp_path: Path, events: set[str], state: str) -> Callable[[], bool]:
    def check() -> bool:
        ids = ",".join(f"'{e}'" for e in events)
        states = sql(tmp_path, f"SELECT state FROM deliveries WHERE event_id IN ({ids})")
        return states.split() == [state] * len(events)

    return check


def test_an_endpoint_created_on_one_node_serves_events_ingested_on_another(
    tmp_path: Path,
) -> None:
    tenants = tenant_names(4)
    with (
        AttemptSink() as sink,
        cluster(tmp_path, sink, NODES, lambda n: cluster_config(tmp_path, n, sink, tenants)) as r,
    ):
        a, b = r["router-a"], r["router-b"]
        doc = {"id": "e-new", "tenant": "t00", "url": f"http://127.0.0.1:{sink.port}/new/t00",
               "secret": ENDPOINT_SECRET}  # fmt: skip
        status, created = a.admin("POST", "/endpoints", doc)
        assert status == 201, created
        wait_for(_shows(b, "/endpoints/e-new", "id", "e-new"), NOTICE_BOUND, "b knowing e-new")
        # And the other way: a tenant changed on b is live on a.
        assert b.admin("PATCH", "/tenants/t01", {"max_in_flight": 7})[0] == 200
        wait_for(_shows(a, "/tenants/t01", "max_in_flight", 7), NOTICE_BOUND, "a seeing t01")

        event_id = _post(b, "t00")  # fanned out on b, delivered by t00's owner

        def delivered_to_new() -> bool:
            return any(
                x.event_id == event_id and x.path == "/new/t00" and x.succeeded
                for x in sink.snapshot()
            )

        wait_for(delivered_to_new, 15, "the event delivered to the endpoint made on a")
        deliveries = sql(
            tmp_path, f"SELECT endpoint_id FROM deliveries WHERE event_id = '{event_id}' ORDER BY 1"
        )
        assert deliveries.split() == ["e-new", "e-t00"]


def test_an_endpoint_disabled_on_one_node_stops_its_owners_deliveries(tmp_path: Path) -> None:
    tenants = tenant_names(8)
    answer = Recovering(503)

    with (
        AttemptSink(answer) as sink,
        cluster(tmp_path, sink, NODES, lambda n: cluster_config(tmp_path, n, sink, tenants)) as r,
    ):
        a, b = r["router-a"], r["router-b"]
        wait_balanced(tmp_path, NODES)
        tenant = _owned_by(tmp_path, tenants, "router-b")
        endpoint = f"e-{tenant}"
        events = {_post(a, tenant) for _ in range(5)}  # retried every second by b

        def b_retrying() -> bool:
            seen = [x for x in sink.snapshot() if x.event_id in events and x.node == "router-b"]
            return {x.event_id for x in seen} == events and len(seen) > len(events)

        wait_for(b_retrying, 15, "b attempting every event more than once")
        assert a.admin("PATCH", f"/endpoints/{endpoint}", {"enabled": False})[0] == 200
        wait_for(_shows(b, f"/endpoints/{endpoint}", "enabled", False), NOTICE_BOUND, "b seeing")
        answer.recover()  # from now on an attempt would succeed: none may be made
        disabled = _all_in_state(tmp_path, events, "disabled")
        wait_for(disabled, 10, "b recording every delivery disabled")
        assert not [x for x in sink.snapshot() if x.event_id in events and x.status == 200]


def test_a_breaker_reset_on_a_non_owner_closes_the_owners_breaker(tmp_path: Path) -> None:
    tenants = tenant_names(8)
    answer = Recovering(500)

    def config(node: str) -> dict[str, Any]:
        one_at_a_time = {t: {"max_in_flight": 1} for t in tenants}
        cfg = cluster_config(
            tmp_path, node, sink, tenants, retry="60s", tenant_options=one_at_a_time
        )
        # Opens after 3 failures and stays open for the test's length unless reset.
        cfg["delivery"]["breaker"] = {"cooldown_seconds": 600, "min_requests": 3}
        return cfg

    with AttemptSink(answer) as sink, cluster(tmp_path, sink, NODES, config) as r:
        a, b = r["router-a"], r["router-b"]
        wait_balanced(tmp_path, NODES)
        tenant = _owned_by(tmp_path, tenants, "router-b")
        endpoint = f"e-{tenant}"
        events = {_post(a, tenant) for _ in range(6)}

        def breaker(router: RouterProcess) -> dict[str, Any]:
            _, doc = router.admin("GET", "/breakers")
            found = [x for x in doc["breakers"] if x["endpoint_id"] == endpoint]
            return found[0] if found else {"state": "none"}

        wait_for(lambda: breaker(b)["state"] == "open", 15, "b's breaker of the endpoint open")
        answer.recover()
        # One attempt at a time: three failed (retried in a minute), the rest were parked.
        parked = events - {x.event_id for x in sink.snapshot()}
        assert parked
        # a does not deliver the tenant, yet shows the breaker as its owner wrote it.
        wait_for(lambda: breaker(a)["state"] == "open", NOTICE_BOUND, "a showing b's breaker")
        assert breaker(a)["node"] == "router-b" and breaker(a)["times_opened"] == 1
        _, health = a.admin("GET", f"/endpoints/{endpoint}/health")
        assert health["breaker"] == "open" and health["breaker_times_opened"] == 1, health
        assert [c["after"] for c in health["breaker_history"]] == ["open"], health
        status, reset = a.admin("POST", f"/breakers/{endpoint}/reset")
        assert (status, reset) == (200, {"endpoint": endpoint, "state": "closed"})
        wait_for(lambda: breaker(b)["state"] == "closed", NOTICE_BOUND, "b's breaker closed")
        wait_for(lambda: breaker(a)["state"] == "closed", NOTICE_BOUND, "a showing it closed")
        _, health = a.admin("GET", f"/endpoints/{endpoint}/health")
        assert [c["signal"] for c in health["breaker_history"]] == ["reset", "trip"], health
        wait_for(lambda: parked <= sink.delivered(), 10, "the parked events delivered")
        assert {x.node for x in sink.snapshot() if x.event_id in events} == {"router-b"}
        assert a.admin("POST", "/breakers/e-nope/reset")[0] == 404


def test_a_replay_on_a_non_owner_reaches_the_owner_at_once(tmp_path: Path) -> None:
    tenants = tenant_names(8)
    answer = Recovering(500)

    def config(node: str) -> dict[str, Any]:
        cfg = cluster_config(tmp_path, node, sink, tenants)
        for endpoint in cfg["endpoints"]:
            endpoint["retry_schedule"] = ["0.2s"]  # dead after two failed attempts
        return cfg

    with AttemptSink(answer) as sink, cluster(tmp_path, sink, NODES, config) as r:
        a = r["router-a"]
        wait_balanced(tmp_path, NODES)
        tenant = _owned_by(tmp_path, tenants, "router-b")
        events = {_post(a, tenant) for _ in range(3)}

        wait_for(_all_in_state(tmp_path, events, "dead"), 15, "every delivery dead-lettered by b")
        answer.recover()
        status, replayed = a.admin("POST", "/replay", {"tenant": tenant})
        assert (status, replayed) == (200, {"replayed": len(events)})
        wait_for(lambda: events <= sink.delivered(), NOTICE_BOUND, "b delivering the replay")
        assert {x.node for x in sink.snapshot() if x.event_id in events} == {"router-b"}


def _tripping(tmp_path: Path, node: str, sink: AttemptSink, tenants: list[str]) -> dict[str, Any]:
    """A node whose breakers open after 3 failures and stay open; retries a minute apart."""
    cfg = cluster_config(tmp_path, node, sink, tenants, retry="60s")
    cfg["delivery"]["breaker"] = {"cooldown_seconds": 600, "min_requests": 3}
    return cfg


def test_a_removed_endpoints_breaker_is_listed_by_no_node(tmp_path: Path) -> None:
    tenants = tenant_names(8)

    def config(node: str) -> dict[str, Any]:
        return _tripping(tmp_path, node, sink, tenants)

    with AttemptSink(Recovering(500)) as sink, cluster(tmp_path, sink, NODES, config) as r:
        a, b = r["router-a"], r["router-b"]
        wait_balanced(tmp_path, NODES)
        endpoint = f"e-{_owned_by(tmp_path, tenants, 'router-b')}"
        for _ in range(4):
            _post(a, endpoint[2:])

        def listed(router: RouterProcess) -> list[str]:
            _, doc = router.admin("GET", "/breakers")
            return [x["state"] for x in doc["breakers"] if x["endpoint_id"] == endpoint]

        wait_for(lambda: listed(a) == ["open"], 15, "a showing b's open breaker")
        assert a.admin("DELETE", f"/endpoints/{endpoint}")[0] == 204
        wait_for(lambda: listed(a) == [] and listed(b) == [], NOTICE_BOUND, "no node listing it")


def test_every_nodes_breakers_come_a_page_at_a_time_from_any_node(tmp_path: Path) -> None:
    tenants = tenant_names(8)

    def config(node: str) -> dict[str, Any]:
        return _tripping(tmp_path, node, sink, tenants)

    def walk(router: RouterProcess, limit: int, query: str = "tripped=true") -> list[Any]:
        """Every page of ``GET /breakers`` in turn, following ``next_after``."""
        seen: list[Any] = []
        after = ""
        while True:
            status, doc = router.admin("GET", f"/breakers?{query}&limit={limit}{after}")
            assert status == 200 and len(doc["breakers"]) <= limit, doc
            seen += doc["breakers"]
            if doc["next_after"] is None:
                return seen
            after = f"&after={doc['next_after']}"

    with AttemptSink(Recovering(500)) as sink, cluster(tmp_path, sink, NODES, config) as r:
        a, b = r["router-a"], r["router-b"]
        wait_balanced(tmp_path, NODES)
        for tenant in tenants:
            for _ in range(4):
                _post(a, tenant)
        endpoints = [f"e-{t}" for t in tenants]

        def all_open() -> bool:
            return [x["endpoint_id"] for x in walk(a, 3)] == endpoints

        wait_for(all_open, 20, "every endpoint's breaker open, listed from a")
        owners = {f"e-{t}": owner_of(tmp_path, t) for t in tenants}
        assert set(owners.values()) == set(NODES)  # both nodes' breakers on the pages
        for router in (a, b):
            for limit in (1, 3, 8):
                listed = walk(router, limit)
                assert [x["endpoint_id"] for x in listed] == endpoints, (router.port, limit)
                assert {x["endpoint_id"]: x["node"] for x in listed} == owners
                assert {x["state"] for x in listed} == {"open"}
            one = walk(router, 1, f"tenant={tenants[5]}")
            assert [x["endpoint_id"] for x in one] == [endpoints[5]]
            middle = walk(router, 2, "after=e-t01&until=e-t05")
            assert [x["endpoint_id"] for x in middle] == endpoints[2:6]
        # The console of a node shows the other node's breakers too (as stored, no window
        # counts): its overview and endpoints pages answered 500 for them.
        cookie = {"Cookie": http_session(a)}
        status, _, page = a.request("GET", "/console/fragments/overview", headers=cookie)
        assert status == 200 and b"on router-b" in page and b"on router-a" in page
        status, _, page = a.request("GET", "/console/breakers", headers=cookie)
        assert status == 200 and all(f">{e}</a>".encode() in page for e in endpoints)
        status, _, page = a.request("GET", "/console/endpoints", headers=cookie)
        assert status == 200 and page.count(b'breaker-state">open<') == len(endpoints)
        theirs = next(e for e in endpoints if owners[e] == "router-b")
        status, _, page = a.request("GET", f"/console/endpoints/{theirs}", headers=cookie)
        assert status == 200 and b'id="health-breaker">open<' in page
        for path in ("/", "/events", "/dead", "/tenants", "/sources", "/audit"):
            status, _, page = a.request("GET", f"/console{path}", headers=cookie)
            assert status == 200, (path, page[-300:])
        # A tenant's portal on a node that does not deliver it, with a key minted on the other.
        tenant = theirs[2:]
        status, minted = b.admin("POST", f"/tenants/{tenant}/keys", {})
        assert status == 201, minted
        key = minted["key"]
        mine = f"/endpoints/{theirs}"
        wait_for(
            lambda: a.admin("GET", mine, token=key)[0] == 200, NOTICE_BOUND, "a knowing the key"
        )
        portal = {"Cookie": http_session(a, minted["key"], "/portal")}
        for path in ("/events", "/endpoints", "/dead", f"/endpoints/{theirs}"):
            status, _, page = a.request("GET", f"/portal{path}", headers=portal)
            assert status == 200, (path, page[-300:])
