"""The delivery lifecycle table (store/lifecycle.py) is consistent with itself."""

from __future__ import annotations

from hookrouter.store.lifecycle import (
    FINAL_STATES,
    INITIAL_STATE,
    OPEN_STATES,
    RECORDED,
    TRANSITIONS,
    DeliveryEvent,
    DeliveryState,
    replayable,
    source,
)

S = DeliveryState
E = DeliveryEvent


def test_states_split_into_open_and_final() -> None:
    assert set(OPEN_STATES) | FINAL_STATES == set(DeliveryState)
    assert not set(OPEN_STATES) & FINAL_STATES
    assert INITIAL_STATE in OPEN_STATES


def test_every_state_is_reachable_and_every_event_used() -> None:
    reachable = {INITIAL_STATE} | set(TRANSITIONS.values())
    assert reachable == set(DeliveryState)
    assert {event for _, event in TRANSITIONS} == set(DeliveryEvent)


def test_record_moves_only_pending_deliveries_and_every_open_state_returns_to_pending() -> None:
    for state, event in RECORDED.items():
        assert TRANSITIONS[S.PENDING, event] is state
    for state in OPEN_STATES:
        if state is not S.PENDING:
            assert S.PENDING in {TRANSITIONS[state, e] for s, e in TRANSITIONS if s is state}


def test_the_helpers_read_the_table() -> None:
    assert (source(E.DUE), source(E.RESUME), source(E.PARK)) == (S.RETRY, S.PARKED, S.PENDING)
    assert {s for s in DeliveryState if replayable(s)} == FINAL_STATES
