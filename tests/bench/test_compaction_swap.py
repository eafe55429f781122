"""``bench.compaction_swap`` still measures both sides of a compaction's swap.

A small partition, two rounds: the copy made on the writer and the check
made at the swap both run, and the check reads back what the copy holds
(the bench asserts it). Its figures are for docs/performance.md.
"""

from __future__ import annotations

from pathlib import Path

from bench import compaction_swap


def test_both_sides_run_on_a_small_partition(tmp_path: Path) -> None:
    partition = compaction_swap.build(tmp_path, 2_000, 20)
    plan = compaction_swap.plan_of(tmp_path, partition)
    assert len(plan.kept) == 20  # every 100th event failed (the newest row among them)
    rounds = compaction_swap.measure(tmp_path, plan, 2)
    assert sorted(rounds) == ["copy made ahead", "copy on the writer"]
    assert all(len(ms) == 2 and min(ms) > 0 for ms in rounds.values())
