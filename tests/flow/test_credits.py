"""Credit queue: capacity bound, credit return, spill mode, oldest-first page-in, lanes."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookrouter.flow.credits import ADMITTED, CreditQueue, DeliveryRef, PageIn, Spilled


def ref(i: int, ep: str = "ep_a") -> DeliveryRef:
    return DeliveryRef(f"evt_{i:06d}", ep)


class FakeStore:
    """The store's pending deliveries of one tenant (a test model, named as such)."""

    def __init__(self) -> None:
        self.rows: set[DeliveryRef] = set()

    def add(self, r: DeliveryRef) -> None:
        self.rows.add(r)

    def done(self, r: DeliveryRef) -> None:
        self.rows.discard(r)

    def page(self, req: PageIn) -> list[DeliveryRef]:
        after = req.after
        rows = (r for r in self.rows if r.endpoint_id == req.endpoint_id)
        return sorted(r for r in rows if after is None or r >= after)[: req.limit]


def serve(
    q: CreditQueue,
    store: FakeStore,
    requests: Sequence[PageIn],
    offers_due: AbstractSet[str] = frozenset(),
) -> None:
    """Answer page-ins (and the ones their answers ask for) from ``store`` at once."""
    todo = list(requests)
    while todo:
        req = todo.pop(0)
        todo.extend(q.paged_in(req, store.page(req), offers_due))


def queue_with(
    capacity: int, ids: Sequence[int], ep: str = "ep_a"
) -> tuple[FakeStore, CreditQueue]:
    """A queue of ``capacity`` that was offered ``ids`` (each pending in the store first)."""
    store, q = FakeStore(), CreditQueue("ten_a", capacity)
    for i in ids:
        store.add(ref(i, ep))
        q.offer(ref(i, ep))
    return store, q


def test_admits_up_to_capacity_then_spills() -> None:
    q = CreditQueue("ten_a", 3)
    assert [q.offer(ref(i)) for i in range(3)] == [ADMITTED] * 3
    assert q.offer(ref(3)) == Spilled("no_credit")
    assert q.offer(ref(4)) == Spilled("backlog")
    s = q.stats()
    assert (s.credits_used, s.queued, s.spilled, s.spilling, s.peak_used) == (3, 3, 2, True, 3)


def test_credit_returns_only_when_the_delivery_leaves() -> None:
    q = CreditQueue("ten_a", 2)
    q.offer(ref(1))
    q.offer(ref(2))
    taken = q.take(5)
    assert taken == [ref(1), ref(2)]
    s = q.stats()
    assert (s.credits_used, s.queued, s.in_flight) == (2, 0, 2)  # in flight still holds credits
    assert isinstance(q.offer(ref(3)), Spilled)
    q.finish(ref(1))
    assert q.stats().credits_used == 1
    with pytest.raises(KeyError):
        q.finish(ref(1))


def test_spilled_work_is_paged_in_oldest_first_before_new_arrivals() -> None:
    store = FakeStore()
    q = CreditQueue("ten_a", 4)
    delivered: list[DeliveryRef] = []
    for i in range(20):
        store.add(ref(i))
        q.offer(ref(i))
    assert q.stats().spilled == 16
    while store.rows:
        for r in q.take(2):
            delivered.append(r)
            store.done(r)  # the outcome is durable before the page-in runs
            serve(q, store, q.finish(r))
        store.add(ref(100 + len(delivered)))  # new arrivals keep coming while spilled
        q.offer(ref(100 + len(delivered)))
        if len(delivered) > 200:
            break
    order = [r.event_id for r in delivered]
    assert order == sorted(order), "spilled work must be served in arrival order"
    assert len(delivered) >= 20


def test_page_in_waits_for_a_quarter_of_the_budget() -> None:
    q = CreditQueue("ten_a", 8)
    for i in range(10):
        q.offer(ref(i))
    taken = q.take(8)
    assert not q.finish(taken[0])  # 1 free < 8 // 4
    [req] = q.finish(taken[1])
    assert req.limit == 2 + 1  # +1: the inclusive cursor row
    assert req.after == ref(8) and req.endpoint_id == "ep_a"  # the first spilled ref
    assert not q.poll_page_in()  # one request outstanding at a time


def test_rows_already_held_are_skipped_and_cursor_advances() -> None:
    q = CreditQueue("ten_a", 4)
    q.offer(ref(1))
    [req] = q.mark_backlog("ep_a")
    assert req.limit == 3 + 1 and req.after is None
    assert not q.poll_page_in()  # one request outstanding at a time
    nxt = q.paged_in(req, [ref(1), ref(2)])
    assert q.stats().queued == 2
    assert not nxt  # short page, nothing spilled meanwhile: spill mode over
    assert not q.stats().spilling
    assert q.offer(ref(3)) is ADMITTED


