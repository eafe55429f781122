"""The sans-IO parts: bucket maths, keys, Functions library, slots (leases, denials), health."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from hookrouter.log_throttle import LogThrottle
from hookrouter.ratelimit.bucket import (
    BucketState,
    Decision,
    Limit,
    idle_ttl_ms,
    refill,
    retry_after_header,
    take,
    validate_cost,
)
from hookrouter.ratelimit.health import (
    TRANSITIONS,
    Health,
    HealthEvent,
    HealthMachine,
    backoff,
)
from hookrouter.ratelimit.keys import bucket_keys, check_prefix
from hookrouter.ratelimit.scripts import PROGRAM
from hookrouter.ratelimit.slots import (
    LeaseBook,
    LeasePlan,
    Slot,
    apply_reply,
    decide_locally,
    policy_decision,
    refill_request,
    take_from_lease,
)

LIMIT = Limit(10, 5)
PKG = Path(__file__).resolve().parents[2] / "src" / "hookrouter" / "ratelimit"


def test_burst_of_capacity_then_the_refill_rate() -> None:
    state, now, grants = None, 100.0, 0
    for _ in range(15):
        result = take(state, LIMIT, now, 1, 1)
        if result.granted:
            grants += 1
            state = result.state
    assert grants == 10
    assert result.retry_after == pytest.approx(0.2)
    assert take(state, LIMIT, now + 0.19, 1, 1).granted == 0
    assert take(state, LIMIT, now + 0.2, 1, 1).granted == 1
    assert refill(state, LIMIT, now + 60) == 10  # never above capacity


def test_fractions_and_partial_lease_grants() -> None:
    first = take(None, LIMIT, 0.0, 9.75, 9.75)
    assert (first.granted, first.tokens) == (9.75, 0.25)
    assert first.retry_after == pytest.approx((9.75 - 0.25) / 5)  # until 9.75 again
    lease = take(first.state, LIMIT, 0.1, want=8, need=0.5)
    assert lease.granted == pytest.approx(0.75) and lease.tokens == 0
    denied = take(lease.state, LIMIT, 0.1, want=8, need=1)
    assert denied.granted == 0 and denied.state is None  # a denial writes nothing
    assert denied.retry_after == pytest.approx(0.2)


def test_clock_going_backwards_counts_as_no_time() -> None:
    state = BucketState(3.0, 100.0)
    assert refill(state, LIMIT, 99.0) == 3.0


def test_idle_ttl_is_time_to_full() -> None:
    assert idle_ttl_ms(LIMIT, 9.0) == 200
    assert idle_ttl_ms(LIMIT, 10.0) == 1  # PEXPIRE needs >= 1
    assert idle_ttl_ms(Limit(2, 3), 0.0) == 667  # rounded up


def test_limits_and_costs_are_validated() -> None:
    for bad in [(0, 1), (1, 0), (-1, 1), (math.inf, 1), (1, math.nan)]:
        with pytest.raises(ValueError):
            Limit(*bad)
    with pytest.raises(ValueError):
        validate_cost(LIMIT, 11)
    with pytest.raises(ValueError):
        validate_cost(LIMIT, 0)


def test_retry_after_header_rounds_up_to_whole_seconds() -> None:
    assert retry_after_header(Decision(False, 0, 0.2)) == "1"
    assert retry_after_header(Decision(False, 0, 1.01)) == "2"
    assert retry_after_header(Decision(False, 0, 2.0000000000000004)) == "2"


def test_keys_share_the_tenant_hash_tag() -> None:
    keys = bucket_keys("acme", "src:stripe", prefix="prod:")
    assert keys.bucket == "prod:{acme}:rl:b:src:stripe"
    assert keys.limits == "prod:{acme}:rl:limits"
    for bad in ["", "a{b", "a}b"]:
        with pytest.raises(ValueError):
            bucket_keys(bad, "ingest")
    with pytest.raises(ValueError):
        check_prefix("x{y}")


def test_function_library_is_generated_from_the_script_body() -> None:
    assert PROGRAM.library.startswith("#!lua name=hookrouter\n")
    assert PROGRAM.script in PROGRAM.library  # one algorithm, spliced in
    assert f"redis.register_function('{PROGRAM.function_name}'" in PROGRAM.library
    assert PROGRAM.function_name.endswith(PROGRAM.script_sha[:12])
    template = (PKG / "token_bucket_function.lua").read_text()
    assert "HMGET" not in template  # the wrapper holds no copy of the algorithm
    assert "HMSET" not in PROGRAM.script  # deprecated since Redis 4


def _slot() -> Slot:
    return Slot("acme", "ingest", bucket_keys("acme", "ingest"))


def test_denial_cache_denies_until_retry_after_then_asks_again() -> None:
    slot = _slot()
    apply_reply(slot, 0, 0.2, need=1, sent_at=10.0, lease=False)
    decision = decide_locally(slot, LIMIT, 1, 10.05)
    assert decision is not None and not decision.allowed
    assert decision.retry_after == pytest.approx(0.15)
    assert decision.remaining == pytest.approx(0.25)  # 1 - 0.15 s x 5/s
    assert decide_locally(slot, LIMIT, 0.5, 10.05) is None  # a smaller request may fit
    assert decide_locally(slot, LIMIT, 1, 10.2) is None  # expired: ask Redis
    apply_reply(slot, 1, 0.0, need=1, sent_at=10.2, lease=False)
    assert decide_locally(slot, LIMIT, 1, 10.2) is None  # cleared by a full bucket


def test_the_clockless_grant_leaves_everything_else_to_the_full_path() -> None:
    slot = _slot()
    slot.supply = 5.0
    granted = take_from_lease(slot, LIMIT, 1, low_water=3)
    assert granted is not None and granted.allowed and granted.remaining == 4.0
    assert slot.supply == 4.0 and slot.allowed == 1
    # Down to the low-water mark a prefetch is due: not this path's decision.
    assert take_from_lease(slot, LIMIT, 1, low_water=3) is None and slot.supply == 4.0
    assert take_from_lease(slot, LIMIT, 1, low_water=0) is not None
    slot.waiters = 1  # someone waits for a lease: newcomers queue behind them
    assert take_from_lease(slot, LIMIT, 1, low_water=0) is None
    slot.waiters = 0
    for cost in (0, -1, LIMIT.capacity + 1):  # never grantable: the full path refuses them
        assert take_from_lease(slot, LIMIT, cost, low_water=0) is None
    assert slot.supply == 3.0 and slot.allowed == 2


def test_the_lease_book_grants_from_the_slot_it_holds_only() -> None:
    book = LeaseBook(low_water=3)
    assert book.take("t", "ingest", LIMIT) is None  # no slot yet: the limiter decides
    slot = book.slots[("t", "ingest")] = _slot()
    slot.supply = 5.0
    granted = book.take("t", "ingest", LIMIT)
    assert granted is not None and granted.allowed and granted.remaining == 4.0
    assert slot.supply == 4.0 and slot.allowed == 1
    assert book.take("t", "ingest", LIMIT) is None  # low water: a prefetch is due
    assert book.take("t", "src:other", LIMIT) is None and slot.supply == 4.0


def test_lease_supply_low_water_and_single_refill() -> None:
    plan = LeasePlan(size=10, low_water=3)
    slot = _slot()
    assert refill_request(slot, plan, LIMIT, 1, now=0.0, demand=True) == (10, 1)
    slot.refilling = True
    assert refill_request(slot, plan, LIMIT, 1, now=0.0, demand=True) is None  # one at a time
    apply_reply(slot, 10, 0.0, need=1, sent_at=0.0, lease=True)
    assert not slot.refilling and slot.supply == 10
    for _ in range(6):
        assert decide_locally(slot, LIMIT, 1, 0.0) is not None
    assert refill_request(slot, plan, LIMIT, 1, now=0.0, demand=False) is None  # 4 > low water
    assert decide_locally(slot, LIMIT, 1, 0.0) is not None
    assert refill_request(slot, plan, LIMIT, 1, now=0.0, demand=False) == (7, 1)  # top up to 10
    # A lease never exceeds the capacity, and covers a large cost.
    assert refill_request(_slot(), LeasePlan(100, 0), LIMIT, 1, now=0.0, demand=True) == (10, 1)
    assert refill_request(_slot(), LeasePlan(2, 0), LIMIT, 5, now=0.0, demand=True) == (5, 5)


def test_lease_plan_and_policy_decisions() -> None:
    with pytest.raises(ValueError):
        LeasePlan(10, 10)
    with pytest.raises(ValueError):
        LeasePlan(-1, 0)
    slot = _slot()
    assert policy_decision(slot, allow=True) == Decision(True, 0.0, 0.0, degraded=True)
    assert policy_decision(slot, allow=False) == Decision(False, 0.0, 1.0, degraded=True)
    assert (slot.policy_allowed, slot.policy_denied) == (1, 1)


def test_health_goes_down_backs_off_and_recovers() -> None:
    h = HealthMachine()
    assert h.on(HealthEvent.CALL_FAILED, 0.0, jitter=0.5) is Health.DOWN
    assert h.next_probe_at == pytest.approx(0.05)
    assert not h.probe_due(0.04) and h.probe_due(0.05)
    h.on(HealthEvent.PROBE_START, 0.05)
    assert h.on(HealthEvent.PROBE_FAILED, 0.06, jitter=0.5) is Health.DOWN
    assert h.next_probe_at == pytest.approx(0.16)  # doubled
    h.on(HealthEvent.CALL_FAILED, 0.07)  # a late failure does not push the probe out
    assert h.next_probe_at == pytest.approx(0.16)
    h.on(HealthEvent.PROBE_START, 0.2)
    assert h.on(HealthEvent.PROBE_OK, 0.21) is Health.UP and h.failures == 0
    with pytest.raises(ValueError):  # a probe result without a probe
        HealthMachine(Health.DOWN).on(HealthEvent.PROBE_OK, 0.0)
    assert backoff(30, 0.0) == pytest.approx(1.0)  # capped at 2 s, jitter x0.5
    assert all((s, e) in TRANSITIONS for s in (Health.UP,) for e in HealthEvent)


def test_log_throttle_allows_one_line_per_interval() -> None:
    throttle = LogThrottle(interval=10.0)
    assert throttle.should_log(0.0) == 0
    assert throttle.should_log(1.0) is None
    assert throttle.should_log(9.9) is None
    assert throttle.should_log(10.0) == 2  # mentions the two it held back
