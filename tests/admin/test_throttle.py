"""The admin login throttle's bookkeeping: windows, and memory bounded by its cap."""

from __future__ import annotations

import pytest

from hookrouter.admin.throttle import AuthThrottle, TooManyFailures
from hookrouter.clock import ManualClock


def test_blocks_after_the_budget_until_the_window_ends() -> None:
    clock = ManualClock()
    throttle = AuthThrottle(clock, max_failures=3, window_seconds=60)
    for _ in range(3):
        throttle.check("10.0.0.1")
        throttle.failed("10.0.0.1")
    with pytest.raises(TooManyFailures) as refused:
        throttle.check("10.0.0.1")
    assert refused.value.retry_after == 60
    throttle.check("10.0.0.2")
    clock.advance(59.5)
    with pytest.raises(TooManyFailures):
        throttle.check("10.0.0.1")
    clock.advance(0.5)
    throttle.check("10.0.0.1")  # a new window
    throttle.failed("10.0.0.1")
    throttle.check("10.0.0.1")


def test_unknown_peers_share_one_entry() -> None:
    throttle = AuthThrottle(ManualClock(), max_failures=2)
    throttle.failed(None)
    throttle.failed(None)
    with pytest.raises(TooManyFailures):
        throttle.check(None)


def test_memory_is_bounded_by_the_cap() -> None:
    clock = ManualClock()
    throttle = AuthThrottle(clock, max_failures=2, max_clients=100)
    for i in range(10_000):
        clock.advance(0.001)
        throttle.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(throttle) == 100