def test_spill_during_a_page_read_keeps_spill_mode() -> None:
    store, q = queue_with(2, range(3))
    requests = []
    for r in q.take(2):
        store.done(r)
        requests.append(q.finish(r))
    [req] = requests[0]
    assert not requests[1]
    rows = store.page(req)  # the read happens ...
    store.add(ref(9))  # ... and a new event spills before its answer is applied
    assert isinstance(q.offer(ref(9)), Spilled)
    [follow] = q.paged_in(req, rows)
    assert q.stats().spilling
    assert follow.after == ref(2)
    q.paged_in(follow, store.page(follow))
    assert [r.event_id for r in q.queued_refs()] == ["evt_000002", "evt_000009"]


def test_spilled_ref_older_than_the_cursor_pulls_the_scan_back() -> None:
    """Event ids are not strictly commit-ordered (same-millisecond ids, due retries)."""
    store, q = queue_with(2, (10, 11, 12, 13))
    taken = q.take(2)
    for r in taken:
        store.done(r)
    [req] = q.finish(taken[0])
    q.paged_in(req, store.page(req))  # admits 12; cursor now at 12
    store.add(ref(5))  # committed later, but sorts before the cursor
    assert isinstance(q.offer(ref(5)), Spilled)
    [req] = q.finish(taken[1])
    assert req.after == ref(5)
    q.paged_in(req, store.page(req))
    assert set(q.queued_refs()) == {ref(12), ref(5)}


def test_delivery_finishing_during_a_page_read_is_not_paged_in_again() -> None:
    """The read ran while the delivery was in flight; its answer is stale for it."""
    store, q = queue_with(2, range(4))
    first, second = q.take(2)
    store.done(first)
    [req] = q.finish(first)
    rows = store.page(req)  # read while `second` is still in flight, hence pending
    store.done(second)
    q.finish(second)  # finishes before the answer is applied
    q.paged_in(req, [second, *rows])
    assert second not in set(q.queued_refs()), "a finished delivery came back"


def test_a_page_passes_over_events_whose_offer_is_due_and_the_offer_brings_them() -> None:
    """A page can list an event committed here before the commit's offer ran."""
    store, q = queue_with(2, range(3))  # 0 and 1 admitted, 2 spilled
    store.add(ref(5))  # committed; its offer is still to come
    for r in q.take(2):
        store.done(r)
        serve(q, store, q.finish(r), offers_due={ref(5).event_id})
    assert set(q.queued_refs()) == {ref(2)}  # 5 passed over, not admitted
    assert not q.stats().spilling  # the page came back short: the offer will bring 5
    assert q.offer(ref(5)) is ADMITTED
    assert set(q.queued_refs()) == {ref(2), ref(5)}


def test_an_event_passed_over_while_spilling_comes_once_after_its_offer() -> None:
    store, q = queue_with(1, range(4))  # 0 admitted; 1-3 spilled
    store.add(ref(5))  # committed here, offer due
    store.add(ref(6))
    due = {ref(5).event_id}
    delivered: list[DeliveryRef] = []

    def deliver_all() -> None:
        serve(q, store, q.poll_page_in(), due)
        while taken := q.take(1):
            delivered.extend(taken)
            store.done(taken[0])
            serve(q, store, q.finish(taken[0]), due)

    deliver_all()
    assert delivered == [ref(0), ref(1), ref(2), ref(3), ref(6)]  # 5 passed over
    due.clear()
    q.offer(ref(5))  # admitted, or spilled with the cursor pulled back to it
    deliver_all()
    assert delivered == [ref(0), ref(1), ref(2), ref(3), ref(6), ref(5)]


def test_abort_page_in_allows_a_new_request() -> None:
    q = CreditQueue("ten_a", 2)
    [req] = q.mark_backlog("ep_a", 5)
    q.abort_page_in(req)
    [again] = q.poll_page_in()
    assert again.token != req.token
    with pytest.raises(ValueError):
        q.paged_in(req, [])


def test_limits_per_tenant_and_endpoint_round_robin() -> None:
    q = CreditQueue("ten_a", 100, max_in_flight=5, endpoint_limits={"ep_slow": 1})
    for i in range(10):
        q.offer(ref(i, "ep_slow"))
        q.offer(ref(i, "ep_fast"))
    taken = q.take(100)
    assert len(taken) == 5
    assert sum(r.endpoint_id == "ep_slow" for r in taken) == 1
    assert q.take(1) == []
    q.finish(taken[-1])
    assert len(q.take(3)) == 1


