"""Circuit breaker transitions, driven by a ManualClock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookrouter.clock import ManualClock
from hookrouter.config.delivery import BreakerSettings
from hookrouter.delivery.breaker import (
    TRANSITIONS,
    BreakerSignal,
    BreakerState,
    CircuitBreaker,
)

CFG = BreakerSettings(
    failure_ratio=0.5, window_seconds=30, min_requests=10, cooldown_seconds=30, half_open_probes=2
)


def feed(b: CircuitBreaker, clock: ManualClock, results: str) -> list[object]:
    """'s' = success, 'f' = failure, one per 0.1 s."""
    out = []
    for ch in results:
        out.append(b.record(ch == "s", clock.monotonic()))
        clock.advance(0.1)
    return [t for t in out if t is not None]


def trip(b: CircuitBreaker, clock: ManualClock) -> None:
    feed(b, clock, "f" * 10)
    assert b.state is BreakerState.OPEN


def test_stays_closed_below_min_requests() -> None:
    clock = ManualClock()
    b = CircuitBreaker("ep_a", CFG)
    assert feed(b, clock, "f" * 9) == []
    assert b.state is BreakerState.CLOSED
    assert b.allow(clock.monotonic())[0]


def test_opens_at_failure_ratio_with_min_requests() -> None:
    clock = ManualClock()
    b = CircuitBreaker("ep_a", CFG)
    assert feed(b, clock, "sfsfsfsfs") == []
    [t] = feed(b, clock, "f")  # 10 requests, 5 failures: ratio 0.5 >= 0.5
    assert (t.before, t.after, t.signal) == (
        BreakerState.CLOSED,
        BreakerState.OPEN,
        BreakerSignal.TRIP,
    )  # type: ignore[attr-defined]
    assert b.allow(clock.monotonic()) == (False, None)


def test_ratio_below_threshold_stays_closed() -> None:
    clock = ManualClock()
    b = CircuitBreaker("ep_a", CFG)
    assert feed(b, clock, "ssfssfssfssfssf") == []
    assert b.state is BreakerState.CLOSED


def test_old_failures_slide_out_of_the_window() -> None:
    clock = ManualClock()
    b = CircuitBreaker("ep_a", CFG)
    feed(b, clock, "f" * 9)
    clock.advance(31)
    assert feed(b, clock, "f") == []  # the 9 old failures no longer count
    assert b.stats(clock.monotonic()).window_requests == 1


def test_half_open_after_cooldown_allows_n_probes_then_closes_on_success() -> None:
    clock = ManualClock()
    b = CircuitBreaker("ep_a", CFG)
    trip(b, clock)  # opened 0.1 s ago
    clock.advance(29.8)
    assert b.allow(clock.monotonic()) == (False, None)
    clock.advance(0.1)
    ok, t = b.allow(clock.monotonic())
    assert ok and t is not None and t.after is BreakerState.HALF_OPEN
    assert b.allow(clock.monotonic()) == (True, None)  # second probe
    assert b.allow(clock.monotonic()) == (False, None)  # only 2 probes
    t2 = b.record(True, clock.monotonic())
    assert t2 is not None and t2.after is BreakerState.CLOSED
    assert b.stats(clock.monotonic()).window_requests == 0  # fresh window after closing
    assert b.allow(clock.monotonic()) == (True, None)


def test_failed_probe_reopens_and_restarts_cooldown() -> None:
    clock = ManualClock()
    b = CircuitBreaker("ep_a", CFG)
    trip(b, clock)
    clock.advance(29.9)
    assert b.poll(clock.monotonic()) is not None
    assert b.allow(clock.monotonic())[0]
    t = b.record(False, clock.monotonic())
    assert t is not None and t.signal is BreakerSignal.PROBE_FAILED and t.after is BreakerState.OPEN
    clock.advance(29.9)
    assert not b.allow(clock.monotonic())[0]
    clock.advance(0.1)
    assert b.allow(clock.monotonic())[0]
    assert b.stats(clock.monotonic()).times_opened == 2


def test_late_results_while_open_are_ignored() -> None:
    clock = ManualClock()
    b = CircuitBreaker("ep_a", CFG)
    trip(b, clock)
    assert b.record(True, clock.monotonic()) is None
    assert b.state is BreakerState.OPEN


def test_cancelled_probe_frees_its_slot() -> None:
    clock = ManualClock()
    b = CircuitBreaker("ep_a", BreakerSettings(min_requests=1, cooldown_seconds=1))
    b.record(False, clock.monotonic())
    clock.advance(1)
    assert b.allow(clock.monotonic())[0]
    assert not b.allow(clock.monotonic())[0]
    b.cancel_probe()
    assert b.allow(clock.monotonic())[0]


def test_reset_closes_from_any_state_and_table_is_complete() -> None:
    clock = ManualClock()
    b = CircuitBreaker("ep_a", CFG)
    trip(b, clock)
    assert b.reset(clock.monotonic()).after is BreakerState.CLOSED
    for state in BreakerState:
        assert TRANSITIONS[(state, BreakerSignal.RESET)] is BreakerState.CLOSED
    assert "ep_a" in repr(b) and "closed" in repr(b)


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        BreakerSettings(failure_ratio=0)
    with pytest.raises(ValueError):
        BreakerSettings(min_requests=0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.floats(0.0, 4.0)), max_size=200))
def test_window_counts_match_the_results_of_the_last_window_seconds(
    steps: list[tuple[bool, float]],
) -> None:
    """The running totals equal a recount of the results still inside the window."""
    config = BreakerSettings(min_requests=10**9, window_seconds=5)  # never trips
    b = CircuitBreaker("ep", config)
    now, seen = 1000.0, []
    for success, gap in steps:
        now += gap
        b.record(success, now)
        seen.append((int(now), success))
        kept = [ok for second, ok in seen if second + 1 > now - config.window_seconds]
        stats = b.stats(now)
        assert (stats.window_requests, stats.window_failures) == (
            len(kept),
            kept.count(False),
        )
