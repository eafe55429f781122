"""Behaviour every event-store backend must show (run against each kind in BACKEND_KINDS)."""

from __future__ import annotations

import asyncio

import pytest
from tests.support.store_backends import StoreBackend, make_event, ordered_ms

from hookrouter.errors import StoreUnavailable
from hookrouter.store import (
    AppendResult,
    DeliveryState,
    Entity,
    EventStatus,
    EventStore,
)


async def test_acknowledged_event_is_readable_and_survives_reopen(
    backend: StoreBackend, store: EventStore
) -> None:
    event = make_event(
        provider_event_id="pe_1",
        endpoints=("ep_b", "ep_a"),
        body=b"\x00binary\xffbody",
        headers={"content-type": "application/json", "x-sig": "v1,abc"},
    )
    result = await store.append(event)
    assert result == AppendResult(event.event_id, duplicate=False)
    await store.close()

    reopened = backend.build()
    await reopened.open()
    try:
        record = await reopened.get_event(event.event_id, with_body=True)
    finally:
        await reopened.close()
    assert record is not None
    assert (record.tenant_id, record.source_id, record.provider_event_id) == (
        "ten_a",
        "src_a",
        "pe_1",
    )
    assert record.event_type == "test.event"
    assert record.received_at == pytest.approx(event.received_at)
    assert record.headers == event.headers
    assert record.body == event.body
    assert record.status is EventStatus.PENDING
    # One pending delivery per endpoint, due at once, ordered by endpoint id.
    assert [d.endpoint_id for d in record.deliveries] == ["ep_a", "ep_b"]
    for delivery in record.deliveries:
        assert delivery.event_id == event.event_id
        assert delivery.state is DeliveryState.PENDING
        assert delivery.attempts == 0
        assert delivery.next_attempt_at == pytest.approx(event.received_at)
        assert delivery.last_status_code is None and delivery.last_error is None
        assert delivery.history == ()


async def test_event_without_endpoints_is_unrouted(store: EventStore) -> None:
    event = make_event(endpoints=())
    await store.append(event)
    record = await store.get_event(event.event_id)
    assert record is not None
    assert record.status is EventStatus.UNROUTED
    assert record.deliveries == ()


async def test_get_event_without_body_and_unknown_id(store: EventStore) -> None:
    event = make_event(body=b"secret payload")
    await store.append(event)
    record = await store.get_event(event.event_id)
    assert record is not None and record.body == b""
    assert record.headers == event.headers
    assert await store.get_event("evt_01AAAAAAAAAAAAAAAAAAAAAAAA") is None


async def test_duplicates_within_one_batch_and_across_batches(store: EventStore) -> None:
    # 100 appends fired in one loop turn: 60 distinct keys, each key's first
    # occurrence must win, the 40 repeats must name it and write nothing.
    keys = [f"pe_{i % 60}" for i in range(100)]
    events = [make_event(provider_event_id=k, endpoints=("ep_a",)) for k in keys]
    futures = [store.append(e) for e in events]
    results = await asyncio.gather(*futures)

    first_id: dict[str, str] = {}
    for key, event, result in zip(keys, events, results, strict=True):
        if key not in first_id:
            first_id[key] = event.event_id
            assert result == AppendResult(event.event_id, duplicate=False)
        else:
            assert result == AppendResult(first_id[key], duplicate=True)
    for index in range(60, 100):  # the repeats left no event and no delivery behind
        assert await store.get_event(events[index].event_id) is None
    stored = await store.list_events(limit=1000)
    assert sorted(r.provider_event_id or "" for r in stored) == sorted(first_id)

    # A later batch re-sending some keys (and one new key) is deduplicated too.
    again = [make_event(provider_event_id=k) for k in ("pe_3", "pe_59", "pe_new")]
    results = await asyncio.gather(*(store.append(e) for e in again))
    assert results[0] == AppendResult(first_id["pe_3"], duplicate=True)
    assert results[1] == AppendResult(first_id["pe_59"], duplicate=True)
    assert results[2] == AppendResult(again[2].event_id, duplicate=False)
    assert store.stats()["duplicates"] == 42


