"""bench.machine's host facts that the scenarios quote."""

from __future__ import annotations

import pytest
from bench.machine import read_latency_ns


def test_read_latency_is_a_positive_time_per_step() -> None:
    assert read_latency_ns(1, steps=1000, rounds=1) > 0


def test_read_latency_wants_a_power_of_two_table() -> None:
    # The address sequence covers the whole table only when its size is one.
    with pytest.raises(ValueError, match="power of two"):
        read_latency_ns(3, steps=10, rounds=1)
