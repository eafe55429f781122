"""The body cache budget: bytes in all and per tenant (issue 33 item 13)."""

from __future__ import annotations

from hookrouter.delivery.body_budget import BodyBudget


def test_a_tenant_gets_its_share_and_no_more() -> None:
    budget = BodyBudget(total_bytes=100, tenant_bytes=40)
    assert budget.admit(0, 30) and not budget.admit(30, 20)  # a's share is 40
    assert budget.admit(0, 40) and budget.admit(0, 30)  # b, c
    assert not budget.admit(0, 1)  # d: 100 in all
    assert budget.not_kept == 2
    budget.release(30)  # a's body
    assert budget.used == 70
    assert budget.admit(0, 30)  # d


def test_a_zero_budget_keeps_nothing() -> None:
    budget = BodyBudget(total_bytes=0, tenant_bytes=16 << 20)
    assert not budget.admit(0, 1)
