"""``bench.store_fill`` leaves the files a router that ingested for hours would have.

Real stores, a real router process: the fill spreads arrival times over
past hours, so the store is one sealed partition per hour, and the router
opens it, finds every event by id, by provider id and in its listing, and
moves on to a partition of its own at the next event.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from pathlib import Path

from bench.store_fill import EventMaker, Span, fill
from tests.e2e.conftest import stripe_event
from tests.support.router import RouterProcess, base_config
from tests.support.store_files import event_files, event_ids_in

from hookrouter.ids import event_id_time_ms
from hookrouter.store.sqlite import fanout, partitions, tenant_index

HOUR = 3600


def _catalog(data: Path) -> list[tuple[int, int | None, str, str]]:
    with contextlib.closing(sqlite3.connect(f"file:{data / 'events.db'}?mode=ro", uri=True)) as c:
        return [(int(r[0]), r[1], str(r[2]), str(r[3])) for r in c.execute(partitions.CATALOG_SQL)]


def _behind(path: Path) -> tuple[int, int]:
    """Events of one file above its fan-out and its tenant-index watermarks."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        newest = fanout.newest_rowid(conn)
        fanned = fanout.watermark(conn)
        merged = conn.execute(f"SELECT {tenant_index.WATERMARK_SQL}").fetchone()[0]
        return newest - (newest if fanned is None else fanned), newest - int(merged)


def test_span_spreads_arrivals_evenly_and_ends_at_its_end() -> None:
    span = Span(end=10_000.0, seconds=100.0, count=4)
    assert [span.at(i) for i in range(4)] == [9_925.0, 9_950.0, 9_975.0, 10_000.0]
    maker = EventMaker("acme", "acme-stripe")
    first, second = maker.next(9_925.0), maker.next(9_950.0)
    assert (first.received_at, event_id_time_ms(first.event_id)) == (9_925.0, 9_925_000)
    assert first.event_id < second.event_id and first.provider_event_id != second.provider_event_id


def test_a_filled_span_opens_in_the_router_as_sealed_hour_partitions(tmp_path: Path) -> None:
    data = tmp_path / "data"
    this_hour = partitions.bucket_start(time.time(), HOUR)
    # Four whole past hours; the last event in the last second before this one.
    result = asyncio.run(
        fill(data, 2_000, "acme", "acme-stripe", span=4 * HOUR, end=this_hour - 1, bucket=HOUR)
    )
    hours = [this_hour - h * HOUR for h in (4, 3, 2, 1)]
    assert result["partitions"] == 5  # events.db, then one per hour
    assert _catalog(data) == [
        (0, hours[0], "events.db", "sealed"),
        *[(h, h + HOUR, partitions.partition_file(h), "sealed") for h in hours[:-1]],
        (hours[-1], None, partitions.partition_file(hours[-1]), "live"),
    ]
    held = {path.name: event_ids_in(path) for path in event_files(data)}
    assert held["events.db"] == set()
    for hour in hours:  # evenly spread: 500 an hour, each in the file its id names
        ids = held[partitions.partition_file(hour)]
        assert len(ids) == 500
        assert {partitions.bucket_start(event_id_time_ms(i) / 1000, HOUR) for i in ids} == {hour}
    oldest = min(held[partitions.partition_file(hours[0])])
    newest = max(held[partitions.partition_file(hours[-1])])

    config = base_config(data, 0)
    with RouterProcess(tmp_path, config) as router:
        status, event = router.admin("GET", f"/events/{oldest}")
        assert status == 200 and event["id"] == oldest
        status, event = router.admin("GET", f"/events/{newest}")
        assert status == 200 and event["id"] == newest
        status, by_provider = router.admin(
            "GET", f"/sources/acme-stripe/events/{event['provider_event_id']}"
        )
        assert status == 200 and by_provider["id"] == newest
        listed: list[str] = []
        before = ""
        while True:
            _, page = router.admin("GET", f"/events?tenant=acme&limit=1000{before}")
            listed += [e["id"] for e in page["data"]]
            if not page.get("next_before"):
                break
            before = f"&before={page['next_before']}"
        assert len(listed) == 2_000 and listed[0] == newest and listed[-1] == oldest
        body, headers = stripe_event("evt_after_the_fill")
        assert router.post("acme-stripe", body, headers)[0] == 200
    catalog = _catalog(data)
    assert [state for *_, state in catalog] == ["sealed"] * 5 + ["live"]
    assert catalog[-1][0] >= this_hour  # the router's own hour


def test_the_fill_leaves_indexes_merged_as_a_router_would(tmp_path: Path) -> None:
    """The engine's rounds run beside the appends: nothing left for the router's first round.

    Without them every filled event was above the tenant-index and fan-out
    watermarks, and the first round of a router opening a 10 M-event store
    merged them all in one write job (docs/performance.md, issue 34).
    """
    data = tmp_path / "data"
    count = 3 * tenant_index.MERGE_AT
    asyncio.run(fill(data, count, "acme", "acme-stripe", span=2 * HOUR, bucket=HOUR))
    behind = {path.name: _behind(path) for path in event_files(data)}
    fresh = sum(f for f, _ in behind.values())
    unmerged = sum(u for _, u in behind.values())
    assert fresh == 0, behind
    assert unmerged < tenant_index.MERGE_AT, behind