async def test_dedup_key_is_per_source_and_absent_ids_never_dedup(store: EventStore) -> None:
    a = make_event(source="src_a", provider_event_id="same")
    b = make_event(source="src_b", provider_event_id="same")
    keyless = [make_event(provider_event_id=None) for _ in range(3)]
    results = await asyncio.gather(*(store.append(e) for e in (a, b, *keyless)))
    assert [r.duplicate for r in results] == [False] * 5
    assert [r.event_id for r in results] == [e.event_id for e in (a, b, *keyless)]


async def test_a_duplicate_batch_matches_originals_by_source_and_provider_id(
    store: EventStore,
) -> None:
    # The same provider id under two sources, and a batch mixing a duplicate of
    # one with a first sighting under a third source and a key-less event: each
    # duplicate must name its own source's original, never the other's.
    a = make_event(source="src_a", provider_event_id="same")
    b = make_event(source="src_b", provider_event_id="same")
    await asyncio.gather(store.append(a), store.append(b))
    batch = [
        make_event(source="src_b", provider_event_id="same"),
        make_event(source="src_c", provider_event_id="same"),
        make_event(source="src_a", provider_event_id="same"),
        make_event(provider_event_id=None),
    ]
    results = await asyncio.gather(*(store.append(e) for e in batch))
    assert results[0] == AppendResult(b.event_id, duplicate=True)
    assert results[1] == AppendResult(batch[1].event_id, duplicate=False)
    assert results[2] == AppendResult(a.event_id, duplicate=True)
    assert results[3] == AppendResult(batch[3].event_id, duplicate=False)


async def test_appending_the_same_event_twice_reports_it_as_its_own_duplicate(
    store: EventStore,
) -> None:
    event = make_event(provider_event_id="pe_retry")
    first, second = await asyncio.gather(store.append(event), store.append(event))
    assert first == AppendResult(event.event_id, duplicate=False)
    assert second == AppendResult(event.event_id, duplicate=True)
    assert await store.append(event) == AppendResult(event.event_id, duplicate=True)


async def test_concurrent_appends_share_commits(store: EventStore) -> None:
    events = [make_event(endpoints=("ep_a",)) for _ in range(300)]
    results = await asyncio.gather(*(store.append(e) for e in events))
    assert all(not r.duplicate for r in results)
    stats = store.stats()
    assert stats["appends"] == 300
    assert stats["pending_appends"] == 0
    assert stats["commits"] < 300 / 10, stats  # grouped: far fewer commits than appends
    assert stats["events_per_commit_max"] > 1
    assert stats["events_per_commit_mean"] > 10


async def test_events_minutes_apart_are_found_by_id_and_provider_id_and_deduplicated(
    backend: StoreBackend, store: EventStore
) -> None:
    # A minute apart, so that each is in a partition of its own under "sqlite-bucket".
    made = [
        make_event(provider_event_id=f"pe_{i}", endpoints=("ep_a",), at_ms=ms)
        for i, ms in enumerate(ordered_ms(3, step=60_000))
    ]
    for event in made:
        await store.append(event)
    # A redelivery of each arrives after all of them: a duplicate of its original.
    for event in made:
        again = make_event(provider_event_id=event.provider_event_id)
        assert await store.append(again) == AppendResult(event.event_id, duplicate=True)
    await store.close()

    reopened = backend.build()
    await reopened.open()
    try:
        for event in made:
            record = await reopened.get_event(event.event_id, with_body=True)
            assert record is not None and record.body == event.body
            assert [d.endpoint_id for d in record.deliveries] == ["ep_a"]
            assert await reopened.find_event("src_a", event.provider_event_id or "") == (
                event.event_id
            )
        late = make_event(provider_event_id="pe_0")  # and after a reopen
        assert await reopened.append(late) == AppendResult(made[0].event_id, duplicate=True)
        listed = await reopened.list_events(limit=1000)
        assert [r.event_id for r in listed] == [e.event_id for e in reversed(made)]
    finally:
        await reopened.close()


