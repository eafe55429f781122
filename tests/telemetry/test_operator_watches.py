"""The operator-event watches on their own: what they emit for a sequence of samples."""

from __future__ import annotations

from hookrouter.operator_events.latch import Change, Latch
from hookrouter.operator_events.watches import (
    MAX_DEAD_SUMMARIES,
    DeadLetterSummary,
    QuietSources,
    SaturationWatch,
)


def test_a_flapping_condition_is_raised_once_and_cleared_after_a_calm_period() -> None:
    latch = Latch(clear_after=10)
    samples = [(0, True), (1, False), (2, True), (3, False), (4, True), (5, False)]
    changes = [latch.observe(bad, now) for now, bad in samples]
    assert changes == [Change.RAISED, None, None, None, None, None]
    assert latch.observe(False, 14) is None  # 9 s calm
    assert latch.observe(False, 15) is Change.CLEARED
    assert latch.observe(False, 16) is None


def test_saturation_reports_the_refusals_seen_and_the_episode_total() -> None:
    refusals: dict[str, int] = {"store_slow": 5}  # before the watch started: not counted
    watch = SaturationWatch(refusals, recovery=2)
    assert watch.poll(0) == []
    refusals["store_slow"] = 7
    assert watch.poll(1) == [("store.saturated", {"refused": {"store_slow": 2}})]
    refusals["backlog_full"] = 3
    assert watch.poll(2) == []  # more refusals: still the same episode
    assert watch.poll(3) == []  # calm from here
    assert watch.poll(4) == []
    assert watch.poll(5) == [
        ("store.recovered", {"refused": {"store_slow": 2, "backlog_full": 3}, "seconds": 4.0})
    ]


def test_dead_letters_are_one_event_per_endpoint_and_a_mass_failure_is_capped() -> None:
    summary = DeadLetterSummary(period=60)
    for n in range(MAX_DEAD_SUMMARIES + 5):
        summary.dead("acme", f"ep-{n}")
        summary.dead("acme", f"ep-{n}")
    first = summary.poll(60)
    assert len(first) == MAX_DEAD_SUMMARIES
    assert first[0] == (
        "delivery.dead_lettered",
        {"tenant": "acme", "endpoint": "ep-0", "count": 2, "period_seconds": 60},
    )
    assert summary.poll(61) == []  # at most one summary per period
    rest = summary.poll(120)  # the endpoints left over come next period
    assert [data["endpoint"] for _, data in rest] == [f"ep-{n}" for n in range(100, 105)]


def test_quiet_sources_are_swept_a_slice_per_poll() -> None:
    sources = {f"src-{n}": "acme" for n in range(40)}
    counts = dict.fromkeys(sources, 0.0)
    visited: list[str] = []

    def accepted(source: str) -> float:
        visited.append(source)
        return counts[source]

    # quiet after 40 s: a sweep of 10 polls, 4 sources a poll.
    quiet = QuietSources(40, 3, lambda: sources, accepted, poll_seconds=1)
    for now in range(10):
        quiet.poll(now)
        assert len(visited) == 4 * (now + 1)
    assert sorted(visited) == sorted(sources)
    for source in sources:
        counts[source] = 5  # every source gets its usual events
    events = [e for now in range(10, 50) for e in quiet.poll(now)]
    assert events == []  # seen busy at 10..19: not quiet for 40 s yet
    events = [e for now in range(50, 60) for e in quiet.poll(now)]
    assert {data["source"] for _, data in events} == set(sources)
    assert {kind for kind, _ in events} == {"source.quiet"}
    assert [e for now in range(70, 200) for e in quiet.poll(now)] == []  # told once


def test_a_removed_source_is_forgotten() -> None:
    sources = {"a": "acme", "b": "acme"}
    quiet = QuietSources(4, 1, lambda: dict(sources), lambda _s: 1.0, poll_seconds=1)
    quiet.poll(0)
    del sources["b"]
    for now in range(1, 20):
        for _, data in quiet.poll(now):
            assert data["source"] == "a"
