"""What a tenant's first delivery leaves for the cyclic collector (issue 38).

Every object the collector tracks that a first event leaves behind is
traversed by a young and a middle collection before it reaches the old
generation; at 100,000 tenants those collections were a good part of a
first event's cost (docs/performance.md). These tests hold the count down:
the state is built with the engine's own classes (``bench_tenant_state``),
and the heap is frozen first, so ``gc.get_objects`` lists only what it left.
"""

from __future__ import annotations

import gc
from array import array
from collections.abc import Iterator

import pytest

from hookrouter.clock import ManualClock
from hookrouter.delivery.breaker import CircuitBreaker
from hookrouter.delivery.health import EndpointHealth
from hookrouter.flow.credits import CreditQueue, DeliveryRef
from hookrouter.flow.scheduler import FairScheduler
from hookrouter.verify.standard import StandardSigner, StandardVerifier

from .bench_tenant_state import SECRET, catalog_of, first_deliveries

TENANTS = 200


@pytest.fixture
def frozen() -> Iterator[None]:
    """Everything made before the test is out of ``gc.get_objects``'s view."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def owned(obj: object, *shared: object) -> list[object]:
    """The objects ``obj`` refers to that the collector tracks, but its class and ``shared``."""
    shared = (*shared, type(obj))
    return [
        o for o in gc.get_referents(obj) if gc.is_tracked(o) and all(o is not s for s in shared)
    ]


def test_a_first_delivery_leaves_few_tracked_objects(frozen: None) -> None:
    catalog = catalog_of(TENANTS)
    before = len(gc.get_objects())
    kept = first_deliveries(catalog, TENANTS)
    gc.collect()
    per_tenant = (len(gc.get_objects()) - before) / TENANTS
    # Queue (with its lanes' dict and one lane), endpoint runtime, its config's
    # prepared parts (kept through an idle release), signer, breaker, health:
    # 20 before the containers went (lazy or arrays).
    assert per_tenant <= 9.1, per_tenant
    del kept


def test_an_idle_queue_keeps_no_container(frozen: None) -> None:
    scheduler = FairScheduler()
    before = len(gc.get_objects())
    queues = []
    for i in range(TENANTS):
        queue = CreditQueue(f"t{i}", 1000)
        scheduler.add(queue)
        queue.offer(DeliveryRef(f"evt_{i}", f"ep_{i}"))
        (taken,) = scheduler.next_batch(1)
        queue.finish(taken.ref)
        assert queue.is_idle()
        queues.append(queue)
    gc.collect()
    per_queue = (len(gc.get_objects()) - before - 1) / TENANTS  # - 1: the list
    # The queue, its lanes' dict and the lane: no FIFO, ready ring, held set or
    # scheduler record of their own (7 before).
    assert per_queue <= 3.05, per_queue


def test_breaker_and_health_windows_are_one_array_each() -> None:
    clock = ManualClock()
    breaker, health = CircuitBreaker("ep"), EndpointHealth()
    for i in range(50):
        breaker.record(i % 5 != 0, clock.monotonic())
        health.observe(i % 5 != 0, 3.0, clock.time())
        clock.advance(0.5)
    assert breaker.stats(clock.monotonic()).window_requests > 0
    # One array each (the window's buckets; the current slot): no object per
    # bucket or slot. Compiled, the breaker is not tracked at all (heap.py).
    if gc.is_tracked(breaker):
        assert [type(o) for o in owned(breaker, breaker.config, breaker.state)] == [array]
    else:
        assert type(breaker._buckets) is array
    assert [type(o) for o in owned(health)] == [array]


def test_signing_and_verifying_keys_leave_the_collectors_view() -> None:
    from hookrouter._native.accel import hmac as native_hmac

    if native_hmac is None:
        pytest.skip("native HMAC not built: keys are HmacKey objects")
    signer, verifier = StandardSigner(SECRET), StandardVerifier([SECRET], 300)
    gc.collect()  # a tuple of atomic objects is untracked by the first pass that sees it
    assert owned(signer) == [] and owned(verifier) == []
