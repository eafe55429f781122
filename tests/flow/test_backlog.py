"""Backlog cap: shed only senders that retry; flag the rest before it is too late."""

from __future__ import annotations

from hookrouter.flow.backlog import ACCEPT, Accept, Shed, decide_backlog, decide_pressure


def test_below_the_cap_everything_is_accepted() -> None:
    assert decide_backlog(0, 100, True) == ACCEPT
    assert decide_backlog(99, 100, True) == ACCEPT
    assert decide_backlog(89, 100, False) == ACCEPT


def test_at_the_cap_a_retrying_sender_is_shed_with_retry_after() -> None:
    decision = decide_backlog(100, 100, True)
    assert isinstance(decision, Shed)
    assert decision.status == 429 and decision.retry_after > 0


def test_a_sender_that_never_retries_is_accepted_but_flagged() -> None:
    assert decide_backlog(90, 100, False) == Accept(at_risk=True)
    assert decide_backlog(5000, 100, False) == Accept(at_risk=True)


def test_slow_commits_shed_only_senders_that_retry() -> None:
    assert decide_pressure(5.0, 1000.0, True) == ACCEPT
    assert decide_pressure(1000.0, 1000.0, True) == ACCEPT  # at the threshold: still fine
    shed = decide_pressure(1500.0, 1000.0, True)
    assert isinstance(shed, Shed) and (shed.status, shed.reason) == (503, "store_slow")
    assert shed.retry_after > 0
    assert decide_pressure(1500.0, 1000.0, False) == Accept(at_risk=True)
