"""Behaviour every delivery ledger must show, through the ``DeliveryLedger`` protocol only.

Each test gets an opened store from ``ledger_backend`` and its ledger from
``store.delivery_ledger()``; nothing here knows the backend. A new backend
adds one ``LedgerBackend`` to ``LEDGER_BACKENDS`` (how to open its store, and
how to make it refuse writes for a while) and runs every test below.

The delivery states seen before and after each ledger call are collected
(``Observer``), and every move must be in ``store.lifecycle.TRANSITIONS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.support.postgres_store import schema_for, shared_server, store_options, writes_locked
from tests.support.store_backends import TEST_BUCKET_SECONDS, make_event, ordered_ms

from hookrouter.errors import StoreUnavailable
from hookrouter.flow.credits import DeliveryRef
from hookrouter.store import EventStatus, EventStore, NewEvent, open_store
from hookrouter.store.ledger import (
    AttemptRecord,
    DeliveryLedger,
    OutcomeRecord,
    ReplayFilter,
    Resumed,
)
from hookrouter.store.lifecycle import (
    RECORDED,
    TRANSITIONS,
    DeliveryEvent,
    DeliveryState,
)

S = DeliveryState
E = DeliveryEvent


@dataclass(frozen=True)
class LedgerBackend:
    """How the suite opens one backend's store and makes it refuse writes."""

    name: str
    build: Callable[[Path], EventStore]
    refusing_writes: Callable[[EventStore, Path], contextlib.AbstractContextManager[None]]


