"""Retention on a real SQLite store: what expires, what never does, and what it must not break."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

import pytest
from tests.support.store_backends import make_event

from hookrouter.clock import ManualClock
from hookrouter.errors import StoreUnavailable
from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.base import AttemptRecord, DeliveryState, NewEvent
from hookrouter.store.ledger import OutcomeRecord, ReplayFilter
from hookrouter.store.pruner import Pruner
from hookrouter.store.retention import DAY, Cutoffs, RetentionPolicy
from hookrouter.store.sqlite import SqliteStore
from hookrouter.store.sqlite import retention as sqlite_retention
from hookrouter.store.sqlite.ledger import SqliteLedger

S = DeliveryState
NOW = time.time()


def days_ago(days: float) -> int:
    return int((NOW - days * DAY) * 1000)


def outcome(event: NewEvent, endpoint: str, state: DeliveryState) -> OutcomeRecord:
    """An attempt's outcome as the delivery engine records it (a park has no attempt)."""
    ref = DeliveryRef(event.event_id, endpoint)
    if state is S.PARKED:
        return OutcomeRecord(ref, state, 0, None, None, None, NOW)
    code = {S.DELIVERED: 200, S.DISABLED: 410}.get(state, 500)
    retry_at = NOW + 60 if state is S.RETRY else None
    attempt = AttemptRecord(1, NOW, 2.0, code, None)
    return OutcomeRecord(ref, state, 1, retry_at, code, None, NOW, attempt)


async def stored(store: SqliteStore, age_days: float, *states: DeliveryState, **kw: Any) -> str:
    """Append an event received ``age_days`` ago whose deliveries end in ``states``."""
    endpoints = tuple(f"ep_{i}" for i in range(len(states)))
    event = make_event(at_ms=days_ago(age_days), endpoints=endpoints, **kw)
    await store.append(event)
    ledger = SqliteLedger(store)
    done = [outcome(event, ep, st) for ep, st in zip(endpoints, states, strict=True)]
    if any(st is not S.PENDING for st in states):
        await ledger.record([o for o in done if o.state is not S.PENDING])
    return event.event_id


def rows(store: SqliteStore, event_id: str) -> tuple[int, int, int]:
    """(events, deliveries, attempts) rows left for ``event_id``, read from the file."""
    with sqlite3.connect(store.db_path) as conn:
        return tuple(  # type: ignore[return-value]
            conn.execute(f"SELECT count(*) FROM {t} WHERE event_id = ?", (event_id,)).fetchone()[0]
            for t in ("events", "deliveries", "attempts")
        )


def pruner(store: SqliteStore, policy: RetentionPolicy | None = None, **kw: Any) -> Pruner:
    return Pruner(store, policy or RetentionPolicy(), ManualClock(wall=NOW), **kw)


