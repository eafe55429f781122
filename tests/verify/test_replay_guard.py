"""The body replay guard (verify/replay.py): windows, pending copies, bounded memory."""

from __future__ import annotations

from hookrouter.verify.replay import (
    ReplayGuard,
    body_key,
    default_window,
    signs_only_the_body,
)


def test_body_only_schemes_get_the_guard_by_default() -> None:
    assert signs_only_the_body("github", {}) and signs_only_the_body("shopify", {})
    assert signs_only_the_body("hmac", {"header": "x-sig"})
    assert not signs_only_the_body("hmac", {"header": "x-sig", "timestamp_header": "x-ts"})
    for signed_timestamp in ("stripe", "slack", "standard"):
        assert default_window(signed_timestamp, {}) == 0.0
    assert default_window("github", {}) > 0


def test_keys_differ_by_source_and_body() -> None:
    assert body_key("a", b"x") == body_key("a", b"x")
    assert body_key("a", b"x") != body_key("b", b"x")
    assert body_key("a", b"x") != body_key("a", b"y")
    assert body_key("ab", b"c") != body_key("a", b"bc")


def test_a_body_seen_within_the_window_is_a_replay_of_the_first_id() -> None:
    guard = ReplayGuard()
    key = body_key("src", b"{}")
    assert guard.claim(key, 100.0, 60.0) is None
    guard.settle(key, "evt_1")
    first = guard.claim(key, 159.0, 60.0)
    assert first is not None and first.event_id == "evt_1"
    assert guard.claim(key, 161.0, 60.0) is None  # past the window: new again
    guard.settle(key, "evt_2")
    again = guard.claim(key, 162.0, 60.0)
    assert again is not None and again.event_id == "evt_2"


def test_copies_of_a_pending_body_wait_for_its_commit() -> None:
    guard = ReplayGuard()
    key = body_key("src", b"{}")
    assert guard.claim(key, 1.0, 60.0) is None
    answers: list[str | None] = []
    for _ in range(3):
        pending = guard.claim(key, 1.0, 60.0)
        assert pending is not None and pending.event_id is None
        pending.waiters.append(answers.append)
    guard.settle(key, "evt_1")
    assert answers == ["evt_1"] * 3
    # A failed first copy: the waiting ones go on as new events, the key is free.
    other = body_key("src", b"[]")
    assert guard.claim(other, 2.0, 60.0) is None
    pending = guard.claim(other, 2.0, 60.0)
    assert pending is not None
    pending.waiters.append(answers.append)
    guard.forget(other)
    assert answers[-1] is None
    assert guard.claim(other, 3.0, 60.0) is None


def test_memory_is_bounded_by_entries_and_by_the_window() -> None:
    guard = ReplayGuard(max_entries=100)
    for n in range(1000):
        key = body_key("src", str(n).encode())
        assert guard.claim(key, float(n), 10_000.0) is None
        guard.settle(key, f"evt_{n}")
    assert len(guard) == 100 and guard.dropped == 900
    small = ReplayGuard()
    for n in range(1000):
        key = body_key("src", str(n).encode())
        small.claim(key, float(n), 5.0)
        small.settle(key, f"evt_{n}")
    assert len(small) <= 7  # older than the longest window: expired as time goes on
