"""An event's status as the admin API shows it, through the SQLite ledger's outcome writes.

The status follows the deliveries (pending while one is open, else failed if
one is dead or disabled, else delivered); ``get_event`` and every
``list_events`` filter must agree on it, whatever the mix of deliveries.
"""

from __future__ import annotations

import random
import sqlite3
from typing import Any

from tests.support.store_backends import make_event

from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.base import AttemptRecord, DeliveryState, EventStatus, NewEvent
from hookrouter.store.ledger import OutcomeRecord, ReplayFilter
from hookrouter.store.sqlite import SqliteStore
from hookrouter.store.sqlite.ledger import SqliteLedger

S = DeliveryState


def outcome(event: NewEvent, endpoint: str, state: DeliveryState) -> OutcomeRecord:
    """What the delivery engine records after one attempt (or a park) of a delivery."""
    if state is S.PARKED:
        return OutcomeRecord(DeliveryRef(event.event_id, endpoint), state, 0, None, None, None, 1.0)
    code = {S.DELIVERED: 200, S.DISABLED: 410}.get(state, 500)
    return OutcomeRecord(
        DeliveryRef(event.event_id, endpoint),
        state,
        1,
        5.0 if state is S.RETRY else None,
        code,
        None,
        1.0,
        AttemptRecord(1, 1.0, 2.0, code, None),
    )


async def status_of(store: SqliteStore, event: NewEvent) -> EventStatus:
    record = await store.get_event(event.event_id)
    assert record is not None
    return record.status


async def listed(store: SqliteStore, **filters: Any) -> list[tuple[str, EventStatus]]:
    return [(r.event_id, r.status) for r in await store.list_events(limit=1000, **filters)]


async def test_status_follows_the_deliveries_through_failure_and_replay(open_sqlite: Any) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    event = make_event(endpoints=("ep_a", "ep_b"))
    await store.append(event)
    assert await status_of(store, event) is EventStatus.PENDING

    await ledger.record([outcome(event, "ep_a", S.DELIVERED)])
    assert await status_of(store, event) is EventStatus.PENDING  # ep_b is still open
    await ledger.record([outcome(event, "ep_b", S.RETRY)])
    assert await status_of(store, event) is EventStatus.PENDING
    await ledger.record([outcome(event, "ep_b", S.DEAD)])
    assert await status_of(store, event) is EventStatus.FAILED
    assert await listed(store, status=EventStatus.FAILED) == [(event.event_id, EventStatus.FAILED)]

    resumed = await ledger.replay(ReplayFilter(event_id=event.event_id))
    assert [r.count for r in resumed] == [1]
    assert await status_of(store, event) is EventStatus.PENDING
    assert await listed(store, tenant_id=event.tenant_id, status=EventStatus.PENDING) == [
        (event.event_id, EventStatus.PENDING)
    ]
    await ledger.record([outcome(event, "ep_b", S.DELIVERED)])
    assert await status_of(store, event) is EventStatus.DELIVERED
    assert await listed(store, status=EventStatus.FAILED) == []


async def test_failed_when_the_last_open_delivery_is_the_one_delivered(open_sqlite: Any) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    gone, dead = make_event(endpoints=("ep_a", "ep_b")), make_event(endpoints=("ep_a", "ep_b"))
    await store.append(gone)
    await store.append(dead)
    await ledger.record([outcome(gone, "ep_a", S.DISABLED), outcome(dead, "ep_b", S.DEAD)])
    assert await status_of(store, gone) is EventStatus.PENDING
    # The deliveries finishing last succeed, yet each event failed because of its sibling.
    await ledger.record([outcome(gone, "ep_b", S.DELIVERED), outcome(dead, "ep_a", S.DELIVERED)])
    assert await status_of(store, gone) is EventStatus.FAILED
    assert await status_of(store, dead) is EventStatus.FAILED


