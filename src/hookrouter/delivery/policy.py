"""Retry policy: schedules, Retry-After, and what an attempt's result means.

Theory of operation
-------------------
An attempt ends with an :class:`AttemptResult` (a status code, or an error
reason when no response arrived). :meth:`RetryPolicy.classify` turns it into
exactly one outcome, a pure function of (attempt number, result, Retry-After,
``now``, a random source, whether the endpoint's breaker is open):

* ``Delivered``  -- any 2xx.
* ``Disable``    -- 410 Gone: the receiver says the endpoint is gone for good.
* ``DeadLetter`` -- the attempt failed and it was the last one the schedule allows.
* ``Park``       -- the attempt failed (or was never made) and the endpoint's
  breaker is open: hold it durably, resume when the breaker closes.
* ``RetryAt``    -- the attempt failed; try again at ``at`` (wall seconds).

Everything that is not 2xx is a failure, including 3xx (redirects are never
followed, so a redirect is a misconfigured endpoint) and 4xx other than 410:
like Svix we retry them, because receivers often answer 400/401/404 during a
deploy or a secret rotation and recover.

Schedule semantics: ``schedule[i]`` is the delay before attempt ``i + 2``, so
the default seven entries (``config/durations.py``) give eight attempts (the
first is immediate), as in Svix: now, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h
(~32.6 h in all). Schedules arrive parsed, as float seconds, from config. Each
delay gets +/-20 % jitter so that a burst that failed together does not retry
together. A valid Retry-After on 429 or 503 replaces the scheduled delay
(no negative jitter: it is a "not before"), clamped to ``[retry_after_min,
retry_after_max]`` so a receiver can neither make us hammer it nor push a
delivery out for days.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from hookrouter.config.durations import DEFAULT_RETRY_SCHEDULE, retry_schedule

DEFAULT_JITTER = 0.2
# 1 s floor: an endpoint answering "Retry-After: 0" in a loop must not turn the
# router into a load generator. 1 h ceiling: longer than that, the delivery
# should follow our own schedule rather than be pushed out by the receiver.
DEFAULT_RETRY_AFTER_MIN = 1.0
DEFAULT_RETRY_AFTER_MAX = 3600.0

Random = Callable[[], float]
"""A source of uniform floats in [0, 1), e.g. ``random.Random(seed).random``."""


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Delay in seconds from a Retry-After header (delta-seconds or HTTP-date), or None.

    ``now`` is wall seconds; a date in the past gives 0. Garbage gives None
    (then the regular schedule applies).
    """
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; a naive parse means "-0000"
        return None
    return max(0.0, when.timestamp() - now)


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one attempt produced: a status code, or the reason no response arrived."""

    status_code: int | None
    error: str | None = None  # reason code such as "timeout", "connect_refused"
    retry_after: str | None = None  # raw Retry-After header value, if any
    response_excerpt: str | None = None  # a failed answer's first bytes, as text

    # Written out so that mypyc compiles it (see core.http1.Request).
    def __init__(
        self,
        status_code: int | None,
        error: str | None = None,
        retry_after: str | None = None,
        response_excerpt: str | None = None,
    ) -> None:
        object.__setattr__(self, "status_code", status_code)  # frozen: no plain assignment
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "retry_after", retry_after)
        object.__setattr__(self, "response_excerpt", response_excerpt)

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


@dataclass(frozen=True, slots=True)
class Delivered:
    status_code: int

    def __init__(self, status_code: int) -> None:  # compiled (see AttemptResult)
        object.__setattr__(self, "status_code", status_code)


@dataclass(frozen=True, slots=True)
class RetryAt:
    at: float  # wall seconds of the next attempt
    next_attempt: int  # 1-based number of that attempt
    reason: str


@dataclass(frozen=True, slots=True)
class DeadLetter:
    reason: str


@dataclass(frozen=True, slots=True)
class Disable:
    reason: str


@dataclass(frozen=True, slots=True)
class Park:
    reason: str


Outcome = Delivered | RetryAt | DeadLetter | Disable | Park


def failure_reason(result: AttemptResult) -> str:
    """A short reason code for a failed attempt: ``http_503``, ``timeout``, ..."""
    if result.status_code is not None:
        return f"http_{result.status_code}"
    return result.error or "unknown_error"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A retry schedule plus jitter and Retry-After clamping. Immutable and pure."""

    schedule: tuple[float, ...] = DEFAULT_RETRY_SCHEDULE
    jitter: float = DEFAULT_JITTER
    retry_after_min: float = DEFAULT_RETRY_AFTER_MIN
    retry_after_max: float = DEFAULT_RETRY_AFTER_MAX

    def __post_init__(self) -> None:
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")
        if not 0 <= self.retry_after_min <= self.retry_after_max:
            raise ValueError("need 0 <= retry_after_min <= retry_after_max")
        if any(not math.isfinite(d) or d < 0 for d in self.schedule):
            raise ValueError("schedule delays must be finite and non-negative")

    @classmethod
    def from_strings(cls, schedule: Sequence[str], **kwargs: float) -> RetryPolicy:
        """Build from duration literals (tests, tools); raises ``ValueError`` on a bad entry."""
        return cls(schedule=retry_schedule(*schedule), **kwargs)

    @property
    def max_attempts(self) -> int:
        return len(self.schedule) + 1

    def delay_after(self, attempt: int, rand: Random) -> float:
        """Jittered delay after failed attempt number ``attempt`` (1-based)."""
        base = self.schedule[attempt - 1]
        return base * (1.0 + self.jitter * (2.0 * rand() - 1.0))

    def next_attempt_at(
        self, attempt: int, result: AttemptResult, now: float, rand: Random
    ) -> float | None:
        """Wall time of the next attempt after failed ``attempt``, or None if none is left."""
        if attempt >= self.max_attempts:
            return None
        if result.status_code in (429, 503):
            hinted = parse_retry_after(result.retry_after, now)
            if hinted is not None:
                return now + min(max(hinted, self.retry_after_min), self.retry_after_max)
        return now + self.delay_after(attempt, rand)

    def classify(
        self,
        attempt: int,
        result: AttemptResult,
        now: float,
        rand: Random,
        *,
        breaker_open: bool = False,
    ) -> Outcome:
        """The outcome of attempt number ``attempt`` (1-based). See the module docstring."""
        if result.ok:
            assert result.status_code is not None
            return Delivered(result.status_code)
        reason = failure_reason(result)
        if result.status_code == 410:
            return Disable(reason)
        at = self.next_attempt_at(attempt, result, now, rand)
        if at is None:
            return DeadLetter(reason)
        if breaker_open:
            return Park(reason)
        return RetryAt(at=at, next_attempt=attempt + 1, reason=reason)


DEFAULT_POLICY = RetryPolicy()


__all__ = [
    "DEFAULT_POLICY",
    "AttemptResult",
    "DeadLetter",
    "Delivered",
    "Disable",
    "Outcome",
    "Park",
    "RetryAt",
    "RetryPolicy",
    "failure_reason",
    "parse_retry_after",
]