def test_drain_endpoint_returns_queued_refs_and_their_credits() -> None:
    q = CreditQueue("ten_a", 10)
    for i in range(3):
        q.offer(ref(i, "ep_dead"))
        q.offer(ref(i, "ep_ok"))
    in_flight = q.take(1)
    drained = q.drain_endpoint("ep_dead")
    assert all(r.endpoint_id == "ep_dead" for r in drained)
    assert len(drained) + sum(r.endpoint_id == "ep_dead" for r in in_flight) == 3
    assert q.stats().credits_used == 6 - len(drained)
    assert all(r.endpoint_id == "ep_ok" for r in q.take(10))
    assert "ten_a" in repr(q)


def test_a_sibling_gets_credits_at_once_from_an_endpoint_that_filled_the_queue() -> None:
    """A hung endpoint's queued refs are evicted (they wait in the store), not the sibling's."""
    store = FakeStore()
    q = CreditQueue("ten_a", 10)
    for i in range(10):
        store.add(ref(i, "ep_hung"))
        assert q.offer(ref(i, "ep_hung")) is ADMITTED  # alone: the whole capacity
    hung_in_flight = q.take(2)
    for i in range(10, 15):
        store.add(ref(i, "ep_ok"))
        assert q.offer(ref(i, "ep_ok")) is ADMITTED, "the sibling never waits for the hung one"
    s = q.stats()
    assert (s.credits_used, s.evicted_total, s.lanes) == (10, 5, 2)
    # The newest queued refs of the endpoint above its share went back to the store.
    assert q.take_evicted() == [ref(i, "ep_hung") for i in (9, 8, 7, 6, 5)]
    assert s.spilling and s.spilled == 5
    assert not q.take_evicted(), "taken: the shell is told once"
    # Nothing is lost, and the hung endpoint keeps its own order when it recovers.
    served: list[DeliveryRef] = []
    in_flight = list(hung_in_flight)
    for _ in range(100):
        in_flight += q.take(10)
        if not in_flight:
            break
        r = in_flight.pop(0)
        served.append(r)
        store.done(r)
        serve(q, store, q.finish(r))
    assert sorted(served) == sorted(
        [ref(i, "ep_hung") for i in range(10)] + [ref(i, "ep_ok") for i in range(10, 15)]
    )
    hung_order = [r.event_id for r in served if r.endpoint_id == "ep_hung"]
    assert hung_order == sorted(hung_order)


def test_in_flight_refs_are_never_evicted() -> None:
    q = CreditQueue("ten_a", 4)
    for i in range(4):
        q.offer(ref(i, "ep_hung"))
    assert len(q.take(4)) == 4  # all in flight: nothing to evict
    assert q.offer(ref(9, "ep_ok")) == Spilled("no_credit")
    assert not q.take_evicted()
    [req] = q.finish(ref(0, "ep_hung"))  # a credit returns: the idle sibling pages in at once
    assert req.endpoint_id == "ep_ok" and req.after == ref(9, "ep_ok")


def test_slots_are_shared_between_a_tenants_endpoints() -> None:
    q = CreditQueue("ten_a", 100, max_in_flight=8, endpoint_count=2)
    for i in range(20):
        q.offer(ref(i, "ep_hung"))
    first = q.take(8)
    assert len(first) == 7, "alone, an endpoint leaves one slot for its siblings"
    for i in range(20, 30):
        q.offer(ref(i, "ep_ok"))
    assert [r.endpoint_id for r in q.take(8)] == ["ep_ok"]  # the kept slot
    for r in first[:4]:  # the hung endpoint's attempts time out one by one
        q.finish(r)
    again = q.take(8)
    # Both have work: each may hold ceil(8 / 2) = 4; ep_hung still holds 3.
    assert sorted(r.endpoint_id for r in again) == ["ep_hung"] + ["ep_ok"] * 3
    assert q.take(8) == []


def test_one_endpoint_tenant_uses_every_slot() -> None:
    q = CreditQueue("ten_a", 100, max_in_flight=8, endpoint_count=1)
    for i in range(20):
        q.offer(ref(i))
    assert len(q.take(20)) == 8


