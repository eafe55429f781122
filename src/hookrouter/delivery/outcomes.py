"""From an attempt's result and the policy's outcome to the durable record. Pure.

Which results count against an endpoint's breaker: no response at all
(timeouts, refused, TLS), 5xx, 408 and 429 -- the receiver is unavailable or
overloaded. Other 4xx mean it is up and answering (a bad secret, a 404 during
a deploy); those are retried by the schedule but do not trip the breaker,
which protects availability, not correctness.
"""

from __future__ import annotations

from typing import Final

from hookrouter.delivery.policy import (
    AttemptResult,
    DeadLetter,
    Delivered,
    Disable,
    Outcome,
    Park,
    RetryAt,
)
from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.base import AttemptRecord, DeliveryState
from hookrouter.store.ledger import OutcomeRecord

_OVERLOAD: Final = frozenset({408, 429})


def breaker_success(result: AttemptResult) -> bool:
    """Does this result show the endpoint available? (See the module docstring.)"""
    code = result.status_code
    return code is not None and code < 500 and code not in _OVERLOAD


def attempt_record(
    attempt: int, started_at: float, duration_ms: float, result: AttemptResult
) -> AttemptRecord:
    return AttemptRecord(
        attempt=attempt,
        started_at=started_at,
        # To the microsecond. round(x, 3) goes through a decimal string;
        # scaling and rounding to an integer does not.
        duration_ms=round(duration_ms * 1000.0) / 1000.0,
        status_code=result.status_code,
        error=result.error,
        response_excerpt=result.response_excerpt,
    )


def outcome_record(
    ref: DeliveryRef,
    outcome: Outcome,
    attempts: int,
    history: AttemptRecord | None,
    now: float,
    *,
    tenant_id: str | None = None,
) -> OutcomeRecord:
    """The delivery's new durable state; ``history`` is None when nothing was sent."""
    next_at: float | None = None
    if isinstance(outcome, Delivered):
        state = DeliveryState.DELIVERED
    elif isinstance(outcome, RetryAt):
        state, next_at = DeliveryState.RETRY, outcome.at
    elif isinstance(outcome, DeadLetter):
        state = DeliveryState.DEAD
    elif isinstance(outcome, Disable):
        state = DeliveryState.DISABLED
    else:
        assert isinstance(outcome, Park)
        state = DeliveryState.PARKED
    status = history.status_code if history else None
    error = history.error if history else None
    return OutcomeRecord(
        ref, state, attempts, next_at, status, error, now, history, tenant_id=tenant_id
    )


__all__ = ["attempt_record", "breaker_success", "outcome_record"]
