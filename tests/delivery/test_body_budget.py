"""The body cache budget: bytes in all and per tenant (issue 33 item 13)."""

from __future__ import annotations

from hookrouter.delivery.body_budget import BodyBudget


def test_a_tenant_gets_its_share_and_no_more() -> None:
    budget = BodyBudget(total_bytes=100, tenant_bytes=40)
    assert budget.admit("a", 30) and not budget.admit("a", 20)  # a's share is 40
    assert budget.admit("b", 40) and budget.admit("c", 30)
    assert not budget.admit("d", 1)  # 100 in all
    assert budget.not_kept == 2
    budget.release("a", 30)
    assert budget.tenant_used("a") == 0 and budget.used == 70
    assert budget.admit("d", 30)


def test_a_zero_budget_keeps_nothing() -> None:
    budget = BodyBudget(total_bytes=0, tenant_bytes=16 << 20)
    assert not budget.admit("a", 1)
