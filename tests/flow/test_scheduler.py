"""Deficit round robin: a tenant with a huge backlog cannot starve a small one."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from hookrouter.flow.credits import CreditQueue, DeliveryRef
from hookrouter.flow.scheduler import FairScheduler, Work


def filled(tenant: str, n: int, capacity: int | None = None, **kw: object) -> CreditQueue:
    q = CreditQueue(tenant, capacity or max(n, 1), **kw)  # type: ignore[arg-type]
    for i in range(n):
        q.offer(DeliveryRef(f"evt_{i:07d}", f"ep_{tenant}"))
    return q


def run(s: FairScheduler, slots: list[int], finish: bool = True) -> list[Work]:
    started: list[Work] = []
    for free in slots:
        batch = s.next_batch(free)
        assert len(batch) <= free
        started += batch
        if finish:
            for w in batch:
                s.queue(w.tenant_id).finish(w.ref)
    return started


def test_small_tenant_is_served_within_one_round_of_a_huge_one() -> None:
    s = FairScheduler()
    s.add(filled("big", 100_000))
    s.add(filled("small", 10))
    started = run(s, [1] * 20)
    assert Counter(w.tenant_id for w in started) == {"big": 10, "small": 10}
    # order alternates: the small tenant never waits behind the big backlog
    assert [w.tenant_id for w in started[:4]] in (["big", "small"] * 2, ["small", "big"] * 2)


def test_idle_tenant_cannot_bank_deficit() -> None:
    s = FairScheduler(quantum=4)
    s.add(filled("a", 100))
    idle = filled("b", 0, capacity=100)
    s.add(idle)
    run(s, [8] * 5)
    for i in range(100):
        idle.offer(DeliveryRef(f"evt_b{i}", "ep_b"))
    batch = s.next_batch(8)
    counts = Counter(w.tenant_id for w in batch)
    assert counts["b"] <= 4, "an idle tenant must not burst with banked credit"


def test_weights_share_proportionally() -> None:
    s = FairScheduler(quantum=1)
    s.add(filled("heavy", 1000), weight=3)
    s.add(filled("light", 1000), weight=1)
    c = Counter(w.tenant_id for w in run(s, [10] * 40))
    assert c["heavy"] == 3 * c["light"]


def test_capped_tenant_leaves_slots_to_others() -> None:
    s = FairScheduler()
    s.add(filled("capped", 1000, max_in_flight=2))
    s.add(filled("free", 1000))
    batch = s.next_batch(10)
    c = Counter(w.tenant_id for w in batch)
    assert c == {"capped": 2, "free": 8}


def test_remove_tenant_keeps_rotation_valid() -> None:
    s = FairScheduler()
    for t in "abc":
        s.add(filled(t, 10))
    s.next_batch(2)
    s.remove("a")
    s.remove("zzz")
    assert {w.tenant_id for w in s.next_batch(4)} == {"b", "c"}
    assert s.stats().tenants == 2 and "tenants=2" in repr(s)


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=2, max_size=6),
    quantum=st.integers(1, 4),
    slots=st.lists(st.integers(1, 12), min_size=1, max_size=60),
)
def test_backlogged_tenants_get_equal_service(
    sizes: list[int], quantum: int, slots: list[int]
) -> None:
    s = FairScheduler(quantum=quantum)
    for i, n in enumerate(sizes):
        s.add(filled(f"t{i}", n))
    served: Counter[str] = Counter()
    for free in slots:
        batch = s.next_batch(free)
        # work conserving: a slot stays free only when nobody has work left
        remaining = sum(s.queue(f"t{i}").stats().queued for i in range(len(sizes)))
        assert len(batch) == free or remaining == 0
        for w in batch:
            served[w.tenant_id] += 1
            s.queue(w.tenant_id).finish(w.ref)
        backlogged = [f"t{i}" for i, n in enumerate(sizes) if served[f"t{i}"] < n]
        # any two tenants that still have work differ by at most one quantum
        if backlogged:
            low = min(served[t] for t in backlogged)
            assert all(served[t] - low <= quantum for t in served if t in backlogged)
