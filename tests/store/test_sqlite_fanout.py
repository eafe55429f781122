"""Fresh deliveries on SQLite (schema version 5): a delivery's row is written lazily.

What must hold whatever rows exist (``store/sqlite_fanout.py``): every
acknowledged delivery is found by the queries the engine relies on (page-in,
pending work at start-up, counts, parking), reads show fresh deliveries as
pending, an outcome lands whether or not the row exists yet, and no reuse of
rowids or migration can hide a delivery behind the watermark.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tests.support.store_backends import make_event

from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.base import AttemptRecord, DeliveryState, EventStatus
from hookrouter.store.ledger import OutcomeRecord
from hookrouter.store.sqlite import SqliteStore
from hookrouter.store.sqlite.fanout import watermark
from hookrouter.store.sqlite.ledger import SqliteLedger
from hookrouter.store.sqlite.schema import MIGRATIONS


def _rows(store: SqliteStore) -> dict[tuple[str, str], str]:
    """Every delivery row, as (event, endpoint) -> state, read straight from the file."""
    with sqlite3.connect(store.db_path) as conn:
        rows = conn.execute("SELECT event_id, endpoint_id, state FROM deliveries").fetchall()
    conn.close()
    return {(e, ep): state for e, ep, state in rows}


def _stored_watermark(store: SqliteStore) -> int | None:
    with sqlite3.connect(store.db_path) as conn:
        value = watermark(conn)
    conn.close()
    return value


def _outcome(
    event_id: str, endpoint_id: str, state: DeliveryState, code: int, tenant: str | None = None
) -> OutcomeRecord:
    attempt = AttemptRecord(1, 100.0, 3.0, code, None)
    ref = DeliveryRef(event_id, endpoint_id)
    return OutcomeRecord(ref, state, 1, None, code, None, 100.0, attempt, tenant_id=tenant)


def _delivered(event_id: str, endpoint_id: str, tenant: str | None = None) -> OutcomeRecord:
    return _outcome(event_id, endpoint_id, DeliveryState.DELIVERED, 200, tenant)


async def _status_after(
    store: SqliteStore, ledger: SqliteLedger, outcome: OutcomeRecord
) -> EventStatus:
    """The event's status once ``outcome`` is recorded."""
    await ledger.record([outcome])
    record = await store.get_event(outcome.ref.event_id)
    assert record is not None
    return record.status


