"""Work ingested on one node reaches its owner by notice, named or (too many lanes) not.

Every event is posted to the node that does not own its tenant, so only the
commit's notice (or the catch-up scan, ``CATCH_UP_SECONDS`` later) can tell
the owner. Each wait is bounded by ``NOTICE_BOUND``, well under the scan's
period, and the owner's ``/metrics`` say whether it queried for the lanes.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.cluster.harness import (
    LEASE,
    cluster,
    cluster_config,
    owner_of,
    wait_balanced,
    wait_for,
)
from tests.cluster.sink import AttemptSink
from tests.e2e.conftest import stripe_event
from tests.support.router import ENDPOINT_SECRET, RouterProcess

from hookrouter.store.postgres.cluster import CATCH_UP_SECONDS

NODES = ["router-a", "router-b"]
NOTICE_BOUND = 1.5
assert NOTICE_BOUND < CATCH_UP_SECONDS / 3
TENANTS = ["narrow", "wide"]
# Enough endpoints with long names that one event's lanes pass the 8000-byte notice limit.
WIDE = [f"e-wide-{n:03d}-{'x' * 48}" for n in range(100)]


def _config(tmp_path: Path, node: str, sink: AttemptSink) -> dict[str, Any]:
    cfg = cluster_config(tmp_path, node, sink, TENANTS)
    cfg["endpoints"] += [
        {"id": e, "tenant": "wide", "url": f"http://127.0.0.1:{sink.port}/wide/{e}",
         "secret": ENDPOINT_SECRET}
        for e in WIDE
    ]  # fmt: skip
    return cfg


def _counter(router: RouterProcess, name: str) -> float:
    _, _, body = router.request("GET", "/metrics")
    line = next(x for x in body.decode().splitlines() if x.startswith(name + " "))
    return float(line.split()[1])


def _avoided(router: RouterProcess) -> float:
    return _counter(router, "hookrouter_store_postgres_pending_scans_avoided_total")


def _owner_and_other(
    tmp_path: Path, routers: dict[str, RouterProcess], tenant: str
) -> tuple[RouterProcess, RouterProcess]:
    """The node owning ``tenant`` and the other one.

    On a starved machine a lease turn can run late enough that the lease is
    past its expiry for a moment (no owner) before it is renewed or taken
    over: wait for an owner rather than read the gap.
    """
    found = [""]

    def owned() -> bool:
        found[0] = owner_of(tmp_path, tenant)
        return found[0] != ""

    wait_for(owned, 3 * LEASE, f"an owner of {tenant!r}'s partition")
    owner = routers[found[0]]
    return owner, next(r for r in routers.values() if r is not owner)


def _post(router: RouterProcess, tenant: str) -> str:
    status, ack = router.post(f"s-{tenant}", *stripe_event(f"evt_{uuid.uuid4().hex}"))
    assert status == 200, ack
    return str(ack["id"])


def test_named_and_unnamed_notices_both_bring_the_work_to_its_owner(tmp_path: Path) -> None:
    with (
        AttemptSink() as sink,
        cluster(tmp_path, sink, NODES, lambda n: _config(tmp_path, n, sink)) as routers,
    ):
        wait_balanced(tmp_path, NODES)

        owner, other = _owner_and_other(tmp_path, routers, "narrow")
        avoided = _avoided(owner)
        event = _post(other, "narrow")
        wait_for(lambda: event in sink.delivered(), NOTICE_BOUND, "the narrow event delivered")
        assert _avoided(owner) == avoided + 1  # its lane was named: no query

        owner, other = _owner_and_other(tmp_path, routers, "wide")
        avoided = _avoided(owner)
        event = _post(other, "wide")
        wait_for(lambda: event in sink.delivered(), NOTICE_BOUND, "the wide event's first delivery")

        def every_endpoint() -> bool:
            paths = {a.path for a in sink.snapshot() if a.event_id == event and a.succeeded}
            return {p.rsplit("/", 1)[-1] for p in paths} >= set(WIDE)

        wait_for(every_endpoint, 15, "the wide event delivered to its 100 endpoints")
        assert _avoided(owner) == avoided  # too long to name its lanes: the owner queried