async def test_finished_events_past_their_cutoff_go_and_everything_else_stays(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite()
    gone = {
        "old delivered": await stored(store, 10, S.DELIVERED, S.DELIVERED),
        "old unrouted": await stored(store, 10),
        "failed beyond 30 days": await stored(store, 40, S.DEAD, S.DELIVERED),
        "disabled beyond 30 days": await stored(store, 31, S.DISABLED),
    }
    kept = {
        "old pending": await stored(store, 50, S.PENDING),
        "old retry": await stored(store, 50, S.RETRY),
        "old parked": await stored(store, 50, S.PARKED),
        "half delivered": await stored(store, 50, S.DELIVERED, S.PENDING),
        "dead but other open": await stored(store, 50, S.DEAD, S.RETRY),
        "failed within 30 days": await stored(store, 10, S.DEAD),
        "young delivered": await stored(store, 6, S.DELIVERED),
        "young unrouted": await stored(store, 1),
        "newest": await stored(store, 0, S.DELIVERED),
    }
    # Successful attempts live in their delivery rows; the dead one has an attempts row.
    assert rows(store, gone["old delivered"]) == (1, 2, 0)
    assert rows(store, gone["failed beyond 30 days"]) == (1, 2, 1)

    deleted = await pruner(store).run_pass()

    assert deleted == len(gone)
    for name, event_id in gone.items():
        assert await store.get_event(event_id) is None, name
        assert rows(store, event_id) == (0, 0, 0), name
    for name, event_id in kept.items():
        assert await store.get_event(event_id) is not None, name
    assert store.stats()["pruned_events"] == len(gone)


async def test_keep_forever_deletes_nothing(open_sqlite: Any) -> None:
    store = await open_sqlite()
    old = await stored(store, 400, S.DELIVERED)
    failed = await stored(store, 400, S.DEAD)
    await stored(store, 0, S.DELIVERED)
    forever = RetentionPolicy(delivered_seconds=None, failed_seconds=None)
    assert await pruner(store, forever).run_pass() == 0
    only_failed = RetentionPolicy(delivered_seconds=None, failed_seconds=30 * DAY)
    assert await pruner(store, only_failed).run_pass() == 1
    assert await store.get_event(old) is not None
    assert await store.get_event(failed) is None


async def test_a_pass_in_small_batches_reaches_every_expired_event(open_sqlite: Any) -> None:
    store = await open_sqlite()
    expired = [await stored(store, 20 - i * 0.01, S.DELIVERED) for i in range(40)]
    open_ones = [await stored(store, 19, S.PENDING) for _ in range(5)]
    await stored(store, 0, S.DELIVERED)

    first = await store.prune(RetentionPolicy().cutoffs(NOW), scan_limit=7)
    assert (first.scanned, first.deleted) == (7, 7)
    assert first.resume_after == expired[6]

    p = pruner(store, scan_limit=7, batch_pause=0)
    assert await p.run_pass() == len(expired) - 7
    assert p.stats()["passes"] == 1
    for event_id in expired:
        assert await store.get_event(event_id) is None
    for event_id in open_ones:
        assert await store.get_event(event_id) is not None


async def test_an_event_replayed_between_scan_and_delete_is_kept(open_sqlite: Any) -> None:
    store = await open_sqlite()
    dead = await stored(store, 40, S.DEAD)
    await stored(store, 0, S.DELIVERED)
    cutoffs = RetentionPolicy().cutoffs(NOW)
    candidates, _, _ = await store.run_read(
        lambda c: sqlite_retention.scan(c, store.reader_catalog(), cutoffs, None, 100)
    )
    assert candidates == [dead]

    await SqliteLedger(store).replay(ReplayFilter(event_id=dead))
    job = sqlite_retention.delete_job(cutoffs, candidates, lambda: store.catalog)
    assert await store.submit_write(job) == 0
    record = await store.get_event(dead)
    assert record is not None and record.deliveries[0].state is S.PENDING


async def test_a_deleted_event_no_longer_deduplicates_its_provider_id(open_sqlite: Any) -> None:
    """The documented price of retention: the provider event id is forgotten with the event."""
    store = await open_sqlite()
    first = await stored(store, 10, S.DELIVERED, provider_event_id="prov_1")
    await stored(store, 0, S.DELIVERED)
    again = await store.append(make_event(provider_event_id="prov_1", endpoints=("ep_0",)))
    assert (again.event_id, again.duplicate) == (first, True)

    await pruner(store).run_pass()
    later = await store.append(make_event(provider_event_id="prov_1", endpoints=("ep_0",)))
    assert later.duplicate is False and later.event_id != first


async def test_new_and_duplicate_appends_are_told_apart_after_the_newest_rows_expired(
    open_sqlite: Any,
) -> None:
    """Retention never deletes the row with the largest rowid (the group commit relies on it)."""
    store = await open_sqlite()
    ids = [await stored(store, 0, S.DELIVERED, provider_event_id=f"p{i}") for i in range(3)]
    everything = Cutoffs(delivered_before=NOW + 60, failed_before=NOW + 60)
    result = await store.prune(everything)
    assert result.deleted == 2
    assert await store.get_event(ids[-1]) is not None  # the largest rowid stays

    # One commit holding a new event without a provider id and a duplicate:
    # the slow path must still see the new row as new.
    fresh = make_event(endpoints=("ep_0",))
    duplicate = make_event(provider_event_id="p2", endpoints=("ep_0",))
    results = await asyncio.gather(store.append(fresh), store.append(duplicate))
    assert [(r.event_id, r.duplicate) for r in results] == [
        (fresh.event_id, False),
        (ids[-1], True),
    ]


async def test_a_failed_pass_is_counted_and_retried(open_sqlite: Any) -> None:
    store = await open_sqlite()
    p = pruner(store, RetentionPolicy(interval_seconds=0.05))
    await store.close()
    with pytest.raises(StoreUnavailable):
        await p.run_pass()
    p.start()
    try:
        for _ in range(100):
            if p.failures >= 2:
                break
            await asyncio.sleep(0.02)
    finally:
        await p.stop()
    assert p.failures >= 2 and p.last_error is not None
    assert p.passes == 0