def test_a_paused_lane_pages_nothing_in_and_leaves_its_share_to_the_others() -> None:
    """Breaker open: queued refs go (to be parked), spilled ones wait, siblings get the room."""
    store, q = queue_with(4, range(6), "ep_down")  # 4 admitted, 2 spilled
    assert q.pause("ep_down") == [ref(i, "ep_down") for i in range(4)]
    for r in q.pause("ep_down"):  # idempotent
        raise AssertionError(r)
    assert not q.poll_page_in(), "no page-in for a paused lane"
    store.add(ref(9, "ep_down"))
    assert q.offer(ref(9, "ep_down")) == Spilled("backlog")
    for i in range(10, 14):  # alone among the active lanes: the whole capacity
        assert q.offer(ref(i, "ep_ok")) is ADMITTED
    assert q.stats().credits_used == 4
    for r in q.take(4):
        q.finish(r)
    [req] = q.unpause("ep_down")  # its spilled work comes back, oldest first
    assert req.endpoint_id == "ep_down" and req.after == ref(4, "ep_down")
    q.paged_in(req, store.page(req))
    assert list(q.queued_refs()) == [ref(4, "ep_down"), ref(5, "ep_down"), ref(9, "ep_down")]


def test_a_page_answer_arriving_after_pause_admits_nothing() -> None:
    store, q = queue_with(2, range(4))
    first, second = q.take(2)
    store.done(first)
    [req] = q.finish(first)
    rows = store.page(req)  # read before the breaker opened ...
    q.pause("ep_a")  # ... answered after
    assert not q.paged_in(req, rows)
    assert list(q.queued_refs()) == []
    store.done(second)
    assert not q.finish(second)
    [again] = q.unpause("ep_a")
    assert again.after == ref(2)  # the rows of the stale answer are read again
    q.paged_in(again, store.page(again))
    assert list(q.queued_refs()) == [ref(2), ref(3)]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("offer"), st.integers(0, 3)),
        st.tuples(st.just("take"), st.integers(1, 5)),
        st.tuples(st.just("finish"), st.integers(0, 50)),
        st.tuples(st.just("pause"), st.integers(0, 3)),
        st.tuples(st.just("unpause"), st.integers(0, 3)),
    ),
    max_size=200,
)


def resume(q: CreditQueue, store: FakeStore, endpoint: str, parked: list[DeliveryRef]) -> None:
    """The breaker let work through: unpause, then make the parked refs pending again."""
    serve(q, store, q.unpause(endpoint))
    if parked:
        for r in parked:
            store.add(r)
        serve(q, store, q.mark_backlog(endpoint, len(parked), min(parked)))
        parked.clear()


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.integers(1, 8),
    max_in_flight=st.one_of(st.none(), st.integers(1, 5)),
    endpoint_count=st.integers(1, 4),
    script=ops,
    ids=st.permutations(range(200)),
)
def test_never_exceeds_capacity_and_loses_nothing(
    capacity: int, max_in_flight: int | None, endpoint_count: int, script: list, ids: list[int]
) -> None:
    """Whatever the order of ids (not commit-ordered), every delivery is served once.

    Across up to four endpoint lanes (evictions, shares), with or without slot
    caps, with breakers opening (pause: queued refs parked) and closing.
    """
    store = FakeStore()
    q = CreditQueue("ten_a", capacity, max_in_flight=max_in_flight, endpoint_count=endpoint_count)
    in_flight: list[DeliveryRef] = []
    delivered: list[DeliveryRef] = []
    offered: list[DeliveryRef] = []
    parked: dict[str, list[DeliveryRef]] = {f"ep_{i}": [] for i in range(4)}
    n = 0
    for op, arg in script:
        if op == "offer":
            r = ref(ids[n], f"ep_{arg}")
            n += 1
            offered.append(r)
            store.add(r)
            q.offer(r)
        elif op == "take":
            in_flight += q.take(arg)
        elif op == "pause":
            for r in q.pause(f"ep_{arg}"):  # parked in the store: no longer pending
                store.done(r)
                parked[f"ep_{arg}"].append(r)
        elif op == "unpause":
            resume(q, store, f"ep_{arg}", parked[f"ep_{arg}"])
        elif in_flight:
            r = in_flight.pop(arg % len(in_flight))
            store.done(r)
            delivered.append(r)
            serve(q, store, q.finish(r))
        s = q.stats()
        assert s.credits_used <= capacity
        assert s.credits_used == s.queued + s.in_flight
        assert max_in_flight is None or s.in_flight <= max_in_flight
        q.take_evicted()  # the engine forgets their bodies; they are still in the store
    for endpoint, refs in parked.items():
        resume(q, store, endpoint, refs)
    # drain everything: every offered delivery is eventually delivered exactly once
    for _ in range(10 * n + 10):
        in_flight += q.take(capacity)
        if not in_flight:
            requests = q.poll_page_in()
            if not requests:
                break
            serve(q, store, requests)
            continue
        r = in_flight.pop(0)
        store.done(r)
        delivered.append(r)
        serve(q, store, q.finish(r))
    assert sorted(delivered) == sorted(offered)  # each exactly once
    assert not store.rows