async def test_every_listing_filter_agrees_with_get_event(open_sqlite: Any) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    rng = random.Random(7)
    endpoints = ("ep_a", "ep_b", "ep_c")
    events = []
    for i in range(120):
        tenant = ("ten_a", "ten_b")[i % 2]
        routed = endpoints[: rng.choice((0, 1, 1, 1, 2, 3))]
        events.append(make_event(tenant=tenant, endpoints=routed))
    for e in events:
        await store.append(e)
    states = (S.DELIVERED, S.DELIVERED, S.RETRY, S.PARKED, S.DEAD, S.DISABLED, None)
    for round_ in range(2):  # a second round finishes some of what the first left open
        records = []
        for e in events:
            record = await store.get_event(e.event_id)
            assert record is not None
            for d in record.deliveries:  # the engine only ever attempts open deliveries
                state = rng.choice(states)
                if d.state in (S.PENDING, S.RETRY, S.PARKED) and state is not None:
                    records.append(outcome(e, d.endpoint_id, state))
        await ledger.record(records)
        if round_ == 0:
            await ledger.replay(ReplayFilter(tenant_id="ten_b", states=(S.DEAD,)), limit=5)

    truth = {e.event_id: await status_of(store, e) for e in events}
    assert set(truth.values()) == set(EventStatus)  # the mix covers every status
    everything = await listed(store)
    assert dict(everything) == truth
    assert [i for i, _ in everything] == sorted(truth, reverse=True)
    for tenant in (None, "ten_a", "ten_b"):
        for status in EventStatus:
            expected = [
                (i, s)
                for i, s in everything
                if s is status and (tenant is None or i in _of(events, tenant))
            ]
            assert await listed(store, tenant_id=tenant, status=status) == expected, (
                tenant,
                status,
            )
            # Paging with the cursor, two at a time, gives the same sequence.
            paged: list[tuple[str, EventStatus]] = []
            before = None
            while True:
                page = await store.list_events(
                    tenant_id=tenant, status=status, limit=2, before=before
                )
                paged += [(r.event_id, r.status) for r in page]
                if len(page) < 2:
                    break
                before = page[-1].event_id
            assert paged == expected


def _of(events: list[NewEvent], tenant: str) -> set[str]:
    return {e.event_id for e in events if e.tenant_id == tenant}


async def test_rows_finished_by_version_1_code_read_the_same(open_sqlite: Any) -> None:
    """Version 1 stored 'delivered' in the row; that still reads as delivered."""
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    event = make_event(endpoints=("ep_a",))
    await store.append(event)
    await ledger.record([outcome(event, "ep_a", S.DELIVERED)])

    def as_version_1_wrote_it(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE events SET status = 'delivered' WHERE event_id = ?", (event.event_id,))

    await store.submit_write(as_version_1_wrote_it)
    assert await status_of(store, event) is EventStatus.DELIVERED
    assert await listed(store, status=EventStatus.DELIVERED) == [
        (event.event_id, EventStatus.DELIVERED)
    ]
    assert await listed(store, tenant_id=event.tenant_id, status=EventStatus.PENDING) == []


async def test_outcomes_that_settle_their_event_skip_only_the_failed_check(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    events = [make_event(endpoints=("ep_a",)) for _ in range(3)]
    for event in events:
        await store.append(event)
    statements: list[str] = []
    await store.submit_write(lambda conn: conn.set_trace_callback(statements.append))
    try:
        settled = [outcome(e, "ep_a", S.DELIVERED).settling_event() for e in events[:2]]
        assert all(o.settles_event for o in settled)
        await ledger.record(settled)
        await ledger.record([])  # flushed and committed
        assert statements and not any("SET status = 'failed'" in s for s in statements)
        await ledger.record([outcome(events[2], "ep_a", S.DELIVERED)])  # not known to settle
        await ledger.record([])
        assert any("SET status = 'failed'" in s for s in statements)
    finally:
        await store.submit_write(lambda conn: conn.set_trace_callback(None))
    for event in events:
        assert await status_of(store, event) is EventStatus.DELIVERED
    # Only a delivery that was delivered can settle its event.
    assert not outcome(events[0], "ep_a", S.DEAD).settling_event().settles_event