async def test_list_events_newest_first_with_filters_and_cursor(store: EventStore) -> None:
    # 20 s apart: three events a minute, ten "sqlite-bucket" partitions for a cursor to cross.
    stamps = iter(ordered_ms(30, step=20_000))
    made = []
    for i in range(30):
        tenant = "ten_a" if i % 3 else "ten_b"
        endpoints = ("ep_a",) if i % 2 else ()
        made.append(make_event(tenant=tenant, endpoints=endpoints, at_ms=next(stamps)))
    for event in made:  # one at a time, so the ids are the only ordering
        await store.append(event)
    newest_first = [e.event_id for e in reversed(made)]

    everything = await store.list_events(limit=1000)
    assert [r.event_id for r in everything] == newest_first
    assert all(r.body == b"" and r.deliveries == () for r in everything)

    ten_a = await store.list_events(tenant_id="ten_a", limit=1000)
    assert [r.event_id for r in ten_a] == [
        e.event_id for e in reversed(made) if e.tenant_id == "ten_a"
    ]
    pending_b = await store.list_events(tenant_id="ten_b", status=EventStatus.PENDING)
    assert [r.event_id for r in pending_b] == [
        e.event_id for e in reversed(made) if e.tenant_id == "ten_b" and e.endpoint_ids
    ]
    assert all(r.status is EventStatus.PENDING for r in pending_b)
    unrouted = await store.list_events(status=EventStatus.UNROUTED, limit=1000)
    assert [r.event_id for r in unrouted] == [
        e.event_id for e in reversed(made) if not e.endpoint_ids
    ]

    # Paging with the cursor visits every event of the tenant once, in order.
    pages: list[str] = []
    cursor = None
    while True:
        page = await store.list_events(tenant_id="ten_a", limit=7, before=cursor)
        if not page:
            break
        pages.extend(r.event_id for r in page)
        cursor = page[-1].event_id
    assert pages == [r.event_id for r in ten_a]


async def test_list_events_rejects_silly_limits(store: EventStore) -> None:
    with pytest.raises(ValueError):
        await store.list_events(limit=0)


async def test_entities_crud(store: EventStore) -> None:
    tenant = Entity("tenant", "ten_a", None, {"name": "Acme", "credits": 100}, 1.0)
    endpoints = [
        Entity("endpoint", f"ep_{n}", "ten_a", {"url": f"https://h/{n}"}, 2.0) for n in "ba"
    ]
    for entity in (tenant, *endpoints):
        await store.put_entity(entity)
    assert await store.list_entities("tenant") == [tenant]
    assert [e.id for e in await store.list_entities("endpoint")] == ["ep_a", "ep_b"]
    assert await store.list_entities("source") == []

    changed = Entity("tenant", "ten_a", None, {"name": "Acme Ltd", "credits": 5}, 3.0)
    await store.put_entity(changed)
    assert await store.list_entities("tenant") == [changed]

    renamed = Entity("tenant", "ten_a", None, {"name": "Acme Inc", "credits": 5}, 4.0)
    assert await store.replace_entity(renamed) is True
    assert await store.list_entities("tenant") == [renamed]

    assert await store.delete_entity("endpoint", "ep_a") is True
    gone = Entity("endpoint", "ep_a", "ten_a", {"url": "https://h/a"}, 5.0)
    assert await store.replace_entity(gone) is False  # never brings a deleted entity back
    assert await store.delete_entity("endpoint", "ep_a") is False
    assert await store.delete_entity("tenant", "ep_b") is False  # kinds do not mix
    assert [e.id for e in await store.list_entities("endpoint")] == ["ep_b"]


async def test_close_commits_what_is_pending(backend: StoreBackend, store: EventStore) -> None:
    events = [make_event() for _ in range(50)]
    futures = [store.append(e) for e in events]
    await store.close()
    assert all(f.done() and not f.exception() for f in futures)
    assert [f.result().event_id for f in futures] == [e.event_id for e in events]
    with pytest.raises(StoreUnavailable):
        store.append(make_event())

    reopened = backend.build()
    await reopened.open()
    try:
        for event in events:
            assert await reopened.get_event(event.event_id) is not None
    finally:
        await reopened.close()


async def test_ping_and_repr(store: EventStore) -> None:
    await store.ping()
    assert "open" in repr(store)