async def test_an_acknowledged_event_writes_no_delivery_row_yet_and_reads_pending(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite()
    event = make_event(endpoints=("ep_a", "ep_b"))
    await store.append(event)
    assert _rows(store) == {}  # the point of version 5: no row written twice
    record = await store.get_event(event.event_id)
    assert record is not None and record.status is EventStatus.PENDING
    assert [(d.endpoint_id, d.state, d.attempts) for d in record.deliveries] == [
        ("ep_a", DeliveryState.PENDING, 0),
        ("ep_b", DeliveryState.PENDING, 0),
    ]
    assert [e.event_id for e in await store.list_events(status=EventStatus.PENDING)] == [
        event.event_id
    ]
    pending = await store.list_events(tenant_id=event.tenant_id, status=EventStatus.PENDING)
    assert [e.event_id for e in pending] == [event.event_id]
    assert await store.list_events(status=EventStatus.DELIVERED) == []


async def test_an_outcome_writes_the_row_of_a_fresh_delivery_once(open_sqlite: Any) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    event = make_event(endpoints=("ep_a", "ep_b"))
    await store.append(event)
    await ledger.record([_delivered(event.event_id, "ep_a")])
    assert _rows(store) == {(event.event_id, "ep_a"): "delivered"}
    # ep_b is still fresh: the event is not delivered yet.
    record = await store.get_event(event.event_id)
    assert record is not None and record.status is EventStatus.PENDING
    assert [(d.endpoint_id, d.state) for d in record.deliveries] == [
        ("ep_a", DeliveryState.DELIVERED),
        ("ep_b", DeliveryState.PENDING),
    ]
    assert record.deliveries[0].history[0].status_code == 200
    assert await _status_after(store, ledger, _delivered(event.event_id, "ep_b")) is (
        EventStatus.DELIVERED
    )


async def test_a_fresh_delivery_loads_with_no_attempt_made(open_sqlite: Any) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    event = make_event(endpoints=("ep_a",), body=b'{"n":1}')
    await store.append(event)
    (work,) = await ledger.load([DeliveryRef(event.event_id, "ep_a")])
    assert (work.tenant_id, work.attempts, work.payload.body) == (event.tenant_id, 0, b'{"n":1}')
    assert work.payload.content_type == "application/json"  # the sender named none


async def test_a_loaded_delivery_keeps_the_media_type_it_arrived_with(open_sqlite: Any) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    form = "application/x-www-form-urlencoded"
    event = make_event(endpoints=("ep_a",), body=b"payload=%7B%7D", headers={"content-type": form})
    await store.append(event)
    (work,) = await ledger.load([DeliveryRef(event.event_id, "ep_a")])
    assert (work.payload.body, work.payload.content_type) == (b"payload=%7B%7D", form)


@pytest.mark.parametrize("tenant_known", [True, False])
async def test_an_outcome_without_next_attempt_or_error_stores_nulls(
    open_sqlite: Any, tenant_known: bool
) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    event = make_event(endpoints=("ep_a", "ep_b"))
    await store.append(event)
    tenant = event.tenant_id if tenant_known else None
    retry = _outcome(event.event_id, "ep_b", DeliveryState.RETRY, 503, tenant)
    retry = OutcomeRecord(retry.ref, retry.state, 1, 160.0, 503, "upstream 503", 100.0,
                          retry.attempt, tenant_id=tenant)  # fmt: skip
    await ledger.record([_delivered(event.event_id, "ep_a", tenant), retry])
    with sqlite3.connect(store.db_path) as conn:
        rows = conn.execute(
            "SELECT endpoint_id, next_attempt_at, last_error, last_status_code FROM deliveries"
            " ORDER BY endpoint_id"
        ).fetchall()
    conn.close()
    assert rows == [("ep_a", None, None, 200), ("ep_b", 160.0, "upstream 503", 503)]


async def test_a_batch_loads_in_the_order_asked_without_the_missing_ones(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    events = [make_event(endpoints=("ep_a", "ep_b"), body=b'{"n":%d}' % i) for i in range(3)]
    for event in events:
        await store.append(event)
    # One delivery with an attempt made (its row exists), the others still fresh.
    await ledger.record([_outcome(events[1].event_id, "ep_b", DeliveryState.RETRY, 503)])
    wanted = [
        DeliveryRef(events[2].event_id, "ep_a"),
        DeliveryRef("evt_never_stored", "ep_a"),
        DeliveryRef(events[1].event_id, "ep_b"),
        DeliveryRef(events[1].event_id, "ep_a"),
        DeliveryRef(events[0].event_id, "ep_b"),
    ]
    loaded = await ledger.load(wanted)
    assert [(w.ref, w.attempts, w.payload.body) for w in loaded] == [
        (wanted[0], 0, b'{"n":2}'),
        (wanted[2], 1, b'{"n":1}'),
        (wanted[3], 0, b'{"n":1}'),
        (wanted[4], 0, b'{"n":0}'),
    ]
    assert {w.tenant_id for w in loaded} == {events[0].tenant_id}
    assert await ledger.load([]) == []


async def test_page_in_and_start_up_find_fresh_deliveries_in_order(
    open_sqlite: Any, tmp_path: Path
) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    events = [make_event(endpoints=("ep_a", "ep_b")) for _ in range(5)]
    for event in events:
        await store.append(event)
    await ledger.record([_delivered(events[1].event_id, "ep_a")])
    page = await ledger.page_pending(events[0].tenant_id, "ep_a", None, 10)
    assert page == [DeliveryRef(e.event_id, "ep_a") for e in events if e is not events[1]]
    # The delivered one kept its outcome; the rest now have pending rows.
    rows = _rows(store)
    assert rows[(events[1].event_id, "ep_a")] == "delivered"
    assert sum(state == "pending" for state in rows.values()) == 9
    await store.close()

    # Nothing materialized before a stop (a kill -9 leaves the same rows,
    # tests/store/test_crash.py): the start-up query finds every delivery.
    other = await open_sqlite(tmp_path / "other")
    for event in events:
        await other.append(event)
    await other.close()
    reopened = await open_sqlite(tmp_path / "other")
    backlog = await SqliteLedger(reopened).pending_endpoints()
    assert sorted((b.endpoint_id, b.count, b.oldest) for b in backlog) == [
        ("ep_a", 5, DeliveryRef(events[0].event_id, "ep_a")),
        ("ep_b", 5, DeliveryRef(events[0].event_id, "ep_b")),
    ]


async def test_counts_and_parking_see_fresh_deliveries(open_sqlite: Any) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    events = [make_event(endpoints=("ep_a",)) for _ in range(4)]
    for event in events:
        await store.append(event)
    counts = await ledger.state_counts([DeliveryState.PENDING])
    assert counts == {(events[0].tenant_id, DeliveryState.PENDING): 4}
    newer = make_event(endpoints=("ep_a",))
    await store.append(newer)
    assert await ledger.park_pending(newer.tenant_id, "ep_a", 200.0, 100) == 5
    assert set(_rows(store).values()) == {"parked"}


async def test_a_decision_without_an_attempt_lands_on_a_fresh_delivery(open_sqlite: Any) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    event = make_event(endpoints=("ep_a",))
    await store.append(event)
    parked = OutcomeRecord(
        DeliveryRef(event.event_id, "ep_a"), DeliveryState.PARKED, 0, None, None, None, 150.0
    )
    await ledger.record([parked])
    record = await store.get_event(event.event_id)
    assert record is not None
    (delivery,) = record.deliveries
    assert (delivery.state, delivery.attempts, delivery.updated_at) == (
        DeliveryState.PARKED,
        0,
        150.0,
    )
    assert delivery.next_attempt_at == event.received_at  # due since it arrived


async def test_an_event_is_failed_only_once_its_fresh_deliveries_are_final(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    event = make_event(endpoints=("ep_a", "ep_b"))
    await store.append(event)
    dead = _outcome(event.event_id, "ep_a", DeliveryState.DEAD, 500)
    assert await _status_after(store, ledger, dead) is EventStatus.PENDING  # ep_b is still fresh
    delivered = _delivered(event.event_id, "ep_b")
    assert await _status_after(store, ledger, delivered) is EventStatus.FAILED


@pytest.mark.parametrize("tenant_known", [True, False])
async def test_an_outcome_for_a_deleted_event_writes_nothing(
    open_sqlite: Any, tenant_known: bool
) -> None:
    # With the tenant known the row goes in without a lookup of the event, and
    # the deleted one fails the foreign key: the batch is then written guarded.
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    events = [make_event(endpoints=("ep_a",)) for _ in range(3)]
    for event in events:
        await store.append(event)
    gone = events[1]
    await store.submit_write(
        lambda c: c.execute("DELETE FROM events WHERE event_id = ?", (gone.event_id,))
    )
    tenant = gone.tenant_id if tenant_known else None
    await ledger.record([_delivered(e.event_id, "ep_a", tenant) for e in events])
    assert _rows(store) == {(e.event_id, "ep_a"): "delivered" for e in events if e is not gone}
    record = await store.get_event(events[2].event_id)
    assert record is not None and record.deliveries[0].history[0].status_code == 200


async def test_the_periodic_round_materializes_the_previous_rounds_events(
    open_sqlite: Any,
) -> None:
    # It rides on promote_due, which the engine calls every poll: it runs
    # whether or not outcomes come in (an endpoint that is down records none).
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    first = [make_event(endpoints=("ep_a",)) for _ in range(3)]
    for event in first:
        await store.append(event)
    await ledger.record([_delivered(first[0].event_id, "ep_a")])
    await ledger.promote_due(0.0, 10)  # round 1: sees 3 events, materializes none
    assert _stored_watermark(store) == 0
    second = [make_event(endpoints=("ep_a",)) for _ in range(3)]
    for event in second:
        await store.append(event)
    await ledger.promote_due(0.0, 10)  # round 2: up to what round 1 saw
    assert _stored_watermark(store) == 3
    rows = _rows(store)
    assert rows[(first[0].event_id, "ep_a")] == "delivered"  # its outcome row is kept
    assert [rows.get((e.event_id, "ep_a")) for e in first[1:]] == ["pending", "pending"]
    assert all((e.event_id, "ep_a") not in rows for e in second)
    # After a pause a round takes a chunk at most; the next ones catch up.
    ledger.fanout_chunk = 2
    await ledger.promote_due(0.0, 10)  # bound: 6 (what round 2 saw), chunk: 3 + 2
    assert _stored_watermark(store) == 5
    await ledger.promote_due(0.0, 10)
    assert _stored_watermark(store) == 6


async def test_materializing_fills_exactly_the_missing_deliveries_of_each_event(
    open_sqlite: Any,
) -> None:
    # The round filters events before parsing their endpoint lists: none of
    # a row-less event's, some of a partly recorded one's, and no event with
    # every row may be missed or rewritten.
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    untouched = make_event(endpoints=("ep_a", "ep_b", "ep_c"))
    partly = make_event(endpoints=("ep_a", "ep_b", "ep_c"))
    complete = make_event(endpoints=("ep_a", "ep_b"))
    single = make_event(endpoints=("ep_a",))
    single_done = make_event(endpoints=("ep_a",))
    unrouted = make_event(endpoints=())
    for event in (untouched, partly, complete, single, single_done, unrouted):
        await store.append(event)
    await ledger.record(
        [
            _delivered(partly.event_id, "ep_b"),
            _delivered(complete.event_id, "ep_a"),
            _outcome(complete.event_id, "ep_b", DeliveryState.DEAD, 500),
            _delivered(single_done.event_id, "ep_a"),
        ]
    )
    counts = await ledger.state_counts([DeliveryState.PENDING])  # materializes everything
    assert counts == {(untouched.tenant_id, DeliveryState.PENDING): 6}
    assert _rows(store) == {
        (untouched.event_id, "ep_a"): "pending",
        (untouched.event_id, "ep_b"): "pending",
        (untouched.event_id, "ep_c"): "pending",
        (partly.event_id, "ep_a"): "pending",
        (partly.event_id, "ep_b"): "delivered",
        (partly.event_id, "ep_c"): "pending",
        (complete.event_id, "ep_a"): "delivered",
        (complete.event_id, "ep_b"): "dead",
        (single.event_id, "ep_a"): "pending",
        (single_done.event_id, "ep_a"): "delivered",
    }


async def test_deleting_the_newest_events_lowers_the_watermark(open_sqlite: Any) -> None:
    # SQLite gives the next event the rowid of a deleted newest one: were the
    # watermark left above it, that event's deliveries would pass for written.
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    old = [make_event(endpoints=("ep_a",)) for _ in range(4)]
    for event in old:
        await store.append(event)
    await ledger.page_pending(old[0].tenant_id, "ep_a", None, 10)  # materializes all four
    assert _stored_watermark(store) == 4
    await store.submit_write(
        lambda c: c.execute(
            "DELETE FROM events WHERE event_id IN (?, ?)", (old[2].event_id, old[3].event_id)
        )
    )
    assert _stored_watermark(store) == 2
    new = make_event(endpoints=("ep_a",))
    await store.append(new)
    refs = await ledger.page_pending(new.tenant_id, "ep_a", None, 10)
    assert refs == [DeliveryRef(e.event_id, "ep_a") for e in (old[0], old[1], new)]


async def test_a_version_4_store_keeps_its_rows_and_starts_the_watermark_at_its_newest(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store"
    old = SqliteStore(path, migrations=MIGRATIONS[:4])  # the trigger writes rows at insert
    await old.open()
    events = [make_event(endpoints=("ep_a",)) for _ in range(3)]
    for event in events:
        await old.append(event)
    assert set(_rows(old).values()) == {"pending"}
    assert _stored_watermark(old) is None
    await old.close()

    store = SqliteStore(path)
    await store.open()
    try:
        assert store.schema_migrated_from == 4
        assert _stored_watermark(store) == 3
        ledger = SqliteLedger(store)
        await ledger.record([_delivered(events[0].event_id, "ep_a")])
        new = make_event(endpoints=("ep_a",))
        await store.append(new)
        assert (new.event_id, "ep_a") not in _rows(store)  # no trigger any more
        page = await ledger.page_pending(new.tenant_id, "ep_a", None, 10)
        assert page == [DeliveryRef(e.event_id, "ep_a") for e in (*events[1:], new)]
    finally:
        await store.close()
