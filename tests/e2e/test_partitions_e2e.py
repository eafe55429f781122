"""Time partitions by default: a router whose config sets no ``bucket`` keeps one file an hour.

Events of earlier hours are written first through the store the config
opens (as the router opens it), so that the router then serves a store
with three hour partitions: lookups, provider ids, duplicates, listing with
a cursor, replay by a window and retention must all reach across them.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from tests.e2e.conftest import stripe_event
from tests.support.delivery_servers import ThreadedReceiver
from tests.support.router import RouterProcess, base_config
from tests.support.store_backends import make_event
from tests.support.store_files import event_files, files_holding
from tests.support.waiting import poll_until

from hookrouter.config import parse_config
from hookrouter.flow.credits import DeliveryRef
from hookrouter.ids import event_id_time_ms
from hookrouter.store import DeliveryState, NewEvent, open_configured
from hookrouter.store.ledger import AttemptRecord, OutcomeRecord
from hookrouter.store.sqlite import partitions

HOUR = 3600


def _hour_file(event_id: str) -> str:
    """The file of the one-hour partition an event id belongs to."""
    start = partitions.bucket_start(event_id_time_ms(event_id) / 1000, HOUR)
    return partitions.partition_file(start)


def _dead(event: NewEvent, at: float) -> OutcomeRecord:
    """The outcome of a delivery that failed for good, as the engine records it."""
    attempt = AttemptRecord(3, at, 2.0, 500, "http_500")
    ref = DeliveryRef(event.event_id, "acme-invoices")
    return OutcomeRecord(
        ref, DeliveryState.DEAD, 3, None, 500, "http_500", at, attempt, tenant_id="acme"
    )


async def _seed_earlier_hours(config: dict[str, Any]) -> list[NewEvent]:
    """Three dead invoice events: one two hours back, two an hour back (10 s and 30 s in)."""
    hour = partitions.bucket_start(time.time(), HOUR)
    stamps = [hour - 2 * HOUR + 10, hour - HOUR + 10, hour - HOUR + 30]
    events = [
        make_event(
            tenant="acme",
            source="acme-stripe",
            provider_event_id=f"evt_seed_{i}",
            endpoints=("acme-invoices",),
            body=stripe_event(f"evt_seed_{i}")[0],
            event_type="invoice.paid",
            at_ms=at * 1000,
        )
        for i, at in enumerate(stamps)
    ]
    store = open_configured(parse_config(config).store)  # as the router opens it
    await store.open()
    try:
        for event in events:
            await store.append(event)
        ledger = store.delivery_ledger()
        assert ledger is not None
        await ledger.record([_dead(e, e.received_at + 60) for e in events])
    finally:
        await store.close()
    return events


def _listed(router: RouterProcess) -> list[str]:
    """Every event of tenant acme, newest first, one page at a time."""
    ids: list[str] = []
    cursor = ""
    while True:
        status, page = router.admin("GET", f"/events?tenant=acme&limit=1{cursor}")
        assert status == 200, page
        ids += [e["id"] for e in page["data"]]
        if page["next_before"] is None:
            return ids
        cursor = f"&before={page['next_before']}"


def test_a_router_without_bucket_serves_every_feature_across_hour_partitions(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with ThreadedReceiver() as sink:
        config = base_config(data, 0)
        assert "sqlite" not in config["store"]  # no bucket: the default
        config["endpoints"][0]["url"] = f"http://127.0.0.1:{sink.port}/invoices"
        seeded = asyncio.run(_seed_earlier_hours(config))
        old = [e.event_id for e in seeded]

        with RouterProcess(tmp_path, config) as router:
            status, doc = router.post("acme-stripe", *stripe_event("evt_now"))
            assert status == 200, doc
            new = doc["id"]
            # Three hour files, each event in the one of its hour; events.db holds none.
            assert files_holding(data, [*old, new]) == {e: _hour_file(e) for e in [*old, new]}
            assert len({_hour_file(e) for e in [*old, new]}) == 3
            assert "the writer moved to time partition" in router.log()

            for event_id in [*old, new]:
                status, record = router.admin("GET", f"/events/{event_id}")
                assert status == 200 and record["id"] == event_id
            status, found = router.admin("GET", "/sources/acme-stripe/events/evt_seed_0")
            assert status == 200 and found["id"] == old[0]
            # A redelivery of a two-hour-old event is still a duplicate.
            status, doc = router.post("acme-stripe", *stripe_event("evt_seed_0"))
            assert (status, doc) == (200, {"id": old[0], "duplicate": True})
            assert _listed(router) == [new, *reversed(old)]

            # A window from the first seeded event up to (not including) the
            # third: the dead deliveries of two partitions, not the third's.
            window = {"since": seeded[0].received_at, "until": seeded[1].received_at + 10}
            assert router.admin("POST", "/replay?dry_run=true", window) == (200, {"matched": 2})
            assert router.admin("POST", "/replay", window) == (200, {"replayed": 2})
            poll_until(
                lambda: set(sink.webhook_ids()) == {old[0], old[1], new}, 20, "replayed deliveries"
            )
            poll_until(
                lambda: router.admin("GET", f"/events/{old[0]}")[1]["status"] == "delivered",
                10,
                "the replayed delivery recorded",
            )
            status, third = router.admin("GET", f"/events/{old[2]}")
            assert third["deliveries"][0]["state"] == "dead"

        # Retention of an hour: the partition two hours back goes whole, file and all.
        config["store"]["retention"] = {"delivered": "1h", "failed": "1h", "interval": "1h"}
        oldest = data / _hour_file(old[0])
        assert oldest.exists()
        # The router's first retention pass may run before any request of ours.
        with RouterProcess(tmp_path, config) as router:

            def gone() -> bool:
                assert router.admin("POST", "/retention/run")[0] == 200
                return not oldest.exists()

            poll_until(gone, 20, "the oldest partition unlinked")
            assert router.admin("GET", f"/events/{old[0]}")[0] == 404
            assert router.admin("GET", f"/events/{new}")[0] == 200


def test_bucket_off_keeps_every_event_in_events_db(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = base_config(data, 0)
    config["store"]["sqlite"] = {"bucket": "off"}
    with RouterProcess(tmp_path, config) as router:
        ids = [router.post("acme-stripe", *stripe_event(f"evt_off_{i}"))[1]["id"] for i in range(3)]
    assert files_holding(data, ids) == dict.fromkeys(ids, "events.db")
    assert event_files(data) == [data / "events.db"]
    assert "time partition" not in router.log()


def test_bucket_off_on_a_store_with_partitions_writes_to_its_newest_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = base_config(data, 0)
    with RouterProcess(tmp_path, config) as router:
        first = router.post("acme-stripe", *stripe_event("evt_first"))[1]["id"]
    config["store"]["sqlite"] = {"bucket": "off"}
    with RouterProcess(tmp_path, config) as router:
        second = router.post("acme-stripe", *stripe_event("evt_second"))[1]["id"]
        assert router.admin("GET", f"/events/{first}")[0] == 200
        status, doc = router.post("acme-stripe", *stripe_event("evt_first"))
        assert (status, doc) == (200, {"id": first, "duplicate": True})
    # The writer no longer switches: the second event joins the newest partition, the first's.
    newest = _hour_file(first)
    assert files_holding(data, [first, second]) == {first: newest, second: newest}
