"""Retry policy: schedule parsing, jitter bounds, Retry-After, outcome classification."""

from __future__ import annotations

import random
from email.utils import formatdate

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookrouter.config.durations import parse_duration, parse_retry_schedule
from hookrouter.delivery.outcomes import attempt_record
from hookrouter.delivery.policy import (
    DEFAULT_POLICY,
    AttemptResult,
    DeadLetter,
    Delivered,
    Disable,
    Park,
    RetryAt,
    RetryPolicy,
    parse_retry_after,
)

NOW = 1_700_000_000.0


def fixed(value: float):
    return lambda: value


def test_default_schedule_is_svix_like() -> None:
    assert DEFAULT_POLICY.schedule == (5, 300, 1800, 7200, 18000, 36000, 36000)
    assert DEFAULT_POLICY.max_attempts == 8


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5s", 5), ("250ms", 0.25), ("5m", 300), ("2h", 7200), ("1d", 86400), (" 1.5s ", 1.5)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["5", "5x", "-5s", "0s", "s", "8d", ""])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_schedule_issues_carry_element_paths() -> None:
    _delays, issues = parse_retry_schedule(["1s", "ten", 5, "10s"], "endpoints[2].retry_schedule")
    assert [i.path for i in issues] == [
        "endpoints[2].retry_schedule[1]",
        "endpoints[2].retry_schedule[2]",
    ]
    assert "invalid duration" in issues[0].message
    ok, none = parse_retry_schedule(["1s", "10s"], "x")
    assert ok == (1.0, 10.0) and none == []
    _, not_list = parse_retry_schedule("5s", "delivery.retry_schedule")
    assert not_list[0].path == "delivery.retry_schedule"


@given(attempt=st.integers(1, 7), u=st.floats(0, 1, exclude_max=True))
def test_jitter_stays_within_twenty_percent(attempt: int, u: float) -> None:
    base = DEFAULT_POLICY.schedule[attempt - 1]
    at = DEFAULT_POLICY.next_attempt_at(attempt, AttemptResult(500), NOW, fixed(u))
    assert at is not None
    assert base * 0.8 - 1e-6 <= at - NOW <= base * 1.2 + 1e-6


def test_jitter_spreads_a_burst() -> None:
    rng = random.Random(7)
    times = {
        DEFAULT_POLICY.next_attempt_at(1, AttemptResult(500), NOW, rng.random) for _ in range(50)
    }
    assert len(times) == 50
    assert min(times) < NOW + 4.5 and max(times) > NOW + 5.5  # type: ignore[operator]


def test_classify_success_and_failures() -> None:
    p = RetryPolicy.from_strings(["1s", "10s"], jitter=0.0)
    assert p.classify(1, AttemptResult(204), NOW, fixed(0.5)) == Delivered(204)
    first = p.classify(1, AttemptResult(500), NOW, fixed(0.5))
    assert first == RetryAt(at=NOW + 1, next_attempt=2, reason="http_500")
    second = p.classify(2, AttemptResult(None, "timeout"), NOW, fixed(0.5))
    assert second == RetryAt(at=NOW + 10, next_attempt=3, reason="timeout")
    assert p.classify(3, AttemptResult(500), NOW, fixed(0.5)) == DeadLetter("http_500")


def test_redirects_and_client_errors_are_failures() -> None:
    for status in (301, 302, 400, 404):
        outcome = DEFAULT_POLICY.classify(1, AttemptResult(status), NOW, fixed(0.5))
        assert isinstance(outcome, RetryAt), status


def test_410_disables_even_on_first_attempt() -> None:
    assert DEFAULT_POLICY.classify(1, AttemptResult(410), NOW, fixed(0.5)) == Disable("http_410")


def test_breaker_open_parks_instead_of_retrying_but_last_attempt_dead_letters() -> None:
    p = RetryPolicy.from_strings(["1s"])
    assert p.classify(1, AttemptResult(502), NOW, fixed(0.5), breaker_open=True) == Park("http_502")
    assert p.classify(2, AttemptResult(502), NOW, fixed(0.5), breaker_open=True) == DeadLetter(
        "http_502"
    )


def test_empty_schedule_means_one_attempt() -> None:
    p = RetryPolicy(schedule=())
    assert p.classify(1, AttemptResult(500), NOW, fixed(0.5)) == DeadLetter("http_500")


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_seconds_is_honoured(status: int) -> None:
    out = DEFAULT_POLICY.classify(1, AttemptResult(status, retry_after="120"), NOW, fixed(0.99))
    assert out == RetryAt(at=NOW + 120, next_attempt=2, reason=f"http_{status}")


def test_retry_after_http_date() -> None:
    header = formatdate(NOW + 90, usegmt=True)
    assert parse_retry_after(header, NOW) == pytest.approx(90)
    assert parse_retry_after(formatdate(NOW - 90, usegmt=True), NOW) == 0
    out = DEFAULT_POLICY.classify(1, AttemptResult(503, retry_after=header), NOW, fixed(0.0))
    assert isinstance(out, RetryAt) and out.at == pytest.approx(NOW + 90)


def test_retry_after_is_clamped() -> None:
    p = RetryPolicy(retry_after_min=2.0, retry_after_max=600.0)
    low = p.classify(1, AttemptResult(429, retry_after="0"), NOW, fixed(0.5))
    high = p.classify(1, AttemptResult(429, retry_after="86400"), NOW, fixed(0.5))
    assert isinstance(low, RetryAt) and low.at == NOW + 2
    assert isinstance(high, RetryAt) and high.at == NOW + 600


def test_retry_after_ignored_when_garbage_or_other_status() -> None:
    garbage = DEFAULT_POLICY.classify(1, AttemptResult(429, retry_after="soon"), NOW, fixed(0.5))
    assert isinstance(garbage, RetryAt) and garbage.at == NOW + 5
    other = DEFAULT_POLICY.classify(1, AttemptResult(500, retry_after="120"), NOW, fixed(0.5))
    assert isinstance(other, RetryAt) and other.at == NOW + 5
    assert parse_retry_after(None, NOW) is None
    assert parse_retry_after("Wed, 99 Foo 2024", NOW) is None


def test_retry_after_does_not_extend_attempts() -> None:
    p = RetryPolicy.from_strings(["1s"])
    assert p.classify(2, AttemptResult(429, retry_after="5"), NOW, fixed(0.5)) == DeadLetter(
        "http_429"
    )


@given(st.floats(min_value=0.0, max_value=86_400_000.0, allow_nan=False))
def test_an_attempts_duration_is_kept_to_the_microsecond(duration_ms: float) -> None:
    record = attempt_record(1, NOW, duration_ms, AttemptResult(200, None))
    assert abs(record.duration_ms - duration_ms) <= 0.0005 + 1e-9 * duration_ms
    assert record.duration_ms == round(record.duration_ms, 3)
