"""The lifecycle of one (event, endpoint) delivery: states, events, a transition table.

Rules (the table below is the whole state machine; every backend keeps it)
-------------------------------------------------------------------------
* A delivery is born PENDING, in the same commit as its event (``EventStore.append``).
* PENDING is the only state an attempt starts from. The delivery engine
  ``record``s what came of it: DELIVERED (2xx), RETRY (a retryable failure
  with attempts left; ``next_attempt_at`` says when), DEAD (the last attempt
  failed: dead-lettered, replayable), DISABLED (410 Gone, or the endpoint was
  removed), or PARKED (not tried: the endpoint's breaker is open).
  ``park_pending`` parks PENDING deliveries of an endpoint in bulk (PARK too).
* RETRY --DUE--> PENDING: ``promote_due`` once ``next_attempt_at`` has passed.
* PARKED --RESUME--> PENDING: ``resume_parked`` when the breaker lets work through.
* DEAD, DISABLED and DELIVERED --REPLAY--> PENDING: ``replay``, an operator's
  command; the attempt count starts again from 0 (the admin API and the CLI
  offer dead and disabled; the ledger also takes delivered).
* OPEN_STATES have work ahead; FINAL_STATES end it until a replay.

The event's own status follows its deliveries: pending while any delivery is
open, else failed if any is dead or disabled, else delivered (``EventStatus``).
"""

from __future__ import annotations

import enum
from typing import Final


class DeliveryState(enum.StrEnum):
    """Where one delivery stands (stored as its text)."""

    PENDING = "pending"  # waiting to be attempted (queued in memory, or spilled)
    RETRY = "retry"  # failed, next attempt at next_attempt_at
    PARKED = "parked"  # held durably while the endpoint's breaker is open
    DELIVERED = "delivered"
    DEAD = "dead"  # dead-lettered after the last attempt (replayable)
    DISABLED = "disabled"  # endpoint answered 410 Gone or was removed


class DeliveryEvent(enum.StrEnum):
    """What moves a delivery, and the ledger method that carries it."""

    SUCCEEDED = "succeeded"  # record: delivered
    FAILED = "failed"  # record: retry later
    DEAD_LETTERED = "dead_lettered"  # record: no attempts left
    GONE = "gone"  # record: 410 Gone or endpoint removed
    PARK = "park"  # record (breaker open) or park_pending
    DUE = "due"  # promote_due
    RESUME = "resume"  # resume_parked
    REPLAY = "replay"  # replay


_S = DeliveryState
_E = DeliveryEvent

INITIAL_STATE: Final = _S.PENDING

TRANSITIONS: Final[dict[tuple[DeliveryState, DeliveryEvent], DeliveryState]] = {
    (_S.PENDING, _E.SUCCEEDED): _S.DELIVERED,
    (_S.PENDING, _E.FAILED): _S.RETRY,
    (_S.PENDING, _E.DEAD_LETTERED): _S.DEAD,
    (_S.PENDING, _E.GONE): _S.DISABLED,
    (_S.PENDING, _E.PARK): _S.PARKED,
    (_S.RETRY, _E.DUE): _S.PENDING,
    (_S.PARKED, _E.RESUME): _S.PENDING,
    (_S.DEAD, _E.REPLAY): _S.PENDING,
    (_S.DISABLED, _E.REPLAY): _S.PENDING,
    (_S.DELIVERED, _E.REPLAY): _S.PENDING,
}
"""(state, event) -> next state. A pair missing here is a bug, not a no-op."""

# The event behind each state ``record`` may write (an outcome names its new state).
RECORDED: Final[dict[DeliveryState, DeliveryEvent]] = {
    _S.DELIVERED: _E.SUCCEEDED,
    _S.RETRY: _E.FAILED,
    _S.DEAD: _E.DEAD_LETTERED,
    _S.DISABLED: _E.GONE,
    _S.PARKED: _E.PARK,
}

# Deliveries that still have work ahead (the rest are final). An event is
# pending while any of its deliveries is in one of these states.
OPEN_STATES: Final = (_S.PENDING, _S.RETRY, _S.PARKED)
# The states a delivery ends in: only these can make its event failed.
FINAL_STATES: Final = frozenset((_S.DELIVERED, _S.DEAD, _S.DISABLED))


def source(event: DeliveryEvent) -> DeliveryState:
    """The one state ``event`` moves a delivery out of (for DUE, PARK, RESUME)."""
    found = {state for state, e in TRANSITIONS if e is event}
    if len(found) != 1:
        raise ValueError(f"{event.value} leaves {len(found)} states, not one")
    return found.pop()


def replayable(state: DeliveryState) -> bool:
    """Whether ``replay`` may make a delivery in ``state`` pending again."""
    return (state, _E.REPLAY) in TRANSITIONS


__all__ = [
    "FINAL_STATES",
    "INITIAL_STATE",
    "OPEN_STATES",
    "RECORDED",
    "TRANSITIONS",
    "DeliveryEvent",
    "DeliveryState",
    "replayable",
    "source",
]