@contextlib.contextmanager
def _sqlite_lock_held(store: EventStore, tmp_path: Path) -> Iterator[None]:
    """Another connection holds SQLite's write lock (as a second process could)."""
    other = sqlite3.connect(tmp_path / "store" / "events.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


@contextlib.contextmanager
def _postgres_writes_locked(store: EventStore, tmp_path: Path) -> Iterator[None]:
    """Another session holds the deliveries table (an operator's lock, a long migration)."""
    with writes_locked(shared_server(), schema_for(tmp_path)):
        yield


LEDGER_BACKENDS = {
    "sqlite": LedgerBackend(
        "sqlite",
        lambda tmp: open_store("sqlite", path=tmp / "store", busy_timeout=0.05),
        _sqlite_lock_held,
    ),
    "sqlite-thread": LedgerBackend(
        "sqlite-thread",
        lambda tmp: open_store("sqlite", path=tmp / "store", busy_timeout=0.05, grouping="thread"),
        _sqlite_lock_held,
    ),
    "sqlite-bucket": LedgerBackend(
        "sqlite-bucket",
        lambda tmp: open_store(
            "sqlite", path=tmp / "store", busy_timeout=0.05, bucket_seconds=TEST_BUCKET_SECONDS
        ),
        _sqlite_lock_held,
    ),
    "postgres": LedgerBackend(
        "postgres",
        lambda tmp: open_store("postgres", **store_options(tmp, lock_timeout=0.05)),
        _postgres_writes_locked,
    ),
}


@pytest.fixture(params=sorted(LEDGER_BACKENDS))
def ledger_backend(request: pytest.FixtureRequest) -> LedgerBackend:
    return LEDGER_BACKENDS[request.param]


@pytest.fixture
async def store(ledger_backend: LedgerBackend, tmp_path: Path) -> AsyncIterator[EventStore]:
    s = ledger_backend.build(tmp_path)
    await s.open()
    yield s
    await s.close()


@pytest.fixture
def ledger(store: EventStore) -> DeliveryLedger:
    found = store.delivery_ledger()
    assert found is not None, "this backend has no delivery ledger"
    assert store.delivery_ledger() is found  # one per store: it batches outcomes
    return found


# ---- helpers -----------------------------------------------------------------


def ref(event: NewEvent, endpoint: str) -> DeliveryRef:
    return DeliveryRef(event.event_id, endpoint)


def outcome(
    event: NewEvent, endpoint: str, state: DeliveryState, *, attempt: int = 1, at: float = 100.0
) -> OutcomeRecord:
    """What the engine records after an attempt (or, for PARKED, a decision not to try)."""
    if state is S.PARKED:
        return OutcomeRecord(ref(event, endpoint), state, attempt - 1, None, None, None, at)
    code = {S.DELIVERED: 200, S.DISABLED: 410}.get(state, 500)
    return OutcomeRecord(
        ref(event, endpoint),
        state,
        attempt,
        at + 5.0 if state is S.RETRY else None,
        code,
        None if code < 500 else "http_500",
        at,
        AttemptRecord(attempt, at, 2.0, code, None if code < 500 else "http_500"),
        tenant_id=event.tenant_id,
    )


async def append_all(store: EventStore, *events: NewEvent) -> None:
    for e in events:
        await store.append(e)


async def states_of(store: EventStore, event: NewEvent) -> dict[str, DeliveryState]:
    record = await store.get_event(event.event_id)
    assert record is not None
    return {d.endpoint_id: d.state for d in record.deliveries}


@dataclass
class Observer:
    """Delivery states before and after each ledger call, checked against the lifecycle."""

    store: EventStore
    events: list[NewEvent]
    seen: set[tuple[DeliveryState, DeliveryEvent, DeliveryState]] = field(default_factory=set)

    async def snapshot(self) -> dict[tuple[str, str], DeliveryState]:
        out = {}
        for e in self.events:
            for endpoint, state in (await states_of(self.store, e)).items():
                out[(e.event_id, endpoint)] = state
        return out

    @contextlib.asynccontextmanager
    async def moves(self, event: DeliveryEvent) -> AsyncIterator[None]:
        before = await self.snapshot()
        yield
        after = await self.snapshot()
        for key, old in before.items():
            if after[key] is not old:
                move = (old, event, after[key])
                assert TRANSITIONS.get((old, event)) is after[key], f"not in the table: {move}"
                self.seen.add(move)


# ---- page_pending and the ordering guarantee -----------------------------------


async def test_page_pending_lists_one_endpoints_pending_deliveries_in_ref_order(
    store: EventStore, ledger: DeliveryLedger
) -> None:
    # A minute apart: a page and its cursor cross "sqlite-bucket" partitions.
    events = [make_event(endpoints=("ep_a", "ep_b"), at_ms=m) for m in ordered_ms(5, step=60_000)]
    other_tenant = make_event(tenant="ten_b", endpoints=("ep_a",))
    await append_all(store, *events, other_tenant)

    page = await ledger.page_pending("ten_a", "ep_a", None, 100)
    assert page == [ref(e, "ep_a") for e in events]
    assert await ledger.page_pending("ten_a", "ep_a", None, 2) == page[:2]
    # ``after`` is inclusive: a cursor re-reads the ref it stopped at.
    assert await ledger.page_pending("ten_a", "ep_a", page[2], 100) == page[2:]
    assert await ledger.page_pending("ten_b", "ep_a", None, 100) == [ref(other_tenant, "ep_a")]
    assert await ledger.page_pending("ten_a", "ep_none", None, 100) == []


async def test_page_pending_observes_every_outcome_recorded_before_it(
    store: EventStore, ledger: DeliveryLedger
) -> None:
    events = [make_event(endpoints=("ep_a",)) for _ in range(4)]
    await append_all(store, *events)
    # Not awaited: submitted before the page query, so the page must reflect them.
    recorded = ledger.record(
        [outcome(events[0], "ep_a", S.DELIVERED), outcome(events[2], "ep_a", S.RETRY)]
    )
    page = await ledger.page_pending("ten_a", "ep_a", None, 100)
    assert page == [ref(events[1], "ep_a"), ref(events[3], "ep_a")]
    await recorded


async def test_a_short_page_after_recorded_outcomes_is_still_full(
    store: EventStore, ledger: DeliveryLedger
) -> None:
    # A page whose first rows finished (outcomes submitted, maybe not yet
    # written) still returns ``limit`` pending deliveries when there are
    # that many: a short page ends the lane's spill mode.
    events = [make_event(endpoints=("ep_a",)) for _ in range(4)]
    await append_all(store, *events)
    recorded = ledger.record(
        [outcome(events[0], "ep_a", S.DELIVERED), outcome(events[1], "ep_a", S.RETRY)]
    )
    page = await ledger.page_pending("ten_a", "ep_a", None, 2)
    assert page == [ref(events[2], "ep_a"), ref(events[3], "ep_a")]
    await recorded


async def test_page_pending_observes_earlier_park_promote_and_resume(
    store: EventStore, ledger: DeliveryLedger
) -> None:
    a, b = make_event(endpoints=("ep_a",)), make_event(endpoints=("ep_a",))
    await append_all(store, a, b)
    parked, page = await asyncio.gather(
        ledger.park_pending("ten_a", "ep_a", 100.0, 100),
        ledger.page_pending("ten_a", "ep_a", None, 100),
    )
    assert (parked, page) == (2, [])
    resumed, page = await asyncio.gather(
        ledger.resume_parked("ten_a", "ep_a", 1),
        ledger.page_pending("ten_a", "ep_a", None, 100),
    )
    assert resumed == Resumed("ten_a", "ep_a", 1, ref(a, "ep_a"))
    assert page == [ref(a, "ep_a")]

    await ledger.record([outcome(a, "ep_a", S.RETRY, at=100.0)])  # due at 105
    promoted, page = await asyncio.gather(
        ledger.promote_due(200.0, 100), ledger.page_pending("ten_a", "ep_a", None, 100)
    )
    assert promoted == [("ten_a", ref(a, "ep_a"))]
    assert page == [ref(a, "ep_a")]


# ---- load and record -------------------------------------------------------------


async def test_load_gives_bodies_media_types_and_attempts_and_skips_missing_events(
    store: EventStore, ledger: DeliveryLedger
) -> None:
    form = make_event(
        endpoints=("ep_a",),
        body=b"payload=%7B%7D",
        headers={"content-type": "application/x-www-form-urlencoded"},
        event_type="push",
    )
    bare = make_event(endpoints=("ep_a",), headers={}, event_type=None)
    await append_all(store, form, bare)
    await ledger.record([outcome(bare, "ep_a", S.RETRY, attempt=2)])
    missing = DeliveryRef("evt_01AAAAAAAAAAAAAAAAAAAAAAAA", "ep_a")

    work = await ledger.load([ref(bare, "ep_a"), missing, ref(form, "ep_a")])
    assert [w.ref for w in work] == [ref(bare, "ep_a"), ref(form, "ep_a")]  # in the order asked
    first, second = work
    assert (first.tenant_id, first.attempts, first.event_type) == ("ten_a", 2, None)
    assert first.payload.body == bare.body
    assert first.payload.content_type == "application/json"  # the default when none was sent
    assert (second.attempts, second.event_type) == (0, "push")
    assert second.payload.body == b"payload=%7B%7D"
    assert second.payload.content_type == "application/x-www-form-urlencoded"


async def test_recorded_outcomes_are_durable_with_their_attempt_history(
    ledger_backend: LedgerBackend, store: EventStore, ledger: DeliveryLedger, tmp_path: Path
) -> None:
    event = make_event(endpoints=("ep_a", "ep_b"))
    await store.append(event)
    await ledger.record([outcome(event, "ep_a", S.RETRY, attempt=1, at=100.0)])
    await ledger.record([outcome(event, "ep_b", S.DELIVERED, attempt=1, at=101.0)])
    await store.close()

    reopened = ledger_backend.build(tmp_path)
    await reopened.open()
    try:
        record = await reopened.get_event(event.event_id)
    finally:
        await reopened.close()
    assert record is not None and record.status is EventStatus.PENDING
    a, b = record.deliveries
    assert (a.endpoint_id, a.state, a.attempts, a.next_attempt_at) == ("ep_a", S.RETRY, 1, 105.0)
    assert (a.last_status_code, a.last_error) == (500, "http_500")
    assert [(h.attempt, h.status_code) for h in a.history] == [(1, 500)]
    assert (b.endpoint_id, b.state, b.attempts, b.last_status_code) == ("ep_b", S.DELIVERED, 1, 200)


async def test_event_status_follows_its_deliveries(
    store: EventStore, ledger: DeliveryLedger
) -> None:
    event = make_event(endpoints=("ep_a", "ep_b"))
    await store.append(event)

    async def status() -> EventStatus:
        record = await store.get_event(event.event_id)
        assert record is not None
        return record.status

    await ledger.record([outcome(event, "ep_a", S.DELIVERED)])
    assert await status() is EventStatus.PENDING
    await ledger.record([outcome(event, "ep_b", S.DEAD)])
    assert await status() is EventStatus.FAILED
    await ledger.replay(ReplayFilter(event_id=event.event_id))
    assert await status() is EventStatus.PENDING
    await ledger.record([outcome(event, "ep_b", S.DELIVERED, attempt=1).settling_event()])
    assert await status() is EventStatus.DELIVERED


async def test_a_refused_outcome_batch_is_counted_and_written_later(
    ledger_backend: LedgerBackend, store: EventStore, ledger: DeliveryLedger, tmp_path: Path
) -> None:
    events = [make_event(endpoints=("ep_a",)) for _ in range(3)]
    await append_all(store, *events)
    assert ledger.write_failures == 0
    with ledger_backend.refusing_writes(store, tmp_path):
        refused = ledger.record([outcome(e, "ep_a", S.DELIVERED) for e in events])
        with pytest.raises(StoreUnavailable):
            await refused  # whoever waits is told
        assert ledger.write_failures == 1

    async def delivered() -> bool:
        return [await states_of(store, e) for e in events] == [{"ep_a": S.DELIVERED}] * 3

    for _ in range(200):  # the ledger writes the batch again by itself
        if await delivered():
            break
        await asyncio.sleep(0.025)
    assert await delivered()
    assert ledger.write_failures == 1


# ---- promote_due, park_pending, resume_parked ---------------------------------------


async def test_promote_due_moves_due_retries_oldest_due_first(
    store: EventStore, ledger: DeliveryLedger
) -> None:
    events = [make_event(endpoints=("ep_a",)) for _ in range(4)]
    await append_all(store, *events)
    # Due at 110, 105, 130 (not yet at 120), and one delivered.
    await ledger.record(
        [
            outcome(events[0], "ep_a", S.RETRY, at=105.0),
            outcome(events[1], "ep_a", S.RETRY, at=100.0),
            outcome(events[2], "ep_a", S.RETRY, at=125.0),
            outcome(events[3], "ep_a", S.DELIVERED),
        ]
    )
    assert await ledger.promote_due(120.0, 1) == [("ten_a", ref(events[1], "ep_a"))]
    assert await ledger.promote_due(120.0, 100) == [("ten_a", ref(events[0], "ep_a"))]
    assert await ledger.promote_due(120.0, 100) == []
    assert await ledger.page_pending("ten_a", "ep_a", None, 100) == [
        ref(events[0], "ep_a"),
        ref(events[1], "ep_a"),
    ]
    assert await ledger.promote_due(1000.0, 100) == [("ten_a", ref(events[2], "ep_a"))]


async def test_park_and_resume_one_endpoint_oldest_first(
    store: EventStore, ledger: DeliveryLedger
) -> None:
    events = [make_event(endpoints=("ep_a", "ep_b")) for _ in range(3)]
    await append_all(store, *events)
    assert await ledger.park_pending("ten_a", "ep_a", 100.0, 2) == 2
    assert await ledger.park_pending("ten_a", "ep_a", 100.0, 100) == 1
    assert await ledger.page_pending("ten_a", "ep_a", None, 100) == []
    assert len(await ledger.page_pending("ten_a", "ep_b", None, 100)) == 3  # untouched

    first = await ledger.resume_parked("ten_a", "ep_a", 2)
    assert first == Resumed("ten_a", "ep_a", 2, ref(events[0], "ep_a"))
    rest = await ledger.resume_parked("ten_a", "ep_a")
    assert rest == Resumed("ten_a", "ep_a", 1, ref(events[2], "ep_a"))
    assert await ledger.resume_parked("ten_a", "ep_a") == Resumed("ten_a", "ep_a", 0, None)
    assert len(await ledger.page_pending("ten_a", "ep_a", None, 100)) == 3


# ---- replay ----------------------------------------------------------------------------


async def test_replay_reopens_matching_finished_deliveries_per_endpoint(
    store: EventStore, ledger: DeliveryLedger
) -> None:
    ms = ordered_ms(4, step=60_000)  # a window across "sqlite-bucket" partitions
    events = [make_event(endpoints=("ep_a", "ep_b"), at_ms=m) for m in ms]
    await append_all(store, *events)
    await ledger.record(
        [outcome(e, "ep_a", S.DEAD, attempt=3) for e in events]
        + [outcome(events[0], "ep_b", S.DISABLED), outcome(events[1], "ep_b", S.DELIVERED)]
    )
    dead = ReplayFilter()
    assert await ledger.count_replayable(dead) == 4
    assert await ledger.count_replayable(ReplayFilter(states=(S.DISABLED,))) == 1
    window = ReplayFilter(since=ms[1] / 1000, until=ms[3] / 1000)
    assert await ledger.count_replayable(window) == 2

    assert await ledger.replay(window) == [Resumed("ten_a", "ep_a", 2, ref(events[1], "ep_a"))]
    assert await ledger.replay(dead, limit=1) == [
        Resumed("ten_a", "ep_a", 1, ref(events[0], "ep_a"))
    ]
    resumed = await ledger.replay(ReplayFilter(states=(S.DEAD, S.DISABLED)))
    assert sorted(resumed, key=lambda r: r.endpoint_id) == [
        Resumed("ten_a", "ep_a", 1, ref(events[3], "ep_a")),
        Resumed("ten_a", "ep_b", 1, ref(events[0], "ep_b")),
    ]
    assert await ledger.count_replayable(ReplayFilter(states=(S.DEAD, S.DISABLED))) == 0
    # Attempts start again from 0.
    work = await ledger.load([ref(events[0], "ep_a")])
    assert [w.attempts for w in work] == [0]
    # A pending delivery is not finished: nothing to replay it from.
    with pytest.raises(ValueError, match="cannot be replayed"):
        await ledger.replay(ReplayFilter(states=(S.PENDING,)))


async def test_replay_filters_by_tenant_endpoint_and_event(
    store: EventStore, ledger: DeliveryLedger
) -> None:
    mine = make_event(endpoints=("ep_a", "ep_b"))
    theirs = make_event(tenant="ten_b", endpoints=("ep_a",))
    await append_all(store, mine, theirs)
    await ledger.record(
        [
            outcome(mine, "ep_a", S.DEAD),
            outcome(mine, "ep_b", S.DEAD),
            outcome(theirs, "ep_a", S.DEAD),
        ]
    )
    assert await ledger.count_replayable(ReplayFilter(tenant_id="ten_b")) == 1
    assert await ledger.count_replayable(ReplayFilter(endpoint_id="ep_b")) == 1
    assert await ledger.count_replayable(ReplayFilter(event_id=mine.event_id)) == 2
    assert await ledger.replay(ReplayFilter(tenant_id="ten_b")) == [
        Resumed("ten_b", "ep_a", 1, ref(theirs, "ep_a"))
    ]
    assert await ledger.replay(ReplayFilter(event_id=mine.event_id, endpoint_id="ep_b")) == [
        Resumed("ten_a", "ep_b", 1, ref(mine, "ep_b"))
    ]
    assert await ledger.count_replayable(ReplayFilter()) == 1


# ---- counting ----------------------------------------------------------------------------


async def test_pending_endpoints_and_state_counts(
    store: EventStore, ledger: DeliveryLedger
) -> None:
    a, b = make_event(endpoints=("ep_a", "ep_b")), make_event(endpoints=("ep_a",))
    c = make_event(tenant="ten_b", endpoints=("ep_c",))
    await append_all(store, a, b, c)
    await ledger.record([outcome(a, "ep_b", S.DELIVERED), outcome(a, "ep_a", S.RETRY)])

    backlog = sorted(await ledger.pending_endpoints(), key=lambda r: (r.tenant_id, r.endpoint_id))
    assert backlog == [
        Resumed("ten_a", "ep_a", 1, ref(b, "ep_a")),
        Resumed("ten_b", "ep_c", 1, ref(c, "ep_c")),
    ]
    assert await ledger.state_counts() == {
        ("ten_a", S.DELIVERED): 1,
        ("ten_a", S.RETRY): 1,
        ("ten_a", S.PENDING): 1,
        ("ten_b", S.PENDING): 1,
    }
    open_only = await ledger.state_counts((S.PENDING, S.PARKED))
    assert open_only == {("ten_a", S.PENDING): 1, ("ten_b", S.PENDING): 1}


async def test_pending_listing_of_a_tenant_merges_its_open_deliveries_and_pages(
    store: EventStore, ledger: DeliveryLedger
) -> None:
    """Pending = any delivery open (pending, retry, parked), on any endpoint, newest first."""
    events = [make_event(endpoints=("ep_a", "ep_b"), at_ms=m) for m in ordered_ms(7, step=60_000)]
    other = make_event(tenant="ten_b", endpoints=("ep_c",))
    await append_all(store, *events, other)
    # Every delivery delivered but these; event 4 has no outcome at all (both pending).
    not_delivered = {(1, "ep_a"): S.RETRY, (2, "ep_b"): S.PARKED, (3, "ep_a"): S.DEAD}
    not_delivered |= {(5, "ep_b"): S.RETRY, (6, "ep_a"): S.PARKED}
    await ledger.record(
        [
            outcome(events[i], ep, not_delivered.get((i, ep), S.DELIVERED))
            for i in (0, 1, 2, 3, 5, 6)
            for ep in ("ep_a", "ep_b")
        ]
    )
    want = [events[i].event_id for i in (6, 5, 4, 2, 1)]

    listed = await store.list_events(tenant_id="ten_a", status=EventStatus.PENDING)
    assert [r.event_id for r in listed] == want
    assert {r.status for r in listed} == {EventStatus.PENDING}
    pages: list[str] = []
    cursor = None
    while page := await store.list_events(
        tenant_id="ten_a", status=EventStatus.PENDING, limit=2, before=cursor
    ):
        assert len(page) <= 2
        pages += [r.event_id for r in page]
        cursor = page[-1].event_id
    assert pages == want
    others = await store.list_events(tenant_id="ten_b", status=EventStatus.PENDING)
    assert [r.event_id for r in others] == [other.event_id]


# ---- the lifecycle table ----------------------------------------------------------------


async def test_every_observed_transition_is_in_the_lifecycle_table(
    store: EventStore, ledger: DeliveryLedger
) -> None:
    """Walk every move the table allows through the ledger, watching the states change."""
    events = [make_event(endpoints=("ep_a",)) for _ in range(5)]
    await append_all(store, *events)
    seen = Observer(store, events)
    for state in (S.DELIVERED, S.RETRY, S.DEAD, S.DISABLED, S.PARKED):
        event = events[list(RECORDED).index(state)]
        async with seen.moves(RECORDED[state]):
            await ledger.record([outcome(event, "ep_a", state)])
    async with seen.moves(E.DUE):
        await ledger.promote_due(10_000.0, 100)
    async with seen.moves(E.RESUME):
        await ledger.resume_parked("ten_a", "ep_a")
    async with seen.moves(E.PARK):
        await ledger.park_pending("ten_a", "ep_a", 100.0, 1)
    async with seen.moves(E.REPLAY):
        await ledger.replay(ReplayFilter(states=(S.DEAD, S.DISABLED, S.DELIVERED)))

    assert {(old, event) for old, event, _ in seen.seen} == set(TRANSITIONS)


async def test_a_refused_page_query_is_store_unavailable(
    ledger_backend: LedgerBackend, store: EventStore, ledger: DeliveryLedger, tmp_path: Path
) -> None:
    """Reads through the ledger fail as ``StoreUnavailable`` too, never hang."""
    await store.append(make_event(endpoints=("ep_a",)))
    with ledger_backend.refusing_writes(store, tmp_path), pytest.raises(StoreUnavailable):
        await ledger.park_pending("ten_a", "ep_a", 100.0, 10)
    assert await ledger.park_pending("ten_a", "ep_a", 100.0, 10) == 1
