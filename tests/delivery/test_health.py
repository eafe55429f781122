"""An endpoint's recent health: two slots of attempts, percentiles as bucket bounds."""

from __future__ import annotations

from hookrouter.delivery.health import BOUNDS_MS, SLOT_SECONDS, EndpointHealth

T0 = 1_800_000_000.0  # a slot boundary (a multiple of SLOT_SECONDS)


def test_ratio_and_percentiles_come_from_the_recent_attempts() -> None:
    health = EndpointHealth()
    assert health.stats(T0).attempts == 0 and health.stats(T0).p50_ms is None
    for i in range(100):
        health.observe(i % 4 != 0, 3.0 if i < 98 else 900.0, T0 + i)
    stats = health.stats(T0 + 100)
    assert (stats.attempts, stats.successes, stats.success_ratio) == (100, 75, 0.75)
    assert stats.p50_ms == 5.0  # the bucket "≤ 5 ms"
    assert stats.p99_ms == 1000.0  # the two slow ones are the top 2 %
    assert stats.window_seconds == 100


def test_the_window_keeps_the_previous_slot_and_forgets_older_ones() -> None:
    health = EndpointHealth()
    health.observe(False, 40.0, T0 + 10)  # slot 0
    health.observe(True, 40.0, T0 + SLOT_SECONDS + 10)  # slot 1
    both = health.stats(T0 + SLOT_SECONDS + 20)
    assert (both.attempts, both.successes) == (2, 1)
    later = health.stats(T0 + 2 * SLOT_SECONDS + 1)  # slot 2: only slot 1 is recent
    assert (later.attempts, later.successes) == (1, 1)
    assert health.stats(T0 + 3 * SLOT_SECONDS + 1).attempts == 0  # nothing recent
    # A pause longer than a slot: the next attempt starts a fresh window.
    health.observe(True, 40.0, T0 + 5 * SLOT_SECONDS)
    assert health.stats(T0 + 5 * SLOT_SECONDS).attempts == 1


def test_anything_slower_than_the_last_bound_lands_in_the_last_bucket() -> None:
    health = EndpointHealth()
    health.observe(False, 10 * BOUNDS_MS[-1], T0)
    assert health.stats(T0).p50_ms == BOUNDS_MS[-1]
