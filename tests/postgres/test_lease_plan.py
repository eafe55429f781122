"""The pure lease plan: spread evenly, move only what a join or a death requires."""

from __future__ import annotations

import pytest

from hookrouter.store.postgres.lease_plan import Plan, plan, quotas

P = 12


def owned(node: str, parts: range | list[int]) -> dict[int, str]:
    return dict.fromkeys(parts, node)


def test_quotas_sum_to_the_partitions_and_differ_by_at_most_one() -> None:
    for nodes in (["a"], ["a", "b"], ["c", "a", "b"], [f"n{i}" for i in range(7)]):
        share = quotas(nodes, 256)
        assert sum(share.values()) == 256
        assert max(share.values()) - min(share.values()) <= 1


@pytest.mark.parametrize(
    ("case", "me", "held", "live", "holders", "take", "release"),
    [
        # A lone node takes everything.
        ("alone", "a", [], ["a"], {}, P, 0),
        # Three nodes start together: each takes its third of the free ones.
        ("start of three", "b", [], ["a", "b", "c"], {}, 4, 0),
        # A node joins a node holding all: the holder gives back half...
        ("join: holder releases", "a", list(range(P)), ["a", "b"], owned("a", range(P)), 0, 6),
        # ...and the newcomer takes nothing until they are free.
        ("join: newcomer waits", "b", [], ["a", "b"], owned("a", range(P)), 0, 0),
        # Over quota by 2 while b lacks 2: give back exactly those 2.
        (
            "uneven",
            "a",
            list(range(8)),
            ["a", "b"],
            {**owned("a", range(8)), **owned("b", range(8, 12))},
            0,
            2,
        ),
        # A death: its 4 partitions expired; two survivors with 4 each take 2 each.
        (
            "death",
            "a",
            [0, 1, 2, 3],
            ["a", "b"],
            {**owned("a", range(4)), **owned("b", range(4, 8))},
            2,
            0,
        ),
        # At quota: nothing to do.
        ("steady", "a", [0, 1, 2, 3, 4, 5], ["a", "b"], owned("a", range(6)), 0, 0),
    ],
)
def test_plan_table(
    case: str,
    me: str,
    held: list[int],
    live: list[str],
    holders: dict[int, str],
    take: int,
    release: int,
) -> None:
    result = plan(me, held, live, holders, P)
    assert (len(result.take), len(result.release)) == (take, release), case
    assert not set(result.take) & set(holders), "never takes a live lease"
    assert set(result.release) <= set(held), "releases only its own"


def test_a_dead_nodes_live_leases_are_left_alone() -> None:
    """Until they expire, a silent node's leases are not free: nobody takes them."""
    holders = {**owned("a", range(4)), **owned("dead", range(4, 12))}
    taken = plan("a", range(4), ["a", "b"], holders, P)
    assert len(taken.take) == 0


def test_survivors_prefer_different_free_partitions() -> None:
    """After a death the two survivors' first choices mostly differ (few lost races)."""
    free = 256
    a = set(plan("router-a", [], ["router-a", "router-b"], {}, free).take)
    b = set(plan("router-b", [], ["router-a", "router-b"], {}, free).take)
    assert len(a) == len(b) == 128
    assert len(a & b) < 96  # independent choices overlap by ~half; identical ones by all


def test_a_join_and_leave_moves_the_same_partitions() -> None:
    holders = owned("a", range(P))
    first = plan("a", range(P), ["a", "b"], holders, P)
    again = plan("a", range(P), ["a", "b"], holders, P)
    assert first == again and first != Plan()
